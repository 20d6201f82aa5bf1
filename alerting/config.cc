#include "alerting/config.h"

#include "common/time_parse.h"
#include "common/yaml_walker.h"

#include <re2/re2.h>

#include <cstdlib>
#include <set>

namespace logdex::alerting {
namespace {

using Field = YamlWalker::Field;

void WalkRule(YamlWalker& w, const YAML::Node& n, const std::string& path, RuleConfig& r) {
  if (!n.IsMap()) return w.Fail(n, path, "must be a mapping");
  w.Map(n, path,
        {{"name", w.String(r.name)},
         {"apps", w.StringList(r.apps, true)},
         {"hosts", w.StringList(r.hosts, true)},
         {"severities", Field([&](const YAML::Node& v, const std::string& key) {
            std::vector<std::string> names;
            w.StringList(names, true)(v, key);
            r.severities.clear();
            for (size_t i = 0; i < names.size(); ++i) {
              auto s = ParseSeverity(names[i]);
              if (!s) {
                w.Fail(v.IsSequence() ? v[i] : v, key, "unknown severity \"" + names[i] + "\"");
                continue;
              }
              r.severities.push_back(*s);
            }
            if (names.empty()) w.Fail(v, key, "must not be empty");
          })},
         {"tags", w.StringMap(r.tags)},
         {"message", Field([&](const YAML::Node& v, const std::string& key) {
            w.String(r.message_regex)(v, key);
            RE2 re(r.message_regex, RE2::Quiet);
            if (!re.ok()) w.Fail(v, key, "bad regex: " + re.error());
          })},
         {"group_by_host", w.Bool(r.group_by_host)},
         {"suppress", w.Bool(r.suppress)},
         {"sinks", w.StringList(r.sinks, true)}});
  if (!n["name"]) {
    w.Fail(n, path + ".name", "missing");
  } else if (r.name.empty()) {
    w.Fail(n["name"], path + ".name", "must not be empty");
  }
}

void WalkSink(YamlWalker& w, const YAML::Node& n, const std::string& path, SinkConfig& s) {
  if (!n.IsMap()) return w.Fail(n, path, "must be a mapping");
  bool typed = false;
  w.Map(n, path,
        {{"name", w.String(s.name)},
         {"type", Field([&](const YAML::Node& v, const std::string& key) {
            typed = true;
            w.Choice(s.type, {{"webhook", SinkType::kWebhook},
                              {"alertmanager", SinkType::kAlertmanager},
                              {"slack", SinkType::kSlack},
                              {"pagerduty", SinkType::kPagerDuty}})(v, key);
          })},
         {"url", w.String(s.url)},
         {"headers", w.StringMap(s.headers)},
         {"secret", w.String(s.secret)},
         {"secret_env", w.String(s.secret_env)},
         {"routing_key", w.String(s.routing_key)},
         {"routing_key_env", w.String(s.routing_key_env)},
         {"timeout", w.Duration(s.timeout_ms, 1)},
         {"concurrency", w.Number<uint32_t>(s.concurrency, 1, UINT32_MAX)},
         {"tls_verify", w.Bool(s.tls_verify)},
         {"ca_file", w.String(s.ca_file)},
         {"event_duration", w.Duration(s.event_duration_ms, 1000)},
         {"circuit", Field([&](const YAML::Node& c, const std::string& cp) {
            w.Map(c, cp,
                  {{"failures", w.Number<uint32_t>(s.circuit.failures, 1, UINT32_MAX)},
                   {"open_for", w.Duration(s.circuit.open_ms, 1)}});
          })}});
  if (!typed) return w.Fail(n, path + ".type", "missing (webhook, alertmanager, slack or pagerduty)");
  if (!n["name"]) {
    s.name = SinkTypeName(s.type);
  } else if (s.name.empty()) {
    w.Fail(n["name"], path + ".name", "must not be empty");
  }
  for (const char* env_key : {"secret_env", "routing_key_env"}) {
    if (n[env_key] && n[env_key].IsScalar() && n[env_key].Scalar().empty()) {
      w.Fail(n[env_key], path + "." + env_key, "must name an environment variable");
    }
  }
  if (s.type == SinkType::kPagerDuty && s.url.empty()) s.url = "https://events.pagerduty.com/v2/enqueue";
  if (s.url.empty()) {
    w.Fail(n, path + ".url", "missing");
  } else if (s.url.rfind("http://", 0) != 0 && s.url.rfind("https://", 0) != 0) {
    w.Fail(path + ".url", "must start with http:// or https://");
  }
}

}  // namespace

void WalkAlertingConfig(YamlWalker& w, const YAML::Node& section, AlertingConfig& c) {
  const std::string p = "alerting";
  w.Map(section, p,
        {{"enabled", w.Bool(c.enabled)},
         {"default_rule", w.Bool(c.default_rule)},
         {"query_base_url", w.String(c.query_base_url)},
         {"dedup_ttl", Field([&](const YAML::Node& v, const std::string& key) {
            int64_t ms = c.dedup_ttl_s * 1000;
            w.Duration(ms, 1000)(v, key);
            c.dedup_ttl_s = ms / 1000;
          })},
         {"state_ttl", Field([&](const YAML::Node& v, const std::string& key) {
            int64_t ms = c.state_ttl_s * 1000;
            w.Duration(ms, 1000)(v, key);
            c.state_ttl_s = ms / 1000;
          })},
         {"rules", Field([&](const YAML::Node& v, const std::string& key) {
            w.List(v, key, [&](const YAML::Node& item, const std::string& item_path) {
              WalkRule(w, item, item_path, c.rules.emplace_back());
            });
          })},
         {"limits", Field([&](const YAML::Node& v, const std::string& key) {
            auto& l = c.limits;
            w.Map(v, key,
                  {{"group_window", w.Duration(l.group_window_ms, 1)},
                   {"per_group", w.Number<uint32_t>(l.per_group, 1, UINT32_MAX)},
                   {"per_app", w.Number<uint32_t>(l.per_app, 0, UINT32_MAX)},
                   {"global", w.Number<uint32_t>(l.global, 0, UINT32_MAX)},
                   {"limit_window", w.Duration(l.limit_window_ms, 1)},
                   {"digest_delay", w.Duration(l.digest_delay_ms, 0)}});
          })},
         {"delivery", Field([&](const YAML::Node& v, const std::string& key) {
            auto& d = c.delivery;
            using D = DeliveryConfig::Dispatch;
            w.Map(v, key,
                  {{"poll_interval", w.Duration(d.poll_interval_ms, 1)},
                   {"scan_batch", w.Number<uint32_t>(d.scan_batch, 1, UINT32_MAX)},
                   {"max_attempts", w.Number<uint32_t>(d.max_attempts, 1, UINT32_MAX)},
                   {"max_age", w.Duration(d.max_age_ms, 1000)},
                   {"backoff_initial", w.Duration(d.backoff_initial_ms, 1)},
                   {"backoff_max", w.Duration(d.backoff_max_ms, 1)},
                   {"backlog_warn_rows", w.Number<uint32_t>(d.backlog_warn_rows, 1, UINT32_MAX)},
                   {"backlog_warn_age", w.Duration(d.backlog_warn_age_ms, 1)},
                   {"dispatch", w.Choice(d.dispatch, {{"auto", D::kAuto},
                                                      {"every_member", D::kEveryMember},
                                                      {"partition_0_owner", D::kPartitionZeroOwner}})},
                   {"dispatch_topic", w.String(d.dispatch_topic)}});
          })},
         {"sinks", Field([&](const YAML::Node& v, const std::string& key) {
            w.List(v, key, [&](const YAML::Node& item, const std::string& item_path) {
              WalkSink(w, item, item_path, c.sinks.emplace_back());
            });
          })}});

  // Across keys, each problem on the line of the key it names.
  std::set<std::string> sink_names;
  for (size_t i = 0; i < c.sinks.size(); ++i) {
    if (!sink_names.insert(c.sinks[i].name).second) {
      w.Fail(p + ".sinks[" + std::to_string(i) + "]", "duplicate sink name \"" + c.sinks[i].name + "\"");
    }
  }
  std::set<std::string> rule_names;
  for (size_t i = 0; i < c.rules.size(); ++i) {
    const std::string rp = p + ".rules[" + std::to_string(i) + "]";
    if (c.rules[i].name == "default" || (!c.rules[i].name.empty() && !rule_names.insert(c.rules[i].name).second)) {
      w.Fail(rp + ".name", "duplicate or reserved rule name \"" + c.rules[i].name + "\"");
    }
    for (const auto& s : c.rules[i].sinks) {
      if (!sink_names.count(s)) w.Fail(rp + ".sinks", "no sink named \"" + s + "\"");
    }
  }
  if (c.delivery.backoff_max_ms < c.delivery.backoff_initial_ms) {
    w.Fail(p + ".delivery.backoff_max", "must be >= backoff_initial");
  }
}

void ResolveAlertingSecrets(AlertingConfig& c, const ConfigSource& source, std::vector<std::string>* problems) {
  auto from_env = [&](const std::string& name, const std::string& key, std::string& out) {
    if (name.empty()) return;
    const char* v = std::getenv(name.c_str());
    if (!v || !*v) return problems->push_back(source.Problem(key, "environment variable " + name + " is not set"));
    out = v;
  };
  for (size_t i = 0; i < c.sinks.size(); ++i) {
    SinkConfig& s = c.sinks[i];
    const std::string sp = "alerting.sinks[" + std::to_string(i) + "]";
    from_env(s.secret_env, sp + ".secret_env", s.secret);
    from_env(s.routing_key_env, sp + ".routing_key_env", s.routing_key);
    if (s.type == SinkType::kPagerDuty && s.routing_key.empty() && s.routing_key_env.empty()) {
      problems->push_back(source.Problem(sp, "routing_key: missing (pagerduty needs routing_key or routing_key_env)"));
    }
  }
}

std::vector<std::string> SecretEnvNames(const AlertingConfig& c) {
  std::vector<std::string> names;
  for (const SinkConfig& s : c.sinks) {
    for (const std::string* n : {&s.secret_env, &s.routing_key_env}) {
      if (!n->empty()) names.push_back(*n);
    }
  }
  return names;
}

Result<AlertingConfig> ParseAlertingConfig(const std::string& yaml, const std::string& name) {
  AlertingConfig c;
  YamlWalker w(name);
  Status walked = WalkYaml(yaml, w, [&](const YAML::Node& root) {
    w.Map(root, "", {{"alerting", [&](const YAML::Node& v, const std::string&) { WalkAlertingConfig(w, v, c); }}});
  });
  if (!walked.ok()) return walked.error();
  std::vector<std::string> problems;
  ResolveAlertingSecrets(c, w.source(), &problems);
  if (Status s = ProblemsStatus(problems); !s.ok()) return s.error();
  if (Status s = ValidateAlertingConfig(c); !s.ok()) return s.error();
  return c;
}

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

}  // namespace logdex::alerting
