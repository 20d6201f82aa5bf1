#include "alerting/detector.h"

#include <gtest/gtest.h>

namespace logdex::alerting {
namespace {

proto::LogRecord Record(const std::string& message, std::vector<std::pair<std::string, std::string>> tags = {}) {
  proto::LogRecord r;
  r.set_message(message);
  for (auto& [k, v] : tags) {
    auto* t = r.add_tags();
    t->set_key(k);
    t->set_value(v);
  }
  return r;
}

TEST(MessageTemplate, MasksNumbersIdsAddressesAndPaths) {
  EXPECT_EQ(MessageTemplate("timeout after 5000 ms talking to 10.0.3.7:8080"),
            "timeout after <num> ms talking to <ip>");
  EXPECT_EQ(MessageTemplate("request 3f2b8c1e-9a4d-4e2f-8b1a-0c9d8e7f6a5b failed"), "request <uuid> failed");
  EXPECT_EQ(MessageTemplate("cannot open /var/lib/app/data/17.db: No such file"),
            "cannot open <path>: No such file");
  EXPECT_EQ(MessageTemplate("segfault at 0x7ffd3a2b1c00 in worker"), "segfault at <hex> in worker");
  EXPECT_EQ(MessageTemplate("commit deadbeef1234cafe not found"), "commit <hex> not found");
  EXPECT_EQ(MessageTemplate("peer fe80::1ff:fe23:4567:890a dropped"), "peer <ip> dropped");
  EXPECT_EQ(MessageTemplate("user42 failed login"), "user<num> failed login");
  EXPECT_EQ(MessageTemplate(R"(read C:\data\x.log failed)"), "read <path> failed");
}

TEST(MessageTemplate, LinesThatDifferOnlyInVariablesShareATemplate) {
  EXPECT_EQ(MessageTemplate("db call took 1203 ms for order 99812"),
            MessageTemplate("db call took 7 ms for order 1"));
  EXPECT_NE(MessageTemplate("db call failed"), MessageTemplate("cache call failed"));
}

TEST(MessageTemplate, KeepsPlainWordsAndCapsLongInput) {
  EXPECT_EQ(MessageTemplate("connection refused by upstream"), "connection refused by upstream");
  EXPECT_LE(MessageTemplate(std::string(100'000, 'a')).size(), 1024u);
}

TEST(GroupFingerprint, HostCountsOnlyWhenTheRuleGroupsByHost) {
  const uint64_t a = GroupFingerprint("api", Severity::kError, "t", "h1", false);
  EXPECT_EQ(a, GroupFingerprint("api", Severity::kError, "t", "h2", false));
  EXPECT_NE(GroupFingerprint("api", Severity::kError, "t", "h1", true),
            GroupFingerprint("api", Severity::kError, "t", "h2", true));
  EXPECT_NE(a, GroupFingerprint("api", Severity::kFatal, "t", "h1", false));
  EXPECT_NE(a, GroupFingerprint("web", Severity::kError, "t", "h1", false));
}

TEST(Detector, DefaultRuleTakesEveryErrorAndFatalButNotWarn) {
  AlertingConfig c;
  Detector d(c);
  auto r = Record("boom");
  ASSERT_NE(d.Match("api", "h", Severity::kError, r), nullptr);
  EXPECT_EQ(d.Match("api", "h", Severity::kFatal, r)->config.name, "default");
  EXPECT_EQ(d.Match("api", "h", Severity::kWarn, r), nullptr);
  EXPECT_EQ(d.MinSeverity(), Severity::kError);
}

TEST(Detector, NoDefaultRuleMeansOnlyConfiguredRulesMatch) {
  AlertingConfig c;
  c.default_rule = false;
  Detector d(c);
  EXPECT_EQ(d.Match("api", "h", Severity::kFatal, Record("boom")), nullptr);
}

TEST(Detector, RulesSelectByAppHostSeverityTagsAndMessage) {
  AlertingConfig c;
  c.default_rule = false;
  RuleConfig r;
  r.name = "r";
  r.apps = {"api"};
  r.hosts = {"h1"};
  r.severities = {Severity::kWarn, Severity::kError};
  r.tags = {{"region", "eu"}, {"canary", "*"}};
  r.message_regex = R"(timeout after \d+)";
  c.rules.push_back(r);
  Detector d(c);
  auto ok = Record("GET /x: timeout after 30s", {{"region", "eu"}, {"canary", "yes"}});
  EXPECT_NE(d.Match("api", "h1", Severity::kWarn, ok), nullptr);
  EXPECT_EQ(d.MinSeverity(), Severity::kWarn);
  EXPECT_EQ(d.Match("web", "h1", Severity::kError, ok), nullptr);   // app
  EXPECT_EQ(d.Match("api", "h2", Severity::kError, ok), nullptr);   // host
  EXPECT_EQ(d.Match("api", "h1", Severity::kFatal, ok), nullptr);   // severity
  EXPECT_EQ(d.Match("api", "h1", Severity::kError, Record("GET /x: timeout after 30s", {{"region", "us"}, {"canary", "1"}})),
            nullptr);  // tag value
  EXPECT_EQ(d.Match("api", "h1", Severity::kError, Record("GET /x: timeout after 30s", {{"region", "eu"}})),
            nullptr);  // tag presence
  EXPECT_EQ(d.Match("api", "h1", Severity::kError, Record("GET /x: refused", {{"region", "eu"}, {"canary", "1"}})),
            nullptr);  // message
}

TEST(Detector, FirstMatchingRuleWinsAndTheDefaultComesLast) {
  AlertingConfig c;
  RuleConfig quiet;
  quiet.name = "quiet";
  quiet.message_regex = "noisy";
  quiet.suppress = true;
  RuleConfig any_api;
  any_api.name = "api";
  any_api.apps = {"api"};
  c.rules = {quiet, any_api};
  Detector d(c);
  EXPECT_EQ(d.Match("api", "h", Severity::kError, Record("noisy thing"))->config.name, "quiet");
  EXPECT_EQ(d.Match("api", "h", Severity::kError, Record("real thing"))->config.name, "api");
  EXPECT_EQ(d.Match("web", "h", Severity::kError, Record("real thing"))->config.name, "default");
}

}  // namespace
}  // namespace logdex::alerting
