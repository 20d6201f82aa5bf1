#include "indexer/query.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <unordered_set>
#include <span>
#include <tuple>

#include "common/base64url.h"
#include "common/bytes.h"
#include "common/ids.h"
#include "common/row_keys.h"
#include "common/token_bloom.h"
#include "indexer/indexer.h"
#include "indexer/minute_counts.h"
#include "indexer/store_epoch.h"

namespace logdex {
namespace {

// a + b and a - b clamped to int64's range: the bounds derived from a
// query's times must not overflow (undefined behaviour) on extreme input.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return b > 0 ? INT64_MAX : INT64_MIN;
  return out;
}
int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) return b < 0 ? INT64_MAX : INT64_MIN;
  return out;
}

// The multiple of step_ms at or before t (step_ms >= 1); nullopt when it is below INT64_MIN.
std::optional<int64_t> VolumeGridStart(int64_t t, int64_t step_ms) {
  int64_t r = t % step_ms;
  if (r < 0) r += step_ms;
  int64_t start = 0;
  if (__builtin_sub_overflow(t, r, &start)) return std::nullopt;
  return start;
}

// A record's place in the result order (all fields descending). `content`
// (a hash of the record's message and tags) comes before the chunk id, so
// that the order of records that differ in anything does not depend on
// which stored chunk holds them: a merge (compactor.h) keeps it.
struct Pos {
  int64_t ts = 0;
  AppId app;
  HostId host;
  uint8_t sev = 0;
  uint64_t content = 0;
  ChunkId chunk;
  uint32_t index = 0;
  auto Tie() const { return std::tie(ts, app, host, sev, content, chunk, index); }
  bool operator<(const Pos& o) const { return Tie() < o.Tie(); }
  // Without the chunk and index: what a merge does not change.
  auto Stable() const { return std::tie(ts, app, host, sev, content); }
};

// The hash of a record's message and tags (part of the order, and of
// cursors: keep it stable). `buffer` is reused.
uint64_t ContentHash(std::string_view message, std::span<const TagView> tags, std::string& buffer) {
  buffer.assign(message);
  for (const TagView& t : tags) {
    buffer += '\0';
    buffer += t.key;
    buffer += '\0';
    buffer += t.value;
  }
  return Hash64(buffer);
}

uint64_t QueryFingerprint(const Query& q) {
  std::string s = q.app + '\x1f' + q.host + '\x1f' + std::to_string(q.from_ms) + '\x1f' +
                  std::to_string(q.to_ms) + '\x1f' + q.contains + '\x1f' + (q.scan ? "1" : "0");
  for (const TextFilter& f : q.text) {
    s += '\x1c' + TextFilterParam(f) + ':' + std::to_string(f.text.size()) + ':' + f.text;  // length-prefixed: unambiguous
  }
  std::vector<uint8_t> sevs;
  for (Severity v : q.severities) sevs.push_back(SeverityCode(v));
  std::sort(sevs.begin(), sevs.end());
  for (uint8_t v : sevs) s += '\x1e' + std::to_string(v);
  auto tags = q.tags;
  std::sort(tags.begin(), tags.end());
  for (auto& [k, v] : tags) s += '\x1d' + k + '=' + v;
  return Hash64(s);
}

// Where a page ended. A stateful cursor also carries, per index range, the
// next unread row, and the chunks that still hold unreturned records, so the
// next page reads nothing twice. When too many chunks are pending, the cursor
// carries only the position and the next page re-reads up to one chunk span.
struct Cursor {
  Pos last;
  struct Range {
    std::string table;
    std::string prefix;
    std::string next_key;  // empty: the range is exhausted
  };
  bool stateful = false;
  // QueryOptions::store_epoch when the page was made: saved positions hold
  // only while no merge has changed the index since (compactor.h).
  uint64_t epoch = 0;
  // Records returned so far, on this page and the ones before, whose
  // Pos::Stable() equals last's (last included): identical records (same
  // time, stream, message and tags) in different places.
  uint32_t same = 1;
  // A merge landed since the page was made (decoded only): the last record
  // may now sit in another chunk, so records are compared by Pos::Stable(),
  // and the first `same` records equal to last by it are the ones returned.
  bool merged_since = false;
  std::vector<Range> ranges;
  std::vector<std::string> pending_chunks;  // main keys
};

constexpr size_t kMaxCursorChunks = 64;
// Most index ranges a cursor saves positions for (about 75 bytes each in
// base64): a cursor must fit the HTTP server's 64 KiB request head. A query
// over more resumes from its last record alone (a scan=true query over
// many streams).
constexpr size_t kMaxCursorRanges = 512;

class Writer {
 public:
  void U8(uint8_t v) { raw_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) {
    U8(static_cast<uint8_t>(v >> 8));
    U8(static_cast<uint8_t>(v));
  }
  void U64(uint64_t v) { AppendBigEndian64(raw_, v); }
  void Bytes(std::string_view b) {
    U16(static_cast<uint16_t>(b.size()));
    raw_.append(b);
  }
  std::string Base64Url() const { return EncodeBase64Url(raw_); }

 private:
  std::string raw_;
};

class Reader {
 public:
  static std::optional<Reader> FromBase64Url(std::string_view text) {
    auto raw = DecodeBase64Url(text);
    if (!raw) return std::nullopt;
    return Reader(std::move(*raw));
  }
  bool ok() const { return ok_; }
  bool done() const { return pos_ == raw_.size(); }
  uint8_t U8() {
    if (pos_ + 1 > raw_.size()) return Fail();
    return static_cast<uint8_t>(raw_[pos_++]);
  }
  uint16_t U16() {
    uint16_t hi = U8();
    return static_cast<uint16_t>(hi << 8 | U8());
  }
  uint64_t U64() {
    if (pos_ + 8 > raw_.size()) return Fail();
    uint64_t v = GetBigEndian64(raw_.data() + pos_);
    pos_ += 8;
    return v;
  }
  std::string Bytes() {
    size_t n = U16();
    if (!ok_ || pos_ + n > raw_.size()) return Fail(), std::string();
    std::string b = raw_.substr(pos_, n);
    pos_ += n;
    return b;
  }

 private:
  explicit Reader(std::string raw) : raw_(std::move(raw)) {}
  uint8_t Fail() {
    ok_ = false;
    pos_ = raw_.size();
    return 0;
  }
  std::string raw_;
  size_t pos_ = 0;
  bool ok_ = true;
};

constexpr uint8_t kCursorVersion = 3;  // 3: epoch and `same` (compaction)

std::string EncodeCursor(uint64_t fingerprint, const Cursor& c) {
  Writer w;
  w.U8(kCursorVersion);
  w.U64(fingerprint);
  w.U64(static_cast<uint64_t>(c.last.ts));
  w.U64(c.last.app.value());
  w.U64(c.last.host.value());
  w.U8(c.last.sev);
  w.U64(c.last.content);
  w.U64(c.last.chunk.value());
  w.U64(c.last.index);
  w.U8(c.stateful);
  w.U64(c.epoch);
  w.U64(c.same);
  if (c.stateful) {
    w.U16(static_cast<uint16_t>(c.ranges.size()));
    for (const auto& r : c.ranges) {
      w.Bytes(r.table);
      w.Bytes(r.prefix);
      w.Bytes(r.next_key);
    }
    w.U16(static_cast<uint16_t>(c.pending_chunks.size()));
    for (const auto& k : c.pending_chunks) w.Bytes(k);
  }
  return w.Base64Url();
}

// A stateful cursor made before a merge (another `epoch`) resumes as a
// stateless one: its saved index positions and chunks may be gone.
Result<Cursor> DecodeCursor(const std::string& text, uint64_t fingerprint, uint64_t epoch) {
  auto bad = [](std::string why) { return Error{Errc::kInvalidArgument, "cursor: " + std::move(why)}; };
  auto r = Reader::FromBase64Url(text);
  if (!r || r->U8() != kCursorVersion) return bad("not a cursor from this server");
  if (r->U64() != fingerprint) return bad(r->ok() ? "it belongs to a different query" : "not a cursor from this server");
  Cursor c;
  c.last.ts = static_cast<int64_t>(r->U64());
  c.last.app = AppId(r->U64());
  c.last.host = HostId(r->U64());
  c.last.sev = r->U8();
  c.last.content = r->U64();
  c.last.chunk = ChunkId(r->U64());
  c.last.index = static_cast<uint32_t>(r->U64());
  c.stateful = r->U8() != 0;
  c.epoch = r->U64();
  c.same = static_cast<uint32_t>(r->U64());
  if (c.stateful) {
    for (uint16_t n = r->U16(); n > 0 && r->ok(); --n) {
      Cursor::Range range;
      range.table = r->Bytes();
      range.prefix = r->Bytes();
      range.next_key = r->Bytes();
      c.ranges.push_back(std::move(range));
    }
    for (uint16_t n = r->U16(); n > 0 && r->ok(); --n) c.pending_chunks.push_back(r->Bytes());
  }
  if (!r->ok() || !r->done()) return bad("not a cursor from this server");
  // An odd epoch: a merge was landing when the page was made, or is now.
  if (c.epoch != epoch || epoch % 2 == 1) {
    c.merged_since = true;
    c.stateful = false;
    c.ranges.clear();
    c.pending_chunks.clear();
  }
  return c;
}

std::string PrefixSuccessor(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

// A stored chunk's name: its main key's stream, first record time and id
// (an id alone is not unique), as a merged chunk's list of parts names them.
struct ChunkName {
  uint64_t app = 0, host = 0, first_ts = 0, chunk = 0;
  uint8_t severity = 0;
  bool operator==(const ChunkName&) const = default;
};
struct ChunkNameHash {
  size_t operator()(const ChunkName& n) const {
    uint64_t h = n.chunk * 0x9e3779b97f4a7c15ull ^ n.first_ts;
    h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull ^ n.app;
    h = (h ^ (h >> 32)) * 0x94d049bb133111ebull ^ n.host;
    h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull ^ n.severity;
    return static_cast<size_t>(h ^ (h >> 31));
  }
};
// Of a part `merged` lists: its first record time and id (MainRow.parts).
ChunkName NameOf(const MainKey& merged, uint64_t first_ts, uint64_t id) {
  return ChunkName{merged.app.value(), merged.host.value(), first_ts, id, SeverityCode(merged.severity)};
}
ChunkName NameOf(const MainKey& k) { return NameOf(k, static_cast<uint64_t>(k.first_ts_ms), k.chunk.value()); }

// An index row, decoded to what the executor needs before fetching the chunk.
struct Candidate {
  int64_t last_ts = 0;
  AppId app;
  HostId host;
  Severity severity = Severity::kInfo;
  IndexValue value;
};

// A RowIterator that can show the rows after its current one: the query
// engine reads main rows of upcoming index rows in one MultiGet on a store
// with batched_gets() (HBase, where each Get is a round trip; RocksDB, which
// reads a block once for the keys in it).
class LookaheadIterator final : public RowIterator {
 public:
  explicit LookaheadIterator(std::unique_ptr<RowIterator> base) : base_(std::move(base)) { Pull(); }
  bool Valid() const override { return !rows_.empty(); }
  void Next() override {
    rows_.pop_front();
    if (rows_.empty()) Pull();
  }
  void Seek(std::string_view target) override {
    rows_.clear();
    base_->Seek(target);
    Pull();
  }
  std::string_view key() const override { return rows_.front().first; }
  std::string_view value() const override { return rows_.front().second; }
  Status status() const override { return rows_.empty() ? base_->status() : Status::Ok(); }

  // Reads until `n` rows after the current one are held (fewer at the end);
  // returns them.
  const std::deque<std::pair<std::string, std::string>>& Ahead(size_t n) {
    while (rows_.size() < n + 1 && base_->Valid()) Pull();
    return rows_;
  }

 private:
  void Pull() {
    if (!base_->Valid()) return;
    rows_.emplace_back(std::string(base_->key()), std::string(base_->value()));
    base_->Next();
  }
  std::unique_ptr<RowIterator> base_;
  std::deque<std::pair<std::string, std::string>> rows_;  // front: the current row
};

// One index range, read newest first.
struct Source {
  std::string table;
  std::string prefix;  // the range's fixed leading key bytes (app, host+app or tag)
  std::unique_ptr<RowIterator> it;
  std::function<std::optional<Candidate>(std::string_view key, std::string_view value)> decode;
  LookaheadIterator* ahead = nullptr;  // `it`, when the store batches gets
};

class Execution {
 public:
  // `epoch`: QueryOptions::store_epoch read before `store` (a snapshot view) was made.
  Execution(TableStore& store, const QueryOptions& options, const Query& q, QueryAnswer& answer, uint64_t epoch)
      : store_(store),
        options_(options),
        q_(q),
        answer_(answer),
        stats_(answer.stats),
        clock_(options.clock ? *options.clock : SystemClock::Instance()),
        start_ns_(clock_.MonotonicNs()),
        epoch_(epoch),
        max_span_ms_(options.longest_span_ms ? std::max(options.max_chunk_span_ms, options.longest_span_ms())
                                             : options.max_chunk_span_ms) {
    for (Severity s : q.severities) sevs_.insert(s);
    if (!q.app.empty()) app_ = AppIdOf(q.app);
    if (!q.host.empty()) host_ = HostIdOf(q.host);
  }

  Status Validate() {
    auto bad = [](std::string why) { return Status(Errc::kInvalidArgument, std::move(why)); };
    if (q_.to_ms <= q_.from_ms) return bad("the time range is empty: 'to' must be after 'from'");
    // to - from overflows int64 for extreme bounds: that range is too long too.
    int64_t span = 0;
    if (__builtin_sub_overflow(q_.to_ms, q_.from_ms, &span) || span > options_.max_range_ms) {
      const std::string spans = span > 0 ? "spans " + std::to_string(span / 1000) + " s" : "is longer than int64 ms";
      return bad("the time range " + spans + ", over the maximum of " + std::to_string(options_.max_range_ms / 1000) +
                 " s");
    }
    if (q_.limit == 0) return bad("limit must be at least 1");
    if (q_.limit > options_.max_limit) return bad("limit is over the maximum of " + std::to_string(options_.max_limit));
    for (auto& [k, v] : q_.tags) {
      if (k.empty()) return bad("a tag filter needs a key (k=v)");
    }
    auto text = TextMatcher::Compile(q_.text);
    if (!text.ok()) return Status(text.error());
    text_ = std::move(*text);
    if (options_.use_token_filters) token_probe_ = TokenProbe::For(q_.text, q_.contains);
    if (!q_.scan && q_.app.empty() && q_.host.empty() && q_.tags.empty()) {
      return bad("a query needs app, host or tag; set scan=true to read every stream");
    }
    if (!q_.cursor.empty()) {
      auto c = DecodeCursor(q_.cursor, QueryFingerprint(q_), epoch_);
      if (!c.ok()) return Status(c.error());
      cursor_ = *c;
      last_ = cursor_->last;
      same_ = cursor_->same;
      have_last_ = true;
      if (cursor_->merged_since) skip_same_ = cursor_->same;
    }
    return Status::Ok();
  }

  // Whether the run depends on the layout its cursor was made in: saved
  // index positions and chunks (stateful), or whole positions compared
  // (chunk ids change in a merge). Only a cursor resuming after a merge
  // (merged_since: by record alone) does not (see MergeRaced).
  bool layout_dependent() const { return cursor_.has_value() && !cursor_->merged_since; }

  Status Run() {
    if (Status s = Validate(); !s.ok()) return s;
    if (Status s = Plan(); !s.ok()) return s;
    if (main_scan_) return RunScan();
    return Merge();
  }

  // Counts instead of collecting records (Volume()); `out` receives them.
  Status RunVolume(const VolumeQuery& vq, VolumeAnswer& out) {
    volume_ = &out;
    step_ = vq.step_ms;
    out.step_ms = vq.step_ms;
    out.read_records = vq.read_records || !q_.contains.empty() || !q_.text.empty() || q_.scan;
    index_counts_ = !out.read_records;
    auto bad = [](std::string why) { return Status(Errc::kInvalidArgument, std::move(why)); };
    if (!q_.cursor.empty()) return bad("a volume query takes no cursor");
    if (Status s = Validate(); !s.ok()) return s;
    std::optional<uint64_t> n = VolumeBucketCount(q_.from_ms, q_.to_ms, step_);
    if (!n) return bad("step must be at least 1 ms");
    if (*n > options_.max_volume_buckets) {
      return bad("step " + std::to_string(step_) + " ms makes " + std::to_string(*n) +
                 " buckets, over the maximum of " + std::to_string(options_.max_volume_buckets) +
                 "; use a longer step or a shorter range");
    }
    if (index_counts_ && q_.tags.size() > 1) {
      return bad("counting from the index takes one tag (the tag index is per chunk); count by reading records to "
                 "filter on several");
    }
    origin_ = VolumeGridStart(q_.from_ms, step_).value();  // VolumeBucketCount checked it
    out.buckets.resize(*n);
    for (uint64_t i = 0; i < *n; ++i) out.buckets[i].start_ms = origin_ + static_cast<int64_t>(i) * step_;
    Status s = Plan();
    if (s.ok()) s = main_scan_ ? RunScan() : CountSources();
    if (!s.ok()) return s;
    for (const VolumeBucket& b : out.buckets) {
      for (size_t i = 0; i < b.counts.by_severity.size(); ++i) out.totals.by_severity[i] += b.counts.by_severity[i];
      out.totals.total += b.counts.total;
    }
    return Status::Ok();
  }

 private:
  // Fails with kResourceExhausted (and names the budget in the stats) once the
  // query has used more than one of its budgets.
  Status CheckBudget() {
    auto over = [this](const char* budget, const std::string& used, const char* key, const std::string& limit) {
      stats_.budget_exhausted = budget;
      return Status(Errc::kResourceExhausted, "query budget exhausted: " + used + ", over " + key + " (" + limit +
                                                  "); narrow the time range or add filters");
    };
    if (options_.max_rows_scanned > 0 && stats_.rows_scanned > options_.max_rows_scanned) {
      return over("rows_scanned", "read " + std::to_string(stats_.rows_scanned) + " rows", "query.max_rows_scanned",
                  std::to_string(options_.max_rows_scanned));
    }
    if (options_.max_bytes_decompressed > 0 &&
        stats_.bytes_decompressed - budget_bytes_base_ > options_.max_bytes_decompressed) {
      return over("bytes_decompressed", "decompressed " + std::to_string(stats_.bytes_decompressed) + " bytes",
                  "query.max_bytes_decompressed", std::to_string(options_.max_bytes_decompressed) + " bytes");
    }
    if (options_.max_time_ms > 0) {
      const int64_t elapsed_ms = (clock_.MonotonicNs() - start_ns_) / 1'000'000;
      if (elapsed_ms > options_.max_time_ms) {
        return over("time", "ran " + std::to_string(elapsed_ms) + " ms", "query.max_time",
                    std::to_string(options_.max_time_ms) + " ms");
      }
    }
    return Status::Ok();
  }

  // Volume from the index: whether chunks spanning index_count_span_ms or
  // more may exist (then they are read, not counted from their index row).
  bool LongChunksRead() const {
    return options_.index_count_span_ms > 0 && options_.index_count_span_ms < max_span_ms_;
  }
  // While long chunks are read, so is one listing its parts
  // (IndexValue::lists_parts); else CountSources reads its list only.
  bool IsLong(const Candidate& c) const {
    return LongChunksRead() &&
           (c.last_ts - c.value.main_key.first_ts_ms >= options_.index_count_span_ms || c.value.lists_parts);
  }

  // Index ts range [from, upper): chunks ending there may hold records in range.
  // Counting from the index: [from, to), by the attribution rule (query.h).
  int64_t Upper() const {
    if (index_counts_) return LongChunksRead() ? SaturatingAdd(q_.to_ms, max_span_ms_) : q_.to_ms;
    int64_t top = q_.to_ms;
    if (cursor_) top = std::min(top, SaturatingAdd(cursor_->last.ts, 1));
    return SaturatingAdd(top, max_span_ms_);
  }

  // Opens one index range [start, stop), newest first; `prefix_len` leading
  // bytes of `start` name the range (for resuming from a stateful cursor).
  void AddSource(std::string table, std::string start, std::string stop, size_t prefix_len,
                 std::function<std::optional<Candidate>(std::string_view, std::string_view)> decode) {
    std::string prefix = start.substr(0, prefix_len);
    if (cursor_ && cursor_->stateful) {
      for (const Cursor::Range& r : cursor_->ranges) {
        if (r.table != table || r.prefix != prefix) continue;
        if (r.next_key.empty()) {  // finished on an earlier page
          finished_.push_back(r);
          return;
        }
        stop = r.next_key + '\0';       // resume at the first unread row
      }
    }
    stats_.plan += (sources_.empty() ? "" : ", ") + table;
    std::unique_ptr<RowIterator> it = store_.NewIterator(ScanSpec{table, std::move(start), std::move(stop), true, 0});
    LookaheadIterator* ahead = nullptr;
    if (store_.batched_gets()) {
      auto wrapped = std::make_unique<LookaheadIterator>(std::move(it));
      ahead = wrapped.get();
      it = std::move(wrapped);
    }
    sources_.push_back(Source{std::move(table), std::move(prefix), std::move(it), std::move(decode), ahead});
    ++stats_.seeks;
  }

  static std::optional<Candidate> WithValue(Candidate c, std::string_view value) {
    auto v = IndexValue::Decode(value);
    if (!v) return std::nullopt;
    c.value = *v;
    return c;
  }

  void AddLevelSource(AppId app, Severity s) {
    AddSource(LevelIndexTable(s), LevelIndexKey{app, q_.from_ms, HostId(), ChunkId()}.Encode(),
              LevelIndexKey{app, Upper(), HostId(), ChunkId()}.Encode(), 8,
              [s](std::string_view k, std::string_view v) -> std::optional<Candidate> {
                auto key = LevelIndexKey::Decode(k);
                if (!key) return std::nullopt;
                return WithValue(Candidate{key->ts_ms, key->app, key->host, s, {}}, v);
              });
  }

  void AddHostSource(HostId host, AppId app) {
    AddSource(std::string(kHostIndexTable), HostIndexKey{host, app, q_.from_ms, Severity::kTrace, ChunkId()}.Encode(),
              HostIndexKey{host, app, Upper(), Severity::kTrace, ChunkId()}.Encode(), 16,
              [](std::string_view k, std::string_view v) -> std::optional<Candidate> {
                auto key = HostIndexKey::Decode(k);
                if (!key) return std::nullopt;
                return WithValue(Candidate{key->ts_ms, key->app, key->host, key->severity, {}}, v);
              });
  }

  // Plans the index ranges a query reads (see query.h). A scan=true query
  // skips the tag index (its cap would hide records) and, with no app or
  // host, reads every stream's severity index: every stored chunk has one
  // row there, so the answer is the main-table scan's, streamed newest first
  // and with token filters probed. Over max_scan_index_ranges (app,
  // severity) pairs it sets main_scan_: RunScan() reads the main table.
  Status Plan() {
    if (!q_.tags.empty() && !q_.scan) {
      const TagId tag = TagIdOf(q_.tags[0].first, q_.tags[0].second);
      stats_.plan = "tag index " + q_.tags[0].first + "=" + q_.tags[0].second + ": ";
      AddSource(std::string(kTagIndexTable), TagIndexKey{tag, q_.from_ms, AppId(), HostId(), Severity::kTrace, ChunkId()}.Encode(),
                TagIndexKey{tag, Upper(), AppId(), HostId(), Severity::kTrace, ChunkId()}.Encode(), 8,
                [](std::string_view k, std::string_view v) -> std::optional<Candidate> {
                  auto key = TagIndexKey::Decode(k);
                  if (!key) return std::nullopt;
                  return WithValue(Candidate{key->ts_ms, key->app, key->host, key->severity, {}}, v);
                });
      return Status::Ok();
    }
    if (app_ && host_) {
      stats_.plan = "host index, app + host: ";
      AddHostSource(*host_, *app_);
      return Status::Ok();
    }
    if (app_) {
      stats_.plan = "severity indexes, app: ";
      for (Severity s : kAllSeverities) {
        if (sevs_.empty() || sevs_.count(s)) AddLevelSource(*app_, s);
      }
      return Status::Ok();
    }
    if (host_) {  // one range per app the host has logged for
      std::set<AppId> apps;
      Status s = ForStreamsInRange(host_, [&](const MetaKey& key) {
        apps.insert(key.stream_app());
        return true;
      });
      if (!s.ok()) return s;
      stats_.plan = "host index, host only (" + std::to_string(apps.size()) + " apps): ";
      for (AppId app : apps) AddHostSource(*host_, app);
      return Status::Ok();
    }
    if (options_.max_scan_index_ranges == 0) {
      main_scan_ = true;
      return Status::Ok();
    }
    std::set<std::pair<AppId, Severity>> ranges;
    Status s = ForStreamsInRange(std::nullopt, [&](const MetaKey& key) {
      ranges.emplace(key.stream_app(), key.severity);
      return ranges.size() <= options_.max_scan_index_ranges;
    });
    if (!s.ok()) return s;
    if (ranges.size() > options_.max_scan_index_ranges) {
      main_scan_ = true;
      return Status::Ok();
    }
    stats_.plan = "severity indexes, every stream (" + std::to_string(ranges.size()) + " ranges): ";
    every_stream_ = true;
    for (auto [app, severity] : ranges) AddLevelSource(app, severity);
    return Status::Ok();
  }

  // Calls `fn` for each stream (meta, kStream) of `host` (every host when
  // none) whose extent overlaps the query's range, with a severity it asks
  // for, until `fn` returns false. Extents are rounded out to whole minutes
  // and grow in the batch of the chunk that extends them (indexer.cc).
  Status ForStreamsInRange(std::optional<HostId> host, const std::function<bool(const MetaKey&)>& fn) {
    std::string prefix = host ? MetaKey::Stream(*host, AppId(), Severity::kTrace).Encode().substr(0, 9)
                              : std::string(1, static_cast<char>(MetaKind::kStream));
    return store_.Scan(ScanSpec{std::string(kMetaTable), prefix, PrefixSuccessor(prefix), false, 0},
                       [&](std::string_view k, std::string_view v) {
                         ++stats_.meta_rows;
                         auto key = MetaKey::Decode(k);
                         if (!key || key->kind != MetaKind::kStream || v.size() != 16) return true;
                         const int64_t lo = static_cast<int64_t>(GetBigEndian64(v.data()));
                         const int64_t hi = static_cast<int64_t>(GetBigEndian64(v.data() + 8));
                         const bool overlaps = hi > q_.from_ms && lo < q_.to_ms;
                         if (!overlaps || (!sevs_.empty() && !sevs_.count(key->severity))) return true;
                         return fn(*key);
                       });
  }

  // Whether the chunk's token filter (`tok`) shows that no record of it can
  // pass the text filters: then its main row is not read. A chunk without a
  // filter, or with one this build cannot read, is read.
  Result<bool> RuledOutByTokens(const Candidate& c) {
    if (token_probe_.empty() || !c.value.has_token_filter) return false;
    auto row = store_.Get(kTokenTable, c.value.main_key.Encode());
    if (!row.ok()) return row.error();
    if (!row->has_value()) return false;
    ++stats_.token_filters_read;
    const TokenBloomView filter(**row);
    const bool ruled_out = !token_probe_.MayMatch(filter);
    stats_.chunks_skipped_by_tokens += ruled_out;
    return ruled_out;
  }

  // The main row of a candidate. On a store with batched gets, from rows
  // read ahead: a miss reads this one with the main rows of the index rows
  // ahead (ReadAhead) in one MultiGet; if that call fails, this row alone.
  // `only`: read ahead in this source only (Volume reads sources in turn).
  Result<std::optional<std::string>> MainRow(const Candidate& c, Source* only = nullptr) {
    std::string key = c.value.main_key.Encode();
    if (!store_.batched_gets()) return store_.Get(kMainTable, key);
    auto it = read_ahead_.find(key);
    if (it == read_ahead_.end() && ReadAhead(key, only)) it = read_ahead_.find(key);
    if (it == read_ahead_.end()) return store_.Get(kMainTable, key);
    std::optional<std::string> row = std::move(it->second);
    read_ahead_.erase(it);
    return row;
  }

  // Reads `first` and the main rows of the chunks the query will read next,
  // as far as the index rows tell, in one MultiGet: the rows Merge takes
  // next, newest last_ts first across sources (a merge of every source's
  // head and the rows after it; Volume, `only`: that source's rows in order),
  // up to a batch. Not those a token filter may rule out (read on their own,
  // if at all) or that Volume counts from their index row. The batch starts
  // at 8 rows and doubles each call up to the page's limit (at most 64),
  // fewer when rows are large (about 16 MiB a batch): a first page that
  // needs one merged chunk does not read 64. False when the call failed
  // (counted in the stats): the caller reads its row alone, and a store that
  // is down fails that read with its error.
  bool ReadAhead(const std::string& first, Source* only) {
    constexpr uint64_t kBatchBytes = 16 << 20;
    size_t batch = ahead_batch_;
    ahead_batch_ = std::min<size_t>(2 * ahead_batch_, std::clamp<size_t>(q_.limit, 8, 64));
    if (ahead_rows_ > 0) batch = std::clamp<size_t>(kBatchBytes / (ahead_bytes_ / ahead_rows_ + 1), 1, batch);
    if (read_ahead_.size() > 4 * 64) read_ahead_.clear();  // bounded: what a page skipped

    std::vector<std::string> keys{first};
    std::set<std::string> seen{first};
    struct Next {
      int64_t ts;
      Source* src;
      size_t depth;  // index into src->ahead->Ahead() rows; SIZE_MAX: the source's head
      Candidate c;
      bool operator<(const Next& o) const { return ts < o.ts; }
    };
    std::priority_queue<Next> heap;
    auto push_row = [&](Source& src, size_t depth) {
      const auto& rows = src.ahead->Ahead(depth + 1);  // rows[0]: the row after the head, unread
      for (; depth < rows.size(); ++depth) {
        if (auto c = src.decode(rows[depth].first, rows[depth].second)) {
          heap.push(Next{c->last_ts, &src, depth, *c});
          return;
        }
      }
    };
    for (size_t i = 0; i < sources_.size(); ++i) {
      Source& src = sources_[i];
      if (!src.ahead || (only && &src != only)) continue;
      if (!only && i < heads_.size() && i < head_keys_.size() && !head_keys_[i].empty()) {
        heap.push(Next{heads_[i].last_ts, &src, SIZE_MAX, heads_[i]});
      } else {
        push_row(src, 0);
      }
    }
    // Bounded work: at most 4 batches of index rows looked at per call.
    for (size_t looked = 0; !heap.empty() && keys.size() < batch && looked < 4 * batch; ++looked) {
      Next n = heap.top();
      heap.pop();
      const Candidate& c = n.c;
      if (KeyMatches(c) && !(c.value.has_token_filter && !token_probe_.empty()) &&
          !(volume_ && (CountedFromIndex(c) || (CountsByMinute(c) && !c.value.lists_parts)))) {
        std::string k = c.value.main_key.Encode();
        if (!read_ahead_.count(k) && seen.insert(k).second) keys.push_back(std::move(k));
      }
      push_row(*n.src, n.depth == SIZE_MAX ? 0 : n.depth + 1);
    }
    auto rows = store_.MultiGet(kMainTable, keys);
    if (!rows.ok()) {
      ++stats_.main_row_batch_failures;
      return false;
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if ((*rows)[i]) ahead_bytes_ += (*rows)[i]->size();
      ++ahead_rows_;
      read_ahead_[keys[i]] = std::move((*rows)[i]);
    }
    ++stats_.main_row_batches;
    return true;
  }

  // Key-level filters: what the index row tells without reading the chunk.
  bool KeyMatches(const Candidate& c) const {
    if (!sevs_.empty() && !sevs_.count(c.severity)) return false;
    if (app_ && c.app != *app_) return false;
    if (host_ && c.host != *host_) return false;
    const int64_t first = c.value.main_key.first_ts_ms;
    if (first >= q_.to_ms) return false;
    if (cursor_ && first > cursor_->last.ts) return false;
    return true;
  }

  bool RecordMatches(const RecordView& r, std::span<const TagView> tags) const {
    if (r.ts_ms < q_.from_ms || r.ts_ms >= q_.to_ms) return false;
    if (!sevs_.empty() && !sevs_.count(static_cast<Severity>(r.severity))) return false;
    for (const auto& [k, v] : q_.tags) {
      bool found = false;
      for (const TagView& t : tags) {
        if (t.key == k && t.value == v) {
          found = true;
          break;
        }
      }
      if (!found) return false;
    }
    if (!q_.contains.empty() && r.message.find(q_.contains) == std::string_view::npos) return false;
    return text_.Matches(r.message);
  }

  // Counts `n` records of the chunk at `chunk_key` in the bucket of `ts`,
  // remembered in added_ (merged with its previous entry when it counts
  // into the same bucket and severity).
  void CountOf(const MainKey& chunk_key, int64_t ts, Severity severity, uint64_t n, uint64_t inexact) {
    const ChunkName chunk = NameOf(chunk_key);
    const size_t bucket = static_cast<size_t>((ts - origin_) / step_), sev = VolumeSeverityIndex(severity);
    VolumeCounts& c = volume_->buckets[bucket].counts;
    c.by_severity[sev] += n;
    c.total += n;
    // A chunk is counted in one go (one index row, or one Collect).
    const bool first = added_.empty() || !(added_.back().chunk == chunk);
    if (!first && added_.back().bucket == bucket && added_.back().severity == sev) {
      added_.back().n += n;
      added_.back().inexact += inexact;
      return;
    }
    added_.push_back(Added{chunk, bucket, sev, n, inexact, first});
  }

  // Whether the chunk at `key` is a part of a merged chunk read before
  // (superseded_): then counted, and skipped by the caller.
  bool Superseded(const MainKey& key) {
    if (superseded_.empty() || !superseded_.count(NameOf(key))) return false;
    ++stats_.superseded_parts;
    return true;
  }

  // The merged chunk `merged` listing `parts` (in its stream) was read:
  // what parts collected before added (their pending records, or their
  // counts) goes.
  void Supersede(const MainKey& merged, const google::protobuf::RepeatedField<uint64_t>& parts) {
    bool fresh = false, purge = false;
    for (int i = 0; i + 1 < parts.size(); i += 2) {
      const ChunkName part = NameOf(merged, parts[i], parts[i + 1]);
      if (!superseded_.insert(part).second) continue;
      fresh = true;
      purge |= collected_.count(part) > 0;
    }
    if (!(volume_ ? fresh : purge)) return;
    auto gone = [this](const ChunkName& chunk) { return superseded_.count(chunk) > 0; };
    if (!volume_) {
      for (int i = 0; i + 1 < parts.size(); i += 2) {
        stats_.superseded_parts += collected_.erase(NameOf(merged, parts[i], parts[i + 1]));
      }
      std::erase_if(pending_, [&](const Pending& p) { return gone(NameOf(p.key)); });
      std::make_heap(pending_.begin(), pending_.end());
      return;
    }
    std::erase_if(added_, [&](const Added& a) {
      if (!gone(a.chunk)) return false;
      VolumeCounts& c = volume_->buckets[a.bucket].counts;
      c.by_severity[a.severity] -= a.n;
      c.total -= a.n;
      volume_->inexact_records -= a.inexact;
      stats_.chunks_returned -= a.returned;
      stats_.superseded_parts += a.returned;
      return true;
    });
  }

  // Applies the parts list of the chunk at `key` (a main row), if its
  // records read (else its parts, if still stored, hold them), or without
  // reading them (`counted`: its records were counted whatever they hold).
  void SupersedeFrom(const MainKey& key, std::string_view main_value, bool counted = false) {
    proto::MainRow row;
    if (!row.ParseFromArray(main_value.data(), static_cast<int>(main_value.size())) || row.parts_size() == 0) return;
    if (!counted && !ViewRecords(ChunkRef::Of(row.chunk()), options_.decode, scratch_, views_).ok()) return;
    Supersede(key, row.parts());
  }

  // Volume from the index: whether a merged chunk that is not counted from
  // its index row is counted from its `cnt` row (CountByMinute) rather than
  // read. Not under a tag filter: a merged chunk read counts the records
  // that carry the tag, its minutes would count them all.
  bool CountsByMinute(const Candidate& c) const {
    return index_counts_ && c.value.has_minute_counts && q_.tags.empty();
  }

  // Volume from the index: counts a merged chunk by its `cnt` row, each
  // minute's records at the minute's last millisecond within the chunk (at
  // most 59,999 ms after their own time, never earlier; so exactly in
  // buckets a whole number of minutes wide between minute-aligned `from`
  // and `to`); false when the row is missing
  // or unreadable (counted): the caller reads the chunk instead.
  Result<bool> CountByMinute(const Candidate& c, Source& src) {
    auto value = store_.Get(kMinuteCountsTable, c.value.main_key.Encode());
    if (!value.ok()) return value.error();
    ++stats_.minute_counts_read;
    const int64_t first_ts = c.value.main_key.first_ts_ms;
    auto minutes = value->has_value()
                       ? DecodeMinuteCounts(**value, c.value.record_count, first_ts, c.last_ts)
                       : std::nullopt;
    if (!minutes) {
      ++stats_.unreadable_minute_counts;
      return false;
    }
    if (c.value.lists_parts) {  // its parts, found beside it, must not count (query.h)
      auto row = MainRow(c, &src);
      if (!row.ok()) return row.error();
      if (!row->has_value()) {
        ++stats_.index_rows_without_main;
        return true;  // as a chunk read would: counted nowhere
      }
      SupersedeFrom(c.value.main_key, **row, /*counted=*/true);
    }
    bool counted = false;
    for (const MinuteCount& m : *minutes) {
      const int64_t t = std::min(m.start_ms + (kCountMinuteMs - 1), c.last_ts);
      if (t < q_.from_ms || t >= q_.to_ms) continue;
      const int64_t bucket_start = origin_ + (t - origin_) / step_ * step_;
      const bool inexact = std::max(m.start_ms, first_ts) < std::max(bucket_start, q_.from_ms);
      CountOf(c.value.main_key, t, c.severity, m.records, inexact ? m.records : 0);
      if (inexact) volume_->inexact_records += m.records;
      counted = true;
    }
    stats_.chunks_returned += counted;
    return true;
  }

  // Volume: every index row of the planned sources, counted by the
  // attribution rule (index_counts_) or by reading its chunk's records.
  Status CountSources() {
    for (Source& src : sources_) {
      // A merged chunk and its parts are in one range (one stream).
      added_.clear();
      tie_ts_ = INT64_MAX;
      for (; src.it->Valid(); src.it->Next()) {
        ++stats_.rows_scanned;
        if (Status s = CheckBudget(); !s.ok()) return s;
        auto c = src.decode(src.it->key(), src.it->value());
        if (!c || !KeyMatches(*c)) continue;
        if (c->last_ts != tie_ts_) {  // newest end first: what ended later no chunk to come can list
          added_.clear();
          tie_ts_ = c->last_ts;
        }
        if (Superseded(c->value.main_key)) continue;
        if (index_counts_ && c->value.lists_parts && !LongChunksRead()) {
          // Counted from its index row (its records before `from` are
          // counted in no range when the ranges are not padded), but its
          // parts must not be: its list is read.
          auto row = MainRow(*c, &src);
          if (!row.ok()) return Status(row.error());
          if (row->has_value()) SupersedeFrom(c->value.main_key, **row, /*counted=*/true);
        }
        if (CountedFromIndex(*c)) {
          if (c->last_ts < q_.from_ms || c->last_ts >= q_.to_ms) continue;  // past `to`: a later range's
          const int64_t bucket_start = origin_ + (c->last_ts - origin_) / step_ * step_;
          const bool inexact = c->value.main_key.first_ts_ms < std::max(bucket_start, q_.from_ms);
          CountOf(c->value.main_key, c->last_ts, c->severity, c->value.record_count,
                  inexact ? c->value.record_count : 0);
          ++stats_.chunks_returned;
          if (inexact) volume_->inexact_records += c->value.record_count;
          continue;
        }
        if (CountsByMinute(*c)) {
          auto counted = CountByMinute(*c, src);
          if (!counted.ok()) return Status(counted.error());
          if (*counted) continue;
        }
        auto skip = RuledOutByTokens(*c);
        if (!skip.ok()) return Status(skip.error());
        if (*skip) continue;
        auto row = MainRow(*c, &src);
        if (!row.ok()) return Status(row.error());
        if (!row->has_value()) {
          ++stats_.index_rows_without_main;
          continue;
        }
        if (Status s = Collect(c->value.main_key, **row); !s.ok()) return s;
        if (Status s = CheckBudget(); !s.ok()) return s;
      }
      if (!src.it->status().ok()) return src.it->status();
    }
    return Status::Ok();
  }

  // Volume: whether the chunk is counted from its index row, unread. A long
  // chunk within one bucket and within [from, to) counts from its index row
  // too: reading it would put its records in that bucket.
  bool CountedFromIndex(const Candidate& c) const {
    if (!index_counts_) return false;
    const int64_t first_ts = c.value.main_key.first_ts_ms;
    const bool whole_in_bucket = first_ts >= q_.from_ms && c.last_ts < q_.to_ms &&
                                 (first_ts - origin_) / step_ == (c.last_ts - origin_) / step_;
    return !IsLong(c) || (whole_in_bucket && !c.value.lists_parts);
  }

  // Decompresses one stored chunk and keeps its matching records (counts
  // them, for Volume()).
  Status Collect(const MainKey& key, std::string_view main_value) {
    proto::MainRow row;
    // A stored chunk that no longer decodes (disk corruption) is skipped and
    // counted: one bad row must not make every query over it fail.
    if (!row.ParseFromArray(main_value.data(), static_cast<int>(main_value.size()))) {
      ++stats_.corrupt_chunks;
      return Status::Ok();
    }
    if (Superseded(key)) return Status::Ok();
    ++stats_.chunks_read;
    // Read in place: a query keeps few of the records it reads.
    if (!ViewRecords(ChunkRef::Of(row.chunk()), options_.decode, scratch_, views_).ok()) {
      ++stats_.corrupt_chunks;  // and its parts, if still stored, are read
      return Status::Ok();
    }
    if (row.parts_size() > 0) Supersede(key, row.parts());
    stats_.bytes_decompressed += row.chunk().uncompressed_size();
    if (volume_) {
      bool counted = false;
      for (const RecordView& r : views_.records) {
        if (!RecordMatches(r, views_.TagsOf(r))) continue;
        CountOf(key, r.ts_ms, static_cast<Severity>(r.severity), 1, 0);
        counted = true;
      }
      stats_.chunks_returned += counted;
      return Status::Ok();
    }
    bool pending_added = false;
    for (size_t i = 0; i < views_.records.size(); ++i) {
      const RecordView& r = views_.records[i];
      const auto tags = views_.TagsOf(r);
      if (!RecordMatches(r, tags)) continue;
      Pos p{r.ts_ms, key.app, key.host, static_cast<uint8_t>(r.severity), ContentHash(r.message, tags, hash_buffer_),
            key.chunk, static_cast<uint32_t>(i)};
      if (cursor_ && (cursor_->merged_since ? cursor_->last.Stable() < p.Stable() : !(p < cursor_->last))) continue;
      ResultRecord out;
      out.ts_ms = r.ts_ms;
      out.severity = static_cast<Severity>(r.severity);
      out.app = row.chunk().app();
      out.host = row.chunk().host();
      out.message = std::string(r.message);
      out.tags.reserve(tags.size());
      for (const TagView& t : tags) out.tags.emplace_back(std::string(t.key), std::string(t.value));
      pending_.push_back(Pending{p, key, std::move(out)});
      std::push_heap(pending_.begin(), pending_.end());
      pending_added = true;
    }
    if (pending_added) collected_.insert(NameOf(key));
    return Status::Ok();
  }

  // Moves pending records newer than `bound` to the answer, newest first.
  void Emit(int64_t bound) {
    while (!pending_.empty() && pending_.front().pos.ts > bound && answer_.records.size() < q_.limit) {
      std::pop_heap(pending_.begin(), pending_.end());
      Pending& top = pending_.back();
      if (skip_same_ > 0 && top.pos.Stable() == cursor_->last.Stable()) {
        --skip_same_;  // returned on an earlier page, before a merge moved it
        pending_.pop_back();
        continue;
      }
      same_ = have_last_ && top.pos.Stable() == last_.Stable() ? same_ + 1 : 1;
      have_last_ = true;
      last_ = top.pos;
      if (returned_.insert(last_.chunk).second) ++stats_.chunks_returned;
      answer_.records.push_back(std::move(top.record));
      pending_.pop_back();
    }
  }

  Status Merge() {
    auto cmp = [this](size_t a, size_t b) { return heads_[a].last_ts < heads_[b].last_ts; };
    std::priority_queue<size_t, std::vector<size_t>, decltype(cmp)> heap(cmp);
    heads_.resize(sources_.size());
    head_keys_.assign(sources_.size(), std::string());
    auto advance = [&](size_t i) -> Status {
      Source& src = sources_[i];
      head_keys_[i].clear();
      while (src.it->Valid()) {
        auto c = src.decode(src.it->key(), src.it->value());
        if (c) head_keys_[i] = std::string(src.it->key());
        src.it->Next();
        if (c) {
          heads_[i] = *c;
          heap.push(i);
          return Status::Ok();
        }
        ++stats_.rows_scanned;  // an undecodable index row: counted, skipped
      }
      return src.it->status();
    };
    // Chunks an earlier page left records of.
    if (cursor_ && cursor_->stateful) {
      for (const std::string& k : cursor_->pending_chunks) {
        auto key = MainKey::Decode(k);
        if (!key) return Status(Errc::kInvalidArgument, "cursor: not a cursor from this server");
        auto row = store_.Get(kMainTable, k);
        if (!row.ok()) return Status(row.error());
        if (!row->has_value()) continue;  // expired since
        if (Status s = Collect(*key, **row); !s.ok()) return s;
      }
      // Re-reading an earlier page's open chunks is not this page's work:
      // charged to the bytes budget, a small one would let every page take
      // a single index row.
      budget_bytes_base_ = stats_.bytes_decompressed;
    }
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (Status s = advance(i); !s.ok()) return s;
    }
    Status over_budget;
    bool took = false;  // an index row was taken on this page
    // A page may stop with no record only where its cursor resumes exactly:
    // not a page that started over after a merge (its `last` and `same`
    // are of the old layout, and only a record it returns gives a new one),
    // nor one made while a merge lands (odd epoch: the next page would start
    // over from the same `last` and could stop again, forever).
    const bool may_stop_empty = !(cursor_ && cursor_->merged_since) && epoch_ % 2 == 0;
    while (answer_.records.size() < q_.limit) {
      if (heap.empty()) {
        Emit(INT64_MIN);
        break;
      }
      const size_t i = heap.top();
      Emit(heads_[i].last_ts);  // nothing unread is newer than this chunk's end
      if (answer_.records.size() >= q_.limit) break;
      // Checked before the head is taken, so that a page stopped here
      // resumes at it, and once a row was taken, so that every page moves
      // on (re-reading a cursor's open chunks may use the budget up alone).
      if (took && (may_stop_empty || !answer_.records.empty())) over_budget = CheckBudget();
      if (!over_budget.ok()) break;
      heap.pop();
      took = true;
      const Candidate c = heads_[i];
      ++stats_.rows_scanned;
      if (Status s = advance(i); !s.ok()) return s;
      if (!KeyMatches(c) || Superseded(c.value.main_key)) continue;
      auto skip = RuledOutByTokens(c);
      if (!skip.ok()) return Status(skip.error());
      if (*skip) continue;
      auto row = MainRow(c);
      if (!row.ok()) return Status(row.error());
      if (!row->has_value()) {
        ++stats_.index_rows_without_main;
        continue;
      }
      if (Status s = Collect(c.value.main_key, **row); !s.ok()) return s;
      if (every_stream_ && options_.scan_switch_after_chunks > 0 &&
          stats_.chunks_read >= options_.scan_switch_after_chunks && 2 * stats_.chunks_read > stats_.rows_scanned &&
          !(cursor_ && cursor_->merged_since)) {
        Status scanned = SwitchToMainScan();
        if (scanned.ok() || scanned.code() != Errc::kResourceExhausted) return scanned;
        over_budget = scanned;  // this page ends as the index plan's, stopped early
        break;
      }
    }
    const bool stopped = !over_budget.ok();
    if ((answer_.records.size() >= q_.limit || stopped) && (!pending_.empty() || !heap.empty())) {
      Cursor next;
      next.last = last_;
      next.same = same_;
      next.epoch = epoch_;
      if (!have_last_) {  // nothing returned yet, on this page or before: every record is still to come
        next.last.ts = INT64_MAX;
        next.last.app = AppId(UINT64_MAX);
        next.last.host = HostId(UINT64_MAX);
        next.last.content = UINT64_MAX;
        next.last.chunk = ChunkId(UINT64_MAX);
        next.last.sev = UINT8_MAX;
        next.last.index = UINT32_MAX;
        next.same = 0;
      }
      std::set<std::string> chunks;
      for (const Pending& p : pending_) chunks.insert(p.key.Encode());
      // A page stopped by its budget that returned nothing continues only
      // from saved positions (a cursor by the last record alone would start
      // over): else the budget error stands.
      const bool saves_positions =
          chunks.size() <= kMaxCursorChunks && sources_.size() + finished_.size() <= kMaxCursorRanges;
      if (stopped && answer_.records.empty() && !saves_positions) return over_budget;
      if (saves_positions) {
        next.stateful = true;
        next.pending_chunks.assign(chunks.begin(), chunks.end());
        for (size_t i = 0; i < sources_.size(); ++i) {
          next.ranges.push_back(Cursor::Range{sources_[i].table, sources_[i].prefix, head_keys_[i]});
        }
        next.ranges.insert(next.ranges.end(), finished_.begin(), finished_.end());
      }
      answer_.next_cursor = EncodeCursor(QueryFingerprint(q_), next);
      if (stopped) answer_.stopped_early = stats_.budget_exhausted;
    }
    return Status::Ok();
  }

  // The every-stream plan has read scan_switch_after_chunks chunks without
  // filling its page, and read more than half the chunks it met (no token
  // filter prunes them): the rest of the page comes from the main-table
  // scan, which reads sequentially. What the page returned stays; the scan
  // returns the records after it (as from a cursor at its last record).
  // Over a budget (or max_scan_records) the scan cannot stop part-way: its
  // records are dropped, the index plan's are put back, and the caller ends
  // the page as the index plan's, stopped early with saved positions.
  Status SwitchToMainScan() {
    std::vector<Pending> merged = std::move(pending_);
    pending_.clear();
    const std::optional<Cursor> cursor = cursor_;
    if (have_last_) {
      if (!cursor_) cursor_.emplace();
      cursor_->last = last_;
      cursor_->same = same_;
    }
    const std::string plan = stats_.plan;
    Status s = RunScan();
    cursor_ = cursor;
    if (s.code() == Errc::kResourceExhausted) {
      pending_ = std::move(merged);
      stats_.plan = plan + "; the main table over its budget";
    } else {
      stats_.plan = plan + "; then main table, full scan";
    }
    return s;
  }

  // The main-table scan (a scan=true query over more than
  // max_scan_index_ranges streams): every main row, every filter applied to
  // records, then sorted.
  Status RunScan() {
    ScanSpec range{std::string(kMainTable), "", "", false, 0};
    const uint64_t examined_before = store_.counters().rows_examined, rows_before = stats_.rows_scanned;
    Status failed;
    RowVisitor visit = [&](std::string_view k, std::string_view v) {
      ++stats_.rows_scanned;
      auto key = MainKey::Decode(k);
      if (!key) return true;
      if (!sevs_.empty() && !sevs_.count(key->severity)) return true;
      failed = CheckBudget();
      if (!failed.ok()) return false;
      if (key->first_ts_ms >= q_.to_ms || key->first_ts_ms < SaturatingSub(q_.from_ms, max_span_ms_)) {
        return true;
      }
      // A merged chunk and its parts share (salt, app, severity), and it
      // comes first but for parts that start with it: what an earlier
      // group superseded or collected is done with.
      const auto group = std::make_tuple(key->salt, key->app, key->severity, key->first_ts_ms);
      if (!scan_group_ || std::get<0>(*scan_group_) != key->salt || std::get<1>(*scan_group_) != key->app ||
          std::get<2>(*scan_group_) != key->severity) {
        superseded_.clear();
        collected_.clear();
      }
      if (volume_ && scan_group_ != group) added_.clear();
      scan_group_ = group;
      failed = Collect(*key, v);
      if (failed.ok() && !volume_ && pending_.size() > options_.max_scan_records) {
        stats_.budget_exhausted = "scan_records";
        failed = Status(Errc::kResourceExhausted, "the scan matched over " + std::to_string(options_.max_scan_records) +
                                                      " records; narrow the time range or add filters");
      }
      return failed.ok();
    };
    stats_.plan = "main table, full scan";
    Status s = store_.Scan(range, visit);
    stats_.seeks += store_.counters().rows_examined - examined_before - (stats_.rows_scanned - rows_before);
    if (!failed.ok()) return failed;
    if (!s.ok()) return s;
    if (volume_) return Status::Ok();
    Emit(INT64_MIN);
    if (answer_.records.size() >= q_.limit && !pending_.empty()) {
      Cursor next;
      next.last = last_;
      next.same = same_;
      next.epoch = epoch_;
      answer_.next_cursor = EncodeCursor(QueryFingerprint(q_), next);
    }
    return Status::Ok();
  }

  struct Pending {
    Pos pos;
    MainKey key;
    ResultRecord record;
    bool operator<(const Pending& o) const { return pos < o.pos; }
  };

  TableStore& store_;
  const QueryOptions& options_;
  const Query& q_;
  QueryAnswer& answer_;
  QueryStats& stats_;
  const Clock& clock_;
  const int64_t start_ns_;
  const uint64_t epoch_;
  const int64_t max_span_ms_;  // the padding: QueryOptions::max_chunk_span_ms, or longest_span_ms() when longer
  std::set<Severity> sevs_;
  TextMatcher text_;  // q_.text, compiled by Validate()
  TokenProbe token_probe_;  // what a chunk's token filter must hold (empty: use none)
  uint64_t budget_bytes_base_ = 0;  // bytes decompressed not charged to the budget (a cursor's open chunks)
  std::optional<AppId> app_;  // the query's, if it names one
  std::optional<HostId> host_;
  std::optional<Cursor> cursor_;
  bool main_scan_ = false;  // Plan() chose the main-table scan (RunScan)
  bool every_stream_ = false;  // Plan() chose every stream's severity index (scan=true, no app or host)
  std::vector<Source> sources_;
  std::vector<Cursor::Range> finished_;  // ranges an earlier page exhausted
  std::vector<Candidate> heads_;
  std::vector<std::string> head_keys_;  // raw key of each source's head; empty when exhausted
  std::map<std::string, std::optional<std::string>> read_ahead_;  // main rows read ahead (batched gets)
  size_t ahead_batch_ = 8;  // rows the next ReadAhead reads
  uint64_t ahead_bytes_ = 0, ahead_rows_ = 0;  // main rows read ahead so far: their mean size bounds a batch
  std::vector<Pending> pending_;  // a max-heap by pos
  Pos last_;
  // Records returned with last_'s Pos::Stable() (Cursor::same), whether
  // last_ is set (this page's, or the cursor's), and how many records equal
  // to the cursor's last are still to skip (Cursor::merged_since).
  uint32_t same_ = 0;
  bool have_last_ = false;
  uint32_t skip_same_ = 0;
  std::set<ChunkId> returned_;
  // The parts that merged chunks read so far list (MainRow.parts), as
  // ChunkId values: where a merge's writes do not land at once (HBase), a
  // part may be found beside its merged chunk. A part met after it is
  // skipped; one collected before it has its records dropped. In the
  // newest-end-first merge only a part that ends with its merged chunk can
  // come first (a merged chunk's header spans its parts': a tie of index
  // times); in the main-table scan only one that starts with it. Parts are
  // in their merged chunk's stream.
  std::unordered_set<ChunkName, ChunkNameHash> superseded_;
  // Run(): chunks with records in pending_.
  std::unordered_set<ChunkName, ChunkNameHash> collected_;

  // Volume(): what counted chunks added, while a merged chunk read later may
  // still list them: in CountSources, those ending at tie_ts_ (no chunk read
  // later can list a chunk that ends after it); in RunScan, those starting at
  // scan_group_ (in the main table's order a merged chunk, which starts with
  // its earliest part, comes before the others).
  struct Added {
    ChunkName chunk;
    size_t bucket;
    size_t severity;  // VolumeSeverityIndex
    uint64_t n;
    uint64_t inexact;  // of n, counted into VolumeAnswer::inexact_records
    bool returned;     // the chunk's first entry (it counted in chunks_returned)
  };
  std::vector<Added> added_;
  int64_t tie_ts_ = INT64_MAX;
  std::optional<std::tuple<uint8_t, AppId, Severity, int64_t>> scan_group_;
  std::string scratch_;
  RecordViews views_;        // the chunk being collected, read in place (in scratch_ or its row)
  std::string hash_buffer_;  // ContentHash's
  // Volume(): where counts go (null for Run()), the bucket grid, and whether
  // counts come from index rows alone.
  VolumeAnswer* volume_ = nullptr;
  int64_t step_ = 1;
  int64_t origin_ = 0;
  bool index_counts_ = false;
};

}  // namespace

size_t VolumeSeverityIndex(Severity s) {
  for (size_t i = 0; i < kAllSeverities.size(); ++i) {
    if (kAllSeverities[i] == s) return i;
  }
  LOGDEX_CHECK(false && "not a severity");
  return 0;
}

std::optional<uint64_t> VolumeBucketCount(int64_t from_ms, int64_t to_ms, int64_t step_ms) {
  if (step_ms < 1 || to_ms <= from_ms) return std::nullopt;
  std::optional<int64_t> origin = VolumeGridStart(from_ms, step_ms);
  int64_t span = 0;
  if (!origin || __builtin_sub_overflow(to_ms - 1, *origin, &span)) return std::nullopt;
  return static_cast<uint64_t>(span / step_ms) + 1;
}

int64_t DefaultVolumeStep(int64_t from_ms, int64_t to_ms) {
  constexpr int64_t kSecond = 1000, kMinute = 60 * kSecond, kHour = 60 * kMinute, kDay = 24 * kHour;
  static constexpr int64_t kUnits[] = {1,           10,          100,         kSecond,      5 * kSecond, 10 * kSecond,
                                       30 * kSecond, kMinute,     5 * kMinute, 10 * kMinute, 30 * kMinute, kHour,
                                       3 * kHour,   6 * kHour,   12 * kHour,  kDay};
  int64_t span = 0;
  if (to_ms <= from_ms || __builtin_sub_overflow(to_ms, from_ms, &span)) return kDay;
  // Floored: since=1h is 3,600,001 ms (to = now + 1) and should still get 1 m buckets.
  const int64_t want = std::max<int64_t>(1, span / 60);
  for (int64_t unit : kUnits) {
    if (unit >= want) return unit;
  }
  return (want + kDay - 1) / kDay * kDay;
}

namespace {

// Whether a run should be run again because a compactor's writes raced
// it (indexer/store_epoch.h). At most kMaxRuns runs.
//   - One process's store (RocksDB): the run found index rows without their
//     main row (the rows it missed are in a merged chunk its snapshot
//     predates), or it depended on its cursor's layout, and the epoch moved
//     or was odd.
//   - A shared store (HBase, no snapshots): the run depended on its cursor's
//     layout, or lasted `recheck_after_ms`, and the epoch, read again now,
//     moved or was odd. Index rows without a main row are routine there
//     (ingest writes the main row last) and harmless while a merge's parts
//     stay (its removal delay), so they are no reason.
// `now`: the epoch read again, when it was (the next run's `before`).
constexpr int kMaxRuns = 3;
bool MergeRaced(StoreEpoch* epoch, uint64_t before, const QueryStats& stats, bool layout_dependent,
                int64_t elapsed_ms, int64_t recheck_after_ms, std::optional<uint64_t>& now) {
  if (!epoch) return false;
  if (epoch->shared()) {
    recheck_after_ms = epoch->RecheckAfterMs(recheck_after_ms);
    if (!layout_dependent && (recheck_after_ms <= 0 || elapsed_ms < recheck_after_ms)) return false;
  } else if (stats.index_rows_without_main == 0 && !layout_dependent) {
    return false;
  }
  now = epoch->Now();
  return before % 2 == 1 || !now || *now != before;
}

// The epoch a run starts from: the one read after the run before (nullopt:
// that read failed), or the one held. Unknown: odd, so that a cursor resumes
// by record and a page does not stop empty.
constexpr uint64_t kUnknownEpoch = ~uint64_t{0};
uint64_t EpochBefore(StoreEpoch* epoch, int run, const std::optional<uint64_t>& read_after_last) {
  if (!epoch) return 0;
  if (run > 1) return read_after_last.value_or(kUnknownEpoch);
  return epoch->Held().value_or(kUnknownEpoch);
}

}  // namespace

Result<VolumeAnswer> QueryEngine::Volume(const VolumeQuery& query, QueryStats* stats) const {
  const Clock& clock = options_.clock ? *options_.clock : SystemClock::Instance();
  std::optional<uint64_t> now;
  for (int run = 1;; ++run) {
    const uint64_t before = EpochBefore(options_.store_epoch, run, now);
    const int64_t start_ns = clock.MonotonicNs();
    QueryAnswer unused;
    VolumeAnswer answer;
    auto view = store_.SnapshotView();
    Execution exec(view ? *view : store_, options_, query.filter, unused, before);
    Status s = exec.RunVolume(query, answer);
    answer.stats = unused.stats;
    answer.stats.runs = static_cast<uint64_t>(run);
    if (s.ok() && run < kMaxRuns &&
        MergeRaced(options_.store_epoch, before, answer.stats, false, (clock.MonotonicNs() - start_ns) / 1'000'000,
                   options_.recheck_after_ms, now)) {
      continue;
    }
    if (stats) *stats = answer.stats;
    if (!s.ok()) return s.error();
    return answer;
  }
}

Result<QueryAnswer> QueryEngine::Run(const Query& query, QueryStats* stats) const {
  const Clock& clock = options_.clock ? *options_.clock : SystemClock::Instance();
  std::optional<uint64_t> now;
  for (int run = 1;; ++run) {
    const uint64_t before = EpochBefore(options_.store_epoch, run, now);
    const int64_t start_ns = clock.MonotonicNs();
    QueryAnswer answer;
    auto view = store_.SnapshotView();
    Execution exec(view ? *view : store_, options_, query, answer, before);
    Status s = exec.Run();
    answer.stats.runs = static_cast<uint64_t>(run);
    if (s.ok() && run < kMaxRuns &&
        MergeRaced(options_.store_epoch, before, answer.stats, exec.layout_dependent(),
                   (clock.MonotonicNs() - start_ns) / 1'000'000, options_.recheck_after_ms, now)) {
      continue;
    }
    if (stats) *stats = answer.stats;
    if (!s.ok()) return s.error();
    return answer;
  }
}

namespace {

// Every name row of `kind` in meta: id -> name.
Result<std::map<uint64_t, std::string>> MetaNames(TableStore& store, MetaKind kind) {
  std::map<uint64_t, std::string> names;
  const std::string prefix(1, static_cast<char>(kind));
  Status s = store.Scan(ScanSpec{std::string(kMetaTable), prefix, PrefixSuccessor(prefix), false, 0},
                        [&](std::string_view k, std::string_view v) {
                          auto key = MetaKey::Decode(k);
                          if (key && key->kind == kind) names.emplace(key->id, std::string(v));
                          return true;
                        });
  if (!s.ok()) return s.error();
  return names;
}

}  // namespace

Result<std::vector<StreamInfo>> QueryEngine::Streams(int64_t from_ms, int64_t to_ms) const {
  auto apps = MetaNames(store_, MetaKind::kAppName);
  if (!apps.ok()) return apps.error();
  auto hosts = MetaNames(store_, MetaKind::kHostName);
  if (!hosts.ok()) return hosts.error();
  std::vector<StreamInfo> out;
  const std::string prefix(1, static_cast<char>(MetaKind::kStream));
  Status s = store_.Scan(ScanSpec{std::string(kMetaTable), prefix, PrefixSuccessor(prefix), false, 0},
                         [&](std::string_view k, std::string_view v) {
                           auto key = MetaKey::Decode(k);
                           if (!key || key->kind != MetaKind::kStream || v.size() != 16) return true;
                           const int64_t first = static_cast<int64_t>(GetBigEndian64(v.data()));
                           const int64_t last = static_cast<int64_t>(GetBigEndian64(v.data() + 8));
                           if (last < from_ms || first >= to_ms) return true;
                           auto app = apps->find(key->app);
                           auto host = hosts->find(key->id);
                           if (app == apps->end() || host == hosts->end()) return true;
                           out.push_back(StreamInfo{app->second, host->second, key->severity, first, last});
                           return true;
                         });
  if (!s.ok()) return s.error();
  std::sort(out.begin(), out.end(), [](const StreamInfo& a, const StreamInfo& b) {
    return std::tie(a.app, a.host, a.severity) < std::tie(b.app, b.host, b.severity);
  });
  return out;
}

Result<std::vector<std::string>> QueryEngine::TagKeys() const {
  auto keys = MetaNames(store_, MetaKind::kTagKeyName);
  if (!keys.ok()) return keys.error();
  std::vector<std::string> out;
  for (auto& [id, name] : *keys) out.push_back(std::move(name));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace logdex
