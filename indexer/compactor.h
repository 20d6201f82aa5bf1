// The compactor: merges a stream's consecutive small stored chunks into
// chunks of a target size, so that a stream that logs slowly ends up with
// one row per few thousand records instead of one per second (issue 16).
//
// A pass (Pass()) looks at every stream (host, app, severity: the meta table's
// stream rows) over [now - lookback, now - settle) (a deep pass, the first
// and one every deep_interval_ms, over [0, now - settle)), reads its host index rows
// in time order (index rows only: no main row is read to plan), and cuts them
// into runs of consecutive chunks, each chunk below target_records:
//   - a run grows while its records stay within target_records and its span
//     (first record of its oldest chunk to last record of its newest) stays
//     below max_span_ms;
//   - a run is merged when it is closed: the next chunk did not fit, or no
//     chunk yet to settle could join it (now - settle - its first record >=
//     max_span_ms). An open run waits, so a record is rewritten about once,
//     not at every pass; a merged chunk is closed, and no later pass rewrites
//     it unless late records of its time arrive;
//   - late records (a lagging shipper, a consumer catching up, a backfill)
//     break "no chunk yet to settle could join it": chunks keep arriving
//     into a run the clock says is closed, and each pass would merge the
//     last pass's merged chunk with the few parts that came since, rewriting
//     a stream's records once a pass (11 times each in bench/peers' real-time
//     run). So a stream's run closed by the clock alone is merged at its
//     first sight (a stream that is not late merges as soon as the clock
//     closes its run), and after that only once the previous pass saw it
//     with the same parts and the stream's last such merge is `settle` old;
//     meanwhile it waits (CompactionPass::runs_growing) until its chunks
//     stop coming or it closes by size or span;
//   - a run is cut further so that a merged chunk holds at most target_bytes
//     uncompressed.
// A merge reads the parts' main rows, reads their records in place
// (ViewRecords), sorts them by (time, part id, index in part), writes each
// record's stored bytes into the merged chunk (ChunkWriter; codec,
// zstd_level) and writes,
// in ONE atomic batch, the merged chunk's rows (Indexer::StageMerged) and the
// deletes of every row of its parts (Indexer::StageRemoval). So:
//   - a crash loses nothing and duplicates nothing: the batch landed or not;
//   - the merged chunk's id derives from its parts' ids: a pass repeated over
//     the same parts rewrites the same rows;
//   - a query sees the parts or the merged chunk, never both, per index
//     iterator; a query that found a part's main row gone mid-query (its
//     index iterator predates the batch) is run again (QueryOptions::
//     store_epoch, bumped around every batch), and a cursor from before a
//     merge resumes without its saved positions.
// Stores whose writes are not atomic (HBase) are refused: Create() fails
// (unless allow_non_atomic, below; several members then take turns by
// the compaction lease, CompactorOptions::lease, and the store's epoch is
// the lease row's: indexer/store_epoch.h).
//
// Replays: a part whose Kafka source is not yet committed could be written
// again by a replay after the merge, and its records would then be stored
// twice; options.replay_safe says whether a source is past its partition's
// committed offset (serve asks the consumer), and a run with a part that is
// not waits for a later pass. A part without a Kafka topic counts as safe.
//
// A chunk found to hold target_bytes / 2 or more (a part read, or a merged
// chunk written) is remembered (in memory, up to 1 M chunks) and planned like
// one of target_records: a run it would end no longer makes every pass read
// it again to find that nothing fits.
//
// Cost: a pass stops after max_pass_bytes of parts read (uncompressed) and
// reports the closed runs it left (CompactionPass::runs_left, lag_ms); the
// caller paces passes (serve: compaction.interval, compaction.max_rate).
//
// Query padding: a query's index ranges reach max_chunk_span_ms past its
// end, so that a chunk that ends later but starts within the range is found.
// That padding must cover the longest chunk ever written: serve keeps the
// longest span of a store in its meta table (RecordLongestSpan) and pads by
// it, so that lowering compaction.max_span, or turning compaction off, never
// hides chunks merged before; on a store other members write, it reads the
// row again every minute (LongestSpanWatch).
//
// Thread-safety: one thread at a time calls Pass().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/result.h"
#include "indexer/indexer.h"
#include "store/table_store.h"

namespace logdex {

class CompactionLease;

// The meta row holding the longest chunk span a store may hold (8 bytes, big-endian ms).
inline constexpr std::string_view kLongestSpanRow = "\xff" "store.longest_chunk_span_ms";

// Raises the store's longest span to `span_ms` when it is below, and returns
// the store's (the larger of the two). On a shared store with conditional
// writes (HBase), members raising it at once keep the largest: the put is
// conditional on the value read, and read again when it lost.
Result<int64_t> RecordLongestSpan(TableStore& store, int64_t span_ms);
// The store's longest span as recorded; nullopt when none is.
Result<std::optional<int64_t>> StoredLongestSpan(TableStore& store);

// The longest span as a query pads by it, kept current on a store other
// processes write (HBase): a member started later with a longer
// indexer.max_chunk_span raises the row, and the
// members already running must then pad by it too, or their queries miss
// the newer member's longer chunks. Get() reads the row again once
// `every_ms` has passed since the last read (one Get, made by the query
// that finds the value stale; queries meanwhile use the value held), and
// never answers less than before. So queries started more than `every_ms`
// after another member raised the row pad by it, unless a re-read failed
// (a cursor made before keeps the ranges it planned). A failed read
// keeps the value held, is passed to `on_failure` (serve logs and counts
// it) and is tried again `every_ms` later. On a store only this process
// writes (RocksDB), the row is never read again. Thread-safe.
class LongestSpanWatch {
 public:
  LongestSpanWatch(TableStore& store, int64_t span_ms, const Clock& clock, int64_t every_ms,
                   std::function<void(const Error&)> on_failure);
  int64_t Get();

 private:
  TableStore& store_;
  const Clock& clock_;
  const int64_t every_ns_;
  const std::function<void(const Error&)> on_failure_;
  std::atomic<int64_t> span_ms_;
  std::atomic<int64_t> next_read_ns_;
  std::mutex reading_;  // one read at a time; the other callers use the value held
};

// The meta row holding the shortest settle a compactor of the store ever
// used (8 bytes, big-endian ms).
inline constexpr std::string_view kShortestSettleRow = "\xff" "store.shortest_compaction_settle_ms";

// How old a chunk must be for ingest to look it up in the merge ledger
// (IndexerOptions::merged_check_ms; 0: none is): a chunk younger than every
// settle a compactor of the store used was never merged. `settle_ms`: this
// process's compactor's settle (nullopt: it does not compact), recorded
// first when it is the shortest. So turning compaction off, or raising its
// settle, keeps a re-send of a merged part from being stored beside its
// merged chunk. The shortest settle only goes down: after a run with a short
// one, older chunks are looked up for good (a range read of the ledger
// each). A store without a settle row whose ledger has rows was compacted
// before the row existed: every chunk is looked up (1). The settle is
// recorded as RecordLongestSpan records the span (the smallest is kept).
Result<int64_t> MergedCheckMs(TableStore& store, std::optional<int64_t> settle_ms);

struct CompactorOptions {
  // A chunk is left alone until its last record is this old. Default 10 min.
  int64_t settle_ms = 10 * 60'000;
  // Longest span of a merged chunk. Queries look this far past a range's end
  // (QueryOptions::max_chunk_span_ms must be at least this). Default 3 h.
  int64_t max_span_ms = 3 * 3600'000;
  // Records and uncompressed bytes of a merged chunk, at most. Chunks with
  // target_records records or more are left as they are.
  uint32_t target_records = 8192;
  uint64_t target_bytes = 4ull << 20;
  // How far back a pass looks for small chunks. Default 1 day.
  int64_t lookback_ms = 24 * 3600'000;
  // The first pass, and then a pass every this often (by the passes'
  // now_ms), look back to each stream's oldest record (its meta row), not
  // lookback_ms: chunks written with older times (old files shipped, a
  // consumer catching up after more than lookback) merge too, a deep
  // interval after their write at most. Such a deep pass reads every host
  // index row of the store. One stopped before its end (RequestStop, the
  // lease) or that leaves runs older than the lookback unmerged for want of
  // budget (max_pass_bytes) makes the next pass deep too; one a store error
  // ended does not (the next is due an interval later). 0: never. Default 1 h.
  // Never with allow_non_atomic (HBase): a merge there restarts its rows'
  // TTL, so merging chunks written up to a TTL ago would keep their records
  // up to twice the retention, and their parts would be removed only by the
  // next pass over their time.
  int64_t deep_interval_ms = 3600'000;
  // Uncompressed bytes of parts one pass merges at most; the rest waits.
  uint64_t max_pass_bytes = 256ull << 20;
  // The merged chunks' codec. By columns (common/record_columns.h) by
  // default: 16-20 % smaller than plain zstd at the same level on Loghub
  // text; builds before it cannot read such chunks (compaction.columns).
  proto::Codec codec = proto::CODEC_ZSTD_COLUMNS;
  int zstd_level = 3;
  // List the parts' ids in the merged chunk's main row (MainRow.parts), 8
  // bytes each: where a merge's writes do not land at once (HBase), queries
  // then skip a part found beside its merged chunk. A RocksDB merge is one
  // atomic batch, so off by default (tests turn it on to check the queries).
  bool list_parts = false;
  // Merge on a store whose writes are not atomic (HBase): a merge writes
  // the merged chunk's rows and its ledger row, then removes its parts (their
  // tag and token-filter rows, then their main rows, then the rest: a stopped removal leaves
  // what finds and names the rest), and lists them (list_parts on), so that
  // a query finding both skips the parts. A merge stopped between or inside its writes is
  // finished by a later pass, which first removes the still-stored parts a
  // merged chunk lists (CompactionPass::repaired_parts; a merged chunk is
  // read for this only when a row that could be its part is there, and
  // trusted only when its records read); one stopped before the merged
  // main row is written (it goes last) loses its index rows and is done
  // again whole, under the same key.
  // Two compactors on one store need the lease (below) so that they never
  // merge one stream at once: Create refuses a shared() store without one.
  // Serve sets it on HBase with compaction.hbase.
  bool allow_non_atomic = false;
  // (allow_non_atomic) A merge's parts are removed by a pass at least this
  // long after the merged chunk was written (on the passes' now_ms), not at
  // once. A store without snapshots (HBase) lets a query whose index scan
  // passed the merged chunk's position before it landed read the parts
  // instead, and they must still be there: set it to the longest a query
  // runs (query.max_time) plus a margin. Meanwhile queries find both and
  // skip the parts (CompactionPass::removals_waiting counts them). With a
  // lease, a member removes nothing until it has held the lease this long:
  // it does not know when another member (or itself, before a restart)
  // wrote the merged chunks it finds. 0: at once. The delay must also have
  // passed on `clock`'s monotonic time, so that a step of the wall clock
  // forward (an NTP correction) does not cut it short.
  int64_t removal_delay_ms = 0;
  // The monotonic time of the removal delay and of a pass's writes; null:
  // SystemClock. Tests give the ManualClock their passes' now_ms follow.
  const Clock* clock = nullptr;
  // Whether a part's source can no longer be replayed (see above). Null: all.
  std::function<bool(const proto::ChunkSource&)> replay_safe;
  // Bumped (to odd) before and (to even) after every merge batch; queries
  // read it (QueryOptions::store_epoch, through LocalStoreEpoch). May be
  // null. One process's: on a shared store the epoch is the lease row's
  // (indexer/store_epoch.h), moved by the lease's write phases (Land).
  std::atomic<uint64_t>* store_epoch = nullptr;
  // On a store several members write (HBase): one of them merges at a time.
  // A pass runs only while this member holds the lease (CompactionLease::
  // Hold at its start; CompactionPass::lease_elsewhere otherwise), and each
  // write is fenced by it (Fence): a pass that lost the lease meanwhile
  // stops before its next write with kFailedPrecondition. May be null.
  CompactionLease* lease = nullptr;
  // Ingest's indexer in this process (IndexerOptions::merge_gate): a merge
  // waits for a batch being staged or written to settle. May be null.
  MergeGate* merge_gate = nullptr;
  // Salt buckets, tag rules and decode limits: the serving indexer's.
  IndexerOptions indexer;
};

// What one pass did.
struct CompactionPass {
  uint64_t streams = 0;        // (host, app) index ranges read
  uint64_t index_rows = 0;     // host index rows read
  uint64_t merges = 0;         // merged chunks written
  uint64_t parts = 0;          // chunks merged into them (and deleted)
  uint64_t records = 0;        // records rewritten
  uint64_t bytes_in = 0;       // parts' stored chunk bytes
  uint64_t bytes_out = 0;      // merged chunks' stored bytes
  uint64_t token_filters = 0;  // token filters written with them (common/token_bloom.h)
  uint64_t token_filter_bytes = 0;
  uint64_t token_filters_skipped = 0;  // merged chunks too varied for a filter within its byte share
  uint64_t token_filter_cpu_ns = 0;    // CPU time building them
  // Merged chunks written as plain zstd instead of by columns (codec
  // CODEC_ZSTD_COLUMNS): their records are in a form the columns do not
  // hold (a newer producer's fields, or encoded otherwise than logdex
  // writes them) or would not be smaller; kept as they are.
  uint64_t plain_merges = 0;
  uint64_t uncompressed = 0;   // merged parts' uncompressed bytes
  uint64_t bytes_read = 0;     // uncompressed bytes of every part read, merged or not (budget, pacing)
  uint64_t corrupt_parts = 0;  // parts found not to decode this pass (each once): left as they are
  uint64_t unsafe_parts = 0;   // parts of runs that wait for one not yet replay-safe
  uint64_t repaired_parts = 0; // parts a merged chunk lists, still stored (a merge stopped part-way, or a delayed removal): removed
  uint64_t removals_waiting = 0;  // parts a merged chunk lists, still stored, left for a later pass (removal_delay_ms)
  bool lease_elsewhere = false;  // another member holds the compaction lease: the pass did nothing (or stopped)
  // The lease went to another member during the pass (a fence or a renewal
  // found it taken): the pass stopped, failing with kFailedPrecondition
  // when it was about to write. Not a store error.
  bool lease_lost = false;
  // RequestStop() ended it before its last stream, or before it began: the
  // counts of what waits (runs_left, unsafe_parts, ...) cover part of the store.
  bool stopped = false;
  bool deep = false;           // it looked back to every stream's oldest record (deep_interval_ms)
  uint64_t runs_left = 0;      // closed runs the pass had no budget for
  uint64_t runs_left_past_lookback = 0;  // of which ending before now - lookback (a deep pass's)
  uint64_t runs_growing = 0;   // runs the clock closed that wait: grown since the last pass, or merged within settle
  int64_t lag_ms = 0;          // now - the last record of the oldest run left (0: none)
  int64_t cpu_ns = 0;          // this thread's CPU time during the pass
};

class Compactor {
 public:
  // Fails (kFailedPrecondition) when the store's writes are not atomic,
  // unless options.allow_non_atomic.
  static Result<std::unique_ptr<Compactor>> Create(TableStore& store, CompactorOptions options);

  // One pass at `now_ms`. `keep_going` (may be null) is called after each
  // run read with the pass's bytes_read so far; false stops the pass
  // (shutdown, pacing). Errors are the store's; what was merged stays merged
  // (last_pass() counts it).
  Result<CompactionPass> Pass(int64_t now_ms, const std::function<bool(uint64_t)>& keep_going = nullptr);
  // The counts of the latest Pass(), also when it stopped on an error.
  const CompactionPass& last_pass() const { return last_pass_; }
  // From any thread (shutdown): a pass under way stops before its next
  // stream, and later passes do nothing, not even renew the lease
  // (CompactionPass::stopped). A pass between merges stops at `keep_going`.
  void RequestStop() { stop_requested_.store(true); }

  const CompactorOptions& options() const { return options_; }

 private:
  Compactor(TableStore& store, CompactorOptions options);

  struct Part;
  Status PassOverHostApp(HostId host, AppId app, int64_t lo, int64_t cutoff, int64_t now_ms, CompactionPass& pass,
                         const std::function<bool(uint64_t)>& keep_going, bool& stop);
  Status MergeRun(std::vector<Part>& run, CompactionPass& pass,
                  const std::function<bool(uint64_t)>& keep_going, bool& stop);
  Status WriteMerge(std::vector<Part*>& parts, CompactionPass& pass);
  // Writes a merge's batch: alone (merge_gate), with store_epoch odd meanwhile.
  Status Land(const std::vector<WriteBatch*>& batches);
  // Marks the pass's lease lost (CompactionPass::lease_lost) and says so.
  Status LeaseLost();
  // Of `rows` (a host and app's index rows), the parts a stored merged chunk
  // lists (into `listed`), each removed (allow_non_atomic).
  Status RemoveListedParts(const std::vector<std::pair<HostIndexKey, IndexValue>>& rows,
                           std::set<std::tuple<Severity, int64_t, ChunkId>>& listed, CompactionPass& pass);
  Status RunPass(int64_t now_ms, const std::function<bool(uint64_t)>& keep_going, CompactionPass& pass);

  // A stored chunk's identity in big_ and corrupt_: its id alone may repeat
  // across streams (a producer numbering its sequences per stream), so its
  // stream and first time go with it, hashed.
  static uint64_t StoredChunk(const MainKey& key);
  void NoteBig(const MainKey& key, uint64_t bytes);

  TableStore& store_;
  CompactorOptions options_;
  Indexer indexer_;
  std::unordered_set<uint64_t> big_;  // StoredChunk()s of target_bytes / 2 or more (see above)
  // Parts that did not decode: counted once, then runs are cut around them
  // unread, for the life of the compactor (even if a good copy replaces one:
  // it then stays unmerged). Past the first 64 Ki, a bad part is read and
  // counted at every pass.
  std::unordered_set<uint64_t> corrupt_;  // StoredChunk()s
  bool lease_lost_ = false;  // set by LeaseLost() during a pass
  std::atomic<bool> stop_requested_{false};
  CompactionPass last_pass_;
  // Streams (host, app, severity) whose run the clock closed: that run as
  // last seen (a hash of its parts' ids), the pass that saw it, and when
  // such a run of the stream was last merged.
  struct ClockClosed {
    uint64_t parts_hash = 0;
    int64_t merged_ms = 0;
    uint64_t pass = 0;
  };
  std::unordered_map<uint64_t, ClockClosed> clock_closed_;
  uint64_t passes_ = 0;
  // now_ms of the latest deep pass, unless it was stopped or left runs older
  // than the lookback for want of budget (then the next pass is deep too).
  std::optional<int64_t> last_deep_ms_;
  // This compactor's merges whose parts' removal waits (removal_delay_ms):
  // when each merged chunk was written (on the passes' now_ms, and on
  // options_.clock's monotonic time) and its parts
  // (severity, first time, id), so that a pass neither reads it nor
  // removes them until the delay has passed. At most a delay's merges.
  struct Waiting {
    int64_t written_ms = 0;
    int64_t written_ns = 0;  // clock()'s monotonic time
    std::vector<std::tuple<Severity, int64_t, ChunkId>> parts;
  };
  // By the merged chunk's (app, host, severity, first time, id): ids alone
  // may repeat across streams.
  std::map<std::tuple<AppId, HostId, Severity, int64_t, ChunkId>, Waiting> waiting_;
  int64_t now_ms_ = 0;  // the running pass's, and when it started
  int64_t pass_started_ns_ = 0;  // clock()'s monotonic time
  const Clock& clock() const { return options_.clock ? *options_.clock : SystemClock::Instance(); }
};

}  // namespace logdex
