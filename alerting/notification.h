// A notification and its outbox row.
//
// The stager writes one outbox row per (notification, sink) into table
// `alert_outbox` under OutboxKey{due_ms, alert_id}, alert_id =
// XXH64(idempotency_key "\0" sink). The value is an OutboxEntry as JSON
// (text fields are valid UTF-8: invalid bytes of log lines become U+FFFD).
//
// Idempotency keys (stable across replays and restarts; receivers may drop
// a key they have seen):
//   event          "ev:<chunk id, 16 hex>:<record index>"
//   group digest   "gd:<group fingerprint, 16 hex>:<window start ms>"
//   app digest     "ad:<app id, 16 hex>:<limit window start ms>"
//   storm summary  "st:<limit window start ms>"
//
// Plain value types; no thread-safety concerns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/severity.h"

namespace logdex::alerting {

inline constexpr std::string_view kStateTable = "alert_state";  // grouping and limit state (TTL state_ttl)
inline constexpr std::string_view kSeenTable = "alert_seen";    // processed chunk ids (TTL dedup_ttl)

enum class NotificationKind { kEvent, kGroupDigest, kAppDigest, kStormSummary };
const char* KindName(NotificationKind k);  // "event", "group_digest", "app_digest", "storm_summary"

struct Notification {
  NotificationKind kind = NotificationKind::kEvent;
  std::string idempotency_key;
  std::string rule;               // rule name ("default" for the built-in rule)
  std::string app;
  std::string host;               // the (latest) record's host
  Severity severity = Severity::kError;
  uint64_t group = 0;             // fingerprint (events and group digests; 0 otherwise)
  std::string message_template;
  std::string message;            // the log line (events) or the latest one (digests), <= 4 KiB
  std::vector<std::pair<std::string, std::string>> tags;
  int64_t ts_ms = 0;              // the (latest) record's timestamp
  int64_t kafka_ts_ms = 0;        // events: the record's Kafka timestamp (latency origin); 0 = unknown
  uint64_t count = 1;             // records this notification stands for
  int64_t since_ms = 0;           // digests: timestamp of the first record counted
  int64_t window_end_ms = 0;      // digests: when counting stopped
  int64_t staged_ms = 0;          // processing time when first staged
  std::string query_url;          // link to the records in logdex's query API

  // One line for titles: "[ERROR] app@host: first line of message", or for
  // digests "[ERROR] app: 9999 more since 12:00:03 UTC: <template>".
  std::string Summary() const;
  // A few lines: the log line, counts, rule, group, query link.
  std::string Description() const;
};

// A row of the outbox: one notification for one sink, with its delivery state.
struct OutboxEntry {
  std::string sink;
  uint32_t attempts = 0;          // failed attempts so far
  std::string last_error;
  Notification n;
};

std::string EncodeOutboxEntry(const OutboxEntry& e);
Result<OutboxEntry> DecodeOutboxEntry(std::string_view value);

// The outbox row id of a notification for a sink.
uint64_t OutboxAlertId(std::string_view idempotency_key, std::string_view sink);

// "2026-11-29T12:00:03.250Z" (RFC 3339, UTC, milliseconds).
std::string FormatRfc3339(int64_t ms);

// The link a notification carries to the records it is about: serve's web
// UI, <base>/?app=..[&host=..]&severity=..&from=..&to=.. (ms, a minute
// either side), which shows them (the UI takes the query API's parameters:
// <base>/api/v1/query with the same query string answers them as JSON).
// Empty when `base` is.
inline constexpr std::string_view kUiPath = "/";
std::string QueryLink(std::string_view base, std::string_view app, std::string_view host, Severity severity,
                      int64_t from_ms, int64_t to_ms);
// "12:00:03 UTC"
std::string FormatClock(int64_t ms);
// Valid UTF-8: invalid sequences become U+FFFD; at most `max_bytes` (cut on a character boundary).
std::string SanitizeUtf8(std::string_view in, size_t max_bytes);
// "%016llx"
std::string Hex16(uint64_t v);

}  // namespace logdex::alerting
