#include "server/config.h"

#include <gtest/gtest.h>

#include <fstream>

namespace logdex {
namespace {

TEST(Config, DefaultsNeedNoFile) {
  auto c = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->consumer.group_id, "logdex");
  EXPECT_EQ(c->consumer.topics, std::vector<std::string>{std::string(kDefaultTopic)});
  EXPECT_EQ(c->store.durability, Durability::kAsync);
  EXPECT_EQ(c->store.ttl_seconds, 7 * 24 * 3600);
  EXPECT_EQ(c->indexer.tags.max_values_per_hour, 10'000u);
}

TEST(Config, TheDocumentedExampleIsValidAndMeansWhatItSays) {
  auto c = LoadConfig(LOGDEX_SOURCE_DIR "/deploy/logdex.example.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kafka.at("bootstrap.servers"), "localhost:9092");
  EXPECT_EQ(c->consumer.batch_max_bytes, 32ull << 20);
  EXPECT_EQ(c->consumer.batch_max_wait_ms, 50);
  EXPECT_EQ(c->consumer.shutdown_deadline_ms, 10'000);
  EXPECT_EQ(c->indexer.max_chunk_span_ms, 60'000);
  EXPECT_EQ(c->query.max_range_ms, 31ll * 86'400'000);
}

TEST(Config, ErrorsNameTheLineAndTheKey) {
  const std::string yaml =
      "store:\n"
      "  dir: /tmp/x\n"
      "  durability: sometimes\n"
      "consumer:\n"
      "  batch_max_wait: soon\n"
      "  bacth_max_messages: 5\n"
      "http:\n"
      "  ready_max_lag: -3\n";
  auto c = ParseConfig(yaml, "bad.yaml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("bad.yaml:3: store.durability: must be skip_wal, async or sync"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:5: consumer.batch_max_wait:"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:6: consumer.bacth_max_messages: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:8: http.ready_max_lag: must be between"), std::string::npos) << m;
}

TEST(Config, RefusesSkipWalUntilCommitsFollowFlushes) {
  auto c = ParseConfig("store:\n  durability: skip_wal\n", "w.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("skip_wal is not supported"), std::string::npos) << c.error().message;
}

TEST(Config, ReportsYamlSyntaxErrorsWithTheirLine) {
  auto c = ParseConfig("store:\n  dir: [unclosed\n", "syntax.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("syntax.yaml:"), std::string::npos) << c.error().message;
}

TEST(Config, RejectsABadTopicFormat) {
  auto c = ParseConfig("consumer:\n  topic_formats:\n    syslog: xml\n", "f.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("f.yaml:3: consumer.topic_formats.syslog: format must be chunk, json or text"),
            std::string::npos)
      << c.error().message;
}

TEST(Config, EnvironmentOverridesTheFile) {
  auto c = ParseConfig("store:\n  dir: /from/file\n", "e.yaml");
  ASSERT_TRUE(c.ok());
  std::string a = "LOGDEX_STORE_DIR=/from/env", b = "LOGDEX_KAFKA_SASL_USERNAME=alice", d = "PATH=/bin";
  char* env[] = {a.data(), b.data(), d.data(), nullptr};
  ASSERT_TRUE(ApplyEnvOverrides(*c, env).ok());
  EXPECT_EQ(c->store.dir, "/from/env");
  EXPECT_EQ(c->kafka.at("sasl.username"), "alice");
}

TEST(Config, ParsesDurationsAndSizes) {
  auto c = ParseConfig("consumer:\n  batch_max_wait: 1s500ms\n  shutdown_deadline: 7 days\n", "d.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("d.yaml:3: consumer.shutdown_deadline:"), std::string::npos) << c.error().message;
  EXPECT_EQ(ParseConfig("consumer:\n  batch_max_wait: 1s500ms\n", "d.yaml")->consumer.batch_max_wait_ms, 1500);
  EXPECT_EQ(*ParseBytes("64KiB"), 65536u);
  EXPECT_FALSE(ParseBytes("64KB").ok());
}

}  // namespace
}  // namespace logdex
