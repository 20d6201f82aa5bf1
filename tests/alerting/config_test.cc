#include "alerting/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace logdex::alerting {
namespace {

Result<AlertingConfig> ParseText(const std::string& yaml) { return ParseAlertingConfig(yaml, "a.yaml"); }

TEST(AlertingConfig, ExampleFileParsesWithEveryDocumentedSetting) {
  ::setenv("LOGDEX_WEBHOOK_SECRET_EXAMPLE", "s3cret", 1);
  std::stringstream text;
  text << std::ifstream(LOGDEX_ALERTING_EXAMPLE).rdbuf();
  auto c = ParseAlertingConfig(text.str(), LOGDEX_ALERTING_EXAMPLE);
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  ASSERT_EQ(c->rules.size(), 3u);
  EXPECT_TRUE(c->rules[0].suppress);
  EXPECT_EQ(c->rules[0].message_regex, R"(retrying in \d+s)");
  EXPECT_EQ(c->rules[1].severities, std::vector<Severity>{Severity::kFatal});
  EXPECT_EQ(c->rules[1].sinks, std::vector<std::string>{"pagerduty"});
  EXPECT_EQ(c->rules[2].tags.at("canary"), "*");
  EXPECT_TRUE(c->rules[2].group_by_host);
  EXPECT_EQ(c->limits.group_window_ms, 60'000);
  EXPECT_EQ(c->limits.global, 100u);
  EXPECT_EQ(c->delivery.backoff_initial_ms, 200);
  EXPECT_EQ(c->delivery.max_age_ms, 86'400'000);
  EXPECT_EQ(c->dedup_ttl_s, 7 * 86'400);
  ASSERT_EQ(c->sinks.size(), 4u);
  EXPECT_EQ(c->sinks[0].secret, "s3cret");
  EXPECT_EQ(c->sinks[0].headers.at("X-Team"), "ops");
  EXPECT_TRUE(c->sinks[0].tls_verify);
  EXPECT_EQ(c->sinks[0].circuit.open_ms, 30'000);
  EXPECT_EQ(c->sinks[1].type, SinkType::kAlertmanager);
  EXPECT_EQ(c->sinks[1].event_duration_ms, 300'000);
  EXPECT_EQ(c->sinks[3].url, "https://events.pagerduty.com/v2/enqueue");
}

TEST(AlertingConfig, AbsentSectionGivesDefaultsWithTheDefaultRule) {
  auto c = ParseAlertingConfig("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->enabled);
  EXPECT_TRUE(c->default_rule);
  EXPECT_TRUE(c->sinks.empty());
  EXPECT_TRUE(c->rules.empty());
  EXPECT_TRUE(ValidateAlertingConfig(*c).ok());
}

TEST(AlertingConfig, TlsVerificationIsOnUnlessTurnedOff) {
  auto c = ParseText("alerting:\n  sinks:\n    - {type: webhook, url: 'https://x'}\n");
  ASSERT_TRUE(c.ok()) << c.error().ToString();
  EXPECT_TRUE(c->sinks[0].tls_verify);
  EXPECT_EQ(c->sinks[0].name, "webhook");
}

TEST(AlertingConfig, ErrorNamesLineAndKeyOfABadDuration) {
  auto c = ParseText(
      "alerting:\n"
      "  sinks:\n"
      "    - name: a\n"
      "      type: webhook\n"
      "      url: http://x\n"
      "      timeout: 5\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::kInvalidArgument);
  EXPECT_NE(c.error().message.find("a.yaml:6: alerting.sinks[0].timeout"), std::string::npos) << c.error().message;
}

TEST(AlertingConfig, DispatchModeIsParsedAndAnUnknownOneNamedWithItsLine) {
  auto ok = ParseText("alerting:\n  delivery:\n    dispatch: partition_0_owner\n    dispatch_topic: logs.a\n");
  ASSERT_TRUE(ok.ok()) << ok.error().ToString();
  EXPECT_EQ(ok->delivery.dispatch, DeliveryConfig::Dispatch::kPartitionZeroOwner);
  EXPECT_EQ(ok->delivery.dispatch_topic, "logs.a");
  EXPECT_EQ(ParseText("alerting: {}\n")->delivery.dispatch, DeliveryConfig::Dispatch::kAuto);
  auto bad = ParseText("alerting:\n  delivery:\n    dispatch: leader\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("a.yaml:3:"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("alerting.delivery.dispatch"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("every_member"), std::string::npos) << bad.error().message;
}

TEST(AlertingConfig, ErrorNamesAnUnknownKeyAndItsLine) {
  auto c = ParseText(
      "alerting:\n"
      "  limits:\n"
      "    per_grop: 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("a.yaml:3:"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("alerting.limits.per_grop: unknown key"), std::string::npos)
      << c.error().message;
}

TEST(AlertingConfig, RejectsABadRegexWithItsLine) {
  auto c = ParseText(
      "alerting:\n"
      "  rules:\n"
      "    - name: r\n"
      "      message: 'a(b'\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("a.yaml:4:"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("alerting.rules[0].message"), std::string::npos) << c.error().message;
}

TEST(AlertingConfig, RejectsARuleThatNamesAnUnknownSink) {
  auto c = ParseText(
      "alerting:\n"
      "  sinks:\n"
      "    - {name: a, type: slack, url: 'https://hooks'}\n"
      "  rules:\n"
      "    - name: r\n"
      "      sinks: [b]\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("a.yaml:6:"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("no sink named \"b\""), std::string::npos) << c.error().message;
}

TEST(AlertingConfig, RejectsUnknownSeverityTypeAndMissingRoutingKey) {
  EXPECT_FALSE(ParseText("alerting:\n  rules:\n    - {name: r, severities: [LOUD]}\n").ok());
  EXPECT_FALSE(ParseText("alerting:\n  sinks:\n    - {type: carrier-pigeon, url: 'http://x'}\n").ok());
  auto pd = ParseText("alerting:\n  sinks:\n    - {type: pagerduty}\n");
  ASSERT_FALSE(pd.ok());
  EXPECT_NE(pd.error().message.find("routing_key"), std::string::npos) << pd.error().message;
}

TEST(AlertingConfig, RejectsDuplicateSinkNames) {
  auto c = ParseText(
      "alerting:\n"
      "  sinks:\n"
      "    - {name: a, type: slack, url: 'https://hooks'}\n"
      "    - {name: a, type: webhook, url: 'https://hooks2'}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("a.yaml:4:"), std::string::npos) << c.error().message;
}

TEST(AlertingConfig, MalformedYamlTypeIsAnErrorNotAnException) {
  auto c = ParseText("alerting:\n  rules: {name: r}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("alerting.rules"), std::string::npos) << c.error().message;
}

// What the section's own parser refused before it moved to the shared
// walker is refused still, each with its line and key.
TEST(AlertingConfig, EmptyItemsNamesAndVariablesAreRefusedWithTheirLines) {
  auto null_sink = ParseText("alerting:\n  sinks: [~]\n");
  ASSERT_FALSE(null_sink.ok());
  EXPECT_NE(null_sink.error().message.find("alerting.sinks[0]: must be a mapping"), std::string::npos)
      << null_sink.error().message;
  auto null_rule = ParseText("alerting:\n  rules:\n    - ~\n");
  ASSERT_FALSE(null_rule.ok());
  EXPECT_NE(null_rule.error().message.find("a.yaml:3: alerting.rules[0]: must be a mapping"), std::string::npos)
      << null_rule.error().message;
  auto no_name = ParseText("alerting:\n  sinks:\n    - {name: '', type: slack, url: 'https://hooks'}\n");
  ASSERT_FALSE(no_name.ok());
  EXPECT_NE(no_name.error().message.find("a.yaml:3: alerting.sinks[0].name: must not be empty"), std::string::npos)
      << no_name.error().message;
  auto no_env = ParseText("alerting:\n  sinks:\n    - {type: webhook, url: 'https://x', secret_env: ''}\n");
  ASSERT_FALSE(no_env.ok());
  EXPECT_NE(no_env.error().message.find("alerting.sinks[0].secret_env: must name an environment variable"),
            std::string::npos)
      << no_env.error().message;
  auto odd_key = ParseText("alerting:\n  rules:\n    - name: r\n      tags: {[a]: b}\n");
  ASSERT_FALSE(odd_key.ok());
  EXPECT_NE(odd_key.error().message.find("a.yaml:4: alerting.rules[0].tags: keys must be strings"), std::string::npos)
      << odd_key.error().message;
}

TEST(AlertingConfig, NumbersAreDecimal) {
  auto ten = ParseText("alerting:\n  limits: {per_app: 010}\n");
  ASSERT_TRUE(ten.ok()) << ten.error().ToString();
  EXPECT_EQ(ten->limits.per_app, 10u);
  auto hex = ParseText("alerting:\n  limits: {per_app: 0x10}\n");
  ASSERT_FALSE(hex.ok());
  EXPECT_NE(hex.error().message.find("a.yaml:2: alerting.limits.per_app: must be a whole number"), std::string::npos)
      << hex.error().message;
}

TEST(AlertingConfig, DurationsNeedAUnit) {
  EXPECT_EQ(*ParseDurationMs("250ms"), 250);
  EXPECT_EQ(*ParseDurationMs("5s"), 5'000);
  EXPECT_EQ(*ParseDurationMs("2m"), 120'000);
  EXPECT_EQ(*ParseDurationMs("7d"), 7 * 86'400'000LL);
  EXPECT_FALSE(ParseDurationMs("5").ok());
  EXPECT_FALSE(ParseDurationMs("s").ok());
  EXPECT_FALSE(ParseDurationMs("-5s").ok());
  EXPECT_FALSE(ParseDurationMs("5 s").ok());
}

}  // namespace
}  // namespace logdex::alerting
