// Real-time variants of the alerting acceptance tests (ctest label `load`):
// a 30-second sink outage with the threaded dispatcher, and the
// stage-to-webhook latency of single ERROR lines, printed as JSON.
// The fast, manual-clock variants live in dispatcher_test.cc and stager_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "alerting/dispatcher.h"
#include "alerting/stager.h"
#include "tests/alerting/alerting_test_util.h"
#include "alerting/webhook_receiver.h"

namespace logdex::alerting {
namespace {

using testing::AddRecord;
using testing::Chunk;

struct Harness {
  explicit Harness(AlertingConfig c) : config(std::move(c)) {
    store = testing::OpenStore(dir.path(), clock, config);
    stager = std::make_unique<AlertStager>(config, *store, clock, registry);
    dispatcher = std::make_unique<SinkDispatcher>(config, *store, MakeSinks(config, clock), clock, registry);
  }
  // One single-record chunk with a distinct template; returns its idempotency key.
  std::string StageOne(uint64_t id) {
    static const char* words[] = {"disk", "net", "db", "cache", "queue", "auth", "dns", "tls", "cpu", "mem"};
    proto::RecordBatch b;
    const int64_t now = clock.NowMs();
    AddRecord(b, now, std::string(words[id % 10]) + " failure " + words[(id / 10) % 10] + " " + words[(id / 100) % 10]);
    WriteBatch batch;
    auto n = stager->Stage(Chunk("api", "h"), ChunkId(id), b, now, batch);
    EXPECT_TRUE(n.ok());
    EXPECT_TRUE(store->Write(batch).ok());
    dispatcher->Wake();
    return "ev:" + Hex16(id) + ":0";
  }
  const Clock& clock = SystemClock::Instance();
  AlertingConfig config;
  TempDir dir;
  prometheus::Registry registry;
  std::unique_ptr<RocksDbStore> store;
  std::unique_ptr<AlertStager> stager;
  std::unique_ptr<SinkDispatcher> dispatcher;
};

TEST(AlertingLoad, RealThirtySecondSinkOutageDeliversEverythingOnce) {
  WebhookReceiver receiver;
  AlertingConfig c;
  c.sinks.push_back(testing::WebhookSinkConfig("hook", receiver.url()));
  c.sinks[0].circuit = {5, 3'000};
  c.delivery.backoff_initial_ms = 200;
  c.delivery.backoff_max_ms = 5'000;
  c.limits.per_app = 0;
  c.limits.global = 0;
  Harness h(c);
  ASSERT_TRUE(h.dispatcher->Start().ok());
  receiver.set_status(503);
  std::set<std::string> staged;
  for (int second = 0; second < 30; ++second) {  // the outage: one alert per second
    staged.insert(h.StageOne(100 + second));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_TRUE(receiver.requests().empty());
  receiver.set_status(200);
  EXPECT_TRUE(receiver.WaitFor(staged.size(), std::chrono::seconds(60)));
  h.dispatcher->Stop();
  std::multiset<std::string> got;
  for (const auto& r : receiver.requests()) got.insert(r.Header("Idempotency-Key"));
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), staged);
  EXPECT_EQ(got.size(), staged.size()) << "some key arrived twice";
  EXPECT_TRUE(testing::ReadOutbox(*h.store).empty());
}

// Stage -> outbox -> dispatcher -> HTTP webhook latency for single ERROR lines
// (the record's Kafka timestamp is taken just before Stage()). Kafka and the
// shipper are not in this path yet: serve will add them (issue 6's benchmark).
TEST(AlertingLoad, SingleErrorLineLatencyToWebhook) {
  WebhookReceiver receiver;
  AlertingConfig c;
  c.sinks.push_back(testing::WebhookSinkConfig("hook", receiver.url()));
  c.limits.per_app = 0;
  c.limits.global = 0;
  c.delivery.poll_interval_ms = 50;
  Harness h(c);
  ASSERT_TRUE(h.dispatcher->Start().ok());
  constexpr int kAlerts = 300;
  std::map<std::string, int64_t> sent_at;
  for (int i = 0; i < kAlerts; ++i) {
    const int64_t t = h.clock.NowMs();
    sent_at[h.StageOne(1000 + i)] = t;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(receiver.WaitFor(kAlerts, std::chrono::seconds(30)));
  h.dispatcher->Stop();
  std::vector<int64_t> lat;
  for (const auto& r : receiver.requests()) lat.push_back(r.received_ms - sent_at.at(r.Header("Idempotency-Key")));
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) { return lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))]; };
  std::printf("{\"bench\":\"alert_stage_to_webhook\",\"alerts\":%zu,\"p50_ms\":%lld,\"p99_ms\":%lld,\"max_ms\":%lld}\n",
              lat.size(), static_cast<long long>(pct(0.50)), static_cast<long long>(pct(0.99)),
              static_cast<long long>(lat.back()));
  EXPECT_EQ(lat.size(), static_cast<size_t>(kAlerts));
  EXPECT_LE(pct(0.99), 50) << "p99 above the issue's 50 ms loopback target";
}

}  // namespace
}  // namespace logdex::alerting
