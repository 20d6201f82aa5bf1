// HttpServer: logdex's one HTTP port (cpp-httplib) with
//   GET /metrics        the Prometheus registry in text format (0.0.4)
//   GET /healthz        200 "ok" while the process serves
//   GET /readyz         200 when the readiness callback says ready, else 503 + reason
//   GET /api/v1/query   the QueryEngine as JSON (parameters below)
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
//   scan                       true|false: allow the main-table scan path
// A time range (from+to, or since) is required. A page asked with `since`
// returns a cursor that pins the range it resolved to, so later pages of the
// same `since` query continue the same range even as the clock moves.
//
// Answers: 200 {"records": [{"ts", "time", "severity", "app", "host", "message",
// "tags": {k: v}}], "next_cursor": string|null, "stats": {...QueryStats}};
// 400 {"error", "parameter"?} for a bad request or an engine kInvalidArgument;
// 503 {"error"} for kUnavailable; 500 {"error"} for any other error; 401 for a
// missing or wrong bearer token; 404 for unknown paths. Invalid UTF-8 in log
// text is replaced by U+FFFD in the JSON.
//
// Auth: when `bearer_token` is set, every path except /healthz and /readyz
// needs "Authorization: Bearer <token>" (compared in constant time).
//
// Metrics it adds to the registry (no per-request labels):
//   logdex_http_requests_total{endpoint, code}   endpoint in metrics|healthz|readyz|query|other
//   logdex_http_query_duration_seconds           histogram of /api/v1/query handling time
//
// Ownership: the engine, registry, readiness callback's captures and clock
// must outlive the server. Thread-safety: Start() and Stop() may be called from
// any thread (Stop() concurrently with itself too); handlers run on
// `worker_threads` threads and call the engine, the registry's Collect() and
// the readiness callback concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"
#include "indexer/query.h"

namespace prometheus {
class Registry;
}

namespace logdex {

struct HttpServerOptions {
  // Address to listen on. Default loopback only.
  std::string host = "127.0.0.1";
  // TCP port; 0 picks a free one (see HttpServer::port()). Default 0.
  int port = 0;
  // When non-empty, the bearer token every endpoint but /healthz and /readyz
  // requires. Default empty (no auth).
  std::string bearer_token;
  // Threads that handle requests. Default 4.
  int worker_threads = 4;
  // Socket read and write timeouts, seconds. Default 30.
  int io_timeout_seconds = 30;
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
