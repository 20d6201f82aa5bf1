// HttpServer: logdex's one HTTP port (cpp-httplib) with
//   GET /metrics        the Prometheus registry in text format (0.0.4)
//   GET /healthz        200 "ok" while the process serves
//   GET /readyz         200 when the readiness callback says ready, else 503 + reason
//   GET /api/v1/query   the QueryEngine as JSON (parameters below)
//   GET /api/v1/volume  QueryEngine::Volume as JSON (parameters below)
//   GET /, /ui/...      the built-in web UI (http/ui/, compiled in; no auth: it holds no data)
//   GET /api/v1/alerts  recent alert groups and pending notifications (since=24h, limit=100 by default)
//   GET /api/v1/tail    live tail: server-sent events of records as they are written (http/tail.h)
//   GET /loki/api/v1/... Loki's read API for Grafana (http/loki_api.h)
//
// Query parameters (anything else is a 400):
//   app, host, contains        one each
//   severity                   repeatable and/or comma-separated; any spelling ParseSeverity accepts
//   tag                        repeatable, k=v
//   from, to                   RFC 3339 or integer ms since the epoch (see time_parse.h); both or neither
//   since                      a duration (90s, 15m, 72h, 7d): from = now - since, to = now + 1 ms,
//                              now from the injected Clock; excludes from/to
//   limit                      records per page (the engine bounds it)
//   cursor                     next_cursor of the previous page of the same query
//   scan                       true|false: allow reading every stream (no app, host or tag needed)
// A time range (from+to, or since) is required. A page asked with `since`
// returns a cursor that pins the range it resolved to, so later pages of the
// same `since` query continue the same range even as the clock moves.
//
// Volume parameters: the query's filters above (app, host, contains, severity,
// tag, from/to or since, scan), parsed by the same code; limit and cursor are
// unknown there. Plus:
//   step                       bucket width: a duration (60s, 5m, 1h) or integer ms, >= 1 ms;
//                              default DefaultVolumeStep (about range/60, a whole unit); a step
//                              making more than QueryOptions::max_volume_buckets buckets is a 400
//   exact                      true|false: count by reading the records (implied by contains, scan)
// Volume answers: 200 {"from", "to", "step_ms", "exact", "buckets": [{"start",
// "time", "counts": {"TRACE": n, ... "FATAL": n}, "total"}], "totals":
// {"counts", "total"}, "inexact_records", "stats": {...QueryStats}} (the
// attribution rule is in indexer/query.h); errors as for the query.
//
// Answers: 200 {"records": [{"ts", "time", "severity", "app", "host", "message",
// "tags": {k: v}}], "next_cursor": string|null, "stats": {...QueryStats}};
// 400 {"error", "parameter"?} for a bad request, an engine kInvalidArgument, or
// a cursor whose signature does not verify ("invalid cursor");
// 422 {"error", "budget"} when the query went over its budget (QueryOptions:
// max_time_ms, max_rows_scanned, max_bytes_decompressed, max_scan_records;
// retrying the same query will not help: narrow it);
// 503 {"error", "reason": "busy"} + Retry-After when max_concurrent_queries
// queries are already running; 503 {"error", "error_id"} for a store
// kUnavailable; 500 {"error", "error_id"} for any other error. 500 and store
// 503 answers never carry internal error text: the full text is logged (warn)
// with the same error_id. 401 for a missing or wrong bearer token; 413 for a
// request with a body over max_body_bytes or a chunked body; 404 for unknown
// paths. Invalid UTF-8 in log text is replaced by U+FFFD in the JSON.
//
// Auth and bodies: a pre-routing handler runs after the request headers and
// before httplib reads any body (cpp-httplib 0.11: Server::routing() calls the
// pre-routing handler first, read_content() after). It answers 401 when
// `bearer_token` is set and missing or wrong (every path except /healthz and
// /readyz; compared in constant time), and 413 for a Content-Length over
// max_body_bytes or any chunked body (no endpoint takes a body), without
// reading the body; set_payload_max_length(max_body_bytes) backs it up.
// A refused request that declared a body is answered with "Connection: close".
//
// Request heads: the request line and headers are bounded before httplib
// parses them (http/bounded_head_server.h; cpp-httplib 0.11.4 itself reads
// them without limit): over `max_head_bytes` the client gets 431, a head not
// complete `head_timeout_ms` after its first byte gets 408, and the
// connection closes without reading more of it. Counted in
// logdex_http_requests_refused_total{reason="head_too_large|head_timeout"},
// logged every 10 s at most.
//
// Cursors: every next_cursor is "<payload>.<mac>", mac = base64url of the first
// 16 bytes of HMAC-SHA256(cursor_key, payload). A cursor is checked before
// anything in it is used; a tampered or forged one is a 400 "invalid cursor".
// Members that share a store must share cursor_key (serve keeps it in the
// store, see serve_command.cc) so a cursor of one member works on another.
//
// Liveness under load (why /healthz keeps answering): connections are served
// by `worker_threads` threads (default 32), and at most
// `max_concurrent_queries` (default 4) of them run a query at any time; more
// queries get the 503 "busy" at once instead of waiting for a thread. A client
// that sends its headers slowly holds a thread for at most `head_timeout_ms`
// (default 10 s; `read_timeout_seconds`, default 5, per stalled read), and a body flood is
// refused at its headers. So the threads left for /healthz run out only with
// more than worker_threads - max_concurrent_queries simultaneous stalled
// connections: size worker_threads above the number of slow clients expected
// (an idle thread costs a stack, not CPU). A dedicated health port was not
// chosen: orchestrators probe the serving port, and a separate port would
// prove less about it.
//
// Metrics it adds to the registry (no per-request labels):
//   logdex_http_requests_total{endpoint, code}   endpoint in metrics|healthz|readyz|query|volume|tail|alerts|loki|ui|other
//   logdex_http_query_duration_seconds           histogram of /api/v1/query handling time (not volume's)
//   logdex_http_queries_rejected_total           queries refused with 503 busy (concurrency limit)
//   logdex_http_requests_refused_total{reason}   body_too_large|unauthorized|head_too_large|head_timeout
//   logdex_query_budget_exhausted_total{budget}  time|rows_scanned|bytes_decompressed|scan_records
//   logdex_http_internal_errors_total            500 and store-503 answers (each logged with its error id)
//
// Ownership: the engine, registry, readiness callback's captures and clock
// must outlive the server. Thread-safety: Start() and Stop() may be called from
// any thread (Stop() concurrently with itself too); handlers run on
// `worker_threads` threads and call the engine, the registry's Collect() and
// the readiness callback concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"
#include "indexer/query.h"
#include "store/table_store.h"

namespace prometheus {
class Registry;
}

namespace logdex {

class TailHub;

struct HttpServerOptions {
  // Address to listen on. Default loopback only.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (see HttpServer::port()). Default 0.
  int port = 0;
  // When non-empty, the bearer token every endpoint but /healthz and /readyz
  // requires. Default empty (no auth).
  std::string bearer_token;
  // Threads that serve connections (see "Liveness under load"). Default 32.
  int worker_threads = 32;
  // Queries that may run at once; one more gets a 503 busy. Default 4.
  int max_concurrent_queries = 4;
  // Largest request body accepted, bytes (no endpoint takes one). Default 1 MiB.
  uint64_t max_body_bytes = 1ull << 20;
  // Socket read timeout (each read of the request line, headers, body),
  // seconds; short so that slow-header clients let go of their thread. Default 5.
  int read_timeout_seconds = 5;
  // Request line + headers, bytes; a longer head gets 431. Default 64 KiB.
  size_t max_head_bytes = 64 * 1024;
  // A request (head, and a POST's body) still incomplete this long after its
  // first byte gets 408, ms: a slow client holds a worker thread no longer.
  // Default 10 s.
  int head_timeout_ms = 10'000;
  // Socket write timeout, seconds (a large answer to a slow reader). Default 30.
  int write_timeout_seconds = 30;
  // HMAC key of the cursors. Empty: a random key of this process (cursors then
  // work on this process only). Default empty.
  std::string cursor_key;
  // The version /loki/api/v1/status/buildinfo reports (http/loki_api.h).
  std::string loki_version = "logdex";
  // Live tail (GET /api/v1/tail); null: not served (404). Not owned; must
  // outlive the server.
  TailHub* tail = nullptr;
  // GET /api/v1/alerts: recent alert groups and pending notifications as JSON
  // (alerting::AlertStager::RecentJson), for records at or after since_ms, at
  // most `limit` of each. Unset: 404 (alerting is off).
  std::function<Result<std::string>(int64_t since_ms, size_t limit)> alerts;
};

// Parses "host:port" or "[v6]:port" (port 0..65535) into `options`.
// Errors: kInvalidArgument naming what is wrong.
Status ParseListenAddress(std::string_view text, HttpServerOptions& options);

// What /readyz reports.
struct ReadyState {
  bool ready = false;
  std::string reason;  // why not ready (shown in the 503 body); optional when ready
};

using ReadinessCheck = std::function<ReadyState()>;

// The cursor key of the servers of `store` (HttpServerOptions::cursor_key):
// 32 random bytes kept in the store's meta table, created by the first call
// on a store and read by every later one, on any member sharing the store,
// so that a cursor of one member works on another and across restarts. The
// row's key starts with 0xff, which no MetaKey uses. Chosen over a key
// derived from the configuration: no secret for operators to generate,
// distribute and rotate, and nothing guessable when http.auth_token is empty.
// On a store with conditional writes (HBase, shared by members) the key is
// written only where none is, so members that create it at once all read
// back the first that landed. A store without them has one process. Errors:
// the store's.
Result<std::string> LoadOrCreateCursorKey(TableStore& store);
// The meta row that holds it (random per store: not part of the indexed data).
inline constexpr std::string_view kCursorKeyRow = "\xff" "http.cursor_key";

class HttpServer {
 public:
  // Registers the server's metrics in `registry` at once (scraped even before Start()).
  HttpServer(HttpServerOptions options, const QueryEngine& engine, prometheus::Registry& registry,
             ReadinessCheck readiness, const Clock& clock);
  ~HttpServer();  // Stops.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread; returns once the port is
  // bound (connections made after it are served). Errors: kUnavailable when the
  // address cannot be bound; kFailedPrecondition when already started.
  Status Start();

  // Stops accepting, lets in-flight requests finish and joins every thread.
  // Idle keep-alive connections are closed promptly. Idempotent; a no-op
  // before Start().
  void Stop();

  // The bound port after a successful Start(); 0 before.
  int port() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex
