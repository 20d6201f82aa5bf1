// The query engine: plans a query onto one access path (docs/ARCHITECTURE.md,
// "Queries and their cost"), reads index rows newest first, fetches main
// rows, decompresses them and filters records, and reports what it cost.
//
// Access paths:
//   tag k=v (+ anything)      idx_tag, one range on the first tag
//   app + host                idx_host, one range
//   app (+ severities)        idx_<level>, one range per severity
//   host only                 idx_host, one range per app of the host (from meta)
//   scan: true                the main table (fuzzy on app/severity when given),
//                             every filter applied to records; finds tag values
//                             the tag index capped
// Anything else is refused: a full scan must be asked for.
//
// Order: records come newest first; ties break on (app id, host id,
// severity, chunk id, record index), all descending. Index rows are keyed by
// each chunk's last record time and chunks span less than max_chunk_span_ms,
// so a record can be emitted as soon as the scan passes its time.
//
// Paging: a page holds at most `limit` records; `next_cursor` (opaque) resumes
// strictly after the page's last record. A cursor only fits the query it came from.
//
// Budget: a query stops once it has used more than QueryOptions' max_time_ms
// (wall time in Run, by the options' clock), max_rows_scanned (index rows, or
// main rows on the scan path) or max_bytes_decompressed, and Run() fails with
// kResourceExhausted naming the budget; QueryStats::budget_exhausted says
// which one ("time", "rows_scanned", "bytes_decompressed", or "scan_records"
// for max_scan_records). No partial page: a scan sorts everything it matched,
// so a cut-off page would not be the newest records.
//
// Time ranges: [from_ms, to_ms) may be any int64 values; every bound the
// engine derives (range span, chunk-span padding, cursor position) is computed
// with checked or saturating arithmetic, so extreme values are refused or
// clamped, never undefined behaviour.
//
// Thread-safety: Run() may be called concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/result.h"
#include "common/severity.h"
#include "store/table_store.h"

namespace logdex {

struct Query {
  std::string app;                     // empty = any
  std::string host;                    // empty = any
  std::vector<Severity> severities;    // empty = all
  std::vector<std::pair<std::string, std::string>> tags;  // all must match
  int64_t from_ms = 0;                 // required: [from_ms, to_ms), ms since the epoch
  int64_t to_ms = 0;
  std::string contains;                // case-sensitive substring of the message
  uint32_t limit = 100;                // records per page
  std::string cursor;                  // from a previous page's next_cursor
  bool scan = false;                   // allow the main-table scan path
};

struct QueryOptions {
  // Must match the indexer's.
  uint32_t salt_buckets = 16;
  int64_t max_chunk_span_ms = 60'000;
  // Longest accepted time range. Default 31 days.
  int64_t max_range_ms = 31ll * 24 * 3600 * 1000;
  // Largest accepted limit. Default 10,000.
  uint32_t max_limit = 10'000;
  // Most records a scan path may hold for sorting. Default 2 M.
  uint64_t max_scan_records = 2'000'000;
  // Per-query budget (see above); 0 means no limit. Defaults: no limit (serve
  // sets query.max_time, query.max_rows_scanned, query.max_bytes_decompressed).
  int64_t max_time_ms = 0;
  uint64_t max_rows_scanned = 0;
  uint64_t max_bytes_decompressed = 0;
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
  uint64_t seeks = 0;                // index ranges opened (scan path: store seeks)
  uint64_t rows_scanned = 0;         // index rows read (scan path: main rows read)
  uint64_t chunks_read = 0;          // main rows fetched and decompressed
  uint64_t chunks_returned = 0;      // chunks with at least one record in this page
  uint64_t bytes_decompressed = 0;   // uncompressed bytes of those chunks
  uint64_t index_rows_without_main = 0;  // skipped: the main row is missing (read repair)
  uint64_t meta_rows = 0;            // meta rows read to plan (host-only queries)
  uint64_t corrupt_chunks = 0;       // stored chunks that failed to decode: skipped
  // Which budget stopped the query (Run() then fails with kResourceExhausted):
  // "time", "rows_scanned", "bytes_decompressed", "scan_records"; empty otherwise.
  std::string budget_exhausted;
};

struct QueryAnswer {
  std::vector<ResultRecord> records;
  std::string next_cursor;  // empty when there is nothing more
  QueryStats stats;
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

 private:
  TableStore& store_;
  QueryOptions options_;
};

}  // namespace logdex
