// Sinks: where notifications go. AlertSink is the interface the dispatcher
// delivers through; the HTTP sinks (libcurl) implement it:
//
//   webhook       POST <url>, JSON body (WebhookBody), headers
//                   Content-Type: application/json
//                   Idempotency-Key: <notification idempotency key>
//                   X-Logdex-Timestamp: <ms since epoch, from the clock seam>
//                   X-Logdex-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>  (when a secret is set)
//                 plus the configured headers. Receivers verify the signature
//                 over the exact body bytes and may reject old timestamps.
//   alertmanager  POST <url>/api/v2/alerts, a one-element array: labels
//                 alertname ("logdex_<rule>"), app, host, severity (lower case),
//                 kind, group; annotations summary, description (with the log
//                 line and the query link), query, idempotency_key, count;
//                 startsAt = the record time (digests: first record), endsAt =
//                 max(record time, now) + event_duration (one-shot event);
//                 generatorURL = the query link.
//   slack         POST <incoming webhook url>, {"text": ...} (mrkdwn, escaped).
//   pagerduty     POST Events API v2 enqueue: routing_key, event_action
//                 "trigger", dedup_key = the group (16 hex digits; digests of
//                 apps and storms use their idempotency key), payload
//                 {summary <= 1024 chars, source = host (or app), severity
//                 critical|error|warning|info, timestamp, component = app,
//                 class = kind, custom_details}, links = the query link.
//
// Every request has the sink's timeout (connect included), TLS peer and host
// verification unless tls_verify is false, and the Idempotency-Key header.
//
// Thread-safety: Deliver() may be called from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "alerting/config.h"
#include "alerting/notification.h"
#include "common/clock.h"
#include "common/result.h"

namespace logdex::alerting {

struct DeliveryResult {
  bool ok = false;
  // False for failures a retry cannot fix (HTTP 4xx other than 408/429).
  bool retryable = true;
  long http_status = 0;  // 0 when no response arrived
  // Metric reason: connect | timeout | http_5xx | http_4xx | http_429 | tls | other ("" when ok).
  std::string reason;
  std::string error;     // human-readable, for logs and the outbox row
};

class AlertSink {
 public:
  virtual ~AlertSink() = default;
  // The configured sink name (unique; the `sink` metric label).
  virtual const std::string& name() const = 0;
  // Delivers one notification; blocks at most about the sink's timeout.
  virtual DeliveryResult Deliver(const Notification& n) = 0;
};

// One HTTP request as a sink sends it (tests inspect payloads through this).
struct HttpRequest {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Base of the libcurl sinks: BuildRequest() makes the request, Deliver() sends it.
class HttpSink : public AlertSink {
 public:
  HttpSink(SinkConfig config, const Clock& clock);
  const std::string& name() const override { return config_.name; }
  DeliveryResult Deliver(const Notification& n) override;
  virtual HttpRequest BuildRequest(const Notification& n) const = 0;
  const SinkConfig& config() const { return config_; }

 protected:
  // Common headers (content type, idempotency key, configured headers).
  HttpRequest Start(std::string url, const Notification& n) const;
  const SinkConfig config_;
  const Clock& clock_;
};

// Makes the sink for a config entry.
std::unique_ptr<HttpSink> MakeSink(const SinkConfig& config, const Clock& clock);
// All configured sinks, in config order.
std::vector<std::unique_ptr<AlertSink>> MakeSinks(const AlertingConfig& config, const Clock& clock);

// Hex of HMAC-SHA256(key, data) (64 lower-case hex digits).
std::string HmacSha256Hex(std::string_view key, std::string_view data);

// The JSON body the generic webhook posts (exposed for documentation and tests).
std::string WebhookBody(const Notification& n);

}  // namespace logdex::alerting
