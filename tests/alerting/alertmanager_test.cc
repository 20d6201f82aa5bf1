// Integration with a real Alertmanager (Debian's prometheus-alertmanager):
// an ERROR record staged into a RocksDB store is delivered by the dispatcher
// to Alertmanager's API v2, and Alertmanager's webhook reaches a local
// receiver with the labels and annotations logdex set.
// Skips only when the binary is absent (scripts/install-deps.sh --servers installs it).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "alerting/dispatcher.h"
#include "alerting/stager.h"
#include "tests/alerting/alerting_test_util.h"
#include "tests/alerting/alertmanager_process.h"
#include "alerting/webhook_receiver.h"

namespace logdex::alerting {
namespace {

using nlohmann::json;

TEST(AlertmanagerIntegration, StagedErrorReachesTheWebhookReceiverThroughAlertmanager) {
  if (!testing::AlertmanagerInstalled())
    GTEST_SKIP() << testing::kAlertmanagerBinary << " not installed (run scripts/install-deps.sh --servers)";
  WebhookReceiver receiver;
  testing::AlertmanagerProcess am(receiver.url("/am"));
  ASSERT_TRUE(am.ready()) << "Alertmanager did not become ready; its log:\n" << am.log();

  // Real time: Alertmanager compares startsAt/endsAt with its own clock.
  const Clock& clock = SystemClock::Instance();
  AlertingConfig config;
  SinkConfig sink;
  sink.name = "am";
  sink.type = SinkType::kAlertmanager;
  sink.url = am.url();
  sink.timeout_ms = 5'000;
  config.sinks.push_back(sink);
  config.query_base_url = "http://logdex.test:8080";
  TempDir dir;
  prometheus::Registry registry;
  auto store = testing::OpenStore(dir.path(), clock, config);
  ASSERT_NE(store, nullptr);
  AlertStager stager(config, *store, clock, registry);

  proto::RecordBatch records;
  const int64_t ts = clock.NowMs();
  testing::AddRecord(records, ts, "payment 4711 failed: upstream 10.0.0.8 timed out");
  ASSERT_EQ(testing::StageAndWrite(stager, *store, testing::Chunk("payments", "web-3"), 0xc0ffee, records, ts), 1u);

  SinkDispatcher dispatcher(config, *store, MakeSinks(config, clock), clock, registry);
  ASSERT_TRUE(dispatcher.Start().ok());
  dispatcher.Wake();
  ASSERT_TRUE(receiver.WaitFor(1, std::chrono::seconds(20))) << "nothing arrived; Alertmanager log:\n" << am.log();
  dispatcher.Stop();

  const auto req = receiver.requests()[0];
  EXPECT_EQ(req.path, "/am");
  const json body = json::parse(req.body);
  EXPECT_EQ(body["status"], "firing");
  ASSERT_EQ(body["alerts"].size(), 1u);
  const json& alert = body["alerts"][0];
  EXPECT_EQ(alert["status"], "firing");
  EXPECT_EQ(alert["labels"]["alertname"], "logdex_default");
  EXPECT_EQ(alert["labels"]["app"], "payments");
  EXPECT_EQ(alert["labels"]["host"], "web-3");
  EXPECT_EQ(alert["labels"]["severity"], "error");
  const std::string summary = alert["annotations"]["summary"];
  const std::string description = alert["annotations"]["description"];
  EXPECT_NE(summary.find("payments@web-3"), std::string::npos) << summary;
  EXPECT_NE(description.find("payment 4711 failed: upstream 10.0.0.8 timed out"), std::string::npos) << description;
  EXPECT_NE(description.find("http://logdex.test:8080/?app=payments&host=web-3"), std::string::npos)
      << description;
  EXPECT_EQ(alert["annotations"]["idempotency_key"], "ev:" + Hex16(0xc0ffee) + ":0");
  EXPECT_EQ(alert["generatorURL"].get<std::string>().rfind("http://logdex.test:8080/?app=", 0), 0u);
  EXPECT_TRUE(testing::ReadOutbox(*store).empty());
  EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_notifications_sent_total", {{"sink", "am"}}), 1);
}

TEST(AlertmanagerIntegration, AlertmanagerDownIsRetriedNotLost) {
  if (!testing::AlertmanagerInstalled())
    GTEST_SKIP() << testing::kAlertmanagerBinary << " not installed (run scripts/install-deps.sh --servers)";
  WebhookReceiver receiver;
  const Clock& clock = SystemClock::Instance();
  // Nothing listens on this port yet.
  AlertingConfig config;
  SinkConfig sink;
  sink.name = "am";
  sink.type = SinkType::kAlertmanager;
  TempDir dir;
  prometheus::Registry registry;
  {
    // Stage while Alertmanager is not running; one failed attempt.
    sink.url = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    config.sinks = {sink};
    auto store = testing::OpenStore(dir.path(), clock, config);
    AlertStager stager(config, *store, clock, registry);
    proto::RecordBatch records;
    testing::AddRecord(records, clock.NowMs(), "disk /data full");
    ASSERT_EQ(testing::StageAndWrite(stager, *store, testing::Chunk("db", "db-1"), 1, records, clock.NowMs()), 1u);
    SinkDispatcher d(config, *store, MakeSinks(config, clock), clock, registry);
    auto stats = d.DeliverDue();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->retried, 1u);
    EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_notifications_failed_total",
                                   {{"sink", "am"}, {"reason", "connect"}}),
              1);
  }
  // Alertmanager comes up (on another port: the config names it); the row is still pending.
  testing::AlertmanagerProcess am(receiver.url("/am"));
  ASSERT_TRUE(am.ready()) << am.log();
  config.sinks[0].url = am.url();
  auto store = testing::OpenStore(dir.path(), clock, config);
  ASSERT_EQ(testing::ReadOutbox(*store).size(), 1u);
  SinkDispatcher d(config, *store, MakeSinks(config, clock), clock, registry);
  ASSERT_TRUE(d.Start().ok());
  ASSERT_TRUE(receiver.WaitFor(1, std::chrono::seconds(20))) << am.log();
  d.Stop();
  EXPECT_EQ(json::parse(receiver.requests()[0].body)["alerts"][0]["labels"]["host"], "db-1");
}

}  // namespace
}  // namespace logdex::alerting
