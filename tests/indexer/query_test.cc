// The indexer and query engine, on every backend: randomized queries against
// a brute-force filter, the cost of each plan, idempotence, the rebuild
// baseline, the tag cap, splitting and read repair.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <set>

#include "common/crc32c.h"
#include "common/row_keys.h"
#include "indexer/compaction_lease.h"
#include "indexer/store_epoch.h"
#include "indexer/compactor.h"
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

// The acceptance workload (100,000 records, 50 queries per shape); smaller
// under the sanitizers, whose 10-20x slowdown would take the suite past CI's time.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kRandomRecords = 20'000;
constexpr int kQueriesPerShape = 10;
constexpr int kScanQueries = 10;
constexpr int kMergedRecords = 2'000;  // the merges stopped halfway
#else
constexpr int kRandomRecords = 100'000;
constexpr int kQueriesPerShape = 50;
constexpr int kScanQueries = 30;
constexpr int kMergedRecords = 6'000;
#endif

// An answer, not an error, and the one wanted.
bool Is(const Result<bool>& answer, bool wanted) { return answer.ok() && *answer == wanted; }

class IndexerQuery : public ::testing::TestWithParam<Backend> {
 public:
  void SetUp() override {
    store_ = Open("a");
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<TableStore> Open(const std::string& name) {
    auto s = GetParam().open(dir_.path() + "/" + name, &clock_);
    if (s) {
      EXPECT_TRUE(CreateTables(*s, TableLayout{}).ok());
    }
    return s;
  }

  IndexerOptions Options() {
    IndexerOptions o;
    o.decode.clock = &clock_;
    return o;
  }

  QueryOptions QOptions() {
    QueryOptions o;
    o.decode.clock = &clock_;
    return o;
  }

  // A serialized chunk of one INFO record, "record <seq>", at `ts`.
  static std::string OneRecordChunk(const std::string& app, const std::string& host, uint64_t producer, uint64_t seq,
                                    int64_t ts) {
    proto::RecordBatch b;
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(ts);
    r->set_severity(SeverityCode(Severity::kInfo));
    r->set_message("record " + std::to_string(seq));
    PackOptions po;
    po.producer_id = producer;
    po.sequence = seq;
    return PackChunk(app, host, b, po).SerializeAsString();
  }

  // The non-atomic merge tests' workload: one app on two hosts, small
  // single-severity chunks that merge into a few runs of NonAtomicMerges().
  static WorkloadSpec NonAtomicSpec(int records) {
    WorkloadSpec spec;
    spec.apps = 1;
    spec.hosts = 2;
    spec.records = records;
    spec.max_records_per_chunk = 6;
    spec.mixed_every = 0;
    return spec;
  }
  CompactorOptions NonAtomicMerges() {
    CompactorOptions o;
    o.max_span_ms = 3'600'000;
    o.target_records = 150;
    o.allow_non_atomic = true;
    o.indexer = Options();
    return o;
  }
  // A member's compaction lease on `store` (the test's by default), period
  // 60 s, on its own clock; null (and a failure) when it cannot be made.
  std::unique_ptr<CompactionLease> Lease(const Clock& clock, TableStore* store = nullptr) {
    CompactionLeaseOptions lo;
    lo.period_ms = 60'000;
    lo.owner = "a";
    auto lease = CompactionLease::Create(store ? *store : *store_, lo, clock);
    EXPECT_TRUE(lease.ok()) << lease.error().ToString();
    return lease.ok() ? std::move(*lease) : nullptr;
  }

  // Main rows, and the stored parts a stored merged chunk lists (by main
  // key: the workload's chunk ids are not unique).
  static std::pair<size_t, size_t> Census(TableStore& store) {
    std::set<std::string> keys, listed;
    EXPECT_TRUE(store.Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto k, auto v) {
      proto::MainRow row;
      EXPECT_TRUE(row.ParseFromArray(v.data(), static_cast<int>(v.size())));
      keys.emplace(k);
      MainKey part = *MainKey::Decode(k);
      for (int i = 0; i + 1 < row.parts_size(); i += 2) {
        part.first_ts_ms = static_cast<int64_t>(row.parts(i));
        part.chunk = ChunkId(row.parts(i + 1));
        listed.insert(part.Encode());
      }
      return true;
    }).ok());
    size_t left = 0;
    for (const std::string& k : listed) left += keys.count(k);
    return {keys.size(), left};
  }

  void Ingest(const std::vector<std::string>& chunks, Indexer& indexer) {
    proto::ChunkSource src;
    src.set_topic("t");
    for (size_t i = 0; i < chunks.size(); i += 500) {
      std::vector<std::string> part(chunks.begin() + i, chunks.begin() + std::min(chunks.size(), i + 500));
      ASSERT_TRUE(indexer.IngestSerialized(part, src).ok());
    }
  }

  // The extent tests' three chunks of `host` (record 1 three hours ago,
  // record 2 a minute ago, record 3 two hours ago): a host-only query of the
  // last 30 minutes finds record 2 alone, one of the last 4 hours all three.
  void ExpectHostQueriesFindEveryChunk(const std::string& host, int64_t now, std::string_view why) {
    QueryEngine engine(*store_, QOptions());
    Query q;
    q.host = host;
    q.from_ms = now - 30 * 60'000;
    q.to_ms = now;
    q.limit = 100;
    auto got = engine.Run(q);
    ASSERT_TRUE(got.ok()) << got.error().ToString();
    ASSERT_EQ(got->records.size(), 1u) << why;
    EXPECT_EQ(got->records[0].message, "record 2");
    q.from_ms = now - 4 * 3'600'000;
    got = engine.Run(q);
    ASSERT_TRUE(got.ok()) << got.error().ToString();
    EXPECT_EQ(got->records.size(), 3u);
  }

  // Every row of every table, for byte-for-byte comparisons.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> Dump(TableStore& store,
                                                                               bool with_main = true) {
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
    std::vector<std::string> tables = IndexTableNames();
    if (with_main) tables.emplace_back(kMainTable);
    for (const std::string& t : tables) {
      EXPECT_TRUE(store.Scan(ScanSpec{t, "", "", false, 0}, [&](std::string_view k, std::string_view v) {
        out[t].emplace_back(k, v);
        return true;
      }).ok());
    }
    return out;
  }

  // Runs a query to exhaustion through its cursors.
  struct Paged {
    std::vector<ResultRecord> records;
    QueryStats total;
    uint64_t pages = 0;
    uint64_t max_page_seeks = 0;
    uint64_t stopped_pages = 0;  // pages a budget ended early
  };
  Paged RunAll(const QueryEngine& engine, Query q) {
    Paged p;
    for (;;) {
      auto a = engine.Run(q);
      EXPECT_TRUE(a.ok()) << a.error().ToString();
      if (!a.ok()) break;
      ++p.pages;
      p.total.seeks += a->stats.seeks;
      p.total.rows_scanned += a->stats.rows_scanned;
      p.total.chunks_read += a->stats.chunks_read;
      p.total.chunks_returned += a->stats.chunks_returned;
      p.total.bytes_decompressed += a->stats.bytes_decompressed;
      p.total.token_filters_read += a->stats.token_filters_read;
      p.total.chunks_skipped_by_tokens += a->stats.chunks_skipped_by_tokens;
      p.total.superseded_parts += a->stats.superseded_parts;
      p.total.index_rows_without_main += a->stats.index_rows_without_main;
      p.max_page_seeks = std::max(p.max_page_seeks, a->stats.seeks);
      p.total.plan = a->stats.plan;
      if (!a->stopped_early.empty()) {
        ++p.stopped_pages;
        EXPECT_EQ(a->stopped_early, a->stats.budget_exhausted);
        EXPECT_FALSE(a->next_cursor.empty()) << "a page stopped early continues";
      }
      EXPECT_LE(a->records.size(), q.limit);
      for (auto& r : a->records) p.records.push_back(std::move(r));
      if (a->next_cursor.empty()) break;
      q.cursor = a->next_cursor;
      EXPECT_LT(p.pages, 100000u) << "runaway paging";
    }
    return p;
  }

  static std::vector<const Rec*> BruteForce(const Workload& w, const Query& q) {
    std::vector<const Rec*> out;
    for (const Rec& r : w.records) {
      if (Matches(r, q)) out.push_back(&r);
    }
    std::sort(out.begin(), out.end(), [](const Rec* a, const Rec* b) { return a->ts > b->ts; });
    return out;
  }

  static void ExpectSame(const std::vector<ResultRecord>& got, const std::vector<const Rec*>& want,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].ts_ms, want[i]->ts) << what << " record " << i;
      ASSERT_EQ(got[i].message, want[i]->message) << what << " record " << i;
      ASSERT_EQ(got[i].app, want[i]->app) << what;
      ASSERT_EQ(got[i].host, want[i]->host) << what;
      ASSERT_EQ(got[i].severity, want[i]->sev) << what;
      ASSERT_EQ(got[i].tags, want[i]->tags) << what;
    }
  }

  void PageThroughTiesImpl(int hosts, int chunks_per_host);

  TempDir dir_;
  ManualClock clock_{1'790'000'000'000 + 7 * 3'600'000};
  std::unique_ptr<TableStore> store_;
};

TEST_P(IndexerQuery, RandomQueriesOfEveryShapeMatchBruteForceAndMeetTheirCost) {
  WorkloadSpec spec;
  spec.records = kRandomRecords;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  EXPECT_GT(indexer.counters().split_by_severity, 0u);
  QueryEngine engine(*store_, QOptions());

  // Apps each host has logged for, for the host-only seek bound.
  std::map<std::string, std::set<std::string>> apps_of_host;
  for (const Rec& r : w.records) apps_of_host[r.host].insert(r.app);

  std::mt19937_64 rng(99);
  enum Shape { kApp, kAppHost, kHost, kTag, kShapes };
  const char* names[] = {"app", "app+host", "host", "tag"};
  uint64_t nonempty = 0;
  for (int shape = 0; shape < kShapes; ++shape) {
    for (int with_contains = 0; with_contains < 2; ++with_contains) {
      for (int n = 0; n < kQueriesPerShape; ++n) {
        Query q;
        const int64_t len = 600'000 + static_cast<int64_t>(rng() % (spec.duration_ms - 600'000));
        q.from_ms = w.start_ms + static_cast<int64_t>(rng() % (spec.duration_ms - len + 1));
        q.to_ms = q.from_ms + len;
        q.limit = 1 + static_cast<uint32_t>(rng() % 400);
        const std::string app = "app" + std::to_string(rng() % spec.apps);
        const std::string host = "host" + std::to_string(rng() % spec.hosts);
        if (shape == kApp || shape == kAppHost) q.app = app;
        if (shape == kAppHost || shape == kHost) q.host = host;
        if (shape == kTag) q.tags.emplace_back("k", "v" + std::to_string(rng() % spec.tag_values));
        if (shape == kApp && rng() % 2) {
          for (int i = 0, k = 1 + static_cast<int>(rng() % 2); i < k; ++i) {
            q.severities.push_back(spec.severities[rng() % spec.severities.size()]);
          }
        }
        if (with_contains) q.contains = testing::kWords[rng() % 16];
        const std::string what = std::string(names[shape]) + (with_contains ? "+contains" : "") + " #" +
                                 std::to_string(n);

        Paged got = RunAll(engine, q);
        std::vector<const Rec*> want = BruteForce(w, q);
        ExpectSame(got.records, want, what);
        nonempty += !want.empty();

        // Cost: index rows read stay within 20% of the chunks they yield, plus one per range opened.
        const uint64_t yielded = with_contains ? got.total.chunks_read : got.total.chunks_returned;
        EXPECT_LE(got.total.rows_scanned, 1.2 * yielded + got.total.seeks)
            << what << " plan " << got.total.plan << " chunks read " << got.total.chunks_read;
        if (shape == kHost) {
          EXPECT_LE(got.max_page_seeks, apps_of_host[host].size()) << what;
        }
      }
    }
  }
  EXPECT_GT(nonempty, 6u * kQueriesPerShape) << "the random queries should mostly find something";
}

// A budget ends a page early with the records found so far and a cursor
// that continues where it stopped: paging to the end returns exactly the
// whole answer, however small the budget (one index row per page).
TEST_P(IndexerQuery, BudgetsStopPagesEarlyAndTheirCursorsContinueToTheWholeAnswer) {
  WorkloadSpec spec;
  spec.apps = 3;
  spec.hosts = 5;
  spec.tag_values = 5;
  spec.records = 3'000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  struct Budget {
    uint64_t rows, bytes;
  };
  for (const Budget& b : {Budget{1, 0}, Budget{8, 0}, Budget{0, 1}, Budget{0, 3'000}}) {
    QueryOptions qo = QOptions();
    qo.max_rows_scanned = b.rows;
    qo.max_bytes_decompressed = b.bytes;
    QueryEngine engine(*store_, qo);
    std::vector<Query> shapes(5);
    shapes[0].app = "app0";
    shapes[1].host = "host1";
    shapes[2].tags = {{"k", "v3"}};
    shapes[3].app = "app2";
    shapes[3].contains = "alpha";
    shapes[4].scan = true;  // every stream's severity index
    shapes[4].tags = {{"k", "v1"}};
    for (Query& q : shapes) {
      q.from_ms = w.start_ms;
      q.to_ms = w.start_ms + spec.duration_ms;
      q.limit = 200;
      const std::string what = "rows " + std::to_string(b.rows) + " bytes " + std::to_string(b.bytes) + " app " +
                               q.app + " host " + q.host + (q.tags.empty() ? "" : " tag");
      Paged got = RunAll(engine, q);
      ExpectSame(got.records, BruteForce(w, q), what);
      EXPECT_GT(got.stopped_pages, 0u) << what;
    }
  }
  // The main-table scan sorts only at its end: over its budget it still fails.
  QueryOptions qo = QOptions();
  qo.max_rows_scanned = 5;
  qo.max_scan_index_ranges = 0;
  QueryEngine engine(*store_, qo);
  Query scan;
  scan.scan = true;
  scan.from_ms = w.start_ms;
  scan.to_ms = w.start_ms + spec.duration_ms;
  auto a = engine.Run(scan);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::kResourceExhausted);
}

// The text filters' meaning, written again independently of
// indexer/text_filter.cc: tokens by replacing every non-token byte with a
// space, a phrase as its tokens joined by single spaces inside the
// message's, a regex with std::regex (the patterns below mean the same in
// ECMAScript and RE2).
bool BruteText(const std::string& message, const TextFilter& f) {
  auto tokens = [](const std::string& text) {
    std::string spaced = text;
    for (char& c : spaced) {
      const auto u = static_cast<unsigned char>(c);
      if (!(std::isalnum(u) || c == '_' || u >= 0x80)) c = ' ';
    }
    std::istringstream in(spaced);
    std::vector<std::string> out;
    for (std::string t; in >> t;) out.push_back(t);
    return out;
  };
  auto joined = [](const std::vector<std::string>& t) {
    std::string s = " ";
    for (const std::string& x : t) s += x + " ";
    return s;
  };
  bool hit = false;
  switch (f.kind) {
    case TextFilterKind::kContains: hit = message.find(f.text) != std::string::npos; break;
    case TextFilterKind::kWord: {
      const std::vector<std::string> have = tokens(message);
      hit = true;
      for (const std::string& w : tokens(f.text)) hit = hit && std::find(have.begin(), have.end(), w) != have.end();
      break;
    }
    case TextFilterKind::kPhrase: hit = joined(tokens(message)).find(joined(tokens(f.text))) != std::string::npos; break;
    case TextFilterKind::kRegex: {
      static std::map<std::string, std::regex> compiled;  // std::regex compiles slowly: once per pattern
      auto it = compiled.try_emplace(f.text, f.text).first;
      hit = std::regex_search(message, it->second);
      break;
    }
  }
  return hit != f.negate;
}

// BruteForce, then every text filter of the query by BruteText.
std::vector<const Rec*> BruteForceWithText(const Workload& w, const Query& q) {
  std::vector<const Rec*> out;
  for (const Rec* r : IndexerQuery::BruteForce(w, q)) {
    if (std::all_of(q.text.begin(), q.text.end(), [&](const TextFilter& f) { return BruteText(r->message, f); })) {
      out.push_back(r);
    }
  }
  return out;
}

TEST_P(IndexerQuery, RandomTextFiltersReturnExactlyWhatABruteForceFilterReturns) {
  WorkloadSpec spec;
  spec.apps = 4;
  spec.hosts = 6;
  spec.records = 4'000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  QueryEngine engine(*store_, QOptions());

  std::mt19937_64 rng(17);
  auto word = [&] { return std::string(testing::kWords[rng() % 16]); };
  const std::vector<std::function<TextFilter()>> makers = {
      [&] { return TextFilter{TextFilterKind::kWord, false, word()}; },
      [&] { return TextFilter{TextFilterKind::kWord, false, word() + ", " + word()}; },  // both words, any order
      [&] { return TextFilter{TextFilterKind::kWord, false, "alp"}; },                   // a prefix is not a word
      [&] { return TextFilter{TextFilterKind::kPhrase, false, word() + " request"}; },
      [&] { return TextFilter{TextFilterKind::kPhrase, false, word() + " done"}; },  // only after the number
      [&] { return TextFilter{TextFilterKind::kPhrase, false, "request  " + std::to_string(rng() % 10)}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "request [0-9]*" + std::to_string(rng() % 10) + " "}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "^" + word().substr(0, 2)}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "(" + word() + "|" + word() + ") done$"}; },
      [&] { return TextFilter{TextFilterKind::kContains, false, word().substr(1, 3)}; },
  };
  uint64_t nonempty = 0, queries = 0;
  for (int n = 0; n < 40; ++n) {
    Query q;
    q.from_ms = w.start_ms;
    q.to_ms = w.start_ms + spec.duration_ms;
    q.limit = 50 + static_cast<uint32_t>(rng() % 300);
    if (rng() % 4 == 0) {
      q.scan = true;
    } else {
      q.app = "app" + std::to_string(rng() % spec.apps);
    }
    for (int i = 0, k = 1 + static_cast<int>(rng() % 3); i < k; ++i) {
      TextFilter f = makers[rng() % makers.size()]();
      f.negate = rng() % 4 == 0;
      q.text.push_back(std::move(f));
    }
    std::string what = "#" + std::to_string(n) + (q.scan ? " scan" : " " + q.app);
    for (const TextFilter& f : q.text) what += " " + TextFilterParam(f) + "=" + f.text;
    const std::vector<const Rec*> want = BruteForceWithText(w, q);
    Paged got = RunAll(engine, q);
    ExpectSame(got.records, want, what);
    nonempty += !want.empty();
    ++queries;

    // Volume counts by reading the records with the same filters.
    VolumeQuery vq;
    vq.filter = q;
    vq.filter.limit = 100;
    vq.step_ms = 3'600'000;
    auto volume = engine.Volume(vq);
    ASSERT_TRUE(volume.ok()) << what << ": " << volume.error().ToString();
    EXPECT_TRUE(volume->read_records) << what << ": a text filter implies reading the records";
    EXPECT_EQ(volume->totals.total, want.size()) << what;
  }
  EXPECT_GT(nonempty, queries / 2) << "the random filters should mostly find something";

  // A cursor belongs to its filters: the same query with another text filter refuses it.
  Query q;
  q.app = "app0";
  q.from_ms = w.start_ms;
  q.to_ms = w.start_ms + spec.duration_ms;
  q.limit = 5;
  q.text = {{TextFilterKind::kWord, false, "request"}};
  auto first = engine.Run(q);
  ASSERT_TRUE(first.ok());
  ASSERT_FALSE(first->next_cursor.empty());
  q.cursor = first->next_cursor;
  q.text[0].text = "done";
  auto other = engine.Run(q);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, Errc::kInvalidArgument);
  // A regex RE2 refuses is a 400's error, naming the parameter.
  q.cursor.clear();
  q.text = {{TextFilterKind::kRegex, true, "(unclosed"}};
  auto bad = engine.Run(q);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(bad.error().message.rfind("not_regex: '(unclosed' is not an RE2 regular expression", 0), 0u)
      << bad.error().message;
}

// Chunks with a token filter (written as the compactor writes merged ones,
// through Indexer::StageMerged, so that both backends hold them): random
// text filters answer exactly what the brute force answers, whether the
// engine reads the filters or not, and the filters skip chunks for rare
// tokens. A filter that is corrupt or missing makes its chunk read.
TEST_P(IndexerQuery, TokenFiltersSkipChunksAndNeverChangeAnAnswer) {
  WorkloadSpec spec;
  spec.apps = 3;
  spec.hosts = 4;
  spec.records = 12'000;
  spec.max_records_per_chunk = 400;  // merged-chunk sizes
  spec.mixed_every = 0;              // a merged chunk holds one severity
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  uint64_t chunks = 0;
  std::vector<MainKey> keys;
  for (size_t i = 0; i < w.chunks.size(); ++i) {
    auto chunk = DecodeChunk(w.chunks[i], Options().decode);
    ASSERT_TRUE(chunk.ok());
    auto records = UnpackRecords(*chunk, Options().decode);
    ASSERT_TRUE(records.ok());
    WriteBatch batch;
    const ChunkId id = ChunkIdOf(5, i);
    ASSERT_TRUE(indexer.StageMerged(*chunk, w.chunks[i], id, *records, proto::ChunkSource{}, batch).ok());
    ASSERT_TRUE(store_->Write(batch).ok());
    indexer.Settle(true);
    const AppId app = AppIdOf(chunk->app());
    const HostId host = HostIdOf(chunk->host());
    keys.push_back(MainKey{SaltOf(app, host, kDefaultSaltBuckets), app, *SeverityFromCode(chunk->severity()),
                           chunk->first_ts_ms(), host, id});
    ++chunks;
  }
  ASSERT_GT(indexer.counters().token_filters, chunks * 9 / 10) << "chunks of ~200 records get a filter";
  EXPECT_LE(indexer.counters().token_filter_bytes, 0.05 * static_cast<double>([&] {
              uint64_t n = 0;
              for (const std::string& c : w.chunks) n += c.size();
              return n;
            }())) << "at most 5 % of the stored chunks' bytes";

  QueryEngine with(*store_, QOptions());
  QueryOptions off = QOptions();
  off.use_token_filters = false;
  QueryEngine without(*store_, off);

  std::mt19937_64 rng(23);
  auto word = [&] { return std::string(testing::kWords[rng() % 16]); };
  // A number of some record: rare (about one record in 100,000 numbers each).
  auto number = [&] {
    const std::string& m = w.records[rng() % w.records.size()].message;
    const size_t at = m.find("request ") + 8;
    return m.substr(at, m.find(' ', at) - at);
  };
  const std::vector<std::function<TextFilter()>> makers = {
      [&] { return TextFilter{TextFilterKind::kWord, false, number()}; },
      [&] { return TextFilter{TextFilterKind::kWord, false, number() + " " + word()}; },
      [&] { return TextFilter{TextFilterKind::kWord, false, word()}; },
      [&] { return TextFilter{TextFilterKind::kWord, false, "ALPHA"}; },  // case matters: nothing
      [&] { return TextFilter{TextFilterKind::kPhrase, false, "request " + number()}; },
      [&] { return TextFilter{TextFilterKind::kContains, false, "t " + number() + " "}; },
      [&] { return TextFilter{TextFilterKind::kContains, false, number().substr(1)}; },  // no whole token
      [&] { return TextFilter{TextFilterKind::kRegex, false, "request " + number() + " [a-z]+ done"}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "[Rr]EQUEST " + number() + "|[rR]equest " + number() + " "}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "(" + word() + "|" + number() + ") done"}; },
      [&] { return TextFilter{TextFilterKind::kRegex, false, "[0-9]{5} "}; },  // no literal
  };
  uint64_t nonempty = 0, skipped = 0, read = 0;
  for (int n = 0; n < 60; ++n) {
    Query q;
    q.from_ms = w.start_ms;
    q.to_ms = w.start_ms + spec.duration_ms;
    q.limit = 20 + static_cast<uint32_t>(rng() % 200);
    switch (rng() % 3) {
      case 0: q.app = "app" + std::to_string(rng() % spec.apps); break;
      case 1:
        q.app = "app" + std::to_string(rng() % spec.apps);
        q.host = "host" + std::to_string(rng() % spec.hosts);
        break;
      case 2: q.tags = {{"k", "v" + std::to_string(rng() % spec.tag_values)}}; break;
    }
    for (int i = 0, k = 1 + static_cast<int>(rng() % 2); i < k; ++i) {
      TextFilter f = makers[rng() % makers.size()]();
      f.negate = rng() % 5 == 0;
      q.text.push_back(std::move(f));
    }
    std::string what = "#" + std::to_string(n) + " " + q.app + "/" + q.host;
    for (const TextFilter& f : q.text) what += " " + TextFilterParam(f) + "=" + f.text;
    const std::vector<const Rec*> want = BruteForceWithText(w, q);
    Paged got = RunAll(with, q);
    ExpectSame(got.records, want, what + " (token filters read)");
    ExpectSame(RunAll(without, q).records, want, what + " (token filters not read)");
    nonempty += !want.empty();
    skipped += got.total.chunks_skipped_by_tokens;
    read += got.total.token_filters_read;
    EXPECT_LE(got.total.chunks_skipped_by_tokens, got.total.token_filters_read) << what;

    VolumeQuery vq;
    vq.filter = q;
    vq.step_ms = 3'600'000;
    auto volume = with.Volume(vq);
    ASSERT_TRUE(volume.ok()) << what << ": " << volume.error().ToString();
    EXPECT_EQ(volume->totals.total, want.size()) << what;
  }
  EXPECT_GT(nonempty, 20u) << "the random filters should often find something";
  EXPECT_GT(skipped, read / 3) << "rare tokens rule most chunks out (" << skipped << " of " << read << ")";

  // The chunk holding a rare number: a corrupt or missing filter is read, never skipped.
  const Rec& rare = w.records[w.records.size() / 2];
  Query q;
  q.app = rare.app;
  q.from_ms = w.start_ms;
  q.to_ms = w.start_ms + spec.duration_ms;
  q.text = {{TextFilterKind::kPhrase, false, rare.message}};
  auto before = with.Run(q);
  ASSERT_TRUE(before.ok());
  ASSERT_FALSE(before->records.empty());
  EXPECT_GT(before->stats.chunks_skipped_by_tokens, 0u);
  for (const MainKey& k : keys) {
    WriteBatch batch;
    if (k.chunk.value() % 2) {
      batch.Put(kTokenTable, k.Encode(), std::string("\x07garbage"));
    } else {
      batch.Delete(kTokenTable, k.Encode());
    }
    ASSERT_TRUE(store_->Write(batch).ok());
  }
  auto after = with.Run(q);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->records.size(), before->records.size());
  EXPECT_EQ(after->stats.chunks_skipped_by_tokens, 0u);
  EXPECT_GT(after->stats.chunks_read, before->stats.chunks_read);
}

// Token filters against case and non-ASCII text: chunks of filler, each with
// one message of mixed case or non-ASCII letters, written as merged chunks;
// each query answers what it answers without the filters, and what it must
// (counted by hand: RE2 matches U+017F for [sſ] and \x{17F}, U+212A for
// (?i)k, while the filters hash tokens ASCII-folded).
TEST_P(IndexerQuery, TokenFiltersKeepAnswersExactAcrossCaseAndNonAsciiText) {
  const std::vector<std::string> special = {"Error: disk FULL on sda1", "user \u017Fam logged in",
                                            "a wor\u212Aer 7 started", "na\u00EFve \u00C9t\u00E9 caf\u00E9 ok"};
  Indexer indexer(*store_, Options());
  const int64_t t0 = 1'790'000'000'000;
  for (size_t c = 0; c < special.size(); ++c) {
    proto::RecordBatch batch;
    for (int i = 0; i < 200; ++i) {
      proto::LogRecord* r = batch.add_records();
      r->set_ts_ms(t0 + static_cast<int64_t>(c) * 100'000 + i);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message(i == 100 ? special[c] : "filler " + std::to_string(i * 7919 + c) + " ok");
    }
    PackOptions po;
    po.producer_id = 9;
    po.sequence = c;
    const proto::LogChunk chunk = PackChunk("app", "host", batch, po);
    WriteBatch wb;
    ASSERT_TRUE(indexer.StageMerged(chunk, chunk.SerializeAsString(), ChunkIdOf(9, c), batch, proto::ChunkSource{}, wb).ok());
    ASSERT_TRUE(store_->Write(wb).ok());
    indexer.Settle(true);
  }
  ASSERT_EQ(indexer.counters().token_filters, special.size());

  QueryEngine with(*store_, QOptions());
  QueryOptions off = QOptions();
  off.use_token_filters = false;
  QueryEngine without(*store_, off);
  struct Case {
    TextFilterKind kind;
    std::string text;
    size_t want;
  };
  const std::vector<Case> cases = {
      {TextFilterKind::kWord, "Error", 1},           {TextFilterKind::kWord, "error", 0},
      {TextFilterKind::kWord, "FULL sda1", 1},       {TextFilterKind::kPhrase, "disk FULL", 1},
      {TextFilterKind::kContains, ": disk FULL o", 1}, {TextFilterKind::kContains, " disk full ", 0},
      {TextFilterKind::kRegex, "[Ee]rror: disk FULL", 1}, {TextFilterKind::kRegex, "ERROR: disk", 0},
      {TextFilterKind::kRegex, "user [s\u017F]am logged", 1}, {TextFilterKind::kRegex, "user \\x{17F}am logged", 1},
      {TextFilterKind::kRegex, "user sam logged", 0},  {TextFilterKind::kRegex, "(?i)b worker 7 s", 0},
      {TextFilterKind::kRegex, "(?i)a worker 7 s", 1},   {TextFilterKind::kWord, "caf\u00E9", 1},
      {TextFilterKind::kPhrase, "\u00C9t\u00E9 caf\u00E9", 1}, {TextFilterKind::kWord, "CAF\u00C9", 0},
      {TextFilterKind::kContains, "e \u00C9t\u00E9 c", 1},
  };
  for (const Case& c : cases) {
    Query q;
    q.app = "app";
    q.from_ms = t0;
    q.to_ms = t0 + 3'600'000;
    q.text = {{c.kind, false, c.text}};
    auto a = with.Run(q);
    auto b = without.Run(q);
    ASSERT_TRUE(a.ok() && b.ok()) << c.text;
    EXPECT_EQ(a->records.size(), c.want) << TextFilterParam(q.text[0]) << "=" << c.text;
    EXPECT_EQ(b->records.size(), c.want) << TextFilterParam(q.text[0]) << "=" << c.text << " without filters";
    if (c.want == 0 && c.kind != TextFilterKind::kRegex) {
      EXPECT_GT(a->stats.chunks_skipped_by_tokens, 0u) << c.text << ": no chunk holds it";
    }
  }
  // Query::contains (the API's `contains`) probes the filters too.
  Query q;
  q.app = "app";
  q.from_ms = t0;
  q.to_ms = t0 + 3'600'000;
  q.contains = " disk FULL ";
  auto a = with.Run(q);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->records.size(), 1u);
  EXPECT_EQ(a->stats.chunks_skipped_by_tokens, special.size() - 1);
}

// hosts × chunks_per_host chunks of 25 records, all at the same millisecond,
// paged 7 at a time: every record exactly once.
void PageThroughTies(IndexerQuery& t, int hosts, int chunks_per_host);

TEST_P(IndexerQuery, PagesThroughTiedTimestampsExactlyOnce) { PageThroughTies(*this, 3, 4); }

// More pending chunks than a cursor carries: the cursor falls back to
// re-reading one chunk span, still returning every record once.
TEST_P(IndexerQuery, PagesThroughTiesWithTooManyPendingChunksForTheCursor) { PageThroughTies(*this, 10, 10); }

void PageThroughTies(IndexerQuery& t, int hosts, int chunks_per_host) { t.PageThroughTiesImpl(hosts, chunks_per_host); }

void IndexerQuery::PageThroughTiesImpl(int hosts, int chunks_per_host) {
  std::vector<std::string> chunks;
  std::vector<std::tuple<std::string, uint64_t, int>> ids;  // host, sequence, index
  uint64_t seq = 0;
  const int64_t ts = 1'790'000'100'000;
  for (int h = 0; h < hosts; ++h) {
    for (int c = 0; c < chunks_per_host; ++c) {
      proto::RecordBatch b;
      for (int i = 0; i < 25; ++i) {
        proto::LogRecord* r = b.add_records();
        r->set_ts_ms(ts);
        r->set_severity(SeverityCode(Severity::kInfo));
        r->set_message("h" + std::to_string(h) + " c" + std::to_string(c) + " i" + std::to_string(i));
      }
      PackOptions po;
      po.producer_id = 5;
      po.sequence = ++seq;
      chunks.push_back(PackChunk("tied", "host" + std::to_string(h), b, po).SerializeAsString());
    }
  }
  Indexer indexer(*store_, Options());
  Ingest(chunks, indexer);
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "tied";
  q.from_ms = ts - 1000;
  q.to_ms = ts + 1000;
  q.limit = 7;
  Paged got = RunAll(engine, q);
  const size_t total = static_cast<size_t>(hosts * chunks_per_host * 25);
  ASSERT_EQ(got.records.size(), total);
  std::set<std::string> seen;
  for (auto& r : got.records) EXPECT_TRUE(seen.insert(r.message).second) << "duplicate " << r.message;
  EXPECT_EQ(got.pages, (total + 6) / 7 + (total % 7 == 0));
}

TEST_P(IndexerQuery, IngestingEverythingTwiceChangesNothing) {
  WorkloadSpec spec;
  spec.records = 5000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  auto once = Dump(*store_);
  Ingest(w.chunks, indexer);
  EXPECT_EQ(Dump(*store_), once);
  Indexer fresh(*store_, Options());  // a restarted process: no caches
  Ingest(w.chunks, fresh);
  EXPECT_EQ(Dump(*store_), once);
}

TEST_P(IndexerQuery, RebuildFromTheMainTableMatchesTheIncrementalIndexes) {
  WorkloadSpec spec;
  spec.records = 5000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);

  std::unique_ptr<TableStore> b = Open("b");
  WriteBatch copy;
  ASSERT_TRUE(store_->Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto k, auto v) {
    copy.Put(kMainTable, std::string(k), std::string(v));
    return true;
  }).ok());
  ASSERT_TRUE(b->Write(copy).ok());
  ASSERT_TRUE(Indexer::RebuildIndexes(*b, Options(), 300).ok());
  auto incremental = Dump(*store_);
  auto rebuilt = Dump(*b);
  for (const std::string& t : IndexTableNames()) {
    if (t != LevelIndexTable(Severity::kTrace)) {  // the workload has no TRACE
      EXPECT_FALSE(incremental[t].empty()) << t;
    }
    EXPECT_EQ(rebuilt[t], incremental[t]) << t;
  }
}

// One record with 20,000 keys used to write 20,000 tag index rows (and as
// many entries in the tag guard and meta cache). A record's first 64 tags are
// the index candidates, at most max_keys_per_hour keys are indexed an hour;
// every tag stays in the record and the rest are counted.
TEST_P(IndexerQuery, ARecordWithTwentyThousandKeysWritesBoundedIndexRowsAndKeepsItsTags) {
  proto::RecordBatch b;
  proto::LogRecord* r = b.add_records();
  r->set_ts_ms(clock_.NowMs() - 60'000);
  r->set_severity(SeverityCode(Severity::kInfo));
  r->set_message("many keys");
  for (int i = 0; i < 20'000; ++i) {
    proto::Tag* t = r->add_tags();
    t->set_key("key" + std::to_string(i));
    t->set_value("v");
  }
  PackOptions po;
  po.producer_id = 13;
  po.sequence = 1;
  proto::LogChunk packed = PackChunk("keys", "h0", b, po);
  EXPECT_EQ(packed.tag_summary().tags_size(), kMaxIndexedTagsPerRecord) << "the shipper's summary follows the rule";
  proto::LogChunk unsummarized = packed;
  unsummarized.clear_tag_summary();  // another producer: the indexer summarizes
  unsummarized.set_sequence(2);
  IndexerOptions o = Options();
  o.tags.max_keys_per_hour = 40;
  Indexer indexer(*store_, o);
  Ingest({packed.SerializeAsString(), unsummarized.SerializeAsString()}, indexer);
  EXPECT_EQ(indexer.counters().tags_over_record_cap, 20'000u - kMaxIndexedTagsPerRecord);
  EXPECT_EQ(indexer.counters().tag_keys_over_cap, 2u * (kMaxIndexedTagsPerRecord - 40));

  size_t tag_rows = 0;
  ASSERT_TRUE(store_->Scan(ScanSpec{std::string(kTagIndexTable), "", "", false, 0}, [&](auto, auto) {
    ++tag_rows;
    return true;
  }).ok());
  EXPECT_EQ(tag_rows, 2u * 40) << "40 keys an hour, for each of the two chunks";

  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "keys";
  q.tags.emplace_back("key19999", "v");  // never indexed: scan=true finds it in the record
  q.from_ms = clock_.NowMs() - 3'600'000;
  q.to_ms = clock_.NowMs();
  q.scan = true;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  ASSERT_EQ(a->records.size(), 2u);
  EXPECT_EQ(a->records[0].tags.size(), 20'000u) << "every tag stays in the record";
}

// A producer leaves the tag summary out where it would outgrow the payload
// (kMaxTagSummaryShare: a request id per record): the indexer reads the tags
// from the records, and writes the index rows the summary would have given,
// alert-wanted severity or not, and finds each record by its own id.
TEST_P(IndexerQuery, AChunkWhoseTagSummaryWasLeftOutIsIndexedByItsRecordsTags) {
  const auto chunk_of = [&](Severity severity, uint64_t sequence) {
    proto::RecordBatch b;
    for (int i = 0; i < 300; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(clock_.NowMs() - 60'000 + i);
      r->set_severity(SeverityCode(severity));
      r->set_message("GET /api/items");
      for (auto [k, v] : {std::pair<std::string, std::string>{"request", "r" + std::to_string(i)}, {"dc", "east"}}) {
        proto::Tag* t = r->add_tags();
        t->set_key(k);
        t->set_value(v);
      }
    }
    PackOptions po;
    po.codec = proto::CODEC_ZSTD;
    po.producer_id = 21;
    po.sequence = sequence;
    return PackChunk("api", "h0", b, po);
  };
  proto::LogChunk left_out = chunk_of(Severity::kInfo, 1);
  ASSERT_FALSE(left_out.has_tag_summary()) << "301 distinct tags outweigh 300 near-identical records";
  // The same chunk with the summary its records give, written by hand.
  proto::LogChunk summarized = left_out;
  std::vector<std::pair<std::string, std::string>> tags;
  for (int i = 0; i < 300; ++i) tags.emplace_back("request", "r" + std::to_string(i));
  tags.emplace_back("dc", "east");
  for (const auto& [k, v] : tags) {
    proto::Tag* t = summarized.mutable_tag_summary()->add_tags();
    t->set_key(k);
    t->set_value(v);
  }
  // And an ERROR one, whose records the indexer builds for its observers.
  proto::LogChunk error = chunk_of(Severity::kError, 2);
  ASSERT_FALSE(error.has_tag_summary());

  // An observer that wants the ERROR chunks' records, as alerting does.
  struct WantsErrors : ChunkObserver {
    explicit WantsErrors(uint64_t& seen) : seen(seen) {}
    Status Observe(const StreamChunk& c, WriteBatch&) override {
      if (c.records) seen += static_cast<uint64_t>(c.records->records_size());
      return Status::Ok();
    }
    bool WantsRecords(Severity s) const override { return s == Severity::kError; }
    uint64_t& seen;
  };
  std::unique_ptr<TableStore> b = Open("b");
  ASSERT_NE(b, nullptr);
  {
    uint64_t seen = 0, seen_with_summary = 0;
    Indexer indexer(*store_, Options());
    indexer.AddObserver(std::make_unique<WantsErrors>(seen));
    Ingest({left_out.SerializeAsString(), error.SerializeAsString()}, indexer);
    EXPECT_EQ(indexer.counters().decompressed, 2u);
    Indexer with_summary(*b, Options());
    with_summary.AddObserver(std::make_unique<WantsErrors>(seen_with_summary));
    Ingest({summarized.SerializeAsString(), error.SerializeAsString()}, with_summary);
    EXPECT_EQ(with_summary.counters().decompressed, 1u) << "only the ERROR chunk's records were read";
    EXPECT_EQ(seen, 300u);
    EXPECT_EQ(seen_with_summary, 300u);
  }
  const auto index_rows = Dump(*store_, /*with_main=*/false);
  EXPECT_EQ(index_rows, Dump(*b, /*with_main=*/false));
  EXPECT_EQ(index_rows.at(std::string(kTagIndexTable)).size(), 2u * 301u);

  QueryEngine engine(*store_, QOptions());
  for (Severity severity : {Severity::kInfo, Severity::kError}) {
    for (int i : {0, 7, 299}) {
      Query q;
      q.app = "api";
      q.severities = {severity};
      q.tags.emplace_back("request", "r" + std::to_string(i));
      q.from_ms = clock_.NowMs() - 3'600'000;
      q.to_ms = clock_.NowMs();
      auto a = engine.Run(q);
      ASSERT_TRUE(a.ok()) << a.error().ToString();
      ASSERT_EQ(a->records.size(), 1u) << "request r" << i;
      EXPECT_EQ(a->records[0].ts_ms, clock_.NowMs() - 60'000 + i);
    }
  }
}

TEST_P(IndexerQuery, TagCapLimitsIndexedValuesAndScanStillFindsThem) {
  WorkloadSpec spec;
  spec.records = 4000;
  spec.duration_ms = 3'600'000;  // one hour: one cap window... or two when not aligned
  Workload w = MakeWorkload(spec);
  IndexerOptions o = Options();
  o.tags.max_values_per_hour = 5;
  o.tags.deny = {"dc"};
  Indexer indexer(*store_, o);
  Ingest(w.chunks, indexer);
  EXPECT_GT(indexer.counters().tag_values_over_cap, 0u);
  EXPECT_GT(indexer.counters().tag_keys_denied, 0u);

  // Distinct k values in the tag index, per hour: at most the cap.
  std::map<int64_t, std::set<TagId>> per_hour;
  ASSERT_TRUE(store_->Scan(ScanSpec{std::string(kTagIndexTable), "", "", false, 0}, [&](auto k, auto v) {
    auto key = TagIndexKey::Decode(k);
    auto val = IndexValue::Decode(v);
    EXPECT_TRUE(key && val);
    per_hour[val->main_key.first_ts_ms / 3'600'000].insert(key->tag);
    EXPECT_NE(key->tag, TagIdOf("dc", "east"));
    EXPECT_NE(key->tag, TagIdOf("dc", "west"));
    return true;
  }).ok());
  for (auto& [hour, tags] : per_hour) EXPECT_LE(tags.size(), 5u) << "hour " << hour;

  QueryEngine engine(*store_, QOptions());
  int capped_found_by_scan = 0;
  for (int v = 0; v < spec.tag_values; ++v) {
    Query q;
    q.tags.emplace_back("k", "v" + std::to_string(v));
    q.from_ms = w.start_ms;
    q.to_ms = w.end_ms + 1;
    q.limit = 10000;
    std::vector<const Rec*> want = BruteForce(w, q);
    Paged indexed = RunAll(engine, q);
    EXPECT_LE(indexed.records.size(), want.size());
    q.scan = true;
    Paged scanned = RunAll(engine, q);
    ExpectSame(scanned.records, want, "scan for k=v" + std::to_string(v));
    capped_found_by_scan += indexed.records.size() < want.size();
  }
  EXPECT_GT(capped_found_by_scan, 0) << "some values must have been over the cap";
}

// scan=true without app or host reads every stream's severity index (one
// range per app and severity in range, from meta): the same records in the
// same order as the main-table scan it replaces (max_scan_index_ranges 0),
// page by page, with severities, tags, text filters and time ranges mixed;
// and over max_scan_index_ranges ranges it reads the main table.
TEST_P(IndexerQuery, ScanOverEveryStreamAnswersAsTheMainTableScanDoes) {
  WorkloadSpec spec;
  spec.apps = 5;
  spec.hosts = 7;
  spec.tag_values = 6;
  spec.records = 6'000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  QueryOptions main_only = QOptions(), switches = QOptions(), switches_over_budget = QOptions();
  main_only.max_scan_index_ranges = 0;
  switches.scan_switch_after_chunks = 7;  // to the main table once 7 chunks did not fill the page
  // ... whose scan goes over its budget: the page ends as the index plan's.
  switches_over_budget.scan_switch_after_chunks = 7;
  switches_over_budget.max_rows_scanned = 60;
  const QueryEngine streams(*store_, QOptions()), main_table(*store_, main_only), switching(*store_, switches),
      switching_over_budget(*store_, switches_over_budget);
  uint64_t switched = 0;
  std::mt19937_64 rng(7);
  uint64_t nonempty = 0;
  for (int n = 0; n < kScanQueries; ++n) {
    Query q;
    q.scan = true;
    const int64_t span = static_cast<int64_t>(rng() % static_cast<uint64_t>(spec.duration_ms)) + 60'000;
    q.from_ms = w.start_ms - 60'000 + static_cast<int64_t>(rng() % static_cast<uint64_t>(spec.duration_ms));
    q.to_ms = q.from_ms + span;
    q.limit = 1 + static_cast<uint32_t>(rng() % 400);
    if (rng() % 3 == 0) q.severities = {spec.severities[rng() % spec.severities.size()]};
    if (rng() % 3 == 0) q.tags = {{"k", "v" + std::to_string(rng() % spec.tag_values)}};
    if (rng() % 2 == 0) q.text.push_back(TextFilter{TextFilterKind::kWord, rng() % 4 == 0, testing::kWords[rng() % 16]});
    const std::string what = "#" + std::to_string(n);
    Paged got = RunAll(streams, q);
    Paged want = RunAll(main_table, q);
    const std::vector<const Rec*> brute = BruteForceWithText(w, q);
    ExpectSame(got.records, brute, what + " every stream");
    ExpectSame(want.records, brute, what + " main table");
    Paged both = RunAll(switching, q);
    ExpectSame(both.records, brute, what + " every stream, then the main table");
    switched += both.total.plan.find("; then main table, full scan") != std::string::npos;
    Paged stopped = RunAll(switching_over_budget, q);
    ExpectSame(stopped.records, brute, what + " every stream, the main table over its budget");
    // A cursor of one plan continues on the other (the number of streams
    // may cross max_scan_index_ranges between pages).
    std::vector<ResultRecord> mixed;
    Query page = q;
    for (int n = 0; n < 100'000; ++n) {
      auto a = (n % 2 ? main_table : streams).Run(page);
      ASSERT_TRUE(a.ok()) << what << ": " << a.error().ToString();
      for (ResultRecord& r : a->records) mixed.push_back(std::move(r));
      if (a->next_cursor.empty()) break;
      page.cursor = a->next_cursor;
    }
    ExpectSame(mixed, brute, what + " pages from both plans in turn");
    EXPECT_EQ(got.total.plan.rfind("severity indexes, every stream (", 0), 0u) << got.total.plan;
    EXPECT_EQ(want.total.plan, "main table, full scan");
    nonempty += !got.records.empty();
  }
  EXPECT_GT(nonempty, static_cast<uint64_t>(kScanQueries / 3))
      << "the queries must find records for the comparison to mean anything";
  EXPECT_GT(switched, static_cast<uint64_t>(kScanQueries / 10)) << "some pages must have gone on on the main table";
  {
    Query all;
    all.scan = true;
    all.from_ms = w.start_ms;
    all.to_ms = w.end_ms + 1;
    all.text.push_back(TextFilter{TextFilterKind::kWord, false, "no_such_word"});
    auto a = switching_over_budget.Run(all);
    ASSERT_TRUE(a.ok()) << a.error().ToString();
    EXPECT_NE(a->stats.plan.find("; the main table over its budget"), std::string::npos) << a->stats.plan;
    EXPECT_EQ(a->stopped_early, "rows_scanned");
    EXPECT_FALSE(a->next_cursor.empty()) << "the page continues on the index plan";
  }

  // Severity and range narrow the plan to the streams meta says were there.
  Query error;
  error.scan = true;
  error.severities = {Severity::kError};
  error.from_ms = w.start_ms;
  error.to_ms = w.end_ms + 1;
  auto a = streams.Run(error);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->stats.plan.rfind("severity indexes, every stream (" + std::to_string(spec.apps) + " ranges)", 0), 0u)
      << a->stats.plan;
  EXPECT_EQ(a->stats.seeks, static_cast<uint64_t>(spec.apps));

  // More ranges than allowed: the main table.
  QueryOptions few = QOptions();
  few.max_scan_index_ranges = static_cast<uint64_t>(spec.apps) - 1;
  auto b = QueryEngine(*store_, few).Run(error);
  ASSERT_TRUE(b.ok()) << b.error().ToString();
  EXPECT_EQ(b->stats.plan, "main table, full scan");
  ASSERT_EQ(b->records.size(), a->records.size());
  for (size_t i = 0; i < a->records.size(); ++i) EXPECT_EQ(b->records[i].message, a->records[i].message);
}

// Over 512 index ranges a cursor carries the last record alone (saved
// positions would not fit the server's 64 KiB request head): its pages
// still continue to exactly the whole answer.
TEST_P(IndexerQuery, CursorsOfScansOverManyStreamsStaySmall) {
  WorkloadSpec spec;
  spec.apps = 120;  // 120 apps x 5 severities: up to 600 ranges
  spec.hosts = 2;
  spec.records = 24'000;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.scan = true;
  q.from_ms = w.start_ms;
  q.to_ms = w.end_ms + 1;
  q.limit = 3'000;
  std::vector<ResultRecord> got;
  size_t longest = 0;
  for (int n = 0; n < 100'000; ++n) {
    auto a = engine.Run(q);
    ASSERT_TRUE(a.ok()) << a.error().ToString();
    if (n == 0) {
      EXPECT_GT(a->stats.seeks, 512u) << a->stats.plan;
    }
    for (ResultRecord& r : a->records) got.push_back(std::move(r));
    if (a->next_cursor.empty()) break;
    longest = std::max(longest, a->next_cursor.size());
    q.cursor = a->next_cursor;
  }
  ExpectSame(got, BruteForce(w, q), "over 512 ranges");
  EXPECT_GT(longest, 0u);
  EXPECT_LT(longest, 200u) << "the last record alone";
}

// Issue 12: chunks older than the store's retention are stored (queries
// never reach them) and their records counted, by stream, for serve's metric
// and its warn line.
TEST_P(IndexerQuery, RecordsPastTheRetentionAreCountedByStream) {
  auto chunk_at = [](const std::string& app, int64_t ts) {
    proto::RecordBatch b;
    for (int i = 0; i < 3; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(ts + i);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message("m");
    }
    PackOptions po;
    po.producer_id = 9;
    po.sequence = static_cast<uint64_t>(ts);
    return PackChunk(app, "h", b, po).SerializeAsString();
  };
  const int64_t now = clock_.NowMs();
  const int64_t day = 86'400'000;
  IndexerOptions o = Options();
  o.retention_ms = 7 * day;
  Indexer indexer(*store_, o);
  Ingest({chunk_at("old", now - 8 * day), chunk_at("old", now - 9 * day), chunk_at("new", now - 6 * day)}, indexer);
  EXPECT_EQ(indexer.counters().past_retention_records, 6u);
  const std::map<std::string, uint64_t> streams = indexer.TakePastRetention();
  EXPECT_EQ(streams, (std::map<std::string, uint64_t>{{"old/h", 6}}));
  EXPECT_TRUE(indexer.TakePastRetention().empty()) << "taken";
  EXPECT_EQ(indexer.counters().stored_chunks, 3u) << "stored all the same";
}

TEST_P(IndexerQuery, SplitsMixedSeveritiesAndLongSpans) {
  proto::RecordBatch b;
  for (int i = 0; i < 30; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(1'790'000'000'000 + i * 10'000);  // 290 s: several 60 s windows
    r->set_severity(SeverityCode(i % 3 == 0 ? Severity::kError : Severity::kInfo));
    r->set_message("m" + std::to_string(i));
  }
  PackOptions po;
  po.producer_id = 9;
  po.sequence = 1;
  po.summarize_tags = false;
  std::string bytes = PackChunk("mix", "h", b, po).SerializeAsString();
  // An observer that wants ERROR records (as the alert observer does) is
  // given each ERROR part with its own records.
  struct ErrorRecords final : ChunkObserver {
    bool WantsRecords(Severity s) const override { return s >= Severity::kError; }
    Status Observe(const StreamChunk& c, WriteBatch&) override {
      if (c.severity >= Severity::kError && c.records != nullptr) {
        for (const proto::LogRecord& r : c.records->records()) severities.push_back(r.severity());
      }
      return Status::Ok();
    }
    std::vector<uint32_t> severities;
  };
  auto observer = std::make_unique<ErrorRecords>();
  const ErrorRecords& seen = *observer;
  Indexer indexer(*store_, Options());
  indexer.AddObserver(std::move(observer));
  auto chunk = DecodeChunk(bytes, Options().decode);
  ASSERT_TRUE(chunk.ok());
  WriteBatch batch;
  auto staged = indexer.Stage(*chunk, bytes, proto::ChunkSource{}, batch);
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(store_->Write(batch).ok());
  indexer.Settle(true);
  EXPECT_GE(staged->stored_chunks, 10u);  // 2 severities × 5 windows
  EXPECT_EQ(seen.severities.size(), 10u) << "every ERROR record (i % 3 == 0 of 30), each once";
  for (uint32_t s : seen.severities) EXPECT_EQ(s, SeverityCode(Severity::kError));
  // Every stored chunk has one severity and a span under the limit.
  ASSERT_TRUE(store_->Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto, auto v) {
    proto::MainRow row;
    EXPECT_TRUE(row.ParseFromArray(v.data(), static_cast<int>(v.size())));
    EXPECT_NE(row.chunk().severity(), kMixedSeverity);
    EXPECT_LT(row.chunk().last_ts_ms() - row.chunk().first_ts_ms(), 60'000);
    return true;
  }).ok());
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "mix";
  q.severities = {Severity::kError};
  q.from_ms = 1'790'000'000'000;
  q.to_ms = q.from_ms + 3'600'000;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->records.size(), 10u);
}

TEST_P(IndexerQuery, SkipsAndCountsIndexRowsWhoseMainRowIsMissing) {
  WorkloadSpec spec;
  spec.records = 500;
  spec.apps = 1;
  spec.mixed_every = 0;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  // Remove one main row, as an HBase write that failed after its index rows would leave it.
  std::string victim;
  ASSERT_TRUE(store_->Scan(ScanSpec{std::string(kMainTable), "", "", false, 1}, [&](auto k, auto) {
    victim = std::string(k);
    return false;
  }).ok());
  WriteBatch del;
  del.Delete(kMainTable, victim);
  ASSERT_TRUE(store_->Write(del).ok());
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "app0";
  q.from_ms = w.start_ms;
  q.to_ms = w.end_ms;
  q.limit = 10000;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->stats.index_rows_without_main, 1u);
  EXPECT_LT(a->records.size(), w.records.size());
}

// A payload whose length header is right but whose snappy stream is not (a
// broken compressor, or a hostile producer, that signed its output):
// verify: header stores it and queries skip and count it; verify: snappy and
// the default (full) refuse it at ingest (to the DLQ, in serve).
TEST_P(IndexerQuery, ABrokenSnappyStreamIsCountedByQueriesOrRefusedWithVerifySnappy) {
  auto chunk = [&](uint64_t seq) {
    proto::RecordBatch b;
    for (int i = 0; i < 3; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(clock_.NowMs() - 60'000 + static_cast<int64_t>(seq) * 10 + i);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message("record " + std::to_string(seq));
    }
    PackOptions po;
    po.producer_id = 5;
    po.sequence = seq;
    return PackChunk("app0", "h0", b, po);
  };
  proto::LogChunk bad = chunk(2);
  std::string stream;
  for (uint64_t n = bad.uncompressed_size(); ; n >>= 7) {  // the right length header (a varint)
    stream.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) break;
  }
  stream += std::string("\x0a\x01\x00", 3);  // a copy of 3 bytes from before the start
  bad.set_payload(stream);
  bad.set_payload_crc32c(Crc32c(stream));
  const std::vector<std::string> chunks = {chunk(1).SerializeAsString(), bad.SerializeAsString()};

  IndexerOptions trusting = Options();
  trusting.verify = IngestVerify::kHeader;
  Indexer indexer(*store_, trusting);
  Ingest(chunks, indexer);
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "app0";
  q.from_ms = clock_.NowMs() - 3'600'000;
  q.to_ms = clock_.NowMs();
  q.limit = 100;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->records.size(), 3u) << "the good chunk's records";
  EXPECT_EQ(a->stats.corrupt_chunks, 1u);

  for (IngestVerify v : {IngestVerify::kSnappy, Options().verify}) {
    IndexerOptions strict = Options();
    strict.verify = v;
    Indexer checking(*Open("b" + std::to_string(static_cast<int>(v))), strict);
    proto::ChunkSource src;
    Status s = checking.IngestSerialized({chunks[1]}, src);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("not valid snappy"), std::string::npos) << s.ToString();
  }
}

// A chunk whose header lies about its records, signed by its producer: with
// verify: header it was stored under the header's index rows and every query
// skipped it as corrupt, so its records were never found and never
// dead-lettered. The default (full) refuses each lie at ingest.
TEST_P(IndexerQuery, TheDefaultVerifyRefusesAChunkWhoseHeaderLiesAboutItsRecords) {
  auto honest = [&](uint64_t seq) {
    proto::RecordBatch b;
    for (int i = 0; i < 3; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(clock_.NowMs() - 60'000 + i);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message("record " + std::to_string(i));
    }
    PackOptions po;
    po.producer_id = 9;
    po.sequence = seq;
    return PackChunk("liar", "h0", b, po);
  };
  proto::LogChunk count = honest(1);
  count.set_record_count(2);
  proto::LogChunk times = honest(2);
  times.set_last_ts_ms(times.first_ts_ms());
  proto::LogChunk severity = honest(3);
  severity.set_severity(SeverityCode(Severity::kError));
  const std::pair<proto::LogChunk, std::string> lies[] = {
      {count, "count_mismatch"}, {times, "bad_timestamp"}, {severity, "bad_severity"}};
  for (const auto& [chunk, reason] : lies) {
    Indexer indexer(*Open("lie-" + reason), Options());
    proto::ChunkSource src;
    Status s = indexer.IngestSerialized({chunk.SerializeAsString()}, src);
    ASSERT_FALSE(s.ok()) << reason;
    EXPECT_NE(s.message().find(reason), std::string::npos) << s.ToString();
  }
  // What the light check did with the same lie: stored, then hidden.
  IndexerOptions trusting = Options();
  trusting.verify = IngestVerify::kHeader;
  Indexer light(*store_, trusting);
  ASSERT_TRUE(light.IngestSerialized({count.SerializeAsString()}, proto::ChunkSource()).ok());
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "liar";
  q.from_ms = clock_.NowMs() - 3'600'000;
  q.to_ms = clock_.NowMs();
  q.limit = 100;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->records.size(), 0u);
  EXPECT_EQ(a->stats.corrupt_chunks, 1u);
}

// A meta read that fails used to be taken for "absent": the stream's extent
// was rewritten as the new chunk's alone, and host-only queries (which seek
// only where a stream's extent says it has data) then missed its older
// records. Now the staging reports the store failure and the batch is retried.
TEST_P(IndexerQuery, AFailedMetaReadFailsTheStagingInsteadOfNarrowingTheStreamExtent) {
  auto chunk = [](uint64_t seq, int64_t ts) { return OneRecordChunk("extent-app", "extent-host", 11, seq, ts); };
  const int64_t old_ts = clock_.NowMs() - 2 * 3'600'000;
  const int64_t new_ts = clock_.NowMs() - 60'000;
  {
    Indexer first(*store_, Options());
    Ingest({chunk(1, old_ts)}, first);
  }
  testing::FailingReads failing(*store_);
  failing.fail_table = std::string(kMetaTable);
  Indexer indexer(failing, Options());  // a new member: nothing cached
  const std::string bytes = chunk(2, new_ts);
  auto decoded = DecodeChunk(bytes, Options().decode);
  ASSERT_TRUE(decoded.ok());
  proto::ChunkSource src;
  WriteBatch batch;
  auto staged = indexer.Stage(*decoded, bytes, src, batch);
  ASSERT_TRUE(staged.ok()) << "the chunk itself is fine";
  ASSERT_FALSE(staged->store_failure.ok()) << "a failed meta read must fail the batch";
  EXPECT_EQ(staged->store_failure.code(), Errc::kUnavailable);
  indexer.Settle(false);

  failing.fail_table.clear();  // the store recovers: the retry writes the batch
  WriteBatch retry;
  staged = indexer.Stage(*decoded, bytes, src, retry);
  ASSERT_TRUE(staged.ok() && staged->store_failure.ok());
  ASSERT_TRUE(failing.Write(retry).ok());
  indexer.Settle(true);

  QueryEngine engine(*store_, QOptions());
  Query q;
  q.host = "extent-host";
  q.from_ms = clock_.NowMs() - 3 * 3'600'000;
  q.to_ms = clock_.NowMs();
  q.limit = 100;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->records.size(), 2u) << "the stream's older record too";
}

// Members sharing a store (HBase): a stream's partition moves from member A
// to B and back. A used to remember the extent it had written and, widening
// that stale extent by its next chunk, wrote back one narrower than B's: the
// stream's newest minutes were then skipped by host-only queries.
TEST_P(IndexerQuery, AMemberNeverNarrowsAStreamExtentAnotherMemberWidened) {
  if (!store_->shared()) GTEST_SKIP() << "one process owns an embedded store";
  auto chunk = [](uint64_t seq, int64_t ts) { return OneRecordChunk("moved-app", "moved-host", 12, seq, ts); };
  const int64_t now = clock_.NowMs();
  Indexer a(*store_, Options()), b(*store_, Options());
  Ingest({chunk(1, now - 3 * 3'600'000)}, a);
  Ingest({chunk(2, now - 60'000)}, b);       // the partition moved to b
  Ingest({chunk(3, now - 2 * 3'600'000)}, a);  // and back to a, which replays an older chunk
  ExpectHostQueriesFindEveryChunk("moved-host", now, "b's chunk, past the extent a remembered");
}

// A's view of the store: once, right after A read a stream's extent (a Get
// or a batch's MultiGet of meta), or the meta row `between_key` when set,
// another member's batch runs. A then widens an extent (or raises a value)
// it read before that member widened it further.
class MidBatchStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    auto row = base_.Get(table, key);
    AfterRead(table, {std::string(key)});
    return row;
  }
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override {
    auto rows = base_.MultiGet(table, keys);
    AfterRead(table, keys);
    return rows;
  }
  bool batched_gets() const override { return base_.batched_gets(); }
  bool shared() const override { return base_.shared(); }
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override {
    ++conditional_puts;
    return base_.CheckAndPut(table, key, expected, value);
  }
  bool conditional_writes() const override { return base_.conditional_writes(); }
  std::function<void()> between;
  std::string between_key;
  int conditional_puts = 0;

 private:
  void AfterRead(std::string_view table, const std::vector<std::string>& keys) {
    if (table != kMetaTable || !between) return;
    for (const std::string& k : keys) {
      const bool stream = k.size() == MetaKey::kStreamSize && k[0] == static_cast<char>(MetaKind::kStream);
      if (between_key.empty() ? stream : k == between_key) {
        std::exchange(between, nullptr)();
        return;
      }
    }
  }
};

// Both ways a member reads an extent: while staging (a Get), and ahead of
// its batch (the consumer's Prefetch, a MultiGet whose answer the batch
// keeps).
TEST_P(IndexerQuery, TwoMembersWideningOneStreamAtOnceKeepBothWidenings) {
  if (!store_->conditional_writes()) GTEST_SKIP() << "one process owns an embedded store";
  const int64_t now = clock_.NowMs();
  for (const bool read_ahead : {false, true}) {
    SCOPED_TRACE(read_ahead ? "read ahead" : "read while staging");
    const std::string host = read_ahead ? "ahead-host" : "spread-host";
    auto chunk = [&](uint64_t seq, int64_t ts) { return OneRecordChunk("spread-app", host, 12, seq, ts); };
    MidBatchStore a_view(*store_);
    Indexer a(a_view, Options()), b(*store_, Options());
    Ingest({chunk(1, now - 3 * 3'600'000)}, a);
    a_view.between = [&] { Ingest({chunk(2, now - 60'000)}, b); };
    const std::string late = chunk(3, now - 2 * 3'600'000);
    if (read_ahead) {
      auto header = DecodeChunk(late, DecodeOptions{});
      ASSERT_TRUE(header.ok());
      proto::ChunkSource src;
      const ChunkToStage staged[] = {{&*header, &src}};
      a.Prefetch(staged);
    }
    Ingest({late}, a);
    ASSERT_FALSE(a_view.between) << "b's batch ran inside a's";
    ExpectHostQueriesFindEveryChunk(host, now, "b's chunk, whose widening a read too early to see");
  }
}

// A shared extent's end moves in steps of 10 minutes: a stream that logs
// every minute makes one conditional put per step, not one per minute.
TEST_P(IndexerQuery, ASharedExtentWidensInTenMinuteStepsNotEveryMinute) {
  if (!store_->conditional_writes()) GTEST_SKIP() << "one process owns an embedded store";
  constexpr int64_t kStep = 10 * 60'000;
  const int64_t base = (clock_.NowMs() - 3'600'000) / kStep * kStep;
  MidBatchStore view(*store_);
  Indexer indexer(view, Options());
  for (int minute = 0; minute <= 10; ++minute) {
    Ingest({OneRecordChunk("step-app", "step-host", 12, static_cast<uint64_t>(minute + 1), base + minute * 60'000)},
           indexer);
  }
  EXPECT_EQ(view.conditional_puts, 2) << "one at the first chunk, one when minute 10 opens the next step";
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.host = "step-host";
  q.from_ms = base;
  q.to_ms = base + 11 * 60'000;
  q.limit = 100;
  auto got = engine.Run(q);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->records.size(), 11u);
}

int64_t Ms(const Result<int64_t>& r) { return r.ok() ? *r : -1; }

// Members started with different settings at once (a rolling change of
// indexer.max_chunk_span or compaction.settle on HBase) keep the longest
// span and the shortest settle of all, whatever order their writes land in:
// a shorter recorded span would hide the longer chunks from queries.
TEST_P(IndexerQuery, MembersRecordingStoreWideSpansAtOnceKeepTheWidest) {
  if (!store_->conditional_writes()) GTEST_SKIP() << "one process owns an embedded store";
  MidBatchStore a_view(*store_);
  a_view.between_key = std::string(kLongestSpanRow);
  a_view.between = [&] { EXPECT_EQ(Ms(RecordLongestSpan(*store_, 3'600'000)), 3'600'000); };
  auto longest = RecordLongestSpan(a_view, 600'000);
  ASSERT_TRUE(longest.ok()) << longest.error().ToString();
  EXPECT_EQ(*longest, 3'600'000);
  ASSERT_FALSE(a_view.between) << "b recorded its span inside a's";
  EXPECT_EQ(Ms(RecordLongestSpan(*store_, 60'000)), 3'600'000);

  a_view.between_key = std::string(kShortestSettleRow);
  a_view.between = [&] { EXPECT_EQ(Ms(MergedCheckMs(*store_, 60'000)), 60'000); };
  auto check = MergedCheckMs(a_view, 600'000);
  ASSERT_TRUE(check.ok()) << check.error().ToString();
  EXPECT_EQ(*check, 60'000);
  ASSERT_FALSE(a_view.between) << "b recorded its settle inside a's";
  EXPECT_EQ(Ms(MergedCheckMs(*store_, std::nullopt)), 60'000);
}

// Members sharing a store (HBase): B starts with a longer
// indexer.max_chunk_span than A and raises the store's longest span. A's
// queries must pad by it too, or miss B's long chunks: A reads it again once
// a minute has passed. A failed re-read keeps the value held and is reported.
// On an embedded store, which one process owns, the span is never read again.
TEST_P(IndexerQuery, QueriesPadByALongerSpanAnotherMemberRecordedOnceAMinuteHasPassed) {
  constexpr int64_t kShort = 60'000, kLong = 6 * 3'600'000;
  auto a_span = RecordLongestSpan(*store_, kShort);
  ASSERT_TRUE(a_span.ok()) << a_span.error().ToString();
  ASSERT_EQ(*a_span, kShort);
  // A shared view of the store whose meta reads fail on demand.
  struct FlakyMeta final : testing::ForwardingStore {
    using ForwardingStore::ForwardingStore;
    Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
      meta_reads += table == kMetaTable;
      if (fail && table == kMetaTable) return Error{Errc::kUnavailable, "injected read failure"};
      return base_.Get(table, key);
    }
    bool shared() const override { return base_.shared(); }
    bool fail = false;
    int meta_reads = 0;
  } a_store(*store_);
  std::vector<std::string> failures;
  LongestSpanWatch watch(a_store, *a_span, clock_, 60'000,
                         [&](const Error& e) { failures.push_back(e.ToString()); });
  ASSERT_EQ(Ms(RecordLongestSpan(*store_, kLong)), kLong);
  if (!store_->shared()) {
    clock_.AdvanceMs(2 * 60'000);
    EXPECT_EQ(watch.Get(), kShort) << "one process owns an embedded store: its span is never read again";
    EXPECT_EQ(a_store.meta_reads, 0);
    return;
  }

  // B (max_chunk_span 6 h): a chunk spanning two hours, stored whole.
  IndexerOptions b_options = Options();
  b_options.max_chunk_span_ms = kLong;
  Indexer b(*store_, b_options);
  const int64_t t0 = clock_.NowMs() - 3 * 3'600'000;
  proto::RecordBatch records;
  for (int64_t ts : {t0, t0 + 2 * 3'600'000}) {
    proto::LogRecord* r = records.add_records();
    r->set_ts_ms(ts);
    r->set_severity(SeverityCode(Severity::kInfo));
    r->set_message("at " + std::to_string(ts));
  }
  PackOptions po;
  po.producer_id = 13;
  po.sequence = 1;
  Ingest({PackChunk("long-app", "long-host", records, po).SerializeAsString()}, b);

  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = kShort;
  qo.longest_span_ms = [&watch] { return watch.Get(); };
  QueryEngine engine(*store_, qo);
  Query q;
  q.app = "long-app";
  q.from_ms = t0;
  q.to_ms = t0 + 10 * 60'000;  // the chunk's first record only; the chunk ends 2 h later
  auto found = [&]() -> size_t {
    auto a = engine.Run(q);
    EXPECT_TRUE(a.ok()) << a.error().ToString();
    return a.ok() ? a->records.size() : 0;
  };

  a_store.fail = true;
  EXPECT_EQ(found(), 0u) << "within the minute, the span read at A's start holds: no read per query";
  EXPECT_EQ(a_store.meta_reads, 0);
  clock_.AdvanceMs(60'000);
  EXPECT_EQ(found(), 0u) << "the re-read failed: the value held stays";
  EXPECT_EQ(a_store.meta_reads, 1);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("injected read failure"), std::string::npos) << failures[0];
  a_store.fail = false;
  EXPECT_EQ(found(), 0u) << "tried again only a minute after the failed read";
  EXPECT_EQ(a_store.meta_reads, 1);
  clock_.AdvanceMs(60'000);
  EXPECT_EQ(found(), 1u) << "B's long chunk, once A read the longer span";
  EXPECT_EQ(watch.Get(), kLong);
  EXPECT_EQ(a_store.meta_reads, 2);
  EXPECT_EQ(failures.size(), 1u);
}

// Between an HBase merge's writes (not atomic), a merged chunk is stored and
// its parts are still there (testing::DropsDeletes stops the compactor's
// merges at that point). With the parts listed in its main row
// (CompactorOptions::list_parts), every query shape, page after page, the
// main-table scan and Volume (reading records, or from the index, which
// counts a chunk that lists parts from its `cnt` row and reads its list)
// answer what a brute force over the records answers: no record twice.
TEST_P(IndexerQuery, PartsFoundBesideTheMergedChunkListingThemAreSkipped) {
  WorkloadSpec spec;
  spec.apps = 3;
  spec.hosts = 4;
  spec.records = kMergedRecords;
  spec.max_records_per_chunk = 6;  // small chunks: what compaction merges
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  testing::DropsDeletes halfway(*store_);
  CompactorOptions o;
  o.max_span_ms = 3'600'000;
  o.target_records = 500;
  o.list_parts = true;
  o.indexer = Options();
  auto compactor = Compactor::Create(halfway, o);
  ASSERT_TRUE(compactor.ok()) << compactor.error().ToString();
  auto pass = (*compactor)->Pass(w.end_ms + o.settle_ms + o.max_span_ms + 1);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_GT(pass->merges, 10u);
  uint64_t listing = 0;  // severity index rows flagged: the chunk lists its parts
  for (Severity s : kAllSeverities) {
    ASSERT_TRUE(store_->Scan(ScanSpec{std::string(LevelIndexTable(s)), "", "", false, 0}, [&](auto, auto v) {
      auto value = IndexValue::Decode(v);
      EXPECT_TRUE(value.has_value());
      listing += value && value->lists_parts;
      return true;
    }).ok());
  }
  EXPECT_EQ(listing, pass->merges);

  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  qo.index_count_span_ms = 60'000;  // the workload's chunks span at most 30 s
  QueryEngine engine(*store_, qo);
  qo.max_scan_index_ranges = 0;  // scan=true reads the main table
  QueryEngine scanning(*store_, qo);
  std::mt19937_64 rng(31);
  uint64_t superseded = 0;
  for (int n = 0; n < 24; ++n) {
    Query q;
    const int64_t len = 600'000 + static_cast<int64_t>(rng() % (spec.duration_ms - 600'000));
    q.from_ms = w.start_ms + static_cast<int64_t>(rng() % (spec.duration_ms - len + 1));
    q.to_ms = q.from_ms + len;
    q.limit = 1 + static_cast<uint32_t>(rng() % 200);
    const std::string app = "app" + std::to_string(rng() % spec.apps), host = "host" + std::to_string(rng() % spec.hosts);
    const QueryEngine* by = &engine;
    switch (n % 6) {
      case 0: q.app = app; break;
      case 1: q.app = app, q.host = host; break;
      case 2: q.host = host; break;
      case 3: q.tags.emplace_back("k", "v" + std::to_string(rng() % spec.tag_values)); break;
      case 4: q.scan = true; break;  // every stream's index
      case 5:  // a page reads the whole main table: few pages
        q.scan = true, by = &scanning, q.limit = 500;
        break;
    }
    const std::string what = "query " + std::to_string(n) + " (" + q.app + "/" + q.host + ", limit " +
                             std::to_string(q.limit) + (by == &scanning ? ", main table" : "") + ")";
    Paged got = RunAll(*by, q);
    ExpectSame(got.records, BruteForce(w, q), what);
    superseded += got.total.superseded_parts;

    VolumeQuery vq;
    vq.filter = q;
    vq.filter.limit = 100;
    vq.step_ms = 600'000;
    for (bool exact : {true, false}) {
      // scan=true counts by reading; the tag index counts every record of a chunk holding the tag.
      if (!exact && (q.scan || !q.tags.empty())) continue;
      vq.read_records = exact;
      auto v = by->Volume(vq);
      ASSERT_TRUE(v.ok()) << what << ": " << v.error().ToString();
      if (exact) {
        EXPECT_EQ(v->totals.total, BruteForce(w, q).size()) << what << " volume, reading records";
      } else {
        // From the index, a chunk's records count in its last record's
        // bucket: over the whole workload, each once.
        vq.filter.from_ms = w.start_ms - 3'600'000;
        vq.filter.to_ms = w.end_ms + 3'600'000;
        auto all = engine.Volume(vq);
        ASSERT_TRUE(all.ok());
        Query whole = q;
        whole.from_ms = vq.filter.from_ms;
        whole.to_ms = vq.filter.to_ms;
        EXPECT_EQ(all->totals.total, BruteForce(w, whole).size()) << what << " volume from the index";
        // Merged chunks counted by minute (their lists read from their main rows), none decompressed.
        EXPECT_EQ(all->stats.chunks_read, 0u) << what;
        EXPECT_GT(all->stats.minute_counts_read, 0u) << what;
      }
    }
  }
  EXPECT_GT(superseded, 0u) << "the parts were met, and skipped";
}

// A merge reads the main rows of its run and no others: its iterator is
// bounded by the run's lowest and highest keys. Unbounded, it began on the
// table's first row, and on HBase read a first page of the table's first
// chunks (256 rows) for every run, and a page past the run's last part.
TEST_P(IndexerQuery, AMergeReadsNoMainRowOutsideItsRun) {
  const std::string host = "h", app = "merged";
  // Main keys begin with (salt, app): two apps whose rows sort below and
  // above every row of `app`'s on this host.
  auto prefix = [&](const std::string& a) {
    return std::pair(SaltOf(AppIdOf(a), HostIdOf(host), kDefaultSaltBuckets), AppIdOf(a).value());
  };
  std::string below, above;
  for (int i = 0; below.empty() || above.empty(); ++i) {
    const std::string a = "other" + std::to_string(i);
    if (below.empty() && prefix(a) < prefix(app)) below = a;
    if (above.empty() && prefix(a) > prefix(app)) above = a;
  }
  const int64_t now = clock_.NowMs();
  std::vector<std::string> chunks;
  // 300 recent chunks of each neighbour (newer than the settle: not merged)...
  for (uint64_t i = 0; i < 300; ++i) {
    chunks.push_back(OneRecordChunk(below, host, 1, i, now - 60'000 + static_cast<int64_t>(i)));
    chunks.push_back(OneRecordChunk(above, host, 2, i, now - 60'000 + static_cast<int64_t>(i)));
  }
  // ...and one closed run of 10 chunks of `app`, five hours old.
  for (uint64_t i = 0; i < 10; ++i) chunks.push_back(OneRecordChunk(app, host, 3, i, now - 5 * 3'600'000 + static_cast<int64_t>(i) * 1000));
  Indexer indexer(*store_, Options());
  Ingest(chunks, indexer);

  CompactorOptions o;
  o.indexer = Options();
  o.allow_non_atomic = !GetParam().atomic_batches;
  std::unique_ptr<CompactionLease> lease;  // a store several members may write (HBase): one merges at a time
  if (store_->shared()) {
    lease = Lease(clock_);
    ASSERT_NE(lease, nullptr);
    o.lease = lease.get();
  }
  auto compactor = Compactor::Create(*store_, o);
  ASSERT_TRUE(compactor.ok()) << compactor.error().ToString();
  const uint64_t before = store_->counters().rows_examined;
  auto pass = (*compactor)->Pass(now);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_EQ(pass->merges, 1u);
  ASSERT_EQ(pass->parts, 10u);
  // What it reads besides the run's 10 main rows: `meta` and the index
  // rows of `app` on `host`, tens of rows; a page of a neighbour is 256.
  EXPECT_LT(store_->counters().rows_examined - before, 100u);

  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = app;
  q.from_ms = now - 6 * 3'600'000;
  q.to_ms = now + 1;
  q.limit = 100;
  auto page = engine.Run(q);
  ASSERT_TRUE(page.ok()) << page.error().ToString();
  EXPECT_EQ(page->records.size(), 10u);
}

// Without atomic writes (HBase), a merge writes its merged chunk's rows,
// then removes its parts (CompactorOptions::allow_non_atomic). Stopped at
// any write of a pass (the gateway fails one mutation and every later one;
// RocksDB, whose batches are all or nothing, fails each batch that reaches
// the entry, and a view without atomic writes makes it merge in two
// writes), every query still answers what a brute force answers, and the
// next pass finishes the merges: no part a stored merged chunk lists is
// left, and the store ends as a pass never stopped leaves it.
TEST_P(IndexerQuery, AMergeStoppedAtAnyWriteIsExactMeanwhileAndFinishedByTheNextPass) {
  if (!GetParam().fault_injection) GTEST_SKIP() << GetParam().name << " has no fault injection";
  WorkloadSpec spec = NonAtomicSpec(800);
  Workload w = MakeWorkload(spec);
  CompactorOptions o = NonAtomicMerges();
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  qo.index_count_span_ms = 60'000;
  std::vector<Query> queries(4);
  for (Query& q : queries) q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1;
  queries[0].app = "app0", queries[0].limit = 37;
  queries[1].host = "host1", queries[1].limit = 1000;
  queries[2].tags = {{"k", "v1"}}, queries[2].limit = 11;
  queries[3].scan = true, queries[3].limit = 300;
  auto expect_exact = [&](TableStore& store, const std::string& when) {
    QueryEngine engine(store, qo);
    QueryOptions main_table = qo;
    main_table.max_scan_index_ranges = 0;
    QueryEngine scanning(store, main_table);
    for (size_t i = 0; i < queries.size(); ++i) {
      const std::string what = when + ", query " + std::to_string(i);
      ExpectSame(RunAll(engine, queries[i]).records, BruteForce(w, queries[i]), what);
      VolumeQuery vq;
      vq.filter = queries[i];
      vq.step_ms = 600'000;
      vq.read_records = true;
      auto v = engine.Volume(vq);
      ASSERT_TRUE(v.ok()) << what;
      EXPECT_EQ(v->totals.total, BruteForce(w, queries[i]).size()) << what << ", volume";
    }
    ExpectSame(RunAll(scanning, queries[3]).records, BruteForce(w, queries[3]), when + ", the main table");
  };
  auto census = [&](TableStore& store) { return Census(store); };

  size_t clean_rows = 0;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> clean;
  int stopped = 0;
  for (int at : {-1, 0, 2, 7, 15, 40, 90, 200, 400, 800, 1600, 3200}) {
    const std::string when = "stopped at " + std::to_string(at);
    auto store = Open("stop" + std::to_string(at + 1));
    ASSERT_NE(store, nullptr);
    Indexer indexer(*store, Options());
    Ingest(w.chunks, indexer);
    testing::FailingReads view(*store);  // no atomic writes, whatever the backend
    auto compactor = Compactor::Create(view, o);
    ASSERT_TRUE(compactor.ok()) << compactor.error().ToString();
    GetParam().fail_writes_at(*store, at);
    auto pass = (*compactor)->Pass(settled);
    GetParam().fail_writes_at(*store, -1);
    if (at < 0) {  // the reference: a pass that runs through
      ASSERT_TRUE(pass.ok()) << pass.error().ToString();
      ASSERT_GT(pass->merges, 2u);
      EXPECT_EQ(pass->repaired_parts, 0u);
      clean_rows = census(*store).first;
      clean = Dump(*store);
      expect_exact(*store, when);
      continue;
    }
    if (pass.ok()) break;  // the pass made fewer writes than `at`: every stop was tried
    ++stopped;
    expect_exact(*store, when);
    auto restarted = Compactor::Create(view, o);  // as after a crash: nothing remembered
    ASSERT_TRUE(restarted.ok());
    for (int passes = 0;; ++passes) {  // then passes run through until one has nothing to do
      ASSERT_LT(passes, 5) << when;
      auto next = (*restarted)->Pass(settled);
      ASSERT_TRUE(next.ok()) << when << ": " << next.error().ToString();
      if (next->merges == 0 && next->repaired_parts == 0) break;
    }
    expect_exact(*store, when + ", then finished");
    EXPECT_EQ(census(*store), std::make_pair(clean_rows, size_t{0})) << when;
    // Row for row as the unstopped pass left the store: a part's tag rows
    // go before its main row, which says what they are.
    auto got = Dump(*store);
    for (const auto& [table, rows] : clean) {
      EXPECT_TRUE(got[table] == rows) << when << ": table " << table << ", " << got[table].size() << " rows, "
                                      << rows.size() << " unstopped";
    }
    for (const auto& [table, rows] : got) EXPECT_TRUE(rows.empty() || clean.count(table)) << when << ": table " << table;
  }
  EXPECT_GT(stopped, 4);
}

// Two members' compactors on one store, each with the compaction lease
// (indexer/compaction_lease.h): only the holder merges; another takes over
// once the holder has not written the lease for a whole period; the old
// holder, back from a stall, finds its fence failed and writes nothing.
// Every query answers what a brute force answers throughout.
TEST_P(IndexerQuery, CompactorsSharingAStoreMergeOnlyWhileTheyHoldTheLease) {
  if (!store_->conditional_writes()) GTEST_SKIP() << GetParam().name << ": one process owns the store";
  WorkloadSpec spec = NonAtomicSpec(900);
  // Three workloads, one after the other in time: ingested one at a time.
  std::vector<Workload> thirds;
  for (int i = 0; i < 3; ++i) {
    spec.seed = 7 + i;
    thirds.push_back(MakeWorkload(spec));
    spec.start_ms = thirds.back().end_ms + 1;
  }
  Workload w;
  w.start_ms = thirds.front().start_ms, w.end_ms = thirds.back().end_ms;
  constexpr int64_t kPeriod = 60'000;
  ManualClock a_clock(0), b_clock(0);
  CompactionLeaseOptions lo;
  lo.period_ms = kPeriod;
  lo.owner = "a";
  auto a_lease = CompactionLease::Create(*store_, lo, a_clock);
  lo.owner = "b";
  auto b_lease = CompactionLease::Create(*store_, lo, b_clock);
  ASSERT_TRUE(a_lease.ok() && b_lease.ok());
  CompactorOptions o = NonAtomicMerges();
  o.list_parts = true;
  o.lease = a_lease->get();
  auto a = Compactor::Create(*store_, o);
  o.lease = b_lease->get();
  auto b = Compactor::Create(*store_, o);
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  Indexer indexer(*store_, Options());
  auto expect_exact = [&](size_t ingested, const std::string& when) {
    Workload part = w;
    for (size_t i = 0; i < ingested; ++i) part.records.insert(part.records.end(), thirds[i].records.begin(), thirds[i].records.end());
    QueryEngine engine(*store_, qo);
    for (const char* host : {"host0", "host1"}) {
      Query q;
      q.host = host;
      q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 1000;
      ExpectSame(RunAll(engine, q).records, BruteForce(part, q), when + ", " + host);
    }
  };

  Ingest(thirds[0].chunks, indexer);
  auto pass = (*a)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_GT(pass->merges, 0u) << "a takes the free lease and merges";
  EXPECT_FALSE(pass->lease_elsewhere);
  expect_exact(1, "a merged");

  Ingest(thirds[1].chunks, indexer);
  pass = (*b)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_TRUE(pass->lease_elsewhere);
  EXPECT_EQ(pass->merges, 0u) << "a holds the lease";
  // a stalls (writes nothing more); b waits out a period of its own clock.
  b_clock.AdvanceMs(kPeriod);
  pass = (*b)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_FALSE(pass->lease_elsewhere);
  EXPECT_GT(pass->merges, 0u) << "b took the lease over and merges";
  EXPECT_EQ((*b_lease)->takeovers(), 1u);
  expect_exact(2, "b merged");

  // a comes back within what it thinks its period: its pass plans merges,
  // and its first write's fence fails. Nothing it would have written lands.
  Ingest(thirds[2].chunks, indexer);
  auto before = Dump(*store_);
  pass = (*a)->Pass(settled);
  ASSERT_FALSE(pass.ok());
  EXPECT_EQ(pass.error().code, Errc::kFailedPrecondition) << pass.error().ToString();
  EXPECT_TRUE((*a)->last_pass().lease_lost) << "told apart from a store error";
  auto after = Dump(*store_);
  for (auto* dump : {&before, &after}) {  // but the lease row, which a's failed fence leaves as b wrote it
    std::erase_if((*dump)[std::string(kMetaTable)], [](const auto& row) { return row.first == kCompactionLeaseRow; });
  }
  EXPECT_TRUE(after == before) << "a wrote after losing the lease";
  pass = (*a)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_TRUE(pass->lease_elsewhere);
  EXPECT_FALSE(pass->lease_lost) << "it knew it was not the holder";
  expect_exact(3, "a stopped");

  pass = (*b)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_GT(pass->merges, 0u);
  expect_exact(3, "b merged the rest");
  auto released = (*b_lease)->Release();
  EXPECT_TRUE(released.ok() && *released);
}

// HBase has no snapshots: a query whose index scan passed a merged chunk's
// position before the merge landed reads the parts instead, so they stay
// for CompactorOptions::removal_delay_ms after the merged chunk's write.
// Meanwhile queries find both and answer each record once; a pass after
// the delay removes them. A compactor restarted with a lease removes
// nothing until it has held the lease for the delay (it cannot know the
// age of the merged chunks it finds).
TEST_P(IndexerQuery, AMergesPartsStayForTheRemovalDelayAndQueriesAreExactMeanwhile) {
  WorkloadSpec spec = NonAtomicSpec(600);
  Workload w = MakeWorkload(spec);
  constexpr int64_t kDelay = 600'000;
  CompactorOptions o = NonAtomicMerges();
  o.list_parts = true;
  o.removal_delay_ms = kDelay;
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
  ManualClock delay_clock(settled);  // the delay's monotonic time: each pass's now_ms, unless the wall clock steps
  o.clock = &delay_clock;
  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  auto expect_exact = [&](TableStore& store, const std::string& when) {
    QueryEngine engine(store, qo);
    QueryOptions main_table = qo;
    main_table.max_scan_index_ranges = 0;
    QueryEngine scanning(store, main_table);
    for (const char* host : {"host0", "host1"}) {
      Query q;
      q.host = host;
      q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 1000;
      ExpectSame(RunAll(engine, q).records, BruteForce(w, q), when + ", " + host);
    }
    Query q;
    q.scan = true;
    q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 1000;
    ExpectSame(RunAll(scanning, q).records, BruteForce(w, q), when + ", the main table");
  };
  auto listed_and_stored = [&](TableStore& store) { return Census(store).second; };

  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  testing::FailingReads view(*store_);  // no atomic writes, whatever the backend
  auto compactor = Compactor::Create(view, o);
  ASSERT_TRUE(compactor.ok()) << compactor.error().ToString();
  auto pass = (*compactor)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_GT(pass->merges, 1u);
  EXPECT_EQ(pass->repaired_parts, 0u);
  EXPECT_EQ(pass->removals_waiting, pass->parts);
  const uint64_t merged_parts = pass->parts;
  EXPECT_EQ(listed_and_stored(*store_), merged_parts) << "every part stays";
  expect_exact(*store_, "merged, parts waiting");
  delay_clock.SetMs(settled + kDelay - 1);
  pass = (*compactor)->Pass(settled + kDelay - 1);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, 0u) << "within the delay";
  EXPECT_EQ(pass->removals_waiting, merged_parts);
  EXPECT_EQ(pass->merges, 0u) << "waiting parts are not merged again";
  expect_exact(*store_, "within the delay");
  // The wall clock steps a delay forward (an NTP correction) within it:
  // the monotonic time the delay also counts on does not.
  pass = (*compactor)->Pass(settled + 2 * kDelay + 60'000);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, 0u) << "the wall clock stepped forward within the delay";
  EXPECT_EQ(pass->removals_waiting, merged_parts);
  // The delay counts from each write, which came as long after the pass's
  // start as the pass had run: a minute covers a pass on a loaded machine.
  delay_clock.SetMs(settled + kDelay + 60'000);
  pass = (*compactor)->Pass(settled + kDelay + 60'000);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, merged_parts) << "the delay has passed";
  EXPECT_EQ(pass->removals_waiting, 0u);
  EXPECT_EQ(listed_and_stored(*store_), 0u);
  expect_exact(*store_, "parts removed");

  if (!store_->conditional_writes()) return;
  // Merged and restarted: the new compactor's lease, taken at its first
  // pass, has been held for less than the delay, whatever the wall clock.
  auto b = Open("b");
  ASSERT_NE(b, nullptr);
  Indexer b_indexer(*b, Options());
  Ingest(w.chunks, b_indexer);
  testing::FailingReads b_view(*b);
  {
    auto first = Compactor::Create(b_view, o);
    ASSERT_TRUE(first.ok());
    ASSERT_TRUE((*first)->Pass(settled).ok());
  }
  ManualClock lease_clock(0);
  CompactionLeaseOptions lo;
  lo.period_ms = 60'000;
  auto lease = CompactionLease::Create(*b, lo, lease_clock);
  ASSERT_TRUE(lease.ok());
  o.lease = lease->get();
  auto restarted = Compactor::Create(b_view, o);
  ASSERT_TRUE(restarted.ok());
  pass = (*restarted)->Pass(settled + 10 * kDelay);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, 0u) << "the lease is new";
  EXPECT_EQ(pass->removals_waiting, merged_parts);
  EXPECT_EQ(pass->merges, 0u);
  expect_exact(*b, "restarted, lease new");
  for (int64_t held = 20'000; held < kDelay; held += 20'000) {  // renewing it every third of its period
    lease_clock.AdvanceMs(20'000);
    pass = (*restarted)->Pass(settled + 10 * kDelay);
    ASSERT_TRUE(pass.ok()) << pass.error().ToString();
    ASSERT_EQ(pass->repaired_parts, 0u) << "held for " << held << " ms";
  }
  lease_clock.AdvanceMs(20'000);
  pass = (*restarted)->Pass(settled + 10 * kDelay);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, merged_parts) << "held for the delay";
  EXPECT_EQ(listed_and_stored(*b), 0u);
  expect_exact(*b, "restarted, removed");
}

// Members share an HBase store: a cursor's page 2 may run on any member,
// after another member merged the chunks page 1 stopped in and, its removal
// delay later, removed their parts. Saved positions then point at rows that
// are gone and the merged chunk sits above them: page 2 must resume by
// record. The epoch every member reads from the lease row
// (indexer/store_epoch.h) tells it so; an engine without it loses records.
TEST_P(IndexerQuery, ACursorResumesByRecordAfterAnotherMembersMergeAndItsRemoval) {
  if (!store_->conditional_writes()) GTEST_SKIP() << GetParam().name << ": one process owns the store";
  Workload w = MakeWorkload(NonAtomicSpec(600));
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  constexpr int64_t kDelay = 60'000;
  ManualClock a_clock(1'790'000'000'000);
  auto lease = Lease(a_clock);
  ASSERT_NE(lease, nullptr);
  CompactorOptions o = NonAtomicMerges();
  o.list_parts = true;
  o.removal_delay_ms = kDelay;
  o.lease = lease.get();
  o.clock = &a_clock;
  // Every batch goes with a send deadline: the half period the fence left.
  class RecordsSendDeadlines final : public testing::SharedForwardingStore {
   public:
    using SharedForwardingStore::SharedForwardingStore;
    Status Write(const WriteBatch& b) override {
      deadlines.push_back(b.send_within_ms().value_or(-1));
      return base_.Write(b);
    }
    std::vector<int64_t> deadlines;
  } recording(*store_);
  auto a = Compactor::Create(recording, o);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;

  QueryOptions plain = QOptions();
  plain.max_chunk_span_ms = o.max_span_ms;
  QueryOptions shared = plain;
  // Held for an hour (clock_ stands still): page 2 starts from the stale
  // value page 1 read, and the read after it (MergeRaced) finds it moved.
  LeaseRowEpoch epoch(*store_, clock_, 3'600'000);
  shared.store_epoch = &epoch;
  QueryEngine with(*store_, shared), without(*store_, plain);
  auto held = lease->Hold();  // the lease row exists before page 1: its epoch must move
  ASSERT_TRUE(held.ok() && *held);
  struct Paging {
    const QueryEngine* engine;
    Query q;
    std::vector<ResultRecord> got;
  };
  std::vector<Paging> pagings;
  for (const QueryEngine* engine : {&with, &without}) {
    for (const char* host : {"host0", "host1"}) {
      Paging p{engine, Query{}, {}};
      p.q.host = host;
      p.q.from_ms = w.start_ms, p.q.to_ms = w.end_ms + 1, p.q.limit = 7;  // chunks hold up to 6 records
      auto page = engine->Run(p.q);
      ASSERT_TRUE(page.ok()) << page.error().ToString();
      ASSERT_FALSE(page->next_cursor.empty());
      p.got = std::move(page->records);
      p.q.cursor = page->next_cursor;
      pagings.push_back(std::move(p));
    }
  }

  auto pass = (*a)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_GT(pass->merges, 1u);
  const uint64_t merged_parts = pass->parts;
  uint64_t removed = 0;
  for (int i = 0; i < 6 && removed < merged_parts; ++i) {  // the lease renewed every third of its period
    a_clock.AdvanceMs(20'000);
    pass = (*a)->Pass(settled + kDelay + 60'000);
    ASSERT_TRUE(pass.ok()) << pass.error().ToString();
    removed += pass->repaired_parts;
  }
  ASSERT_EQ(removed, merged_parts) << "every part removed";
  ASSERT_FALSE(recording.deadlines.empty());
  for (int64_t d : recording.deadlines) ASSERT_EQ(d, lease->period_ms() / 2) << "a's clock stands still while it writes";

  size_t lost_without = 0;
  for (Paging& p : pagings) {
    for (int pages = 0; !p.q.cursor.empty() && pages < 1000; ++pages) {
      auto page = p.engine->Run(p.q);
      ASSERT_TRUE(page.ok()) << page.error().ToString();
      if (p.engine == &with && pages == 0) {  // the first page 2 read it moved, and raised the value held
        EXPECT_EQ(page->stats.runs, &p == &pagings.front() ? 2u : 1u) << "run again once the epoch was read";
      }
      for (auto& r : page->records) p.got.push_back(std::move(r));
      p.q.cursor = page->next_cursor;
    }
    p.q.cursor.clear();
    const auto want = BruteForce(w, p.q);
    if (p.engine == &with) {
      ExpectSame(p.got, want, "the shared epoch, " + p.q.host);
    } else {
      EXPECT_LE(p.got.size(), want.size());
      lost_without += want.size() - std::min(want.size(), p.got.size());
    }
  }
  EXPECT_GT(lost_without, 0u) << "the test no longer makes a cursor that loses records without the shared epoch";
}

// One page can outlast a merge's removal delay (a stalled store call): its
// index scan passed the merged chunk's position before the merge landed,
// and the parts it then reads were removed meanwhile. A page that ran
// QueryOptions::recheck_after_ms or longer reads the shared epoch again
// and runs again when it moved.
TEST_P(IndexerQuery, APageLongerThanTheRemovalDelayRunsAgainWhenAMergeMovedTheLayout) {
  if (!store_->conditional_writes()) GTEST_SKIP() << GetParam().name << ": one process owns the store";
  Workload w = MakeWorkload(NonAtomicSpec(600));
  constexpr int64_t kDelay = 60'000;
  // The query's first main-row read waits while another member merges and,
  // its delay later, removes the parts; the page then goes on.
  class StallsAtTheFirstMainRead final : public testing::ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
      if (table == kMainTable && stall) std::exchange(stall, nullptr)();
      return base_.Get(table, key);
    }
    std::function<void()> stall;
  };
  // The records of host0 one page finds, with recheck_after_ms `recheck`,
  // and the page's runs.
  auto page_through_a_stall = [&](const std::string& name, int64_t recheck) -> std::pair<size_t, uint64_t> {
    auto store = Open(name);
    EXPECT_NE(store, nullptr);
    if (!store) return {0, 0};
    Indexer indexer(*store, Options());
    Ingest(w.chunks, indexer);
    ManualClock a_clock(1'790'000'000'000), q_clock(0);
    auto lease = Lease(a_clock, store.get());
    if (!lease) return {0, 0};
    CompactorOptions o = NonAtomicMerges();
    o.list_parts = true;
    o.removal_delay_ms = kDelay;
    o.lease = lease.get();
    o.clock = &a_clock;
    auto a = Compactor::Create(*store, o);
    EXPECT_TRUE(a.ok());
    if (!a.ok()) return {0, 0};
    EXPECT_TRUE(lease->Hold().ok());
    const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
    StallsAtTheFirstMainRead stalling(*store);
    LeaseRowEpoch epoch(*store, q_clock, 3'600'000);
    QueryOptions qo = QOptions();
    qo.max_chunk_span_ms = o.max_span_ms;
    qo.store_epoch = &epoch;
    qo.clock = &q_clock;
    qo.recheck_after_ms = recheck;
    uint64_t removed = 0, merged = 0;
    stalling.stall = [&] {
      auto pass = (*a)->Pass(settled);
      EXPECT_TRUE(pass.ok());
      merged = pass.ok() ? pass->parts : 0;
      for (int i = 0; i < 6 && removed < merged; ++i) {
        a_clock.AdvanceMs(20'000);
        pass = (*a)->Pass(settled + kDelay + 60'000);
        EXPECT_TRUE(pass.ok());
        removed += pass.ok() ? pass->repaired_parts : 0;
      }
      q_clock.AdvanceMs(kDelay + 60'000);
    };
    Query q;
    q.host = "host0";
    q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 1000;
    auto page = QueryEngine(stalling, qo).Run(q);
    EXPECT_TRUE(page.ok());
    EXPECT_GT(merged, 0u);
    EXPECT_EQ(removed, merged) << "every part removed during the page";
    if (!page.ok()) return {0, 0};
    EXPECT_TRUE(page->next_cursor.empty());
    if (recheck > 0) {
      Query all = q;
      ExpectSame(page->records, BruteForce(w, all), "a page that outlasted the removal delay");
    }
    return {page->records.size(), page->stats.runs};
  };
  Query q;
  q.host = "host0";
  q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1;
  const size_t want = BruteForce(w, q).size();
  auto [found, runs] = page_through_a_stall("rechecked", kDelay);
  EXPECT_EQ(found, want);
  EXPECT_EQ(runs, 2u);
  std::tie(found, runs) = page_through_a_stall("not_rechecked", 0);
  EXPECT_LT(found, want) << "the test no longer makes a page that loses records without the re-check";
  EXPECT_EQ(runs, 1u);
}

// On a shared store, nothing orders another member's ingest with a merge
// (MergeGate is per process): a re-send of a part may pass the merge
// ledger's check before the merge lands and be written after the part's
// removal. It keeps its original's main key, so it is a part the merged
// chunk lists: queries skip it, and the next pass removes it.
TEST_P(IndexerQuery, AReSendWrittenBesideAnotherMembersMergeIsSkippedThenRemoved) {
  if (!store_->conditional_writes()) GTEST_SKIP() << GetParam().name << ": one process owns the store";
  Workload w = MakeWorkload(NonAtomicSpec(600));
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  ManualClock a_clock(1'790'000'000'000);
  auto lease = Lease(a_clock);
  ASSERT_NE(lease, nullptr);
  CompactorOptions o = NonAtomicMerges();
  o.list_parts = true;
  o.lease = lease.get();
  auto a = Compactor::Create(*store_, o);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
  auto pass = (*a)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_GT(pass->merges, 1u);
  const uint64_t merged_parts = pass->parts;
  ASSERT_EQ(Census(*store_).second, 0u) << "no removal delay: the parts went with the merge";
  const size_t stored = Census(*store_).first;

  // Member B re-sends every chunk; its ledger check raced the merge (none).
  Indexer b(*store_, Options());
  Ingest(w.chunks, b);
  EXPECT_EQ(Census(*store_).second, merged_parts) << "every merged part written again beside its merged chunk";
  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  QueryEngine engine(*store_, qo);
  for (const char* host : {"host0", "host1"}) {
    Query q;
    q.host = host;
    q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 97;
    ExpectSame(RunAll(engine, q).records, BruteForce(w, q), std::string("re-sent, ") + host);
  }
  a_clock.AdvanceMs(20'000);
  pass = (*a)->Pass(settled);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, merged_parts);
  EXPECT_EQ(pass->merges, 0u) << "listed parts are not merged again";
  EXPECT_EQ(Census(*store_).second, 0u);
  EXPECT_EQ(Census(*store_).first, stored);
  for (const char* host : {"host0", "host1"}) {
    Query q;
    q.host = host;
    q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 97;
    ExpectSame(RunAll(engine, q).records, BruteForce(w, q), std::string("removed again, ") + host);
  }
}

// A merge's write reported failed may have landed (an answer lost, or a
// gateway that applies it later): its parts must then stay the removal
// delay too, even for a member that has held the lease long enough to
// remove others' merges at once.
TEST_P(IndexerQuery, AMergeWhoseWriteFailedButLandedKeepsItsPartsForTheDelay) {
  if (!store_->conditional_writes()) GTEST_SKIP() << GetParam().name << ": one process owns the store";
  Workload w = MakeWorkload(NonAtomicSpec(300));
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  constexpr int64_t kDelay = 60'000;
  ManualClock a_clock(1'790'000'000'000);
  auto lease = Lease(a_clock);
  ASSERT_NE(lease, nullptr);
  // Held for the delay already: merged chunks it did not record are removable.
  for (int i = 0; i <= 3; ++i, a_clock.AdvanceMs(20'000)) ASSERT_TRUE(Is(lease->Hold(), true));
  ASSERT_GE(lease->held_for_ms(), kDelay);
  class LandsThenFails final : public testing::SharedForwardingStore {
   public:
    using SharedForwardingStore::SharedForwardingStore;
    Status Write(const WriteBatch& b) override {
      Status s = base_.Write(b);
      if (s.ok() && fail_next) {
        fail_next = false;
        return Status(Errc::kUnavailable, "injected: the answer was lost");
      }
      return s;
    }
    bool fail_next = true;
  } lossy(*store_);
  CompactorOptions o = NonAtomicMerges();
  o.list_parts = true;
  o.removal_delay_ms = kDelay;
  o.lease = lease.get();
  o.clock = &a_clock;
  auto a = Compactor::Create(lossy, o);
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  const int64_t settled = w.end_ms + o.settle_ms + o.max_span_ms + 1;
  auto pass = (*a)->Pass(settled);
  ASSERT_FALSE(pass.ok()) << "the first merge's write answered a failure";
  ASSERT_GE(Census(*store_).first, 1u);
  const size_t stored = Census(*store_).second;
  ASSERT_GT(stored, 0u) << "it landed: its merged chunk lists parts still stored";
  pass = (*a)->Pass(settled + 1'000);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_EQ(pass->repaired_parts, 0u) << "the landed merge's parts wait for the delay";
  EXPECT_GE(pass->removals_waiting, stored);
  QueryOptions qo = QOptions();
  qo.max_chunk_span_ms = o.max_span_ms;
  QueryEngine engine(*store_, qo);
  for (const char* host : {"host0", "host1"}) {
    Query q;
    q.host = host;
    q.from_ms = w.start_ms, q.to_ms = w.end_ms + 1, q.limit = 1000;
    ExpectSame(RunAll(engine, q).records, BruteForce(w, q), std::string("waiting, ") + host);
  }
  for (int i = 0; i < 4; ++i, a_clock.AdvanceMs(20'000)) ASSERT_TRUE(Is(lease->Hold(), true));
  pass = (*a)->Pass(settled + kDelay + 60'000);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  EXPECT_GT(pass->repaired_parts, 0u) << "removed once the delay passed";
  EXPECT_EQ(Census(*store_).second, 0u);
}

TEST_P(IndexerQuery, RefusesQueriesThatAreWrong) {
  QueryEngine engine(*store_, QOptions());
  auto expect_bad = [&](Query q, const std::string& says) {
    auto a = engine.Run(q);
    ASSERT_FALSE(a.ok()) << says;
    EXPECT_EQ(a.error().code, Errc::kInvalidArgument);
    EXPECT_NE(a.error().message.find(says), std::string::npos) << a.error().message;
  };
  Query q;
  q.app = "a";
  q.from_ms = 1000;
  q.to_ms = 1000;
  expect_bad(q, "time range is empty");
  q.to_ms = q.from_ms + 40ll * 24 * 3600 * 1000;
  expect_bad(q, "over the maximum");
  q.to_ms = q.from_ms + 1000;
  q.app.clear();
  expect_bad(q, "scan=true");
  q.app = "a";
  q.cursor = "zz";
  expect_bad(q, "cursor");
  q.cursor.clear();
  q.limit = 0;
  expect_bad(q, "limit");
}

TEST_P(IndexerQuery, ACursorOnlyFitsItsOwnQuery) {
  WorkloadSpec spec;
  spec.records = 300;
  spec.apps = 1;
  Workload w = MakeWorkload(spec);
  Indexer indexer(*store_, Options());
  Ingest(w.chunks, indexer);
  QueryEngine engine(*store_, QOptions());
  Query q;
  q.app = "app0";
  q.from_ms = w.start_ms;
  q.to_ms = w.end_ms;
  q.limit = 10;
  auto a = engine.Run(q);
  ASSERT_TRUE(a.ok());
  ASSERT_FALSE(a->next_cursor.empty());
  q.cursor = a->next_cursor;
  q.contains = "alpha";
  auto b = engine.Run(q);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("different query"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, IndexerQuery, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex
