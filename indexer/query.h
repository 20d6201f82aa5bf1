// The query engine: plans a query onto one access path (docs/ARCHITECTURE.md,
// "Queries and their cost"), reads index rows newest first, fetches main
// rows, decompresses them and filters records, and reports what it cost.
//
// Access paths:
//   tag k=v (+ anything)      idx_tag, one range on the first tag
//   app + host                idx_host, one range
//   app (+ severities)        idx_<level>, one range per severity
//   host only                 idx_host, one range per app of the host (from meta)
//   scan: true                as above without the tag index, or with no app or
//                             host idx_<level>, one range per (app, severity)
//                             stream in range (from meta); tags and every other
//                             filter applied to records, so it finds tag values
//                             the tag index capped. Over max_scan_index_ranges
//                             such ranges: the main table, whole
// Anything else is refused: reading every stream must be asked for.
//
// Order: records come newest first; ties break on (app id, host id,
// severity, a hash of the record's message and tags, chunk id, record
// index), all descending: records that differ in anything keep their order
// when the compactor moves them to another chunk. Index rows are keyed by
// each chunk's last record time, so a record can be emitted as soon as the
// scan passes its time; chunks span less than max_chunk_span_ms (or
// longest_span_ms(), when longer: "the padding" below), so the index ranges
// reach that far past `to`. Each Run() and Volume() reads
// through one snapshot of the store where the backend has them (RocksDB).
//
// Paging: a page holds at most `limit` records; `next_cursor` (opaque) resumes
// strictly after the page's last record. A cursor only fits the query it came from.
//
// Budget: a query stops once it has used more than QueryOptions' max_time_ms
// (wall time in Run, by the options' clock), max_rows_scanned (index rows, or
// main rows on the main-table scan) or max_bytes_decompressed;
// QueryStats::budget_exhausted says which ("time", "rows_scanned",
// "bytes_decompressed", or "scan_records" for max_scan_records). The index
// paths return the page so far with a cursor (QueryAnswer::stopped_early);
// the main-table scan sorts everything it matched at its end, so it fails
// with kResourceExhausted instead: a cut-off page would not be the newest
// records.
//
// Time ranges: [from_ms, to_ms) may be any int64 values; every bound the
// engine derives (range span, chunk-span padding, cursor position) is computed
// with checked or saturating arithmetic, so extreme values are refused or
// clamped, never undefined behaviour.
//
// Volume (Volume(), GET /api/v1/volume): record counts per time bucket and
// per severity for a query's filters, on the same access path as Run() (the
// same refusals: no app, host or tag needs scan=true). Two ways to count:
//
// - From the index (the default): every index row carries its stored chunk's
//   record count, and every stored chunk holds one stream (app, host,
//   severity), so the counts come from index rows alone: no main row is read
//   or decompressed (chunks_read = bytes_decompressed = 0). Attribution rule:
//   a stored chunk is counted if and only if its LAST record time lies in
//   [from, to), and all its records are counted in the bucket holding that
//   time. So:
//     * ranges that tile, [a, b) then [b, c), count every chunk exactly once:
//       nothing twice, nothing dropped, and their totals add up;
//     * a chunk straddling `from` (first record before it, last at or after)
//       is counted whole, its records before `from` included; a chunk
//       straddling `to` (last record at or after `to`) is not counted at all:
//       the range that holds its last record counts it. Either holds records
//       within max_chunk_span_ms of the edge only;
//     * a record is counted at most max_chunk_span_ms - 1 ms after its own
//       time (in its chunk's last record's bucket), never earlier.
//       VolumeAnswer::inexact_records counts the records of chunks whose first
//       record lies before their bucket's start (or before `from`): the only
//       records that may sit in a different bucket than their own time's;
//     * app, host and severity filters are exact (per stored chunk); a tag
//       filter counts every record of the chunks holding the tag in any
//       record (the tag index is per chunk: an upper bound on the records
//       carrying it), and takes one tag (more need read_records);
//     * a chunk spanning index_count_span_ms or more (a merged one; or one
//       ingest made under a longer indexer.max_chunk_span) that does not lie
//       within one bucket and within [from, to) is read instead, and each of
//       its records in [from, to) that passes the filters (a tag filter per
//       record, exactly) counted in its own bucket (chunks_read and
//       bytes_decompressed count them); the index ranges then reach
//       max_chunk_span_ms past `to`, for such chunks. A merged chunk with
//       a `cnt` row (IndexValue::has_minute_counts) is counted from it
//       instead, unread (under a tag filter it is read): each minute's records at
//       the minute's last millisecond within the chunk, when that lies in
//       [from, to) (so a minute straddling `from` counts whole and one
//       straddling `to` in the next range, as a chunk does; exact in buckets
//       a whole number of minutes wide between minute-aligned from and to;
//       else a record at most 59,999 ms late, never early; inexact_records
//       counts those whose minute starts before their bucket or `from`). A
//       `cnt` row missing or unreadable makes the chunk read
//       (QueryStats::unreadable_minute_counts). While long chunks are
//       read (index_count_span_ms below the padding: a store that was
//       compacted), a chunk whose main row lists the parts it merged
//       (IndexValue::lists_parts) is counted as above whatever its span
//       (from `cnt`, or read), and its list read from its main row; else
//       it is counted from its index row and its list alone is read. So its
//       parts, found beside it between a merge's writes, are not counted
//       twice (see below);
//     * like Run(), tags the tag index capped are not seen, and on HBase an
//       index row whose main row is missing (a write under way or failed
//       before its main row) is counted: index mode cannot tell.
// - By reading records (VolumeQuery::read_records, implied by `contains`, by
//   any text filter and by scan=true): the chunks Run() would read are read
//   and decompressed, every filter (tags and text filters included) is applied to each record, and each
//   record counts in the bucket of its own time if it lies in [from, to):
//   exactly the records Run() returns, counted.
//
// Parts beside their merged chunk: where a merge's writes do not land at
// once (HBase), a merged chunk may be found while its parts are still
// stored. When its main row lists them (MainRow.parts, by first record time
// and id, the parts of merged parts included), Run() and Volume() skip a
// part met after it, and drop what a part met before it added. A merged
// chunk's header spans its parts' headers, so only a part that ends with
// it can come first in the newest-end-first merge, and only one that
// starts with it in the main-table scan. A merged chunk that does not
// decode skips no part where it is read (its parts, if stored, hold its
// records); Volume() from the index, which counts it without reading it,
// applies its list whatever. QueryStats::superseded_parts counts them.
//
// Buckets are `step_ms` wide and aligned to multiples of step_ms since the
// epoch: the first starts at or before `from`, the last ends at or after
// `to` (the first and last cover only their part of [from, to)). Every
// bucket is listed, empty ones included, oldest first; at most
// max_volume_buckets.
//
// Thread-safety: Run() and Volume() may be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/result.h"
#include "common/severity.h"
#include "indexer/text_filter.h"
#include "store/table_store.h"

namespace logdex {
class StoreEpoch;  // indexer/store_epoch.h
}

namespace logdex {

struct Query {
  std::string app;                     // empty = any
  std::string host;                    // empty = any
  std::vector<Severity> severities;    // empty = all
  std::vector<std::pair<std::string, std::string>> tags;  // all must match
  int64_t from_ms = 0;                 // required: [from_ms, to_ms), ms since the epoch
  int64_t to_ms = 0;
  std::string contains;                // case-sensitive substring of the message
  std::vector<TextFilter> text;        // more text filters (indexer/text_filter.h); all must pass
  uint32_t limit = 100;                // records per page
  std::string cursor;                  // from a previous page's next_cursor
  bool scan = false;                   // allow reading every stream (no app, host or tag needed)
};

struct QueryOptions {
  // Must match the indexer's.
  uint32_t salt_buckets = 16;
  int64_t max_chunk_span_ms = 60'000;
  // When set, called once per query run: a longer span than
  // max_chunk_span_ms that chunks of the store may have since (serve:
  // LongestSpanWatch, indexer/compactor.h, which other members of a shared
  // store raise). The larger of the two pads the query.
  std::function<int64_t()> longest_span_ms;
  // Longest accepted time range. Default 31 days.
  int64_t max_range_ms = 31ll * 24 * 3600 * 1000;
  // Largest accepted limit. Default 10,000.
  uint32_t max_limit = 10'000;
  // Most records the main-table scan may hold for sorting. Default 2 M.
  uint64_t max_scan_records = 2'000'000;
  // Most index ranges (one per app and severity in the query's range) a
  // scan=true query without app or host opens; over it, it reads the main
  // table whole and sorts (each range is an open iterator, on HBase a
  // scanner). 0: always the main table. Default 1,024.
  uint64_t max_scan_index_ranges = 1'024;
  // A Run() of that every-stream plan that has read this many chunks
  // without filling its page, and read more than half of the chunks it met
  // (no token filter prunes them), reads the rest of the page from the main
  // table instead (sequential reads: a rare word over a store without token
  // filters). 0: never. Default 1,000.
  uint64_t scan_switch_after_chunks = 1'000;
  // Per-query budget (see above); 0 means no limit. Defaults: no limit (serve
  // sets query.max_time, query.max_rows_scanned, query.max_bytes_decompressed).
  int64_t max_time_ms = 0;
  uint64_t max_rows_scanned = 0;
  uint64_t max_bytes_decompressed = 0;
  // Volume() from the index counts a chunk by its index row alone when it
  // spans less than this (the chunks ingest makes: indexer.max_chunk_span);
  // a longer one (a merged chunk, indexer/compactor.h) is read, and each of
  // its records in [from, to) counts in its own bucket, exactly. 0: every
  // chunk from its index row.
  int64_t index_count_span_ms = 0;
  // Most buckets of a Volume() answer. Default 11,000.
  uint64_t max_volume_buckets = 11'000;
  // The store's layout epoch (indexer/store_epoch.h), when a compactor
  // writes to the store: a cursor from another epoch resumes by record, not
  // by its saved positions, and a run that a merge raced is run again (up
  // to 3 runs; QueryStats::runs). Null: no compactor (on a shared store
  // another member may compact: serve always sets it there). Not owned.
  StoreEpoch* store_epoch = nullptr;
  // Shared stores (StoreEpoch::shared()): a run at least this long reads the
  // epoch again when it ends, and runs again when it moved: the parts of a
  // merge that landed after the run passed its position may have been
  // removed meanwhile. Somewhat less than the compactors' removal delay
  // (CompactorOptions::removal_delay_ms; StoreEpoch::RecheckAfterMs takes
  // the lease holder's from the store when shorter). 0: never.
  int64_t recheck_after_ms = 0;
  // Read merged chunks' token filters (common/token_bloom.h) to skip chunks
  // no record of which can pass a word, phrase, contains or regex filter.
  // Answers are the same either way; false measures the difference.
  bool use_token_filters = true;
  // The clock max_time_ms is measured on (MonotonicNs). Null: SystemClock. Not owned.
  const Clock* clock = nullptr;
  DecodeOptions decode;
};

struct ResultRecord {
  int64_t ts_ms = 0;
  Severity severity = Severity::kInfo;
  std::string app;
  std::string host;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
};

struct QueryStats {
  std::string plan;                  // access path and ranges, human-readable
  uint64_t seeks = 0;                // index ranges opened (main-table scan: store seeks)
  uint64_t rows_scanned = 0;         // index rows read (main-table scan: main rows read)
  uint64_t chunks_read = 0;          // main rows fetched and decompressed
  uint64_t main_row_batches = 0;     // MultiGet calls reading main rows ahead (stores with batched gets)
  uint64_t main_row_batch_failures = 0;  // of those, failed: the rows were read one by one
  uint64_t chunks_returned = 0;      // chunks with at least one record in this page
  uint64_t bytes_decompressed = 0;   // uncompressed bytes of those chunks
  uint64_t index_rows_without_main = 0;  // skipped: the main row is missing (read repair)
  uint64_t meta_rows = 0;            // meta rows read to plan (host only; scan=true without app or host)
  uint64_t corrupt_chunks = 0;       // stored chunks that failed to decode: skipped
  uint64_t token_filters_read = 0;   // `tok` rows read (chunks with a token filter, text filters given)
  uint64_t chunks_skipped_by_tokens = 0;  // of those, chunks their filter ruled out: not read
  // Volume() from the index: `cnt` rows read (merged chunks counted by
  // minute, unread), and of those missing or unreadable: their chunks were
  // read instead (indexer/minute_counts.h).
  uint64_t minute_counts_read = 0;
  uint64_t unreadable_minute_counts = 0;
  // Parts found beside the merged chunk that lists them (MainRow.parts: on
  // HBase, between a merge's writes): skipped, or their records dropped.
  uint64_t superseded_parts = 0;
  // Runs of the page: more than 1 when a compactor's writes raced it
  // (QueryOptions::store_epoch); the other counts are the last run's.
  uint64_t runs = 1;
  // Which budget stopped the query: "time", "rows_scanned",
  // "bytes_decompressed", "scan_records"; empty otherwise. Run() then
  // returns the page so far (QueryAnswer::stopped_early), or fails with
  // kResourceExhausted where it cannot continue (see QueryAnswer).
  std::string budget_exhausted;
};

struct QueryAnswer {
  std::vector<ResultRecord> records;
  std::string next_cursor;  // empty when there is nothing more
  QueryStats stats;
  // The budget that ended this page early ("time", "rows_scanned",
  // "bytes_decompressed"), empty otherwise. The index path stops a page at
  // its budget and returns the records found so far (every one final:
  // nothing unread is newer) with a next_cursor that continues where it
  // stopped, possibly with no record. A page that started over after a
  // merge, or runs while one lands, stops only once it has a record (its
  // cursor must carry a position of the new layout). Re-reading a cursor's
  // open chunks is not charged to the bytes budget. Where it cannot
  // continue (the main-table scan, which sorts only at its end; Volume(); a page
  // with no record and more than 64 chunks open), Run() fails with
  // kResourceExhausted instead.
  std::string stopped_early;
};

// A Volume() request: `filter` as for Run() (its limit and cursor are not
// used; a cursor is refused), the bucket width, and the way to count.
struct VolumeQuery {
  Query filter;
  int64_t step_ms = 60'000;   // bucket width, ms, >= 1
  bool read_records = false;  // count by reading records (see above); implied by contains and scan
};

// Counts of one bucket, indexed by VolumeSeverityIndex (TRACE first).
struct VolumeCounts {
  std::array<uint64_t, kAllSeverities.size()> by_severity{};
  uint64_t total = 0;
};

struct VolumeBucket {
  int64_t start_ms = 0;  // the bucket is [start_ms, start_ms + step_ms)
  VolumeCounts counts;
};

struct VolumeAnswer {
  int64_t step_ms = 0;
  bool read_records = false;         // how it was counted (true: exact)
  std::vector<VolumeBucket> buckets; // every bucket, oldest first
  VolumeCounts totals;
  // Index mode: records of counted chunks whose first record lies before
  // their bucket's start or before `from` (they may belong to an earlier
  // bucket, or before the range). 0 when reading records.
  uint64_t inexact_records = 0;
  // As for Run(): rows_scanned = index rows read (main rows on the main-table
  // path), chunks_read and bytes_decompressed 0 unless reading records (or long chunks),
  // chunks_returned = chunks that added at least one record to the counts.
  QueryStats stats;
};

// The position of `s` in kAllSeverities (TRACE 0 ... FATAL 5).
size_t VolumeSeverityIndex(Severity s);

// Buckets of width step_ms (aligned to multiples of it) covering [from_ms,
// to_ms); nullopt when step_ms < 1, the range is empty, or the grid's start
// would not fit int64.
std::optional<uint64_t> VolumeBucketCount(int64_t from_ms, int64_t to_ms, int64_t step_ms);

// A step for [from_ms, to_ms) when none is given: a 60th of the range (in
// whole ms, at least 1), rounded up to a whole unit (1 ms, 10 ms, 100 ms, 1 s, 5 s, 10 s, 30 s,
// 1 m, 5 m, 10 m, 30 m, 1 h, 3 h, 6 h, 12 h, 1 d, then whole days).
int64_t DefaultVolumeStep(int64_t from_ms, int64_t to_ms);

// A stream in the catalog (`meta`): records of (app, host, severity) were
// stored with times from first_ms to last_ms.
struct StreamInfo {
  std::string app;
  std::string host;
  Severity severity = Severity::kInfo;
  int64_t first_ms = 0;
  int64_t last_ms = 0;
};

class QueryEngine {
 public:
  // `store` must outlive the engine.
  QueryEngine(TableStore& store, QueryOptions options) : store_(store), options_(std::move(options)) {}

  // Errors: kInvalidArgument for a query that is wrong (message says what),
  // kResourceExhausted when it goes over its budget, or the store's error.
  // When `stats` is not null it receives the query's stats whether Run()
  // succeeds or fails (the budget that stopped it included).
  Result<QueryAnswer> Run(const Query& query, QueryStats* stats = nullptr) const;

  // Record counts per bucket and severity (see "Volume" above). Errors as
  // Run()'s; kInvalidArgument also for a bad step, over max_volume_buckets,
  // a cursor, or more than one tag without read_records.
  Result<VolumeAnswer> Volume(const VolumeQuery& query, QueryStats* stats = nullptr) const;

  // The catalog, from `meta` alone (no index or main row is read), for label
  // browsers: the streams with records in [from_ms, to_ms) as far as their
  // first and last times tell, sorted by (app, host, severity); and the
  // names of the tag keys the indexer has named, sorted. A stream whose
  // name row is missing (a write under way) is left out.
  Result<std::vector<StreamInfo>> Streams(int64_t from_ms, int64_t to_ms) const;
  Result<std::vector<std::string>> TagKeys() const;

  const QueryOptions& options() const { return options_; }

 private:
  TableStore& store_;
  QueryOptions options_;
};

}  // namespace logdex
