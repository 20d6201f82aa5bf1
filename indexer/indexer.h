// The incremental indexer: derives every row of a chunk (main row, severity,
// host and tag index rows, meta rows) as the chunk arrives, through a chain of
// observers, into the caller's write batch. This replaces the old system's
// full-table index rebuilds (kept as a baseline: RebuildIndexes()).
//
// Per chunk, the indexer:
// - names it: chunk id = hash(producer id, sequence), or, for producers that
//   set neither, hash(topic, partition, offset); replays rewrite the same rows;
// - splits it when it must: by severity when its records mix severities, and
//   into time windows of `max_chunk_span_ms` when it spans more, so that every
//   stored chunk has one severity and a bounded span (sub-chunk ids derive
//   from the chunk id, so splitting is deterministic too);
// - builds the records only when it must: mixed severity, too long a span,
//   records an observer wants (alerting's severities); any other chunk
//   without a tag summary has its records read in place (ViewRecords) for
//   their tags; the others get VerifyRecords with IngestVerify::kFull (the default:
//   decompressed and every record checked in one pass over the wire bytes) or
//   VerifyPayload (the snappy length header, or with kSnappy the whole stream).
//
// Index rows are keyed by the chunk's LAST record time, so that a newest-first
// scan can emit records as soon as it passes their time (see query.h).
//
// Thread-safety: an Indexer is used by one thread at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/chunk_codec.h"
#include "common/ids.h"
#include "common/row_keys.h"
#include "common/severity.h"
#include "common/token_bloom.h"
#include "indexer/ingest_verify.h"
#include "indexer/tag_guard.h"
#include "store/table_store.h"

namespace logdex {

class MergeGate;  // below

struct IndexerOptions {
  // Salt buckets of the main table. Default 16. Must match the query side.
  uint32_t salt_buckets = kDefaultSaltBuckets;
  // Longest time span of a stored chunk; longer chunks are split. Default 60 s.
  // Must match the query side (it bounds how far a scan looks past a range).
  int64_t max_chunk_span_ms = 60'000;
  // Payload checks at ingest (a chunk that fails goes to the DLQ). Default
  // kFull: every chunk is decompressed and its records checked against its
  // header. With kHeader or kSnappy, a chunk whose signed payload disagrees
  // with its header (a hostile or broken producer) is stored, and queries
  // skip it and count it in corrupt_chunks and
  // logdex_query_corrupt_chunks_total (see ingest_verify.h).
  IngestVerify verify = IngestVerify::kFull;
  // The store's retention (TTL), ms: a chunk whose records are all older is
  // stored, but no query reaches it; its records are counted
  // (past_retention_records, TakePastRetention()). 0: not checked. Default 0.
  int64_t retention_ms = 0;
  TagGuardOptions tags;
  DecodeOptions decode;
  // With compaction (indexer/compactor.h): a stored chunk whose last record
  // is older than this (the compactor's settle time) may have been merged;
  // if the `merged` ledger lists it, it is a re-send (ship's journal or
  // backlog, a producer's retry) of records the store holds in a merged
  // chunk, and it is not stored again (counted in merged_resends).
  // 0: not checked. merged_max_span_ms: the compactor's max_span.
  int64_t merged_check_ms = 0;
  int64_t merged_max_span_ms = 0;
  // Shared with the compactor that merges into this store (see MergeGate);
  // null when none does in this process. Must outlive the indexer.
  MergeGate* merge_gate = nullptr;
  // The token filter of a merged chunk (common/token_bloom.h) may take at
  // most this share of the chunk's stored bytes; 0: none is written.
  double token_filter_max_ratio = 0.05;
};

// Orders ingest's merge-ledger checks (merged_check_ms) with the compactor's
// merges in one process (serve shares one between its consumer's Indexer and
// its Compactor): a batch holds it shared from its first chunk staged until
// it is settled (Settle, written or not), a merge holds it alone while it
// writes. Without it a re-send staged as "not merged" (checked, or too young
// to check) could be written after the merge of its original had landed and
// deleted it: its records twice.
class MergeGate {
 public:
  std::shared_mutex mu;
  // Merges waiting for a batch to settle.
  std::atomic<uint64_t> merges_waiting{0};
};

// One stored chunk (one stream: app, host, severity) as the observers see it.
struct StreamChunk {
  // Its header (the payload is in chunk_bytes; chunk->payload() may be empty).
  const proto::LogChunk* chunk = nullptr;
  std::string_view chunk_bytes;            // the whole chunk as received, payload included
  // `chunk_bytes` stay valid until the batch is written: a row may borrow them.
  bool bytes_outlive_batch = false;
  const proto::ChunkSource* source = nullptr;
  Severity severity = Severity::kInfo;
  AppId app;
  HostId host;
  ChunkId id;
  MainKey main_key;
  // Distinct tags of the chunk's records.
  std::vector<std::pair<std::string_view, std::string_view>> tags;
  // A token filter of the chunk is staged in `tok` (merged chunks).
  bool has_token_filter = false;
  // Its record counts per minute (indexer/minute_counts.h), staged in `cnt`
  // (merged chunks); empty otherwise.
  std::string_view minute_counts;
  // A merged chunk's parts, listed in its main row (MainRow.parts: pairs of
  // first record time and chunk id) when the compactor lists them; empty otherwise.
  std::span<const uint64_t> parts;
  // The chunk's records when they were built; otherwise null. They are when
  // an observer wants them (ChunkObserver::WantsRecords), when the chunk was
  // split, or when a chunk of mixed severity came without a tag summary;
  // never for the compactor's merged chunks (StageMerged). Other chunks
  // without a tag summary are read in place for their tags only.
  const proto::RecordBatch* records = nullptr;
  // When the chunk reached Kafka (its message's timestamp), 0 when unknown:
  // the start of the alerting path's latency.
  int64_t received_ms = 0;
};

// A decoded chunk about to be staged (Indexer::Prefetch).
struct ChunkToStage {
  const proto::LogChunk* chunk = nullptr;  // its header
  const proto::ChunkSource* source = nullptr;
  // Set by Indexer::Prefetch: the chunk will be split (mixed severities, or
  // a span of max_chunk_span_ms or more), so its parts are stored under ids
  // of their own, and a mixed one's streams are not known yet.
  bool split = false;
};

// One link of the chain: derives rows from a stream chunk.
class ChunkObserver {
 public:
  virtual ~ChunkObserver() = default;
  // An error is the store's (a read failed): the batch cannot be written as
  // it is and is retried; it never means the chunk is bad.
  virtual Status Observe(const StreamChunk& chunk, WriteBatch& batch) = 0;
  // The rows staged since the last call were written (true) or dropped.
  virtual void Settle(bool /*written*/) {}
  // Whether this observer needs the records of a stored chunk of `severity`
  // (StreamChunk::records): the indexer decompresses the chunks some observer
  // wants and no others it need not. The alert observer wants the severities
  // its rules take (server/ingest_adapters.h).
  virtual bool WantsRecords(Severity /*severity*/) const { return false; }
  // Whether this observer also sees the compactor's merged chunks
  // (Indexer::StageMerged): the meta rows and alerts of their records were
  // made when the records arrived. A merged chunk comes without its records
  // (StreamChunk::records is null).
  virtual bool ObservesMergedChunks() const { return true; }
  // Reads ahead, in one MultiGet per table, the rows Observe() will read to
  // stage `chunks` (a consumer batch, by their headers). Observe() reads
  // what this missed itself (the parts of a split chunk, the names of tag
  // keys first seen in a chunk without a tag summary), and what it could
  // not read: a failed read ahead is no error, Observe() then reads each
  // row and fails as it would have. Called only on a store with batched_gets().
  virtual void Prefetch(std::span<const ChunkToStage> /*chunks*/) {}
};

// The value of every index row: the main row key, the chunk's record count
// and, when a flag is set, a flags byte: bit 0, the chunk has a token
// filter in `tok` (a query reads `tok` only for those); bit 1, its main row
// lists the parts it merged (MainRow.parts: Volume() reads that list, so
// that parts found beside it are not counted twice, and where long chunks
// are read counts such a chunk from `cnt` or by reading it rather than
// from this row); bit 2, its record counts per minute are in `cnt`
// (indexer/minute_counts.h: Volume() counts it from them rather than read
// it). 38 or 39 bytes. Readers ignore the bits they do not know.
struct IndexValue {
  MainKey main_key;
  uint32_t record_count = 0;
  bool has_token_filter = false;
  bool lists_parts = false;
  bool has_minute_counts = false;
  std::string Encode() const;
  static std::optional<IndexValue> Decode(std::string_view value);
};

struct StagedChunk {
  uint32_t stored_chunks = 0;  // 1, or more when split
  uint32_t records = 0;
  bool decompressed = false;
  // Not OK when an observer could not read the store (a meta row): the
  // chunk is fine, but the batch holding it must not be written; retry it.
  Status store_failure;
};

// Monotonic counters since construction.
struct IndexerCounters {
  uint64_t chunks = 0;
  uint64_t stored_chunks = 0;
  uint64_t records = 0;
  uint64_t decompressed = 0;
  uint64_t split_by_severity = 0;
  uint64_t split_by_time = 0;
  uint64_t tag_values_over_cap = 0;  // a key's values per hour, or the guard's memory
  uint64_t tag_keys_denied = 0;
  uint64_t tag_keys_over_cap = 0;     // distinct keys per hour
  uint64_t tags_over_record_cap = 0;  // past a record's first kMaxIndexedTagsPerRecord
  uint64_t store_read_failures = 0;   // stagings failed by a store read (retried)
  uint64_t past_retention_records = 0;  // records of chunks wholly older than retention_ms
  // Chunks older than merged_check_ms checked against the ledger (a read each).
  uint64_t merged_checks = 0;
  uint64_t merged_resends = 0;  // stored chunks not written again: merged already (merged_check_ms)
  // Reads, for that check, of ledger rows whose key or value no format allows
  // (a row counts at each read): the chunk is checked against the others, and
  // stored if none lists it.
  uint64_t unreadable_ledger_reads = 0;
  uint64_t token_filters = 0;         // token filters written (merged chunks)
  uint64_t token_filter_bytes = 0;    // their bytes
  uint64_t token_filters_skipped = 0; // merged chunks too varied for a useful filter within the ratio
  uint64_t token_filter_cpu_ns = 0;   // CPU time tokenizing and building them (the compactor's thread)
};

class Indexer {
 public:
  // `store` must outlive the indexer and hold the tables of CreateTables().
  Indexer(TableStore& store, IndexerOptions options);
  ~Indexer();

  // Appends an observer to the chain (after the default ones).
  void AddObserver(std::unique_ptr<ChunkObserver> observer);

  // Derives every row of a decoded, validated chunk into `batch`.
  // `chunk_bytes` is the chunk as received (DecodeChunk's input), stored as is;
  // with `bytes_outlive_batch` the caller keeps them valid until `batch` is
  // written or discarded, and the main row borrows them instead of a copy.
  // `received_ms`: when the chunk reached Kafka (StreamChunk::received_ms).
  // Errors are the chunk's (its records fail validation on decompression);
  // on error nothing was added to `batch`.
  // `chunk` may be a ChunkView's (its payload where it was decoded from):
  // the observers see its header (StreamChunk::chunk).
  ChunkResult<StagedChunk> Stage(ChunkRef chunk, std::string_view chunk_bytes, const proto::ChunkSource& source,
                                 WriteBatch& batch, bool bytes_outlive_batch = false, int64_t received_ms = 0);
  ChunkResult<StagedChunk> Stage(const proto::LogChunk& chunk, std::string_view chunk_bytes,
                                 const proto::ChunkSource& source, WriteBatch& batch,
                                 bool bytes_outlive_batch = false, int64_t received_ms = 0) {
    return Stage(ChunkRef::Of(chunk), chunk_bytes, source, batch, bytes_outlive_batch, received_ms);
  }

  // Before staging a batch of chunks: on a store where a MultiGet is cheaper
  // than a Get per key (TableStore::batched_gets(); on HBase each Get is a
  // round trip), the observers read the rows they will need for all of them
  // at once (meta rows, alert_seen rows) instead of a Get per chunk. Only a
  // speed-up: Stage() gives the same rows, and the same errors, without it.
  void Prefetch(std::span<const ChunkToStage> chunks);
  // Tells the observers whether the batch holding everything staged since the
  // last call was written. Call after every Write() of a staged batch.
  void Settle(bool written);

  // The compactor's (indexer/compactor.h): every row of a merged chunk, with
  // its given id, never split, whatever its span; no meta rows (its records
  // are within its stream's extent already). `messages` are its records'
  // messages (its token filter's input). Its tags are those of its tag
  // summary or, when it has none, `record_tags`: its records' tags as
  // AppendIndexedTags gives them (repeats allowed). Observers see no records.
  // `parts`, when given, are listed in its main row (MainRow.parts: pairs
  // of first record time and chunk id). `minute_counts`, when given
  // (EncodeMinuteCounts of its records' times), go to `cnt`.
  Status StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                     std::span<const std::string_view> messages, std::span<const TagView> record_tags,
                     const proto::ChunkSource& source, WriteBatch& batch, std::span<const uint64_t> parts = {},
                     std::string_view minute_counts = {});
  // The same, of records built (tests): a chunk without a tag summary is
  // indexed by its records' tags, and observers see the records.
  Status StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                     const proto::RecordBatch& records, const proto::ChunkSource& source, WriteBatch& batch);

  // The compactor's: deletes of every row a stored chunk may have (main row,
  // severity, host and tag index rows; not meta rows, which a merged chunk
  // of the same records keeps true). The tag rows deleted are those of its
  // tag summary and of its records' tags (a delete of an absent row is harmless).
  // Its `tok` row only when its index rows say it has one (`has_token_filter`,
  // IndexValue): most parts have none, and a delete is a memtable insert.
  // `tag_rows`, when given, takes the tag and token-filter rows' deletes: a
  // store without atomic writes lands them first, in a write of their own,
  // because a part's tags are read from its main row (removed in `batch`,
  // before its severity and host rows, which say whether it has a token
  // filter), so that a removal stopped anywhere leaves the rows that find
  // the rest of it.
  // Its `cnt` row likewise (`has_minute_counts`), with the token filter's.
  static void StageRemoval(const proto::LogChunk& part, const MainKey& key, const RecordViews& records,
                           WriteBatch& batch, bool has_token_filter = true, WriteBatch* tag_rows = nullptr,
                           bool has_minute_counts = true);
  // The same, of records built (tests).
  static void StageRemoval(const proto::LogChunk& part, const MainKey& key, const proto::RecordBatch& records,
                           WriteBatch& batch);

  // Stage + Write + Settle for a list of serialized chunks (tests, benchmarks).
  Status IngestSerialized(const std::vector<std::string>& chunks, const proto::ChunkSource& source);

  const IndexerCounters& counters() const { return counters_; }
  // Records past the retention by stream ("app/host") since the last call;
  // at most 1000 streams, the rest under "(other streams)".
  std::map<std::string, uint64_t> TakePastRetention() { return std::exchange(past_retention_, {}); }
  const IndexerOptions& options() const { return options_; }

  // The old system's way, kept as a baseline: derives every index and meta
  // row by a full scan of the main table, writing in batches of `batch_rows`.
  // Produces the same rows as the incremental path (for data under the tag cap).
  static Status RebuildIndexes(TableStore& store, const IndexerOptions& options, uint64_t batch_rows = 1000);

 private:
  // Whether the `merged` ledger lists stored chunk `id` of the stream.
  // `pair`: the chunk's StoredChunkPair (it speeds the check when it makes `id`).
  Result<bool> WasMerged(HostId host, AppId app, Severity severity, int64_t last_ts_ms, ChunkId id,
                         std::pair<uint64_t, uint64_t> pair);
  Status ObserveStream(const proto::LogChunk& chunk, std::string_view bytes, const proto::ChunkSource& source,
                       ChunkId id, const proto::RecordBatch* records, WriteBatch& batch, bool index_only,
                       bool bytes_outlive_batch = false, bool merged = false, int64_t received_ms = 0,
                       std::span<const std::string_view> merged_messages = {},
                       std::span<const TagView> record_tags = {}, uint64_t record_tags_past_cap = 0,
                       std::span<const uint64_t> parts = {}, std::string_view minute_counts = {});
  Status StageMerged(const proto::LogChunk& merged, std::string_view bytes, ChunkId id,
                     const proto::RecordBatch* records, std::span<const std::string_view> messages,
                     std::span<const TagView> record_tags, const proto::ChunkSource& source, WriteBatch& batch,
                     std::span<const uint64_t> parts, std::string_view minute_counts);
  // Whether some observer wants the records of a chunk of `severity`.
  bool ObserversWantRecords(Severity severity) const;

  TableStore& store_;
  IndexerOptions options_;
  TagGuard tag_guard_;
  std::vector<std::unique_ptr<ChunkObserver>> observers_;
  IndexerCounters counters_;
  std::map<std::string, uint64_t> past_retention_;
  std::string verify_scratch_;  // decompressed bytes of the chunk being verified
  RecordViews view_scratch_;    // the records of a chunk without a tag summary, read in place
  std::vector<TagView> record_tags_;  // their tags (AppendIndexedTags)
  TokenBloomBuilder token_filter_;  // a merged chunk's (reused: its buffers stay allocated)
  std::shared_lock<std::shared_mutex> gate_lock_;  // on options_.merge_gate, from a batch's first Stage to Settle
};

// Appends the tags of one record that the index holds, its first
// kMaxIndexedTagsPerRecord (what a tag summary holds), to `out`; returns how
// many it has past them (IndexerCounters::tags_over_record_cap).
inline uint64_t AppendIndexedTags(std::span<const TagView> record_tags, std::vector<TagView>& out) {
  const size_t n = std::min<size_t>(record_tags.size(), kMaxIndexedTagsPerRecord);
  out.insert(out.end(), record_tags.begin(), record_tags.begin() + static_cast<std::ptrdiff_t>(n));
  return record_tags.size() - n;
}

// The id of a stored chunk: ChunkIdOf(producer id, sequence), or of the Kafka
// source (topic hash ^ partition, offset) when the producer set neither. A
// chunk split at ingest has ids of its own (ChunkIdOf(id ^ severity, window)).
ChunkId StoredChunkId(const proto::LogChunk& chunk, const proto::ChunkSource& source);
// The pair StoredChunkId hashes.
std::pair<uint64_t, uint64_t> StoredChunkPair(const proto::LogChunk& chunk, const proto::ChunkSource& source);

}  // namespace logdex
