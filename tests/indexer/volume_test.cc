// QueryEngine::Volume on every backend: counts from index rows against a
// brute-force count over the stored chunks under the attribution rule of
// indexer/query.h (a chunk counts whole, in the bucket of its last record,
// when that record lies in [from, to)), counts by reading records against a
// brute-force count of the records, and the refusals.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "indexer/indexer.h"
#include "indexer/query.h"
#include "indexer/tables.h"
#include "tests/backends.h"
#include "tests/failing_store.h"
#include "tests/indexer/workload.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using testing::Matches;
using testing::MakeWorkload;
using testing::Rec;
using testing::Workload;
using testing::WorkloadSpec;

#if defined(__SANITIZE_ADDRESS__)
constexpr int kRecords = 10'000;
constexpr int kQueriesPerShape = 8;
#else
constexpr int kRecords = 100'000;
constexpr int kQueriesPerShape = 25;
#endif

constexpr int64_t kMaxChunkSpanMs = 60'000;  // the indexer's and the engine's (defaults)

// A chunk as the indexer stores it: one (app, host, severity), split by time
// window when the shipped chunk spans max_chunk_span_ms or more (indexer.h).
struct StoredChunk {
  std::string app, host;
  Severity sev = Severity::kInfo;
  int64_t first = INT64_MAX, last = INT64_MIN;
  uint64_t count = 0;
  std::set<std::pair<std::string, std::string>> tags;  // of any of its records
};

std::vector<StoredChunk> StoredChunksOf(const Workload& w, const DecodeOptions& decode) {
  std::vector<StoredChunk> out;
  for (const std::string& bytes : w.chunks) {
    auto chunk = DecodeChunk(bytes, decode);
    EXPECT_TRUE(chunk.ok());
    if (!chunk.ok()) continue;
    auto records = UnpackRecords(*chunk, decode);
    EXPECT_TRUE(records.ok());
    if (!records.ok()) continue;
    const bool too_long = chunk->last_ts_ms() - chunk->first_ts_ms() >= kMaxChunkSpanMs;
    std::map<std::pair<uint32_t, int64_t>, StoredChunk> parts;
    for (const proto::LogRecord& r : records->records()) {
      StoredChunk& c = parts[{r.severity(), too_long ? r.ts_ms() / kMaxChunkSpanMs : 0}];
      c.app = chunk->app();
      c.host = chunk->host();
      c.sev = static_cast<Severity>(r.severity());
      c.first = std::min(c.first, r.ts_ms());
      c.last = std::max(c.last, r.ts_ms());
      ++c.count;
      for (const proto::Tag& t : r.tags()) c.tags.emplace(t.key(), t.value());
    }
    for (auto& [key, c] : parts) out.push_back(std::move(c));
  }
  return out;
}

struct Expected {
  std::map<int64_t, std::array<uint64_t, 6>> buckets;  // start -> by severity (non-empty ones)
  std::array<uint64_t, 6> totals{};
  uint64_t total = 0;
  uint64_t inexact = 0;
  uint64_t chunks = 0;
  uint64_t straddling_from = 0;  // chunks counted with records before `from`
};

int64_t BucketStart(int64_t t, int64_t step) { return t - ((t % step) + step) % step; }

// Index mode: a chunk counts whole, in the bucket of its last record, when
// that record lies in [from, to); app, host, severity per chunk; a tag when
// any record of the chunk holds it.
Expected ByTheAttributionRule(const std::vector<StoredChunk>& chunks, const Query& q, int64_t step) {
  Expected e;
  for (const StoredChunk& c : chunks) {
    if (c.last < q.from_ms || c.last >= q.to_ms) continue;
    if (!q.app.empty() && c.app != q.app) continue;
    if (!q.host.empty() && c.host != q.host) continue;
    if (!q.severities.empty() && std::find(q.severities.begin(), q.severities.end(), c.sev) == q.severities.end()) {
      continue;
    }
    bool tags = true;
    for (const auto& t : q.tags) tags = tags && c.tags.count(t);
    if (!tags) continue;
    const int64_t start = BucketStart(c.last, step);
    const size_t s = VolumeSeverityIndex(c.sev);
    e.buckets[start][s] += c.count;
    e.totals[s] += c.count;
    e.total += c.count;
    ++e.chunks;
    if (c.first < std::max(start, q.from_ms)) e.inexact += c.count;
    if (c.first < q.from_ms) ++e.straddling_from;
  }
  return e;
}

// Reading records: each matching record in the bucket of its own time.
Expected ByRecord(const Workload& w, const Query& q, int64_t step) {
  Expected e;
  for (const Rec& r : w.records) {
    if (!Matches(r, q)) continue;
    const size_t s = VolumeSeverityIndex(r.sev);
    e.buckets[BucketStart(r.ts, step)][s] += 1;
    e.totals[s] += 1;
    ++e.total;
  }
  return e;
}

void ExpectEqual(const VolumeAnswer& got, const Expected& want, const Query& q, int64_t step, const std::string& what) {
  ASSERT_EQ(got.step_ms, step) << what;
  ASSERT_FALSE(got.buckets.empty()) << what;
  // Every bucket of the grid, in order, empty ones included.
  EXPECT_EQ(got.buckets.front().start_ms, BucketStart(q.from_ms, step)) << what;
  EXPECT_LE(got.buckets.front().start_ms, q.from_ms) << what;
  EXPECT_GE(got.buckets.back().start_ms + step, q.to_ms) << what;
  EXPECT_LT(got.buckets.back().start_ms, q.to_ms) << what;
  size_t nonempty = 0;
  for (size_t i = 0; i < got.buckets.size(); ++i) {
    const VolumeBucket& b = got.buckets[i];
    if (i > 0) {
      ASSERT_EQ(b.start_ms, got.buckets[i - 1].start_ms + step) << what;
    }
    std::array<uint64_t, 6> expect{};
    if (auto it = want.buckets.find(b.start_ms); it != want.buckets.end()) {
      expect = it->second;
      ++nonempty;
    }
    uint64_t sum = 0;
    for (size_t s = 0; s < 6; ++s) {
      ASSERT_EQ(b.counts.by_severity[s], expect[s])
          << what << " bucket " << b.start_ms << " severity " << SeverityName(kAllSeverities[s]);
      sum += expect[s];
    }
    ASSERT_EQ(b.counts.total, sum) << what << " bucket " << b.start_ms;
  }
  EXPECT_EQ(nonempty, want.buckets.size()) << what << ": a count fell outside the grid";
  for (size_t s = 0; s < 6; ++s) EXPECT_EQ(got.totals.by_severity[s], want.totals[s]) << what;
  EXPECT_EQ(got.totals.total, want.total) << what;
}

class Volume : public ::testing::TestWithParam<Backend> {
 public:
  void SetUp() override {
    store_ = GetParam().open(dir_.path() + "/a", &clock_);
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    decode_.clock = &clock_;
  }

  // Ingests a workload whose shipped chunks span up to 90 s, so that some are
  // split by time window (max_chunk_span_ms is 60 s) and every 50th mixes
  // severities (split by severity): the brute force counts stored chunks.
  void Fill(int records) {
    WorkloadSpec spec;
    spec.records = records;
    spec.max_chunk_span_ms = 90'000;
    spec_ = spec;
    w_ = MakeWorkload(spec);
    IndexerOptions o;
    o.decode = decode_;
    o.max_chunk_span_ms = kMaxChunkSpanMs;
    Indexer indexer(*store_, o);
    proto::ChunkSource src;
    src.set_topic("t");
    for (size_t i = 0; i < w_.chunks.size(); i += 500) {
      std::vector<std::string> part(w_.chunks.begin() + i, w_.chunks.begin() + std::min(w_.chunks.size(), i + 500));
      ASSERT_TRUE(indexer.IngestSerialized(part, src).ok());
    }
    EXPECT_GT(indexer.counters().split_by_severity, 0u);
    EXPECT_GT(indexer.counters().split_by_time, 0u);
    chunks_ = StoredChunksOf(w_, decode_);
    EXPECT_EQ(chunks_.size(), indexer.counters().stored_chunks);
  }

  QueryOptions QOptions() {
    QueryOptions o;
    o.decode = decode_;
    o.max_chunk_span_ms = kMaxChunkSpanMs;
    return o;
  }

  // A random range of 10 min to the whole workload, edges at random ms (so
  // they cut through chunks), and a random step.
  void RandomRange(std::mt19937_64& rng, Query& q, int64_t& step) {
    const int64_t duration = spec_.duration_ms;
    const int64_t len = 600'000 + static_cast<int64_t>(rng() % (duration - 600'000));
    q.from_ms = w_.start_ms + static_cast<int64_t>(rng() % (duration - len + 1));
    q.to_ms = q.from_ms + len;
    static constexpr int64_t kSteps[] = {1'000, 37'000, 60'000, 300'000, 3'600'000, 0};
    step = kSteps[rng() % std::size(kSteps)];
    if (step == 0) step = DefaultVolumeStep(q.from_ms, q.to_ms);
    if (step == 1'000) q.to_ms = q.from_ms + std::min<int64_t>(len, 3'600'000);  // at most 3,600 buckets
  }

  TempDir dir_;
  ManualClock clock_{1'790'000'000'000 + 7 * 3'600'000};
  DecodeOptions decode_;
  std::unique_ptr<TableStore> store_;
  WorkloadSpec spec_;
  Workload w_;
  std::vector<StoredChunk> chunks_;
};

TEST_P(Volume, CountsFromIndexRowsEqualBruteForceUnderTheAttributionRuleWithoutReadingMainRows) {
  Fill(kRecords);
  // Reads of the main table fail: counting from the index must not need one.
  testing::FailingReads no_main(*store_);
  no_main.fail_table = std::string(kMainTable);
  QueryEngine engine(no_main, QOptions());

  std::mt19937_64 rng(7);
  enum Shape { kApp, kAppSeverity, kAppHost, kHost, kHostSeverity, kTag, kTagApp, kShapes };
  const char* names[] = {"app", "app+severity", "app+host", "host", "host+severity", "tag", "tag+app"};
  uint64_t straddling = 0, inexact = 0, nonzero = 0;
  for (int shape = 0; shape < kShapes; ++shape) {
    for (int n = 0; n < kQueriesPerShape; ++n) {
      VolumeQuery vq;
      Query& q = vq.filter;
      RandomRange(rng, q, vq.step_ms);
      const std::string app = "app" + std::to_string(rng() % spec_.apps);
      const std::string host = "host" + std::to_string(rng() % spec_.hosts);
      if (shape == kApp || shape == kAppSeverity || shape == kAppHost || shape == kTagApp) q.app = app;
      if (shape == kAppHost || shape == kHost || shape == kHostSeverity) q.host = host;
      if (shape == kTag || shape == kTagApp) {
        q.tags.emplace_back(rng() % 3 ? "k" : "dc",
                            rng() % 3 ? "v" + std::to_string(rng() % spec_.tag_values) : (rng() % 2 ? "east" : "west"));
      }
      if (shape == kAppSeverity || shape == kHostSeverity) {
        for (int i = 0, k = 1 + static_cast<int>(rng() % 2); i < k; ++i) {
          const Severity s = spec_.severities[rng() % spec_.severities.size()];
          if (std::find(q.severities.begin(), q.severities.end(), s) == q.severities.end()) q.severities.push_back(s);
        }
      }
      const std::string what = std::string(names[shape]) + " #" + std::to_string(n) + " [" +
                               std::to_string(q.from_ms) + ", " + std::to_string(q.to_ms) + ") step " +
                               std::to_string(vq.step_ms);
      auto got = engine.Volume(vq);
      ASSERT_TRUE(got.ok()) << what << ": " << got.error().ToString();
      const Expected want = ByTheAttributionRule(chunks_, q, vq.step_ms);
      ExpectEqual(*got, want, q, vq.step_ms, what);
      EXPECT_FALSE(got->read_records) << what;
      EXPECT_EQ(got->inexact_records, want.inexact) << what;
      EXPECT_EQ(got->stats.chunks_returned, want.chunks) << what;
      // No main row read or decompressed.
      EXPECT_EQ(got->stats.chunks_read, 0u) << what;
      EXPECT_EQ(got->stats.bytes_decompressed, 0u) << what;
      EXPECT_EQ(got->stats.index_rows_without_main, 0u) << what;
      // Cost: where the index range holds only matching rows, exactly the
      // counted rows are read (no row outside [from, to)).
      if (shape == kApp || shape == kAppSeverity || shape == kAppHost || shape == kHost || shape == kTag) {
        EXPECT_EQ(got->stats.rows_scanned, got->stats.chunks_returned) << what << " plan " << got->stats.plan;
      } else {
        EXPECT_GE(got->stats.rows_scanned, got->stats.chunks_returned) << what;
      }
      straddling += want.straddling_from;
      inexact += want.inexact;
      nonzero += want.total > 0;
    }
  }
  EXPECT_GT(straddling, 0u) << "some range edge should cut through a chunk";
  EXPECT_GT(inexact, 0u);
  EXPECT_GT(nonzero, 5u * kQueriesPerShape) << "the random volumes should mostly count something";
}

TEST_P(Volume, RangesThatTileCountEveryRecordExactlyOnce) {
  Fill(kRecords / 4);
  QueryEngine engine(*store_, QOptions());
  std::mt19937_64 rng(11);
  uint64_t straddling = 0;  // over all apps: the ASan build's smaller workload leaves an app without one
  for (int app = 0; app < 3; ++app) {
    const std::string name = "app" + std::to_string(app);
    uint64_t want = 0;
    for (const Rec& r : w_.records) want += r.app == name;
    // Edges at random ms, several per chunk span: many cut through chunks.
    std::vector<int64_t> edges = {w_.start_ms};
    while (edges.back() < w_.end_ms) edges.push_back(edges.back() + 1 + static_cast<int64_t>(rng() % 1'800'000));
    uint64_t sum = 0;
    for (size_t i = 0; i + 1 < edges.size(); ++i) {
      VolumeQuery vq;
      vq.filter.app = name;
      vq.filter.from_ms = edges[i];
      vq.filter.to_ms = edges[i + 1];
      vq.step_ms = 60'000;
      auto got = engine.Volume(vq);
      ASSERT_TRUE(got.ok()) << got.error().ToString();
      sum += got->totals.total;
      straddling += ByTheAttributionRule(chunks_, vq.filter, vq.step_ms).straddling_from;
    }
    EXPECT_EQ(sum, want) << name << ": tiling ranges must neither drop nor double count";
  }
  EXPECT_GT(straddling, 0u) << "some range edge should cut through a chunk";
}

TEST_P(Volume, CountsByReadingRecordsWithContainsAndTagsEqualBruteForceExactly) {
  Fill(kRecords / 2);
  QueryEngine engine(*store_, QOptions());
  std::mt19937_64 rng(23);
  enum Shape { kAppContains, kHostContains, kTagsContains, kAppExact, kScanSeverity, kShapes };
  const char* names[] = {"app+contains", "host+contains", "two tags+contains", "app, exact", "scan+severity"};
  uint64_t nonzero = 0;
  for (int shape = 0; shape < kShapes; ++shape) {
    for (int n = 0; n < kQueriesPerShape / 2 + 1; ++n) {
      VolumeQuery vq;
      Query& q = vq.filter;
      RandomRange(rng, q, vq.step_ms);
      if (shape == kAppContains || shape == kAppExact) q.app = "app" + std::to_string(rng() % spec_.apps);
      if (shape == kHostContains) q.host = "host" + std::to_string(rng() % spec_.hosts);
      if (shape == kTagsContains) {
        q.tags.emplace_back("k", "v" + std::to_string(rng() % spec_.tag_values));
        if (rng() % 2) q.tags.emplace_back("dc", rng() % 2 ? "east" : "west");
      }
      if (shape == kAppExact) vq.read_records = true;
      if (shape == kScanSeverity) {
        q.scan = true;
        q.severities.push_back(spec_.severities[rng() % spec_.severities.size()]);
        q.to_ms = q.from_ms + std::min<int64_t>(q.to_ms - q.from_ms, 1'800'000);  // a scan reads every main row
        if (vq.step_ms > 300'000) vq.step_ms = 300'000;
      }
      if (shape != kAppExact && shape != kScanSeverity) q.contains = testing::kWords[rng() % 16];
      const std::string what = std::string(names[shape]) + " #" + std::to_string(n);
      auto got = engine.Volume(vq);
      ASSERT_TRUE(got.ok()) << what << ": " << got.error().ToString();
      const Expected want = ByRecord(w_, q, vq.step_ms);
      ExpectEqual(*got, want, q, vq.step_ms, what);
      EXPECT_TRUE(got->read_records) << what;
      EXPECT_EQ(got->inexact_records, 0u) << what;
      if (want.total > 0) {
        EXPECT_GT(got->stats.chunks_read, 0u) << what;
        EXPECT_GT(got->stats.bytes_decompressed, 0u) << what;
      }
      nonzero += want.total > 0;
      // The same records the query returns.
      if (n == 0 && shape != kScanSeverity) {
        Query page = q;
        page.limit = 10'000;
        auto records = engine.Run(page);
        ASSERT_TRUE(records.ok()) << what;
        if (records->next_cursor.empty()) {
          EXPECT_EQ(records->records.size(), got->totals.total) << what;
        }
      }
    }
  }
  EXPECT_GT(nonzero, static_cast<uint64_t>(kShapes)) << "the exact volumes should mostly count something";
}

TEST_P(Volume, RefusesWhatTheQueryRefusesAndBadSteps) {
  QueryEngine engine(*store_, QOptions());
  auto refused = [&](VolumeQuery vq, const std::string& says) {
    auto got = engine.Volume(vq);
    ASSERT_FALSE(got.ok()) << says;
    EXPECT_EQ(got.error().code, Errc::kInvalidArgument);
    EXPECT_NE(got.error().message.find(says), std::string::npos) << got.error().message;
  };
  VolumeQuery ok;
  ok.filter.app = "a";
  ok.filter.from_ms = 1'790'000'000'000;
  ok.filter.to_ms = ok.filter.from_ms + 3'600'000;
  ASSERT_TRUE(engine.Volume(ok).ok());

  VolumeQuery v = ok;
  v.filter.app.clear();
  refused(v, "a query needs app, host or tag; set scan=true");
  // The query refuses it with the same words.
  auto q = engine.Run(v.filter);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("a query needs app, host or tag"), std::string::npos);
  v.filter.scan = true;
  EXPECT_TRUE(engine.Volume(v).ok());

  v = ok;
  v.step_ms = 0;
  refused(v, "step must be at least 1 ms");
  v.step_ms = 100;  // 36,000 buckets
  refused(v, "36000 buckets, over the maximum of 11000");
  v = ok;
  v.filter.to_ms = v.filter.from_ms;
  refused(v, "the time range is empty");
  v = ok;
  v.filter.to_ms = v.filter.from_ms + 40ll * 24 * 3'600'000;
  v.step_ms = 3'600'000;
  refused(v, "the time range spans");
  v = ok;
  v.filter.tags = {{"k", "v1"}, {"dc", "east"}};
  refused(v, "counting from the index takes one tag");
  v.read_records = true;
  EXPECT_TRUE(engine.Volume(v).ok());
  v = ok;
  v.filter.cursor = "AAAA";
  refused(v, "takes no cursor");
}

TEST(VolumeGrid, BucketCountsAndDefaultSteps) {
  EXPECT_EQ(VolumeBucketCount(0, 60'000, 60'000), 1u);
  EXPECT_EQ(VolumeBucketCount(1, 60'001, 60'000), 2u);  // aligned: [0, 60 s) and [60 s, 120 s)
  EXPECT_EQ(VolumeBucketCount(-1, 1, 1'000), 2u);
  EXPECT_EQ(VolumeBucketCount(0, 1, 0), std::nullopt);
  EXPECT_EQ(VolumeBucketCount(5, 5, 1), std::nullopt);
  EXPECT_EQ(VolumeBucketCount(INT64_MIN, 0, 7), std::nullopt);  // the grid's start would not fit
  EXPECT_EQ(DefaultVolumeStep(0, 3'600'000), 60'000);           // 1 h -> 1 m
  EXPECT_EQ(DefaultVolumeStep(0, 3'600'001), 60'000);           // since=1h: to = now + 1 ms
  EXPECT_EQ(DefaultVolumeStep(0, 3'600'060), 300'000);          // over 1 m a bucket: the next unit
  EXPECT_EQ(DefaultVolumeStep(0, 6 * 3'600'000), 600'000);      // 6 h -> 10 m (6 m rounded up)
  EXPECT_EQ(DefaultVolumeStep(0, 24 * 3'600'000), 1'800'000);   // 1 d -> 30 m (24 m rounded up)
  EXPECT_EQ(DefaultVolumeStep(0, 31ll * 86'400'000), 86'400'000);
  EXPECT_EQ(DefaultVolumeStep(0, 100ll * 86'400'000), 2 * 86'400'000);
  EXPECT_EQ(DefaultVolumeStep(0, 30), 1);
  EXPECT_LE(*VolumeBucketCount(123, 123 + 31ll * 86'400'000, DefaultVolumeStep(123, 123 + 31ll * 86'400'000)), 61u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Volume, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex
