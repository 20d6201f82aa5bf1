#include "alerting/stager.h"

#include <gtest/gtest.h>

#include <set>

#include "alerting/dispatcher.h"
#include "alerting/sinks.h"
#include "tests/alerting/alerting_test_util.h"
#include "tests/failing_store.h"
#include "alerting/webhook_receiver.h"

namespace logdex::alerting {
namespace {

using testing::AddRecord;
using testing::Chunk;
using testing::kT0;
using testing::MetricValue;
using testing::ReadOutbox;
using testing::StageAndWrite;

AlertingConfig TwoSinkConfig() {
  AlertingConfig c;
  c.sinks.push_back(testing::WebhookSinkConfig("a", "http://127.0.0.1:9/a"));
  c.sinks.push_back(testing::WebhookSinkConfig("b", "http://127.0.0.1:9/b"));
  return c;
}

class StagerTest : public ::testing::Test {
 protected:
  void Open(const AlertingConfig& c) {
    config_ = c;
    stager_.reset();
    store_ = testing::OpenStore(dir_.path(), clock_, c);
    ASSERT_NE(store_, nullptr);
    stager_ = std::make_unique<AlertStager>(c, *store_, clock_, registry_);
  }
  // Drops the stager and the store, reopens both (a serve restart).
  void Restart() {
    stager_.reset();
    store_.reset();
    Open(config_);
  }

  TempDir dir_;
  ManualClock clock_{kT0};
  prometheus::Registry registry_;
  AlertingConfig config_;
  std::unique_ptr<RocksDbStore> store_;
  std::unique_ptr<AlertStager> stager_;
};

TEST_F(StagerTest, FirstOccurrenceIsAnEventDueNowForEverySink) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0 - 5, "payment 1234 failed: card declined");
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("pay", "web-1"), 77, b, kT0 - 3), 2u);
  auto rows = ReadOutbox(*store_);
  ASSERT_EQ(rows.size(), 2u);
  std::set<std::string> sinks;
  for (const auto& [key, e] : rows) {
    sinks.insert(e.sink);
    EXPECT_EQ(key.due_ms, kT0);
    EXPECT_EQ(key.alert_id, OutboxAlertId(e.n.idempotency_key, e.sink));
    EXPECT_EQ(e.n.kind, NotificationKind::kEvent);
    EXPECT_EQ(e.n.idempotency_key, "ev:" + Hex16(77) + ":0");
    EXPECT_EQ(e.n.count, 1u);
    EXPECT_EQ(e.n.app, "pay");
    EXPECT_EQ(e.n.host, "web-1");
    EXPECT_EQ(e.n.message, "payment 1234 failed: card declined");
    EXPECT_EQ(e.n.message_template, "payment <num> failed: card declined");
    EXPECT_EQ(e.n.kafka_ts_ms, kT0 - 3);
    EXPECT_NE(e.n.query_url.find("app=pay&host=web-1"), std::string::npos) << e.n.query_url;
  }
  EXPECT_EQ(sinks, (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_detected_total", {{"severity", "ERROR"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_staged_total", {{"kind", "event"}}), 2);
}

TEST_F(StagerTest, RecordsBelowErrorAreIgnoredByTheDefaultRule) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, "just info", Severity::kInfo);
  AddRecord(b, kT0, "a warning", Severity::kWarn);
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h", Severity::kInfo), 1, b), 0u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_FALSE(stager_->Wants(Chunk("api", "h", Severity::kWarn)));
  EXPECT_TRUE(stager_->Wants(Chunk("api", "h", Severity::kFatal)));
  proto::LogChunk mixed = Chunk("api", "h");
  mixed.set_severity(0);
  EXPECT_TRUE(stager_->Wants(mixed));
}

TEST_F(StagerTest, RecordsWithoutSeverityInheritTheChunks) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, "disk full")->set_severity(0);
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h", Severity::kFatal), 1, b), 2u);
  EXPECT_EQ(ReadOutbox(*store_)[0].second.n.severity, Severity::kFatal);
}

TEST_F(StagerTest, RepeatsInTheWindowBecomeOneDigestWithTheirCount) {
  AlertingConfig c = TwoSinkConfig();
  c.sinks.pop_back();
  c.limits.group_window_ms = 60'000;
  c.limits.digest_delay_ms = 1'000;
  Open(c);
  for (int i = 0; i < 3; ++i) {
    proto::RecordBatch b;
    AddRecord(b, kT0 + i * 1000, "timeout after " + std::to_string(100 + i) + " ms");
    AddRecord(b, kT0 + i * 1000 + 1, "timeout after " + std::to_string(200 + i) + " ms");
    StageAndWrite(*stager_, *store_, Chunk("api", "h" + std::to_string(i)), 10 + i, b);
    clock_.AdvanceMs(1000);
  }
  auto rows = ReadOutbox(*store_);
  ASSERT_EQ(rows.size(), 2u);
  const auto& [event_key, event] = rows[0];
  const auto& [digest_key, digest] = rows[1];
  EXPECT_EQ(event.n.kind, NotificationKind::kEvent);
  EXPECT_EQ(event_key.due_ms, kT0);
  EXPECT_EQ(digest.n.kind, NotificationKind::kGroupDigest);
  EXPECT_EQ(digest_key.due_ms, kT0 + 60'000 + 1'000);
  EXPECT_EQ(digest.n.count, 5u);
  EXPECT_EQ(digest.n.since_ms, kT0 + 1);
  EXPECT_EQ(digest.n.message, "timeout after 202 ms");  // the latest line
  EXPECT_EQ(digest.n.host, "h2");
  EXPECT_EQ(digest.n.idempotency_key, "gd:" + Hex16(event.n.group) + ":" + std::to_string(kT0));
  EXPECT_NE(digest.n.Summary().find("5 more since"), std::string::npos) << digest.n.Summary();
  // The digest links the app-wide range from its first record to its latest.
  EXPECT_NE(digest.n.query_url.find("from=" + std::to_string(kT0 + 1 - 60'000) + "&to=" + std::to_string(kT0 + 2001 + 60'000)),
            std::string::npos)
      << digest.n.query_url;
  EXPECT_EQ(digest.n.query_url.find("host="), std::string::npos) << digest.n.query_url;
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_suppressed_total", {{"reason", "group_window"}}), 5);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_staged_total", {{"kind", "group_digest"}}), 1);
}

// GET /api/v1/alerts (the web UI's alerts panel): the groups with their
// latest record and counts, newest first, and what waits in the outbox.
TEST_F(StagerTest, RecentJsonListsGroupsNewestFirstAndThePendingNotifications) {
  AlertingConfig c = TwoSinkConfig();
  c.sinks.pop_back();
  c.limits.group_window_ms = 60'000;
  Open(c);
  for (int i = 0; i < 3; ++i) {
    proto::RecordBatch b;
    AddRecord(b, kT0 + i * 1000, "timeout after " + std::to_string(100 + i) + " ms");
    StageAndWrite(*stager_, *store_, Chunk("api", "h" + std::to_string(i)), 10 + i, b);
  }
  proto::RecordBatch b;
  AddRecord(b, kT0 + 5000, "disk full on /var", Severity::kFatal);
  StageAndWrite(*stager_, *store_, Chunk("db", "d1", Severity::kFatal), 20, b);
  auto text = AlertStager::RecentJson(*store_, kT0 - 1000, 10);
  ASSERT_TRUE(text.ok()) << text.error().ToString();
  const nlohmann::json j = nlohmann::json::parse(*text);
  ASSERT_EQ(j["groups"].size(), 2u) << *text;
  EXPECT_EQ(j["groups"][0]["app"], "db");
  EXPECT_EQ(j["groups"][0]["severity"], "FATAL");
  EXPECT_EQ(j["groups"][0]["message"], "disk full on /var");
  EXPECT_EQ(j["groups"][1]["app"], "api");
  EXPECT_EQ(j["groups"][1]["host"], "h2") << "the latest record's";
  EXPECT_EQ(j["groups"][1]["template"], "timeout after <num> ms");
  EXPECT_EQ(j["groups"][1]["sent"].get<uint64_t>() + j["groups"][1]["suppressed"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["pending"].size(), ReadOutbox(*store_).size());
  EXPECT_FALSE(j["truncated"].get<bool>());
  // Older than `since`: left out; over `limit`: cut and said so.
  EXPECT_EQ(nlohmann::json::parse(*AlertStager::RecentJson(*store_, kT0 + 4000, 10))["groups"].size(), 1u);
  const nlohmann::json one = nlohmann::json::parse(*AlertStager::RecentJson(*store_, kT0 - 1000, 1));
  EXPECT_EQ(one["groups"].size(), 1u);
  EXPECT_TRUE(one["truncated"].get<bool>());
}

TEST_F(StagerTest, ANewWindowSendsAgainAndKeepsTheOldDigest) {
  AlertingConfig c = TwoSinkConfig();
  c.sinks.pop_back();
  c.limits.group_window_ms = 10'000;
  Open(c);
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom 1");
  AddRecord(b, kT0, "boom 2");
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b);
  clock_.AdvanceMs(10'000);
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 2, b);
  size_t events = 0, counted = 0;
  for (const auto& [k, e] : ReadOutbox(*store_)) {
    events += e.n.kind == NotificationKind::kEvent;
    counted += e.n.count;
  }
  EXPECT_EQ(events, 2u);
  EXPECT_EQ(counted, 4u);
}

TEST_F(StagerTest, PerAppLimitFoldsFurtherGroupsIntoAnAppDigest) {
  AlertingConfig c = TwoSinkConfig();
  c.sinks.pop_back();
  c.limits.per_app = 3;
  Open(c);
  proto::RecordBatch b;
  for (const char* word : {"alpha", "beta", "gamma", "delta", "epsilon"}) AddRecord(b, kT0, std::string(word) + " failed");
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b);
  proto::RecordBatch other;
  AddRecord(other, kT0, "alpha failed");
  StageAndWrite(*stager_, *store_, Chunk("web", "h"), 2, other);
  size_t api_events = 0, web_events = 0;
  const OutboxEntry* app_digest = nullptr;
  auto rows = ReadOutbox(*store_);
  for (const auto& [k, e] : rows) {
    if (e.n.kind == NotificationKind::kEvent) (e.n.app == "api" ? api_events : web_events)++;
    if (e.n.kind == NotificationKind::kAppDigest) app_digest = &e;
  }
  EXPECT_EQ(api_events, 3u);
  EXPECT_EQ(web_events, 1u);
  ASSERT_NE(app_digest, nullptr);
  EXPECT_EQ(app_digest->n.count, 2u);
  EXPECT_EQ(app_digest->n.app, "api");
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_suppressed_total", {{"reason", "app_limit"}}), 2);
}

TEST_F(StagerTest, SuppressRulesCountButNeverNotify) {
  AlertingConfig c = TwoSinkConfig();
  RuleConfig r;
  r.name = "noise";
  r.message_regex = "^retrying";
  r.suppress = true;
  c.rules.push_back(r);
  Open(c);
  proto::RecordBatch b;
  AddRecord(b, kT0, "retrying in 5s");
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b), 0u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_suppressed_total", {{"reason", "rule"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_detected_total", {{"severity", "ERROR"}}), 1);
}

TEST_F(StagerTest, RuleSinksRouteNotifications) {
  AlertingConfig c = TwoSinkConfig();
  RuleConfig r;
  r.name = "pay";
  r.apps = {"pay"};
  r.sinks = {"b"};
  c.rules.push_back(r);
  Open(c);
  proto::RecordBatch b;
  AddRecord(b, kT0, "declined");
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("pay", "h"), 1, b), 1u);
  auto rows = ReadOutbox(*store_);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].second.sink, "b");
  EXPECT_EQ(rows[0].second.n.rule, "pay");
}

TEST_F(StagerTest, StagingAChunkIdAgainNotifiesNoOne) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 42, b), 2u);
  // Delivered and removed meanwhile:
  WriteBatch clear;
  for (const auto& [k, e] : ReadOutbox(*store_)) clear.Delete(kOutboxTable, k.Encode());
  ASSERT_TRUE(store_->Write(clear).ok());
  Restart();  // the in-memory state is gone; the durable record remains
  clock_.AdvanceMs(3'600'000);
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 42, b), 0u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_alerts_suppressed_total", {{"reason", "replay"}}), 1);
}

TEST_F(StagerTest, TheSeenRowFollowsTheNotificationsInTheBatch) {
  // Non-atomic backends write tables in the order a batch first names them.
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  AddRecord(b, kT0, "boom");
  WriteBatch batch;
  ASSERT_TRUE(stager_->Stage(Chunk("api", "h"), ChunkId(5), b, 0, batch).ok());
  int first_outbox = -1, first_seen = -1;
  for (size_t i = 0; i < batch.entries().size(); ++i) {
    const std::string& t = batch.entries()[i].table;
    if (t == kOutboxTable && first_outbox < 0) first_outbox = static_cast<int>(i);
    if (t == kSeenTable && first_seen < 0) first_seen = static_cast<int>(i);
  }
  ASSERT_GE(first_outbox, 0);
  ASSERT_GE(first_seen, 0);
  EXPECT_LT(first_outbox, first_seen);
  // Marked: a store without atomic batches sends alert_seen after every
  // other table, whatever an earlier chunk of the batch named first.
  EXPECT_EQ(batch.last_tables(), std::vector<std::string>{std::string(kSeenTable)});
}

TEST_F(StagerTest, TheSameChunkTwiceInOneUnwrittenBatchIsStagedOnce) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  WriteBatch batch;
  auto first = stager_->Stage(Chunk("api", "h"), ChunkId(5), b, 0, batch);
  auto second = stager_->Stage(Chunk("api", "h"), ChunkId(5), b, 0, batch);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, 2u);
  EXPECT_EQ(*second, 0u);
}

TEST_F(StagerTest, GroupStateSurvivesARestart) {
  AlertingConfig c = TwoSinkConfig();
  c.sinks.pop_back();
  Open(c);
  proto::RecordBatch b1, b2;
  AddRecord(b1, kT0, "boom 1");
  AddRecord(b2, kT0 + 5, "boom 2");
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b1);
  Restart();
  clock_.AdvanceMs(5'000);
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 2, b2);
  auto rows = ReadOutbox(*store_);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].second.n.kind, NotificationKind::kEvent);
  EXPECT_EQ(rows[1].second.n.kind, NotificationKind::kGroupDigest);
  EXPECT_EQ(rows[1].second.n.count, 1u);
}

TEST_F(StagerTest, InvalidUtf8InALogLineIsReplacedNotRejected) {
  Open(TwoSinkConfig());
  proto::RecordBatch b;
  AddRecord(b, kT0, std::string("bad \xff\xfe bytes"));
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b), 2u);
  EXPECT_EQ(ReadOutbox(*store_)[0].second.n.message, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
}

TEST_F(StagerTest, DisabledAlertingStagesNothing) {
  AlertingConfig c = TwoSinkConfig();
  c.enabled = false;
  Open(c);
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b), 0u);
  EXPECT_FALSE(stager_->Wants(Chunk("api", "h")));
}

using logdex::testing::FailingReads;

TEST_F(StagerTest, AStoreReadFailureFailsTheStageAndARetryAfterDiscardSucceeds) {
  Open(TwoSinkConfig());
  FailingReads store(*store_);
  AlertStager stager(config_, store, clock_, registry_);
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  store.fail_table = std::string(kStateTable);  // after the replay check, at the group lookup
  WriteBatch batch;
  auto r = stager.Stage(Chunk("api", "h"), ChunkId(3), b, 0, batch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kUnavailable);
  store.fail_table.clear();
  stager.DiscardCache();
  EXPECT_EQ(StageAndWrite(stager, store, Chunk("api", "h"), 3, b), 2u);
}

// ---- Storm acceptance: staged through the stager, delivered to a real HTTP receiver ----

struct Delivered {
  size_t notifications = 0;
  uint64_t counted = 0;
  std::set<std::string> keys;
};

Delivered DeliverEverything(const AlertingConfig& c, TableStore& store, ManualClock& clock,
                            prometheus::Registry& registry, WebhookReceiver& receiver) {
  SinkDispatcher d(c, store, MakeSinks(c, clock), clock, registry, 1);
  clock.AdvanceMs(std::max(c.limits.group_window_ms, c.limits.limit_window_ms) + c.limits.digest_delay_ms + 1);
  for (int i = 0; i < 10 && !ReadOutbox(store).empty(); ++i) EXPECT_TRUE(d.DeliverDue().ok());
  EXPECT_TRUE(ReadOutbox(store).empty());
  Delivered out;
  for (const auto& r : receiver.requests()) {
    auto j = nlohmann::json::parse(r.body);
    ++out.notifications;
    out.counted += j.at("count").get<uint64_t>();
    EXPECT_TRUE(out.keys.insert(r.Header("Idempotency-Key")).second) << "delivered twice: " << r.Header("Idempotency-Key");
  }
  return out;
}

TEST_F(StagerTest, StormOfOneTemplateBecomesAFewNotificationsCountingEveryRecord) {
  WebhookReceiver receiver;
  AlertingConfig c;
  c.sinks.push_back(testing::WebhookSinkConfig("hook", receiver.url()));
  c.limits.global = 10;
  c.delivery.scan_batch = 1000;
  Open(c);
  // 10,000 ERRORs of one template within 2 s: 100 chunks of 100 records, 20 ms apart.
  for (int chunk = 0; chunk < 100; ++chunk) {
    proto::RecordBatch b;
    for (int i = 0; i < 100; ++i)
      AddRecord(b, clock_.NowMs(), "upstream 10.1.2." + std::to_string(i) + " refused connection #" + std::to_string(chunk * 100 + i));
    StageAndWrite(*stager_, *store_, Chunk("api", "web-" + std::to_string(chunk % 7)), 1000 + chunk, b, clock_.NowMs());
    clock_.AdvanceMs(20);
  }
  Delivered got = DeliverEverything(c, *store_, clock_, registry_, receiver);
  EXPECT_LE(got.notifications, 2u);  // one event, one "9999 more since" digest
  EXPECT_GE(got.notifications, 1u);
  EXPECT_EQ(got.counted, 10'000u);
}

TEST_F(StagerTest, StormOfDistinctLinesIsCappedIntoOneSummary) {
  WebhookReceiver receiver;
  AlertingConfig c;
  c.sinks.push_back(testing::WebhookSinkConfig("hook", receiver.url()));
  c.limits.global = 10;
  c.limits.per_app = 0;
  c.delivery.scan_batch = 1000;
  Open(c);
  const std::vector<std::string> words = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
                                          "india", "juliet"};
  for (int chunk = 0; chunk < 100; ++chunk) {
    proto::RecordBatch b;
    for (int i = 0; i < 100; ++i) {
      const int n = chunk * 100 + i;  // a distinct template per record: words, not digits
      AddRecord(b, clock_.NowMs(), "failure " + words[n % 10] + " " + words[(n / 10) % 10] + " " + words[(n / 100) % 10] + " " + words[n / 1000]);
    }
    StageAndWrite(*stager_, *store_, Chunk("app" + std::to_string(chunk % 3), "h"), 5000 + chunk, b);
    clock_.AdvanceMs(20);
  }
  Delivered got = DeliverEverything(c, *store_, clock_, registry_, receiver);
  // The storm may straddle one limit-window boundary: per window, `global`
  // events plus one summary.
  EXPECT_LE(got.notifications, 2u * (10u + 1u));
  EXPECT_EQ(got.counted, 10'000u);
  EXPECT_GT(MetricValue(registry_, "logdex_alerting_alerts_suppressed_total", {{"reason", "global_cap"}}), 9'000);
}

}  // namespace
}  // namespace logdex::alerting
