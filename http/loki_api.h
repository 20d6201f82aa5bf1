// LokiApi: the read side of Loki's HTTP API over the query engine, so that
// Grafana's built-in Loki data source works when pointed at logdex
// (docs/ARCHITECTURE.md, "The Loki API"). HttpServer serves it under
// /loki/api/v1/ with the query API's auth, concurrency slots and budgets.
//
// Labels: every record is in the stream {app, host, level} (level = the
// severity's lower-case name: trace debug info warn error fatal) plus its
// tags, which Loki would call structured metadata (Loki puts those into the
// stream labels too unless a client asks to categorize them).
//
// Endpoints (GET; anything else under /loki/api/v1/ is a 404 naming it):
//   query_range   log queries -> "streams", metric queries -> "matrix"
//                 query, start, end, limit (default 100), direction
//                 (backward | forward), step (metric queries; default
//                 Loki's: range / 250 s, at least 1 s)
//   query         instant: metric queries and scalars -> "vector" at `time`
//   labels        app, host, level and the tag keys the indexer named
//   label/<name>/values   app, host or level values in [start, end)
//                 (optionally narrowed by `query`'s app/host/level matchers);
//                 a tag key answers [] with a warning (tag values are not listed)
//   series        the streams {app, host, level} matching each match[]
//   index/stats   {"streams","chunks","entries","bytes"} of a selector (from
//                 the index rows; bytes is 0: the index does not know it; tag
//                 matchers other than = are not applied: an upper bound)
//   status/buildinfo   {"version": ...}
//   tail          a WebSocket (HttpServer upgrades it; TailPlan, TailBackfill
//                 and TailMessage here): query (a log query), start (default
//                 now - 1 h), limit (default 100), delay_for (0 to 5 s;
//                 accepted and not applied: records are tailed once written).
//                 First a message with the `limit` newest records since
//                 start (oldest first), then one each time new records
//                 arrived (a batch's may span several):
//                 {"streams": [...], "dropped_entries": [...]}. A batch the
//                 tail skipped (http/tail.h) cannot be listed entry by
//                 entry: it is one dropped entry with the label
//                 __logdex_missed_batches__ = how many, at the time it was
//                 noticed. The subscription starts before the first message
//                 is read, so a record written in between can come twice,
//                 never not at all.
// Times: integer nanoseconds since the epoch (Grafana's), float seconds, or
// RFC 3339; start defaults to end - 1 h, end to now. Steps: a duration (60s)
// or float seconds.
//
// How a selector runs (the engine needs an app, a host or a tag):
//   app, host, tag k="v" with = are the engine query's; level (any operator)
//   becomes its severity set; the line filters are the engine's text filters
//   (|= and != contains and not_contains, |~ and !~ regex and not_regex, RE2
//   as Loki's); other matchers are applied to each record returned. With no app, host or tag named by =, the apps in the catalog that
//   pass the matchers get a query each (at most kMaxFanOut; more is a 400),
//   and their answers are merged newest first.
//   direction=forward reads the range newest first to its end (at most
//   kMaxForwardRecords matching records, else a 400 asking for a narrower
//   range or backward) and returns its oldest `limit`.
//   A request reads at most kMaxPages engine pages in all (every app of a
//   fan-out) within the engine's time budget (query.max_time, else 30 s):
//   a backward query that runs out answers what it found with a warning
//   ("warnings", which Grafana shows); a forward one gets a 422.
//   Times are refused beyond about the year 5000, ranges and steps over a year.
// Metric queries count from the index rows (QueryEngine::Volume) on a grid of
// gcd(range, step) aligned to the epoch (at most max_volume_buckets buckets,
// else a 400): the window of a point t is [t - range, t) (Loki's is
// (t - range, t]: records at the very ms of a window's edge count in the
// next); one that does not start on the grid counts the buckets that start
// inside it; windows with no record are left out, as Loki leaves them out.
// Without sum, a series per stream: one query per (app, host), at most
// kMaxFanOut. A metric query with line filters counts by reading the records
// (exact, and as costly as the log query). In a metric query, tag matchers
// other than = are refused with a 400 (app and host ones hold through the
// fan-out); `sum by` takes app, host and level.
//
// Errors: 400 with a plain-text reason for what is wrong or not supported
// (Grafana shows the body), 422 for a query over its budget; other engine
// errors are returned for HttpServer to answer (500/503 with an error id).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "indexer/query.h"

namespace logdex {

namespace logql {
struct LogQuery;
}

struct LokiReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // What the engine's volume counts met, for the server's metrics
  // (QueryStats): stored chunks that did not decode, and minute counts
  // missing or unreadable (their chunks were read instead).
  uint64_t corrupt_chunks = 0;
  uint64_t unreadable_minute_counts = 0;
};

// A live tail request, parsed.
struct LokiTail {
  Query filter;  // for TailHub::Subscribe: what the engine part of the selector names
  std::function<bool(const ResultRecord&)> passes;  // the whole selector and its line filters
  int64_t start_ms = 0;
  uint32_t limit = 100;
  std::shared_ptr<const logql::LogQuery> query;
};

class LokiApi {
 public:
  static constexpr size_t kMaxFanOut = 64;
  static constexpr size_t kMaxForwardRecords = 100'000;
  static constexpr size_t kMaxPages = 100;
  static constexpr uint64_t kMaxPoints = 11'000;

  // `engine` and `clock` must outlive the API.
  LokiApi(const QueryEngine& engine, const Clock& clock, std::string version);

  // `endpoint`: the path after /loki/api/v1/ (e.g. "query_range",
  // "label/app/values"); `params`: the query string's parameters. An error
  // is an engine or store failure that is not the request's fault.
  Result<LokiReply> Handle(std::string_view endpoint, const std::multimap<std::string, std::string>& params) const;

  // /loki/api/v1/tail's parameters. Errors: kInvalidArgument (answer 400).
  Result<LokiTail> TailPlan(const std::multimap<std::string, std::string>& params) const;
  // The first message of a tail: the newest records since start, oldest
  // first; empty when there are none. Errors as Handle's (kInvalidArgument,
  // kResourceExhausted, or the engine's).
  Result<std::string> TailBackfill(const LokiTail& tail) const;
  // A tail message of `records` (those that pass) and of `missed_batches`
  // skipped; empty when there is nothing to send.
  static std::string TailMessage(const LokiTail& tail, const std::vector<ResultRecord>& records,
                                 uint64_t missed_batches, int64_t now_ms);

 private:
  const QueryEngine& engine_;
  const Clock& clock_;
  const std::string version_;
};

}  // namespace logdex
