// Alerting configuration: detection rules, grouping and storm limits, outbox
// delivery and sinks, and the parser for the `alerting:` section of logdex's
// YAML config (alerting/example.yaml documents every key with its default).
//
// Plain value types: copy freely; no thread-safety concerns. Durations are in
// milliseconds (`_ms`) or seconds (`_s`) as the field name says; in YAML they
// are strings with a unit: "250ms", "5s", "2m", "1h", "7d".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/config_source.h"
#include "common/result.h"
#include "common/severity.h"

namespace YAML {
class Node;
}
namespace logdex {
class YamlWalker;  // common/yaml_walker.h
}

namespace logdex::alerting {

// ERROR and FATAL: the severities a rule takes unless it lists its own.
std::vector<Severity> DefaultRuleSeverities();

// One detection rule. A record matches when every non-empty selector matches;
// rules are tried in order and the first match wins. When no rule matches and
// `AlertingConfig::default_rule` is on, the built-in default rule (name
// "default", every ERROR/FATAL, all sinks) takes the record.
struct RuleConfig {
  std::string name;                   // required, unique; shows up in notifications and the `rule` label
  std::vector<std::string> apps;      // exact app names; empty = any app
  std::vector<std::string> hosts;     // exact host names; empty = any host
  std::vector<Severity> severities = DefaultRuleSeverities();
  std::map<std::string, std::string> tags;  // every key=value must be on the record; value "*" = key present
  std::string message_regex;          // RE2, unanchored (searches the line); empty = any message
  bool group_by_host = false;         // fingerprint includes the host
  bool suppress = false;              // matching records are counted but never notified (known noise)
  std::vector<std::string> sinks;     // sink names to notify; empty = every sink
};

// Grouping and storm control. Counting "windows" are processing-time windows
// (the clock seam), not record timestamps, so replays of old data behave like
// live data.
struct LimitsConfig {
  // A group's window opens at its first occurrence and lasts this long.
  int64_t group_window_ms = 60'000;
  // Immediate notifications per group per window (the first occurrence counts);
  // further occurrences become the group's digest ("N more since ...").
  uint32_t per_group = 1;
  // Immediate notifications per app per limit window; beyond it, first
  // occurrences of new groups go to the app's digest. 0 = no per-app limit.
  uint32_t per_app = 20;
  // Immediate notifications in total per limit window; beyond it everything
  // goes to one storm summary per window. 0 = no global cap.
  uint32_t global = 100;
  // Fixed windows (aligned to multiples of this since the epoch) for per_app and global.
  int64_t limit_window_ms = 60'000;
  // Digests and summaries fall due this long after their window closes, so that
  // the write batch that last updated them is durable before delivery reads them.
  int64_t digest_delay_ms = 1'000;
};

// How the outbox is drained (SinkDispatcher).
struct DeliveryConfig {
  int64_t poll_interval_ms = 50;       // the dispatcher rescans the outbox at least this often
  uint32_t scan_batch = 256;           // due rows read per scan
  uint32_t max_attempts = 30;          // per notification and sink; then dropped (reason max_attempts)
  int64_t max_age_ms = 24 * 3'600'000LL;  // older notifications are dropped (reason expired)
  int64_t backoff_initial_ms = 200;    // first retry delay; doubles per attempt
  int64_t backoff_max_ms = 60'000;     // retry delay cap (before jitter)
  // Warn (and set the backlog gauges) when this many rows are due, or the
  // oldest due row is older than backlog_warn_age_ms.
  uint32_t backlog_warn_rows = 1'000;
  int64_t backlog_warn_age_ms = 60'000;
  // Which group members deliver from the outbox. With a store per member
  // (RocksDB) each must deliver its own; with a shared store (HBase) only the
  // member that owns `dispatch_topic` partition 0 should, or every member
  // would deliver the same rows. kAuto picks by the store backend.
  enum class Dispatch { kAuto, kEveryMember, kPartitionZeroOwner };
  Dispatch dispatch = Dispatch::kAuto;
  std::string dispatch_topic;          // empty = the first of consumer.topics
};

enum class SinkType { kWebhook, kAlertmanager, kSlack, kPagerDuty };
const char* SinkTypeName(SinkType t);

struct CircuitConfig {
  uint32_t failures = 5;       // consecutive failed attempts that open the circuit
  int64_t open_ms = 30'000;    // how long it stays open before one trial attempt
};

struct SinkConfig {
  std::string name;            // unique; defaults to the type name
  SinkType type = SinkType::kWebhook;
  // Endpoint. webhook/slack: the full URL. alertmanager: base URL
  // (".../api/v2/alerts" is appended). pagerduty: defaults to
  // https://events.pagerduty.com/v2/enqueue.
  std::string url;
  std::map<std::string, std::string> headers;  // extra request headers
  std::string secret;          // webhook: HMAC-SHA256 key (or from secret_env: ResolveAlertingSecrets)
  std::string secret_env;      // the environment variable the secret is read from
  std::string routing_key;     // pagerduty: integration routing key (or routing_key_env)
  std::string routing_key_env;
  int64_t timeout_ms = 5'000;  // whole request, connect included
  uint32_t concurrency = 2;    // parallel requests (dispatcher worker threads for this sink)
  bool tls_verify = true;      // verify peer certificate and host name
  std::string ca_file;         // PEM bundle; empty = system default
  // alertmanager: endsAt = startsAt + this (a one-shot event resolves itself).
  int64_t event_duration_ms = 300'000;
  CircuitConfig circuit;
};

struct AlertingConfig {
  bool enabled = true;
  bool default_rule = true;    // catch every ERROR/FATAL that no rule matched
  std::vector<RuleConfig> rules;
  LimitsConfig limits;
  DeliveryConfig delivery;
  std::vector<SinkConfig> sinks;
  // Link in notifications: the web UI, <query_base_url>/?app=..&host=..&severity=..&from=..&to=..
  std::string query_base_url = "http://localhost:8080";
  // How long processed chunk ids are remembered, so replays notify no one.
  // Should cover Kafka retention of unprocessed offsets; default 7 days.
  int64_t dedup_ttl_s = 7 * 86'400;
  // TTL of grouping/limit state rows (must exceed every window). Default 1 day.
  int64_t state_ttl_s = 86'400;
};

// Walks the `alerting:` section (the node under the key) into `out`,
// reporting every problem to `walker` with its line and key path, e.g.
// "logdex.yaml:12: alerting.sinks[1].timeout: ...", the checks across keys
// (unique names, rules' sinks exist, backoff order) included. A null or
// absent node leaves the defaults (default rule, no sinks). serve's config
// parser (server/config.cc) calls it for its file's section.
void WalkAlertingConfig(YamlWalker& walker, const YAML::Node& section, AlertingConfig& out);

// Reads the sinks' secret_env and routing_key_env variables into secret and
// routing_key, and checks that every pagerduty sink has a routing key. Each
// problem is added to `problems`, naming the file's line through `source`.
// Run after the environment is final (serve: after its overrides).
void ResolveAlertingSecrets(AlertingConfig& config, const ConfigSource& source, std::vector<std::string>* problems);

// The environment variables the sinks read secrets from.
std::vector<std::string> SecretEnvNames(const AlertingConfig& config);

// Parses the `alerting:` section of a YAML document (`name` names it in
// errors), resolves its secrets and validates it: what serve does with its
// file's section, for a document of that section alone. Never throws.
Result<AlertingConfig> ParseAlertingConfig(const std::string& yaml, const std::string& name);

// Semantic checks shared by the parser and programmatic configs: unique rule
// and sink names, rules' sinks exist, regexes compile, limits positive.
Status ValidateAlertingConfig(const AlertingConfig& config);

// "250ms", "5s", "2m", "1h", "7d" -> milliseconds; error for anything else.
Result<int64_t> ParseDurationMs(const std::string& text);

}  // namespace logdex::alerting
