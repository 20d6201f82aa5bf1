#include "alerting/config.h"

#include "common/time_parse.h"

#include <re2/re2.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <limits>
#include <set>

namespace logdex::alerting {
namespace {

// Thrown inside this file only; ParseAlertingConfig turns it into a Status.
struct ParseError {
  std::string message;
};

int LineOf(const YAML::Node& n) { return n.IsDefined() ? n.Mark().line + 1 : 0; }

[[noreturn]] void Fail(const YAML::Node& at, const std::string& path, const std::string& what) {
  const int line = LineOf(at);
  throw ParseError{(line > 0 ? "line " + std::to_string(line) + ": " : std::string()) + path + ": " + what};
}

std::string Scalar(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(n, path, "expected a scalar value");
  return n.Scalar();
}

bool Bool(const YAML::Node& n, const std::string& path) {
  const std::string s = Scalar(n, path);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  Fail(n, path, "expected true or false, got \"" + s + "\"");
}

uint32_t Uint(const YAML::Node& n, const std::string& path, uint32_t min_value) {
  const std::string s = Scalar(n, path);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno != 0 || v > std::numeric_limits<uint32_t>::max())
    Fail(n, path, "expected a non-negative integer, got \"" + s + "\"");
  if (v < min_value) Fail(n, path, "must be at least " + std::to_string(min_value));
  return static_cast<uint32_t>(v);
}

int64_t Duration(const YAML::Node& n, const std::string& path, int64_t min_ms) {
  const std::string s = Scalar(n, path);
  auto ms = ParseDurationMs(s);
  if (!ms.ok()) Fail(n, path, ms.error().message);
  if (*ms < min_ms) Fail(n, path, "must be at least " + std::to_string(min_ms) + "ms");
  return *ms;
}

std::vector<std::string> StringList(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> out;
  if (n.IsScalar()) return {n.Scalar()};
  if (!n.IsSequence()) Fail(n, path, "expected a list");
  for (size_t i = 0; i < n.size(); ++i) out.push_back(Scalar(n[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

std::map<std::string, std::string> StringMap(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) Fail(n, path, "expected a mapping");
  std::map<std::string, std::string> out;
  for (const auto& kv : n) {
    const std::string key = Scalar(kv.first, path);
    out[key] = Scalar(kv.second, path + "." + key);
  }
  return out;
}

// Rejects keys the section does not know (typos must not pass silently).
void CheckKeys(const YAML::Node& n, const std::string& path, std::initializer_list<const char*> known) {
  if (!n.IsMap()) Fail(n, path, "expected a mapping");
  for (const auto& kv : n) {
    const std::string key = Scalar(kv.first, path);
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) Fail(kv.first, path + "." + key, "unknown key");
  }
}

std::string EnvOr(const YAML::Node& n, const std::string& path) {
  const std::string name = Scalar(n, path);
  const char* v = std::getenv(name.c_str());
  if (!v || !*v) Fail(n, path, "environment variable " + name + " is not set");
  return v;
}

RuleConfig ParseRule(const YAML::Node& n, const std::string& path) {
  CheckKeys(n, path,
            {"name", "apps", "hosts", "severities", "tags", "message", "group_by_host", "suppress", "sinks"});
  RuleConfig r;
  if (!n["name"]) Fail(n, path + ".name", "missing");
  r.name = Scalar(n["name"], path + ".name");
  if (auto v = n["apps"]) r.apps = StringList(v, path + ".apps");
  if (auto v = n["hosts"]) r.hosts = StringList(v, path + ".hosts");
  if (auto v = n["severities"]) {
    r.severities.clear();
    const auto names = StringList(v, path + ".severities");
    for (size_t i = 0; i < names.size(); ++i) {
      auto s = ParseSeverity(names[i]);
      if (!s) Fail(v.IsSequence() ? v[i] : v, path + ".severities", "unknown severity \"" + names[i] + "\"");
      r.severities.push_back(*s);
    }
    if (r.severities.empty()) Fail(v, path + ".severities", "must not be empty");
  }
  if (auto v = n["tags"]) r.tags = StringMap(v, path + ".tags");
  if (auto v = n["message"]) {
    r.message_regex = Scalar(v, path + ".message");
    RE2 re(r.message_regex, RE2::Quiet);
    if (!re.ok()) Fail(v, path + ".message", "bad regex: " + re.error());
  }
  if (auto v = n["group_by_host"]) r.group_by_host = Bool(v, path + ".group_by_host");
  if (auto v = n["suppress"]) r.suppress = Bool(v, path + ".suppress");
  if (auto v = n["sinks"]) r.sinks = StringList(v, path + ".sinks");
  return r;
}

SinkConfig ParseSink(const YAML::Node& n, const std::string& path) {
  CheckKeys(n, path,
            {"name", "type", "url", "headers", "secret", "secret_env", "routing_key", "routing_key_env", "timeout",
             "concurrency", "tls_verify", "ca_file", "event_duration", "circuit"});
  SinkConfig s;
  if (!n["type"]) Fail(n, path + ".type", "missing (webhook, alertmanager, slack or pagerduty)");
  const std::string type = Scalar(n["type"], path + ".type");
  if (type == "webhook") {
    s.type = SinkType::kWebhook;
  } else if (type == "alertmanager") {
    s.type = SinkType::kAlertmanager;
  } else if (type == "slack") {
    s.type = SinkType::kSlack;
  } else if (type == "pagerduty") {
    s.type = SinkType::kPagerDuty;
  } else {
    Fail(n["type"], path + ".type", "unknown sink type \"" + type + "\" (webhook, alertmanager, slack, pagerduty)");
  }
  s.name = n["name"] ? Scalar(n["name"], path + ".name") : type;
  if (auto v = n["url"]) s.url = Scalar(v, path + ".url");
  if (s.type == SinkType::kPagerDuty && s.url.empty()) s.url = "https://events.pagerduty.com/v2/enqueue";
  if (s.url.empty()) Fail(n, path + ".url", "missing");
  if (s.url.rfind("http://", 0) != 0 && s.url.rfind("https://", 0) != 0)
    Fail(n["url"], path + ".url", "must start with http:// or https://");
  if (auto v = n["headers"]) s.headers = StringMap(v, path + ".headers");
  if (auto v = n["secret"]) s.secret = Scalar(v, path + ".secret");
  if (auto v = n["secret_env"]) s.secret = EnvOr(v, path + ".secret_env");
  if (auto v = n["routing_key"]) s.routing_key = Scalar(v, path + ".routing_key");
  if (auto v = n["routing_key_env"]) s.routing_key = EnvOr(v, path + ".routing_key_env");
  if (s.type == SinkType::kPagerDuty && s.routing_key.empty())
    Fail(n, path + ".routing_key", "missing (pagerduty needs routing_key or routing_key_env)");
  if (auto v = n["timeout"]) s.timeout_ms = Duration(v, path + ".timeout", 1);
  if (auto v = n["concurrency"]) s.concurrency = Uint(v, path + ".concurrency", 1);
  if (auto v = n["tls_verify"]) s.tls_verify = Bool(v, path + ".tls_verify");
  if (auto v = n["ca_file"]) s.ca_file = Scalar(v, path + ".ca_file");
  if (auto v = n["event_duration"]) s.event_duration_ms = Duration(v, path + ".event_duration", 1000);
  if (auto c = n["circuit"]) {
    CheckKeys(c, path + ".circuit", {"failures", "open_for"});
    if (auto v = c["failures"]) s.circuit.failures = Uint(v, path + ".circuit.failures", 1);
    if (auto v = c["open_for"]) s.circuit.open_ms = Duration(v, path + ".circuit.open_for", 1);
  }
  return s;
}

AlertingConfig Parse(const YAML::Node& root) {
  AlertingConfig c;
  if (!root || root.IsNull()) return c;
  const std::string p = "alerting";
  CheckKeys(root, p,
            {"enabled", "default_rule", "rules", "limits", "delivery", "sinks", "query_base_url", "dedup_ttl",
             "state_ttl"});
  if (auto v = root["enabled"]) c.enabled = Bool(v, p + ".enabled");
  if (auto v = root["default_rule"]) c.default_rule = Bool(v, p + ".default_rule");
  if (auto v = root["query_base_url"]) c.query_base_url = Scalar(v, p + ".query_base_url");
  if (auto v = root["dedup_ttl"]) c.dedup_ttl_s = Duration(v, p + ".dedup_ttl", 1000) / 1000;
  if (auto v = root["state_ttl"]) c.state_ttl_s = Duration(v, p + ".state_ttl", 1000) / 1000;
  if (auto rules = root["rules"]) {
    if (!rules.IsSequence()) Fail(rules, p + ".rules", "expected a list");
    for (size_t i = 0; i < rules.size(); ++i) c.rules.push_back(ParseRule(rules[i], p + ".rules[" + std::to_string(i) + "]"));
  }
  if (auto l = root["limits"]) {
    const std::string lp = p + ".limits";
    CheckKeys(l, lp, {"group_window", "per_group", "per_app", "global", "limit_window", "digest_delay"});
    if (auto v = l["group_window"]) c.limits.group_window_ms = Duration(v, lp + ".group_window", 1);
    if (auto v = l["per_group"]) c.limits.per_group = Uint(v, lp + ".per_group", 1);
    if (auto v = l["per_app"]) c.limits.per_app = Uint(v, lp + ".per_app", 0);
    if (auto v = l["global"]) c.limits.global = Uint(v, lp + ".global", 0);
    if (auto v = l["limit_window"]) c.limits.limit_window_ms = Duration(v, lp + ".limit_window", 1);
    if (auto v = l["digest_delay"]) c.limits.digest_delay_ms = Duration(v, lp + ".digest_delay", 0);
  }
  if (auto d = root["delivery"]) {
    const std::string dp = p + ".delivery";
    CheckKeys(d, dp,
              {"poll_interval", "scan_batch", "max_attempts", "max_age", "backoff_initial", "backoff_max",
               "backlog_warn_rows", "backlog_warn_age", "dispatch", "dispatch_topic"});
    if (auto v = d["poll_interval"]) c.delivery.poll_interval_ms = Duration(v, dp + ".poll_interval", 1);
    if (auto v = d["scan_batch"]) c.delivery.scan_batch = Uint(v, dp + ".scan_batch", 1);
    if (auto v = d["max_attempts"]) c.delivery.max_attempts = Uint(v, dp + ".max_attempts", 1);
    if (auto v = d["max_age"]) c.delivery.max_age_ms = Duration(v, dp + ".max_age", 1000);
    if (auto v = d["backoff_initial"]) c.delivery.backoff_initial_ms = Duration(v, dp + ".backoff_initial", 1);
    if (auto v = d["backoff_max"]) c.delivery.backoff_max_ms = Duration(v, dp + ".backoff_max", 1);
    if (auto v = d["backlog_warn_rows"]) c.delivery.backlog_warn_rows = Uint(v, dp + ".backlog_warn_rows", 1);
    if (auto v = d["backlog_warn_age"]) c.delivery.backlog_warn_age_ms = Duration(v, dp + ".backlog_warn_age", 1);
    if (auto v = d["dispatch"]) {
      const std::string mode = Scalar(v, dp + ".dispatch");
      using D = DeliveryConfig::Dispatch;
      if (mode == "auto") c.delivery.dispatch = D::kAuto;
      else if (mode == "every_member") c.delivery.dispatch = D::kEveryMember;
      else if (mode == "partition_0_owner") c.delivery.dispatch = D::kPartitionZeroOwner;
      else Fail(v, dp + ".dispatch", "unknown mode \"" + mode + "\" (auto, every_member, partition_0_owner)");
    }
    if (auto v = d["dispatch_topic"]) c.delivery.dispatch_topic = Scalar(v, dp + ".dispatch_topic");
  }
  if (auto sinks = root["sinks"]) {
    if (!sinks.IsSequence()) Fail(sinks, p + ".sinks", "expected a list");
    for (size_t i = 0; i < sinks.size(); ++i) c.sinks.push_back(ParseSink(sinks[i], p + ".sinks[" + std::to_string(i) + "]"));
  }
  // Cross-references, with lines.
  std::set<std::string> sink_names;
  for (size_t i = 0; i < c.sinks.size(); ++i) {
    if (!sink_names.insert(c.sinks[i].name).second)
      Fail(root["sinks"][i], p + ".sinks[" + std::to_string(i) + "].name", "duplicate sink name \"" + c.sinks[i].name + "\"");
  }
  std::set<std::string> rule_names;
  for (size_t i = 0; i < c.rules.size(); ++i) {
    const std::string rp = p + ".rules[" + std::to_string(i) + "]";
    if (!rule_names.insert(c.rules[i].name).second || c.rules[i].name == "default")
      Fail(root["rules"][i], rp + ".name", "duplicate or reserved rule name \"" + c.rules[i].name + "\"");
    for (const auto& s : c.rules[i].sinks)
      if (!sink_names.count(s)) Fail(root["rules"][i]["sinks"], rp + ".sinks", "no sink named \"" + s + "\"");
  }
  if (c.delivery.backoff_max_ms < c.delivery.backoff_initial_ms)
    Fail(root["delivery"], p + ".delivery.backoff_max", "must be >= backoff_initial");
  return c;
}

}  // namespace

std::vector<Severity> DefaultRuleSeverities() {
  std::vector<Severity> v;
  v.push_back(Severity::kError);
  v.push_back(Severity::kFatal);
  return v;
}

const char* SinkTypeName(SinkType t) {
  switch (t) {
    case SinkType::kWebhook: return "webhook";
    case SinkType::kAlertmanager: return "alertmanager";
    case SinkType::kSlack: return "slack";
    case SinkType::kPagerDuty: return "pagerduty";
  }
  return "unknown";
}

Result<int64_t> ParseDurationMs(const std::string& text) {
  auto ms = ParseDuration(text);
  if (!ms.ok()) return Error{Errc::kInvalidArgument, "bad duration \"" + text + "\" (use e.g. 500ms, 5s, 2m, 1h, 7d)"};
  return *ms;
}

Status ValidateAlertingConfig(const AlertingConfig& c) {
  auto bad = [](const std::string& m) { return Status(Errc::kInvalidArgument, "alerting: " + m); };
  std::set<std::string> sinks;
  for (const auto& s : c.sinks) {
    if (s.name.empty()) return bad("a sink has no name");
    if (!sinks.insert(s.name).second) return bad("duplicate sink name " + s.name);
    if (s.url.empty()) return bad("sink " + s.name + " has no url");
    if (s.concurrency == 0) return bad("sink " + s.name + ": concurrency must be >= 1");
    if (s.timeout_ms <= 0) return bad("sink " + s.name + ": timeout must be > 0");
    if (s.type == SinkType::kPagerDuty && s.routing_key.empty()) return bad("sink " + s.name + ": no routing_key");
  }
  std::set<std::string> rules;
  for (const auto& r : c.rules) {
    if (r.name.empty() || r.name == "default" || !rules.insert(r.name).second)
      return bad("rule name \"" + r.name + "\" is empty, reserved or duplicated");
    if (r.severities.empty()) return bad("rule " + r.name + " has no severities");
    for (const auto& s : r.sinks)
      if (!sinks.count(s)) return bad("rule " + r.name + " names unknown sink " + s);
    if (!r.message_regex.empty()) {
      RE2 re(r.message_regex, RE2::Quiet);
      if (!re.ok()) return bad("rule " + r.name + ": bad regex: " + re.error());
    }
  }
  const auto& l = c.limits;
  if (l.group_window_ms <= 0 || l.limit_window_ms <= 0 || l.per_group == 0 || l.digest_delay_ms < 0)
    return bad("limits: windows must be > 0 and per_group >= 1");
  const auto& d = c.delivery;
  if (d.poll_interval_ms <= 0 || d.scan_batch == 0 || d.max_attempts == 0 || d.backoff_initial_ms <= 0 ||
      d.backoff_max_ms < d.backoff_initial_ms || d.max_age_ms <= 0)
    return bad("delivery: intervals must be > 0, max_attempts >= 1, backoff_max >= backoff_initial");
  if (c.dedup_ttl_s <= 0 || c.state_ttl_s <= 0) return bad("dedup_ttl and state_ttl must be > 0");
  if (c.state_ttl_s * 1000 <= std::max(l.group_window_ms, l.limit_window_ms) + l.digest_delay_ms)
    return bad("state_ttl must exceed every window");
  return Status::Ok();
}

Result<AlertingConfig> ParseAlertingConfig(const YAML::Node& alerting_section) {
  try {
    AlertingConfig c = Parse(alerting_section);
    if (Status s = ValidateAlertingConfig(c); !s.ok()) return s.error();
    return c;
  } catch (const ParseError& e) {
    return Error{Errc::kInvalidArgument, e.message};
  } catch (const YAML::Exception& e) {
    return Error{Errc::kInvalidArgument, "line " + std::to_string(e.mark.line + 1) + ": alerting: " + e.msg};
  } catch (const std::exception& e) {
    return Error{Errc::kInvalidArgument, std::string("alerting: ") + e.what()};
  }
}

}  // namespace logdex::alerting
