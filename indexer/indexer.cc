#include "indexer/indexer.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "common/bytes.h"
#include "common/clock.h"
#include "common/token_bloom.h"
#include "common/varint.h"
#include "indexer/merge_ledger.h"
#include "indexer/minute_counts.h"
#include "indexer/tables.h"

namespace logdex {
namespace {

// MainRow{chunk, source} is encoded from the chunk's bytes as received,
// without re-serializing the payload: field 2 (source), then field 1's tag
// and length, then the chunk's bytes (protobuf fields may come in any
// order), so that the chunk's bytes can end the value without being copied.
void AppendTagAndLength(std::string& out, uint8_t tag, uint64_t n) {
  out.push_back(static_cast<char>(tag));
  AppendVarint(out, n);
}

// The tags written below are MainRow's fields (wire type 2, length-delimited).
static_assert(proto::MainRow::kSourceFieldNumber == 2, "MainRowHead writes source as field 2 (tag 0x12)");
static_assert(proto::MainRow::kChunkFieldNumber == 1, "MainRowHead writes chunk as field 1 (tag 0x0a)");
static_assert(proto::MainRow::kPartsFieldNumber == 3, "MainRowHead writes parts as field 3, packed (tag 0x1a)");

// The main row value up to (not including) the chunk's bytes.
std::string MainRowHead(size_t chunk_size, const proto::ChunkSource& source, std::span<const uint64_t> parts) {
  std::string src = source.SerializeAsString();
  std::string out;
  out.reserve(src.size() + 16 + 8 * parts.size());
  AppendTagAndLength(out, 0x12, src.size());
  out.append(src);
  if (!parts.empty()) {  // packed fixed64: little-endian
    AppendTagAndLength(out, 0x1a, 8 * parts.size());
    for (uint64_t p : parts) {
      for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(p >> (8 * i)));
    }
  }
  AppendTagAndLength(out, 0x0a, chunk_size);
  return out;
}


IndexValue ValueOf(const StreamChunk& c) {
  return IndexValue{c.main_key, c.chunk->record_count(), c.has_token_filter, !c.parts.empty(),
                    !c.minute_counts.empty()};
}

class MainRowObserver final : public ChunkObserver {
 public:
  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    std::string head = MainRowHead(c.chunk_bytes.size(), *c.source, c.parts);
    // On a store without atomic batches, a main row is written after its
    // index rows (and removed before them): a chunk whose main row exists is
    // indexed, which is what a replay's "already stored" check relies on.
    batch.WriteLast(kMainTable);
    if (c.bytes_outlive_batch) {
      batch.PutBorrowing(kMainTable, c.main_key.Encode(), std::move(head), c.chunk_bytes);
    } else {
      head.append(c.chunk_bytes);
      batch.Put(kMainTable, c.main_key.Encode(), std::move(head));
    }
    return Status::Ok();
  }
};

class LevelIndexObserver final : public ChunkObserver {
 public:
  LevelIndexObserver() {
    for (Severity s : kAllSeverities) tables_[SeverityCode(s)] = LevelIndexTable(s);
  }
  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    LevelIndexKey k{c.app, c.chunk->last_ts_ms(), c.host, c.id};
    batch.Put(tables_[SeverityCode(c.severity)], k.Encode(), ValueOf(c).Encode());
    return Status::Ok();
  }

 private:
  std::map<uint8_t, std::string> tables_;
};

class HostIndexObserver final : public ChunkObserver {
 public:
  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    HostIndexKey k{c.host, c.app, c.chunk->last_ts_ms(), c.severity, c.id};
    batch.Put(kHostIndexTable, k.Encode(), ValueOf(c).Encode());
    return Status::Ok();
  }
};

class TagIndexObserver final : public ChunkObserver {
 public:
  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    const std::string value = ValueOf(c).Encode();
    for (const auto& [key, val] : c.tags) {
      TagIndexKey k{TagIdOf(key, val), c.chunk->last_ts_ms(), c.app, c.host, c.severity, c.id};
      batch.Put(kTagIndexTable, k.Encode(), value);
    }
    return Status::Ok();
  }
};

// Names of apps, hosts and tag keys, and the extent of each stream
// (host, app, severity) in whole minutes. Writes a row only when it changes,
// remembering what was written once the batch is known to be durable.
// A failed read of a stream's extent fails the chunk's staging (the batch is
// retried): taking it for "absent" would overwrite the stream's first-seen
// time, and host-only queries would then skip the stream's older data.
// What it remembers is bounded (kMaxKnown rows; then it starts afresh, and
// rows are read again on first use).
// On a store other members write too (TableStore::shared(), HBase), an
// extent is remembered for its batch only: another member may have widened
// it since (a partition that moved away and back), and writing back a stale
// extent widened by this chunk alone would narrow the stored one, hiding
// chunks from host-only and every-stream queries. Names never change and
// are remembered on every store. Two members may also widen one stream's
// extent in the same moment (line input whose message keys spread a stream
// over partitions): on a store with conditional writes (HBase's
// checkAndPut), a shared extent is widened at once with a put conditional
// on the value read, and read again when another member changed it first,
// so no member writes over another's widening. It goes out before the
// batch's rows, so an extent never lags the chunks it must cover. Each is
// a round trip of its own (not part of the batch's putMultiple), so a
// shared extent's end is widened to the next kSharedEndStep boundary: a
// live stream costs one such call per step, not one per minute, and a
// host-only query may read a stream up to one step after its last chunk
// (an empty range). Members of an older version still write extents
// unconditionally, within their batches: during a rolling upgrade they can
// overwrite a widening.
class MetaObserver final : public ChunkObserver {
 public:
  static constexpr size_t kMaxKnown = 100'000;
  // Conditional puts of one extent that lost to another member's, in a row,
  // before the chunk's staging fails (and its batch is retried).
  static constexpr int kMaxWidenAttempts = 16;
  static constexpr int64_t kSharedEndStep = 10 * 60'000;

  explicit MetaObserver(TableStore& store)
      : store_(store), shared_(store.shared()), conditional_(store.shared() && store.conditional_writes()) {}

  // A merged chunk holds records its stream's extent already covers, and
  // this indexer's cached extents would be stale beside serve's.
  bool ObservesMergedChunks() const override { return false; }

  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    if (Status s = Name(batch, MetaKey::AppName(c.app), c.chunk->app()); !s.ok()) return s;
    if (Status s = Name(batch, MetaKey::HostName(c.host), c.chunk->host()); !s.ok()) return s;
    for (const auto& [key, value] : c.tags) {
      if (Status s = Name(batch, MetaKey::TagKeyName(TagKeyIdOf(key)), key); !s.ok()) return s;
    }

    constexpr int64_t kMinute = 60'000;
    const int64_t first = c.chunk->first_ts_ms() / kMinute * kMinute;
    const int64_t last = (c.chunk->last_ts_ms() / kMinute + 1) * kMinute;
    std::string key = MetaKey::Stream(c.host, c.app, c.severity).Encode();
    auto extent = Extent(key);
    if (!extent.ok()) return extent.error();
    auto [lo, hi] = *extent;
    if (lo <= first && hi >= last) return Status::Ok();
    if (conditional_) return Widen(key, first, last);
    lo = std::min(lo, first);
    hi = std::max(hi, last);
    pending_[key] = EncodeExtent(lo, hi);
    batch.Put(kMetaTable, key, pending_[key]);
    return Status::Ok();
  }

  void Settle(bool written) override {
    if (written) {
      if (known_.size() + pending_.size() > kMaxKnown) known_.clear();
      for (auto& [k, v] : pending_) {
        if (!ForThisBatchOnly(k)) known_[k] = std::move(v);
      }
    }
    pending_.clear();
    absent_.clear();  // read ahead for this batch only
    batch_known_.clear();
  }

  static std::string EncodeExtent(int64_t first, int64_t last) {
    std::string v;
    AppendBigEndian64(v, static_cast<uint64_t>(first));
    AppendBigEndian64(v, static_cast<uint64_t>(last));
    return v;
  }

  // The rows of the chunks' names and streams that are neither staged nor
  // remembered, in one MultiGet. A mixed chunk's streams are known only once
  // it is split: Observe() reads those.
  void Prefetch(std::span<const ChunkToStage> chunks) override {
    std::vector<std::string> keys;
    std::unordered_set<std::string> listed;
    auto want = [&](std::string key) {
      if (pending_.contains(key) || known_.contains(key) || batch_known_.contains(key) || absent_.contains(key)) return;
      if (listed.insert(key).second) keys.push_back(std::move(key));
    };
    for (const ChunkToStage& c : chunks) {
      const AppId app = AppIdOf(c.chunk->app());
      const HostId host = HostIdOf(c.chunk->host());
      want(MetaKey::AppName(app).Encode());
      want(MetaKey::HostName(host).Encode());
      for (const proto::Tag& t : c.chunk->tag_summary().tags()) want(MetaKey::TagKeyName(TagKeyIdOf(t.key())).Encode());
      if (c.chunk->severity() == kMixedSeverity) continue;
      if (auto severity = SeverityFromCode(c.chunk->severity())) {
        want(MetaKey::Stream(host, app, *severity).Encode());
      }
    }
    if (keys.empty()) return;
    auto rows = store_.MultiGet(kMetaTable, keys);
    if (!rows.ok()) return;  // Observe() reads them one by one
    for (size_t i = 0; i < keys.size(); ++i) {
      if ((*rows)[i]) {
        CacheFor(keys[i])[keys[i]] = std::move(*(*rows)[i]);
      } else {
        absent_.insert(std::move(keys[i]));
      }
    }
  }

 private:
  // A name row is the same whoever writes it: an unreadable one is rewritten.
  Status Name(WriteBatch& batch, const MetaKey& meta, std::string_view name) {
    std::string key = meta.Encode();
    auto found = Lookup(key);
    if (found.ok() && *found) return Status::Ok();
    pending_[key] = std::string(name);
    batch.Put(kMetaTable, std::move(key), std::string(name));
    return Status::Ok();
  }

  // The value staged or written for `key` (null: absent), reading the store
  // on first use.
  Result<const std::string*> Lookup(const std::string& key) {
    if (auto it = pending_.find(key); it != pending_.end()) return &it->second;
    if (auto it = known_.find(key); it != known_.end()) return &it->second;
    if (auto it = batch_known_.find(key); it != batch_known_.end()) return &it->second;
    if (absent_.contains(key)) return static_cast<const std::string*>(nullptr);
    auto stored = store_.Get(kMetaTable, key);
    if (!stored.ok()) return stored.error();
    if (!stored->has_value()) return static_cast<const std::string*>(nullptr);
    std::string& slot = CacheFor(key)[key];
    slot = std::move(**stored);
    return &slot;
  }

  Result<std::pair<int64_t, int64_t>> Extent(const std::string& key) {
    auto v = Lookup(key);
    if (!v.ok()) {
      return Error{v.error().code, "reading the meta row of a stream: " + v.error().message};
    }
    return DecodeExtent(*v);
  }

  // The smallest multiple of `step` at or above `t` (t itself near INT64_MAX).
  static int64_t CeilToStep(int64_t t, int64_t step) {
    const int64_t floor = t / step * step - (t % step < 0 ? step : 0);
    return floor == t || floor > INT64_MAX - step ? t : floor + step;
  }

  // An absent or unreadable extent is empty: widening it writes the chunk's.
  static std::pair<int64_t, int64_t> DecodeExtent(const std::string* v) {
    if (!v || v->size() != 16) return {INT64_MAX, INT64_MIN};
    return {static_cast<int64_t>(GetBigEndian64(v->data())), static_cast<int64_t>(GetBigEndian64(v->data() + 8))};
  }

  // Widens a shared extent to cover [first, last) with puts conditional on
  // the value last read (see the class comment).
  Status Widen(const std::string& key, int64_t first, int64_t last) {
    for (int attempt = 0; attempt < kMaxWidenAttempts; ++attempt) {
      auto seen = Lookup(key);
      if (!seen.ok()) return Error{seen.error().code, "reading the meta row of a stream: " + seen.error().message};
      std::optional<std::string> expected;
      if (*seen) expected = **seen;
      auto [lo, hi] = DecodeExtent(*seen);
      if (lo <= first && hi >= last) return Status::Ok();
      const int64_t end = last > hi ? CeilToStep(last, kSharedEndStep) : hi;
      std::string wider = EncodeExtent(std::min(lo, first), end);
      auto wrote = store_.CheckAndPut(kMetaTable, key, expected, wider);
      if (!wrote.ok()) {
        return Error{wrote.error().code, "widening the meta row of a stream: " + wrote.error().message};
      }
      absent_.erase(key);
      if (*wrote) {
        batch_known_[key] = std::move(wider);
        return Status::Ok();
      }
      batch_known_.erase(key);  // another member's write came first: read it
    }
    return Error{Errc::kUnavailable, "the meta row of a stream changed under " + std::to_string(kMaxWidenAttempts) +
                                         " conditional writes in a row"};
  }

  // A stream's extent on a shared store (see the class comment).
  bool ForThisBatchOnly(const std::string& key) const {
    return shared_ && key.size() == MetaKey::kStreamSize && key[0] == static_cast<char>(MetaKind::kStream);
  }
  std::unordered_map<std::string, std::string>& CacheFor(const std::string& key) {
    return ForThisBatchOnly(key) ? batch_known_ : known_;
  }

  TableStore& store_;
  const bool shared_;
  const bool conditional_;  // shared extents are widened by CheckAndPut
  std::unordered_map<std::string, std::string> known_, pending_;
  std::unordered_map<std::string, std::string> batch_known_;  // read this batch, forgotten at Settle
  std::unordered_set<std::string> absent_;  // read ahead (Prefetch) and not in the store
};

struct Group {
  Severity severity;
  int64_t window;
  proto::RecordBatch records;
};

}  // namespace

std::string IndexValue::Encode() const {
  std::string v = main_key.Encode();
  char count[4] = {static_cast<char>(record_count >> 24), static_cast<char>(record_count >> 16),
                   static_cast<char>(record_count >> 8), static_cast<char>(record_count)};
  v.append(count, 4);
  const char flags =
      static_cast<char>((has_token_filter ? 1 : 0) | (lists_parts ? 2 : 0) | (has_minute_counts ? 4 : 0));
  if (flags != 0) v.push_back(flags);
  return v;
}

std::optional<IndexValue> IndexValue::Decode(std::string_view value) {
  if (value.size() != MainKey::kSize + 4 && value.size() != MainKey::kSize + 5) return std::nullopt;
  auto key = MainKey::Decode(value.substr(0, MainKey::kSize));
  if (!key) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(value.data() + MainKey::kSize);
  const uint8_t flags = value.size() > MainKey::kSize + 4 ? p[4] : 0;
  return IndexValue{*key, (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3],
                    (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0};
}

std::pair<uint64_t, uint64_t> StoredChunkPair(const proto::LogChunk& chunk, const proto::ChunkSource& source) {
  if (chunk.producer_id() != 0 || chunk.sequence() != 0) return {chunk.producer_id(), chunk.sequence()};
  return {Hash64(source.topic()) ^ static_cast<uint64_t>(source.partition()), static_cast<uint64_t>(source.offset())};
}

ChunkId StoredChunkId(const proto::LogChunk& chunk, const proto::ChunkSource& source) {
  const auto [a, b] = StoredChunkPair(chunk, source);
  return ChunkIdOf(a, b);
}

Indexer::Indexer(TableStore& store, IndexerOptions options)
    : store_(store), options_(std::move(options)), tag_guard_(options_.tags) {
  LOGDEX_CHECK(options_.max_chunk_span_ms > 0);
  observers_.push_back(std::make_unique<MainRowObserver>());
  observers_.push_back(std::make_unique<LevelIndexObserver>());
  observers_.push_back(std::make_unique<HostIndexObserver>());
  observers_.push_back(std::make_unique<TagIndexObserver>());
  observers_.push_back(std::make_unique<MetaObserver>(store_));
}

Indexer::~Indexer() = default;

void Indexer::AddObserver(std::unique_ptr<ChunkObserver> observer) { observers_.push_back(std::move(observer)); }

bool Indexer::ObserversWantRecords(Severity severity) const {
  for (const auto& o : observers_) {
    if (o->WantsRecords(severity)) return true;
  }
  return false;
}

void Indexer::Prefetch(std::span<const ChunkToStage> chunks) {
  if (chunks.empty() || !store_.batched_gets()) return;
  std::vector<ChunkToStage> marked(chunks.begin(), chunks.end());
  for (ChunkToStage& c : marked) {
    c.split = c.chunk->severity() == kMixedSeverity ||
              c.chunk->last_ts_ms() - c.chunk->first_ts_ms() >= options_.max_chunk_span_ms;
  }
  for (auto& o : observers_) o->Prefetch(marked);
}

void Indexer::Settle(bool written) {
  for (auto& o : observers_) o->Settle(written);
  if (gate_lock_.owns_lock()) gate_lock_.unlock();
}

Status Indexer::ObserveStream(const proto::LogChunk& chunk, std::string_view bytes,
                              const proto::ChunkSource& source, ChunkId id, const proto::RecordBatch* records,
                              WriteBatch& batch, bool index_only, bool bytes_outlive_batch, bool merged,
                              int64_t received_ms, std::span<const std::string_view> merged_messages,
                              std::span<const TagView> record_tags, uint64_t record_tags_past_cap,
                              std::span<const uint64_t> parts, std::string_view minute_counts) {
  StreamChunk c;
  c.chunk = &chunk;
  c.chunk_bytes = bytes;
  c.bytes_outlive_batch = bytes_outlive_batch;
  c.source = &source;
  c.severity = *SeverityFromCode(chunk.severity());
  c.app = AppIdOf(chunk.app());
  c.host = HostIdOf(chunk.host());
  c.id = id;
  c.main_key = MainKey{SaltOf(c.app, c.host, options_.salt_buckets), c.app, c.severity, chunk.first_ts_ms(), c.host, id};
  c.records = records;
  c.received_ms = received_ms;
  c.parts = parts;

  // No merge lands between here and the batch's write (MergeGate): not
  // between the ledger check and the write, nor, for a chunk too young to
  // check, while the batch waits past its original's settle.
  if (!index_only && !merged && options_.merge_gate && !gate_lock_.owns_lock()) {
    gate_lock_ = std::shared_lock(options_.merge_gate->mu);
  }
  // Before the tag guard: a re-send that is not stored uses none of its caps.
  if (!index_only && !merged && options_.merged_check_ms > 0 &&
      chunk.last_ts_ms() < options_.decode.clock->NowMs() - options_.merged_check_ms) {
    auto was = WasMerged(c.host, c.app, c.severity, chunk.last_ts_ms(), id, StoredChunkPair(chunk, source));
    if (!was.ok()) {
      ++counters_.store_read_failures;
      return Status(was.error());
    }
    ++counters_.merged_checks;
    if (*was) {
      ++counters_.merged_resends;
      return Status::Ok();
    }
  }
  std::vector<std::pair<std::string_view, std::string_view>> tags;
  if (chunk.has_tag_summary()) {
    for (const proto::Tag& t : chunk.tag_summary().tags()) tags.emplace_back(t.key(), t.value());
  } else {
    if (records) {
      for (const proto::LogRecord& r : records->records()) {
        const int n = std::min(r.tags_size(), kMaxIndexedTagsPerRecord);
        for (int i = 0; i < n; ++i) tags.emplace_back(r.tags(i).key(), r.tags(i).value());
        counters_.tags_over_record_cap += static_cast<uint64_t>(r.tags_size() - n);
      }
    } else {
      for (const TagView& t : record_tags) tags.emplace_back(t.key, t.value);
      counters_.tags_over_record_cap += record_tags_past_cap;
    }
    std::sort(tags.begin(), tags.end());
    tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  }
  for (const auto& tag : tags) {
    switch (tag_guard_.Check(tag.first, tag.second, chunk.first_ts_ms())) {
      case TagGuard::Verdict::kIndex: c.tags.push_back(tag); break;
      case TagGuard::Verdict::kDenied: ++counters_.tag_keys_denied; break;
      case TagGuard::Verdict::kOverCap: ++counters_.tag_values_over_cap; break;
      case TagGuard::Verdict::kKeyOverCap: ++counters_.tag_keys_over_cap; break;
    }
  }
  if (merged && !merged_messages.empty() && options_.token_filter_max_ratio > 0) {
    const int64_t start_ns = ThreadCpuNs();
    TokenBloomOptions bo;
    bo.max_bytes = static_cast<size_t>(static_cast<double>(bytes.size()) * options_.token_filter_max_ratio);
    const std::string key = c.main_key.Encode();
    bo.salt = static_cast<uint32_t>(Hash64(key));
    token_filter_.Start(bo);
    for (std::string_view m : merged_messages) token_filter_.AddMessage(m);
    if (auto filter = token_filter_.Finish()) {
      ++counters_.token_filters;
      counters_.token_filter_bytes += filter->size();
      batch.Put(kTokenTable, key, std::move(*filter));
      c.has_token_filter = true;
    } else {
      ++counters_.token_filters_skipped;
    }
    counters_.token_filter_cpu_ns += static_cast<uint64_t>(ThreadCpuNs() - start_ns);
  }
  if (merged && !minute_counts.empty()) {
    batch.Put(kMinuteCountsTable, c.main_key.Encode(), std::string(minute_counts));
    c.minute_counts = minute_counts;
  }
  ++counters_.stored_chunks;
  for (size_t i = index_only ? 1 : 0; i < observers_.size(); ++i) {
    if (merged && !observers_[i]->ObservesMergedChunks()) continue;
    if (Status s = observers_[i]->Observe(c, batch); !s.ok()) {
      ++counters_.store_read_failures;
      return s;
    }
  }
  return Status::Ok();
}

ChunkResult<StagedChunk> Indexer::Stage(ChunkRef ref, std::string_view chunk_bytes, const proto::ChunkSource& source,
                                        WriteBatch& batch, bool bytes_outlive_batch, int64_t received_ms) {
  const proto::LogChunk& chunk = ref.header;
  ++counters_.chunks;
  counters_.records += chunk.record_count();
  StagedChunk staged;
  staged.records = chunk.record_count();
  if (chunk.record_count() == 0) {  // ValidateChunk refuses it too; never store nothing silently
    return ChunkError{ChunkErrc::kCountMismatch, "record_count is 0 (unset?): a chunk holds at least one record"};
  }
  if (options_.retention_ms > 0 && chunk.last_ts_ms() < options_.decode.clock->NowMs() - options_.retention_ms) {
    counters_.past_retention_records += chunk.record_count();
    std::string stream = chunk.app() + "/" + chunk.host();
    if (past_retention_.size() >= 1000 && !past_retention_.contains(stream)) stream = "(other streams)";
    past_retention_[stream] += chunk.record_count();
  }

  const bool mixed = chunk.severity() == kMixedSeverity;
  const bool too_long = chunk.last_ts_ms() - chunk.first_ts_ms() >= options_.max_chunk_span_ms;
  const bool wanted = ObserversWantRecords(*SeverityFromCode(chunk.severity()));
  const bool need_records = mixed || too_long || !chunk.has_tag_summary() || wanted;
  const ChunkId id = StoredChunkId(chunk, source);

  if (!need_records) {
    const PayloadCheck check =
        options_.verify == IngestVerify::kSnappy ? PayloadCheck::kStream : PayloadCheck::kLengthHeader;
    if (auto ok = VerifyPayload(ref, options_.decode, check); !ok.ok()) return ok.error();
    if (options_.verify == IngestVerify::kFull) {
      // Every record against the header, without building the records.
      if (auto ok = VerifyRecords(ref, options_.decode, &verify_scratch_); !ok.ok()) return ok.error();
    }
    staged.store_failure =
        ObserveStream(chunk, chunk_bytes, source, id, nullptr, batch, false, bytes_outlive_batch, false, received_ms);
    staged.stored_chunks = 1;
    return staged;
  }
  if (!mixed && !too_long && !wanted) {
    // No tag summary (its producer left it out, or wrote none): the tags come
    // from the records, read in place, which checks them as UnpackRecords
    // would, whatever `verify` says.
    if (auto ok = ViewRecords(ref, options_.decode, verify_scratch_, view_scratch_); !ok.ok()) return ok.error();
    staged.decompressed = true;
    ++counters_.decompressed;
    record_tags_.clear();
    uint64_t past_cap = 0;
    for (const RecordView& r : view_scratch_.records) past_cap += AppendIndexedTags(view_scratch_.TagsOf(r), record_tags_);
    staged.store_failure = ObserveStream(chunk, chunk_bytes, source, id, nullptr, batch, false, bytes_outlive_batch,
                                         false, received_ms, {}, record_tags_, past_cap);
    staged.stored_chunks = 1;
    // Views of one huge chunk are not kept for the life of the indexer.
    constexpr size_t kKeepTags = 1 << 16;
    if (record_tags_.capacity() > kKeepTags || view_scratch_.tags.capacity() > kKeepTags ||
        view_scratch_.records.capacity() > kKeepTags) {
      record_tags_ = {};
      view_scratch_ = RecordViews();
    }
    return staged;
  }

  auto records = UnpackRecords(ref, options_.decode);
  if (!records.ok()) return records.error();
  staged.decompressed = true;
  ++counters_.decompressed;

  if (!mixed && !too_long) {
    staged.store_failure =
        ObserveStream(chunk, chunk_bytes, source, id, &*records, batch, false, bytes_outlive_batch, false, received_ms);
    staged.stored_chunks = 1;
    return staged;
  }

  // Split by (severity, time window); each group becomes a stored chunk. Mixed
  // severities come from other producers: ship and serve's line input make
  // one chunk per (app, host, severity).
  std::map<std::pair<uint8_t, int64_t>, proto::RecordBatch> groups;
  for (const proto::LogRecord& r : records->records()) {
    const int64_t window = too_long ? r.ts_ms() / options_.max_chunk_span_ms : 0;
    *groups[{static_cast<uint8_t>(r.severity()), window}].add_records() = r;
  }
  if (mixed) ++counters_.split_by_severity;
  if (too_long) ++counters_.split_by_time;
  for (auto& [group, part] : groups) {
    PackOptions po;
    po.codec = chunk.codec();  // a part keeps its producer's codec
    po.producer_id = chunk.producer_id();
    po.sequence = chunk.sequence();
    proto::LogChunk sub = PackChunk(chunk.app(), chunk.host(), part, po);
    const ChunkId sub_id = ChunkIdOf(id.value() ^ group.first, static_cast<uint64_t>(group.second));
    const std::string bytes = sub.SerializeAsString();
    if (Status s = ObserveStream(sub, bytes, source, sub_id, &part, batch, false, false, false, received_ms);
        !s.ok() && staged.store_failure.ok()) {
      staged.store_failure = s;
    }
    ++staged.stored_chunks;
  }
  return staged;
}

Result<bool> Indexer::WasMerged(HostId host, AppId app, Severity severity, int64_t last_ts_ms, ChunkId id,
                                std::pair<uint64_t, uint64_t> pair) {
  // The chunk merged into M holds M's records: M ends at or after it, and
  // less than max_span after M's first record, so before last + max_span.
  int64_t stop_ts = 0;
  if (__builtin_add_overflow(last_ts_ms, options_.merged_max_span_ms, &stop_ts)) stop_ts = INT64_MAX;
  bool found = false;
  Status s = store_.Scan(ScanSpec{std::string(kMergedTable), MergedKey{host, app, severity, last_ts_ms, ChunkId()}.Encode(),
                                  MergedKey{host, app, severity, stop_ts, ChunkId()}.Encode(), false, 0},
                         [&](std::string_view key, std::string_view parts) {
                           const auto k = MergedKey::Decode(key);
                           const auto holds = k ? LedgerHolds(k->format, parts, id, pair) : std::nullopt;
                           if (!holds) {
                             // Another build's, or damaged: the chunk may be stored twice, never lost.
                             ++counters_.unreadable_ledger_reads;
                             return true;
                           }
                           found = *holds;
                           return !found;
                         });
  if (!s.ok()) return s.error();
  return found;
}

Status Indexer::StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                            std::span<const std::string_view> messages, std::span<const TagView> record_tags,
                            const proto::ChunkSource& source, WriteBatch& batch, std::span<const uint64_t> parts,
                            std::string_view minute_counts) {
  return StageMerged(merged, bytes, id, nullptr, messages, record_tags, source, batch, parts, minute_counts);
}

Status Indexer::StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                            const proto::RecordBatch& records, const proto::ChunkSource& source, WriteBatch& batch) {
  std::vector<std::string_view> messages;
  std::vector<int64_t> times;
  for (const proto::LogRecord& r : records.records()) {
    messages.push_back(r.message());
    times.push_back(r.ts_ms());
  }
  std::sort(times.begin(), times.end());
  const std::string minute_counts = EncodeMinuteCounts(times);
  return StageMerged(merged, bytes, id, &records, messages, {}, source, batch, {}, minute_counts);
}

// Without a tag summary, a merged chunk is indexed by its records' tags
// (`records`, or else `record_tags`).
Status Indexer::StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                            const proto::RecordBatch* records, std::span<const std::string_view> messages,
                            std::span<const TagView> record_tags, const proto::ChunkSource& source,
                            WriteBatch& batch, std::span<const uint64_t> parts, std::string_view minute_counts) {
  if (!SeverityFromCode(merged.severity()) || merged.severity() == kMixedSeverity) {
    return Status(Errc::kInvalidArgument, "a merged chunk holds one severity");
  }
  ++counters_.chunks;
  counters_.records += merged.record_count();
  return ObserveStream(merged, bytes, source, id, records, batch, /*index_only=*/false,
                       /*bytes_outlive_batch=*/false, /*merged=*/true, /*received_ms=*/0, messages, record_tags,
                       /*record_tags_past_cap=*/0, parts, minute_counts);
}

void Indexer::StageRemoval(const proto::LogChunk& part, const MainKey& key, const proto::RecordBatch& records,
                           WriteBatch& batch) {
  RecordViews views;
  for (const proto::LogRecord& r : records.records()) {
    RecordView v;
    v.first_tag = static_cast<uint32_t>(views.tags.size());
    for (const proto::Tag& t : r.tags()) views.tags.push_back({t.key(), t.value()});
    v.tag_count = static_cast<uint32_t>(r.tags_size());
    views.records.push_back(v);
  }
  StageRemoval(part, key, views, batch);
}

void Indexer::StageRemoval(const proto::LogChunk& part, const MainKey& key, const RecordViews& records,
                           WriteBatch& batch, bool has_token_filter, WriteBatch* tag_rows,
                           bool has_minute_counts) {
  const int64_t last = part.last_ts_ms();
  batch.WriteLast(kMainTable);
  batch.Delete(kMainTable, key.Encode());
  WriteBatch& tag_batch = tag_rows ? *tag_rows : batch;
  if (has_token_filter) tag_batch.Delete(kTokenTable, key.Encode());  // a merged part's
  if (has_minute_counts) tag_batch.Delete(kMinuteCountsTable, key.Encode());  // likewise
  batch.Delete(LevelIndexTable(key.severity), LevelIndexKey{key.app, last, key.host, key.chunk}.Encode());
  batch.Delete(kHostIndexTable, HostIndexKey{key.host, key.app, last, key.severity, key.chunk}.Encode());
  std::vector<TagId> tags;
  for (const proto::Tag& t : part.tag_summary().tags()) tags.push_back(TagIdOf(t.key(), t.value()));
  for (const RecordView& r : records.records) {
    const std::span<const TagView> own = records.TagsOf(r);
    const size_t n = std::min<size_t>(own.size(), kMaxIndexedTagsPerRecord);
    for (size_t i = 0; i < n; ++i) tags.push_back(TagIdOf(own[i].key, own[i].value));
  }
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  for (TagId tag : tags) {
    tag_batch.Delete(kTagIndexTable, TagIndexKey{tag, last, key.app, key.host, key.severity, key.chunk}.Encode());
  }
}

Status Indexer::IngestSerialized(const std::vector<std::string>& chunks, const proto::ChunkSource& source) {
  WriteBatch batch;
  for (const std::string& bytes : chunks) {
    auto chunk = DecodeChunk(bytes, options_.decode);
    if (!chunk.ok()) {
      Settle(false);
      return Status(Errc::kCorruption, chunk.error().ToString());
    }
    auto staged = Stage(*chunk, bytes, source, batch, /*bytes_outlive_batch=*/true);
    if (!staged.ok()) {
      Settle(false);
      return Status(Errc::kCorruption, staged.error().ToString());
    }
    if (!staged->store_failure.ok()) {
      Settle(false);
      return staged->store_failure;
    }
  }
  Status s = store_.Write(batch);
  Settle(s.ok());
  return s;
}

Status Indexer::RebuildIndexes(TableStore& store, const IndexerOptions& options, uint64_t batch_rows) {
  Indexer indexer(store, options);
  WriteBatch batch;
  uint64_t rows = 0;
  Status failed;
  Status scan = store.Scan(ScanSpec{std::string(kMainTable), "", "", false, 0},
                           [&](std::string_view key, std::string_view value) {
                             proto::MainRow row;
                             auto main_key = MainKey::Decode(key);
                             if (!main_key || !row.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
                               failed = Status(Errc::kCorruption, "unreadable main row");
                               return false;
                             }
                             const proto::LogChunk& chunk = row.chunk();
                             std::optional<proto::RecordBatch> records;
                             if (!chunk.has_tag_summary()) {
                               auto r = UnpackRecords(chunk, options.decode);
                               if (!r.ok()) {
                                 failed = Status(Errc::kCorruption, r.error().ToString());
                                 return false;
                               }
                               records = std::move(*r);
                             }
                             const std::string bytes = chunk.SerializeAsString();
                             const std::vector<uint64_t> parts(row.parts().begin(), row.parts().end());
                             failed = indexer.ObserveStream(chunk, bytes, row.source(), main_key->chunk,
                                                            records ? &*records : nullptr, batch, /*index_only=*/true,
                                                            false, false, 0, {}, {}, 0, parts);
                             if (!failed.ok()) return false;
                             if (++rows % batch_rows == 0) {
                               failed = store.Write(batch);
                               indexer.Settle(failed.ok());
                               batch.Clear();
                               return failed.ok();
                             }
                             return true;
                           });
  if (!scan.ok()) return scan;
  if (!failed.ok()) return failed;
  Status s = store.Write(batch);
  indexer.Settle(s.ok());
  return s;
}

}  // namespace logdex
