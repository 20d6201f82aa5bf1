#include "alerting/dispatcher.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "alerting/stager.h"
#include "tests/alerting/alerting_test_util.h"
#include "alerting/webhook_receiver.h"

namespace logdex::alerting {
namespace {

using testing::AddRecord;
using testing::Chunk;
using testing::kT0;
using testing::MetricValue;
using testing::ReadOutbox;
using testing::StageAndWrite;

// A fake sink: records what it was given and answers from a switch.
class FakeSink final : public AlertSink {
 public:
  explicit FakeSink(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  DeliveryResult Deliver(const Notification& n) override {
    ++started_;
    std::function<bool()> hold;
    {
      std::lock_guard lock(mu_);
      hold = hold_;
    }
    if (hold) {
      EXPECT_TRUE(logdex::testing::WaitFor(hold, 30'000)) << "a held delivery was never released";
    }
    std::lock_guard lock(mu_);
    DeliveryResult r;
    if (up_) {
      r.ok = true;
      delivered_.push_back(n);
    } else {
      r.reason = "http_5xx";
      r.http_status = 503;
      r.error = "HTTP 503";
      ++failures_;
    }
    return r;
  }
  void set_up(bool up) {
    std::lock_guard lock(mu_);
    up_ = up;
  }
  // Each delivery from now on waits until `release` holds (nullptr: none
  // waits): a slow sink whose end the test decides, not the machine's speed.
  void HoldDeliveriesUntil(std::function<bool()> release) {
    std::lock_guard lock(mu_);
    hold_ = std::move(release);
  }
  int started() const { return started_.load(); }
  std::vector<Notification> delivered() const {
    std::lock_guard lock(mu_);
    return delivered_;
  }
  size_t failures() const {
    std::lock_guard lock(mu_);
    return failures_;
  }

 private:
  std::string name_;
  std::function<bool()> hold_;
  std::atomic<int> started_{0};
  mutable std::mutex mu_;
  bool up_ = true;
  size_t failures_ = 0;
  std::vector<Notification> delivered_;
};

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.sinks.push_back(testing::WebhookSinkConfig("hook", receiver_.url()));
    config_.delivery.backoff_initial_ms = 1'000;
    config_.delivery.backoff_max_ms = 8'000;
    config_.sinks[0].circuit.failures = 5;
    config_.sinks[0].circuit.open_ms = 10'000;
    config_.limits.per_app = 0;  // these tests are about delivery, not storm control
    config_.limits.global = 0;
    OpenStore();
  }
  void OpenStore() {
    stager_.reset();
    store_.reset();
    store_ = testing::OpenStore(dir_.path(), clock_, config_);
    ASSERT_NE(store_, nullptr);
    stager_ = std::make_unique<AlertStager>(config_, *store_, clock_, registry_);
  }
  std::unique_ptr<SinkDispatcher> HttpDispatcher() {
    return std::make_unique<SinkDispatcher>(config_, *store_, MakeSinks(config_, clock_), clock_, registry_, 7);
  }
  std::unique_ptr<SinkDispatcher> FakeDispatcher(FakeSink** fake) {
    auto sink = std::make_unique<FakeSink>("hook");
    *fake = sink.get();
    std::vector<std::unique_ptr<AlertSink>> sinks;
    sinks.push_back(std::move(sink));
    return std::make_unique<SinkDispatcher>(config_, *store_, std::move(sinks), clock_, registry_, 7);
  }
  // Stages `n` single-record chunks with distinct templates (each is an event).
  void StageEvents(int n, uint64_t first_id = 100) {
    static const std::vector<std::string> words = {"disk", "net", "db", "cache", "queue", "auth", "dns", "tls",
                                                   "cpu", "mem", "io", "gc"};
    for (int i = 0; i < n; ++i) {
      const size_t w = next_template_++;  // words, not digits: digits would be masked into one template
      proto::RecordBatch b;
      AddRecord(b, clock_.NowMs(), words[w % 12] + " failure " + words[(w / 12) % 12] + " " + words[(w / 144) % 12]);
      ASSERT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), first_id + i, b, clock_.NowMs()), 1u);
      clock_.AdvanceMs(10);
    }
  }
  std::multiset<std::string> ReceivedKeys() {
    std::multiset<std::string> keys;
    for (const auto& r : receiver_.requests()) keys.insert(r.Header("Idempotency-Key"));
    return keys;
  }

  size_t next_template_ = 0;
  WebhookReceiver receiver_;
  TempDir dir_;
  ManualClock clock_{kT0};
  prometheus::Registry registry_;
  AlertingConfig config_;
  std::unique_ptr<RocksDbStore> store_;
  std::unique_ptr<AlertStager> stager_;
};

TEST_F(DispatcherTest, DeliversDueRowsAndRemovesThem) {
  StageEvents(3);
  auto d = HttpDispatcher();
  auto stats = d->DeliverDue();
  ASSERT_TRUE(stats.ok()) << stats.error().ToString();
  EXPECT_EQ(stats->delivered, 3u);
  EXPECT_EQ(receiver_.requests().size(), 3u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_sent_total", {{"sink", "hook"}}), 3);
  // Latency is measured from the Kafka timestamp: 3 observations.
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_delivery_latency_seconds", {{"sink", "hook"}}), 3);
}

TEST_F(DispatcherTest, RowsNotYetDueWait) {
  config_.sinks.resize(1);
  proto::RecordBatch b;
  AddRecord(b, kT0, "boom");
  AddRecord(b, kT0, "boom");  // a repeat: its digest is due when the window closes
  StageAndWrite(*stager_, *store_, Chunk("api", "h"), 1, b);
  auto d = HttpDispatcher();
  ASSERT_TRUE(d->DeliverDue().ok());
  EXPECT_EQ(receiver_.requests().size(), 1u);
  EXPECT_EQ(ReadOutbox(*store_).size(), 1u);
  clock_.AdvanceMs(config_.limits.group_window_ms + config_.limits.digest_delay_ms);
  ASSERT_TRUE(d->DeliverDue().ok());
  ASSERT_EQ(receiver_.requests().size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(receiver_.requests()[1].body)["kind"], "group_digest");
}

TEST_F(DispatcherTest, NewestAlertsGoFirstWhenBehind) {
  StageEvents(6);
  FakeSink* fake = nullptr;
  auto d = FakeDispatcher(&fake);
  ASSERT_TRUE(d->DeliverDue().ok());
  auto got = fake->delivered();
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 1; i < got.size(); ++i) EXPECT_GT(got[i - 1].ts_ms, got[i].ts_ms) << i;
}

TEST_F(DispatcherTest, FailedAttemptIsRetriedWithJitteredExponentialBackoff) {
  testing::LogCapture log;
  StageEvents(1);
  receiver_.set_status(503);
  auto d = HttpDispatcher();
  std::vector<int64_t> delays;
  for (int attempt = 1; attempt <= 4; ++attempt) {
    const int64_t now = clock_.NowMs();
    auto stats = d->DeliverDue();
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->retried, 1u) << attempt;
    auto rows = ReadOutbox(*store_);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].second.attempts, static_cast<uint32_t>(attempt));
    EXPECT_NE(rows[0].second.last_error.find("503"), std::string::npos);
    const int64_t delay = rows[0].first.due_ms - now;
    const int64_t base = std::min<int64_t>(1'000LL << (attempt - 1), 8'000);
    EXPECT_GE(delay, base / 2) << attempt;
    EXPECT_LE(delay, base) << attempt;
    // Not due yet: nothing is attempted before the backoff elapses.
    clock_.AdvanceMs(delay - 1);
    EXPECT_EQ(d->DeliverDue()->attempted, 0u);
    clock_.AdvanceMs(1);
  }
  receiver_.set_status(200);
  EXPECT_EQ(d->DeliverDue()->delivered, 1u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(log.Warnings("sink hook delivery failed (http_5xx)"), 1u);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_retried_total", {{"sink", "hook"}}), 4);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_failed_total", {{"sink", "hook"}, {"reason", "http_5xx"}}), 4);
}

// A store that applies a batch row by row, as HBase's gateway does (no
// cross-row atomicity), and whose outbox puts fail on demand.
class RowByRowStore final : public TableStore {
 public:
  explicit RowByRowStore(TableStore& base) : base_(base) {}
  Status CreateTable(std::string_view name, const TableOptions& o) override { return base_.CreateTable(name, o); }
  bool HasTable(std::string_view name) const override { return base_.HasTable(name); }
  Status Write(const WriteBatch& b) override {
    for (const WriteBatch::Entry& e : b.entries()) {
      if (e.op == WriteBatch::Op::kPut && e.table == kOutboxTable && fail_outbox_puts) {
        return Status(Errc::kUnavailable, "injected put failure");
      }
      WriteBatch one;
      if (e.op == WriteBatch::Op::kPut) {
        one.Put(e.table, e.key, e.Value());
      } else {
        one.Delete(e.table, e.key);
      }
      if (Status s = base_.Write(one); !s.ok()) return s;
    }
    return Status::Ok();
  }
  Result<std::optional<std::string>> Get(std::string_view t, std::string_view k) override { return base_.Get(t, k); }
  Status Scan(const ScanSpec& spec, const RowVisitor& v) override { return base_.Scan(spec, v); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& v) override { return base_.FuzzyScan(spec, v); }
  StoreCounters counters() const override { return base_.counters(); }
  bool fail_outbox_puts = false;

 private:
  TableStore& base_;
};

// Rescheduling a failed delivery used to delete the old outbox row before
// putting the new one: on a store without cross-row atomicity, a failed put
// then lost the notification.
TEST_F(DispatcherTest, AFailedRescheduleOnARowByRowStoreKeepsTheNotification) {
  StageEvents(1);
  RowByRowStore rows(*store_);
  auto sink = std::make_unique<FakeSink>("hook");
  FakeSink* fake = sink.get();
  std::vector<std::unique_ptr<AlertSink>> sinks;
  sinks.push_back(std::move(sink));
  SinkDispatcher d(config_, rows, std::move(sinks), clock_, registry_, 7);
  fake->set_up(false);
  rows.fail_outbox_puts = true;
  ASSERT_TRUE(d.DeliverDue().ok());
  EXPECT_EQ(fake->failures(), 1u);
  ASSERT_EQ(ReadOutbox(*store_).size(), 1u) << "the notification's row must survive the failed reschedule";

  rows.fail_outbox_puts = false;
  fake->set_up(true);
  clock_.AdvanceMs(config_.delivery.backoff_max_ms);
  ASSERT_TRUE(d.DeliverDue().ok());
  EXPECT_EQ(fake->delivered().size(), 1u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
}

TEST_F(DispatcherTest, CircuitOpensAfterConsecutiveFailuresAndATrialClosesIt) {
  testing::LogCapture log;
  config_.sinks[0].circuit.failures = 3;
  StageEvents(8);
  FakeSink* fake = nullptr;
  auto d = FakeDispatcher(&fake);
  fake->set_up(false);
  auto stats = d->DeliverDue();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->attempted, 3u);  // then the circuit opened
  EXPECT_EQ(stats->deferred, 5u);
  EXPECT_TRUE(d->CircuitOpen("hook"));
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_circuit_open", {{"sink", "hook"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_circuit_opened_total", {{"sink", "hook"}}), 1);
  EXPECT_EQ(log.Warnings("sink hook circuit opened after 3 consecutive failures"), 1u);
  EXPECT_EQ(log.Warnings("sink hook delivery failed"), 1u);  // once per outage, not per attempt
  // While open, nothing is attempted even though rows are due.
  clock_.AdvanceMs(9'000);
  EXPECT_EQ(d->DeliverDue()->attempted, 0u);
  EXPECT_EQ(fake->failures(), 3u);
  // After open_ms: one trial; it fails, so the circuit stays open.
  clock_.AdvanceMs(1'000);
  stats = d->DeliverDue();
  EXPECT_EQ(stats->attempted, 1u);
  EXPECT_TRUE(d->CircuitOpen("hook"));
  // Sink back: the next trial succeeds and closes the circuit; the rest follows.
  fake->set_up(true);
  clock_.AdvanceMs(10'000);
  stats = d->DeliverDue();
  EXPECT_FALSE(d->CircuitOpen("hook"));
  EXPECT_EQ(stats->delivered, 8u);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_circuit_open", {{"sink", "hook"}}), 0);
}

// Acceptance (fast variant): the sink is down for 30 s of clock time, then back.
// Every alert arrives after recovery, none twice.
TEST_F(DispatcherTest, SinkOutageOfThirtySecondsLosesNothingAndDuplicatesNothing) {
  config_.sinks[0].circuit.failures = 3;
  config_.sinks[0].circuit.open_ms = 5'000;
  StageEvents(10, 100);
  auto d = HttpDispatcher();
  receiver_.set_status(503);
  const int64_t down_until = clock_.NowMs() + 30'000;
  int step = 0;
  while (clock_.NowMs() < down_until) {
    if (step % 40 == 0) StageEvents(2, 1000 + step);  // alerts keep coming during the outage
    ASSERT_TRUE(d->DeliverDue().ok());
    clock_.AdvanceMs(250);
    ++step;
  }
  EXPECT_TRUE(receiver_.requests().empty());
  EXPECT_GT(receiver_.refused(), 0u);
  const size_t staged = ReadOutbox(*store_).size();
  EXPECT_EQ(staged, 10u + 2u * ((step + 39) / 40));
  receiver_.set_status(200);
  for (int i = 0; i < 200 && !ReadOutbox(*store_).empty(); ++i) {
    ASSERT_TRUE(d->DeliverDue().ok());
    clock_.AdvanceMs(250);
  }
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  auto keys = ReceivedKeys();
  EXPECT_EQ(keys.size(), staged);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size()) << "a key arrived twice";
  EXPECT_GT(MetricValue(registry_, "logdex_alerting_circuit_opened_total", {{"sink", "hook"}}), 0);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "hook"}, {"reason", "max_attempts"}}), -1);
}

// Acceptance: pending outbox rows are delivered by a new dispatcher on the reopened store.
TEST_F(DispatcherTest, PendingDeliveriesResumeAfterARestart) {
  StageEvents(10);
  {
    receiver_.set_status(503);
    auto d = HttpDispatcher();
    ASSERT_TRUE(d->DeliverDue().ok());  // some attempts fail and are rescheduled
  }
  OpenStore();  // serve restarts: store reopened, new stager and dispatcher
  ASSERT_EQ(ReadOutbox(*store_).size(), 10u);
  receiver_.set_status(200);
  auto d = HttpDispatcher();
  clock_.AdvanceMs(config_.delivery.backoff_initial_ms);
  ASSERT_TRUE(d->DeliverDue().ok());
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  auto keys = ReceivedKeys();
  EXPECT_EQ(keys.size(), 10u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 10u);
}

// Acceptance: replaying chunks that were already processed (and delivered) notifies no one.
TEST_F(DispatcherTest, ReplayedChunksAfterDeliveryNotifyNoOne) {
  StageEvents(4, 500);
  auto d = HttpDispatcher();
  ASSERT_TRUE(d->DeliverDue().ok());
  ASSERT_EQ(receiver_.requests().size(), 4u);
  d.reset();
  OpenStore();
  clock_.AdvanceMs(120'000);  // after every window: only the durable record can stop a re-send
  for (int i = 0; i < 4; ++i) {
    proto::RecordBatch b;
    AddRecord(b, kT0, "replayed record");
    EXPECT_EQ(StageAndWrite(*stager_, *store_, Chunk("api", "h"), 500 + i, b), 0u);
  }
  d = HttpDispatcher();
  clock_.AdvanceMs(120'000);
  ASSERT_TRUE(d->DeliverDue().ok());
  EXPECT_EQ(receiver_.requests().size(), 4u);
}

TEST_F(DispatcherTest, RejectedNotificationIsDroppedWithoutRetry) {
  StageEvents(1);
  receiver_.set_status(400);
  auto d = HttpDispatcher();
  auto stats = d->DeliverDue();
  EXPECT_EQ(stats->dropped, 1u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "hook"}, {"reason", "rejected"}}), 1);
  EXPECT_FALSE(d->CircuitOpen("hook"));
}

TEST_F(DispatcherTest, GivesUpAfterMaxAttempts) {
  config_.delivery.max_attempts = 3;
  StageEvents(1);
  receiver_.set_status(503);
  auto d = HttpDispatcher();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d->DeliverDue().ok());
    clock_.AdvanceMs(config_.delivery.backoff_max_ms);
  }
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "hook"}, {"reason", "max_attempts"}}), 1);
}

TEST_F(DispatcherTest, DropsExpiredAndUnknownSinkRows) {
  StageEvents(1);
  // A row for a sink that is no longer configured.
  OutboxEntry orphan = ReadOutbox(*store_)[0].second;
  orphan.sink = "gone";
  WriteBatch b;
  b.Put(kOutboxTable, OutboxKey{clock_.NowMs(), 1}.Encode(), EncodeOutboxEntry(orphan));
  ASSERT_TRUE(store_->Write(b).ok());
  clock_.AdvanceMs(config_.delivery.max_age_ms + 1);
  auto d = HttpDispatcher();
  auto stats = d->DeliverDue();
  EXPECT_EQ(stats->dropped, 2u);
  EXPECT_TRUE(receiver_.requests().empty());
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "hook"}, {"reason", "expired"}}), 1);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "gone"}, {"reason", "unknown_sink"}}), 1);
}

TEST_F(DispatcherTest, CorruptRowsAreDroppedNotRetriedForever) {
  WriteBatch b;
  b.Put(kOutboxTable, OutboxKey{kT0, 9}.Encode(), "{not json");
  ASSERT_TRUE(store_->Write(b).ok());
  auto d = HttpDispatcher();
  EXPECT_EQ(d->DeliverDue()->dropped, 1u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_notifications_dropped_total", {{"sink", "unknown"}, {"reason", "corrupt"}}), 1);
}

TEST_F(DispatcherTest, BacklogCheckWarnsAndSetsGaugesPastTheThreshold) {
  testing::LogCapture log;
  config_.delivery.backlog_warn_rows = 5;
  StageEvents(7);
  clock_.AdvanceMs(90'000);
  auto d = HttpDispatcher();
  auto b = d->CheckBacklog();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->due_rows, 7u);
  EXPECT_EQ(b->oldest_due_age_ms, 90'000 + 70);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_outbox_due_notifications"), 7);
  EXPECT_DOUBLE_EQ(MetricValue(registry_, "logdex_alerting_outbox_oldest_due_age_seconds"), 90.07);
  EXPECT_EQ(log.Warnings("outbox backlog: 7 notifications due"), 1u);
  ASSERT_TRUE(d->CheckBacklog().ok());
  EXPECT_EQ(log.Warnings("outbox backlog"), 1u);  // rate-limited
  ASSERT_TRUE(d->DeliverDue().ok());
  EXPECT_EQ(d->CheckBacklog()->due_rows, 0u);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_outbox_due_notifications"), 0);
}

TEST_F(DispatcherTest, ThreadedDispatcherDeliversStagedAlerts) {
  StageEvents(5);
  auto d = HttpDispatcher();
  ASSERT_TRUE(d->Start().ok());
  EXPECT_FALSE(d->Start().ok());
  EXPECT_FALSE(d->DeliverDue().ok());
  d->Wake();
  EXPECT_TRUE(receiver_.WaitFor(5, std::chrono::seconds(10)));
  StageEvents(3, 900);
  d->Wake();
  EXPECT_TRUE(receiver_.WaitFor(8, std::chrono::seconds(10)));
  d->Stop();
  EXPECT_TRUE(ReadOutbox(*store_).empty()) << "Stop() waits for the deliveries under way";
  auto keys = ReceivedKeys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 8u);
}

TEST_F(DispatcherTest, ThreadedDispatcherDeliversEachRowOnceWithParallelWorkers) {
  config_.sinks[0].concurrency = 4;
  config_.delivery.scan_batch = 16;  // many rescans while workers delete rows
  config_.delivery.poll_interval_ms = 1;
  StageEvents(300);
  auto d = HttpDispatcher();
  ASSERT_TRUE(d->Start().ok());
  EXPECT_TRUE(receiver_.WaitFor(300, std::chrono::seconds(30)));
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return ReadOutbox(*store_).empty(); }, 30'000));
  // Room for a wrong extra delivery to show: 20 more scheduler rounds over
  // the emptied outbox, with the workers idle.
  const uint64_t rounds = d->scheduler_rounds();
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return d->scheduler_rounds() >= rounds + 20; }, 30'000));
  d->Stop();
  auto keys = ReceivedKeys();
  EXPECT_EQ(keys.size(), 300u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 300u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
}

// A member that does not own the shared outbox reads nothing from it; the
// rows wait, and go out once it is made the delivering member.
TEST_F(DispatcherTest, AnInactiveDispatcherLeavesTheOutboxToItsOwner) {
  config_.delivery.poll_interval_ms = 5;
  auto d = HttpDispatcher();
  d->SetActive(false);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_dispatcher_active", {}), 0);
  ASSERT_TRUE(d->Start().ok());
  StageEvents(4);
  d->Wake();
  const uint64_t rounds = d->scheduler_rounds();
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return d->scheduler_rounds() >= rounds + 60; }, 30'000));
  EXPECT_TRUE(receiver_.requests().empty()) << "60 scheduler rounds while inactive";
  EXPECT_EQ(ReadOutbox(*store_).size(), 4u);
  d->SetActive(true);
  EXPECT_EQ(MetricValue(registry_, "logdex_alerting_dispatcher_active", {}), 1);
  EXPECT_TRUE(receiver_.WaitFor(4, std::chrono::seconds(10)));
  d->Stop();
  auto keys = ReceivedKeys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 4u);
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
}

// Handing the outbox over waits for the delivery under way and drops the
// queued ones; taking it back delivers the rest, each once.
TEST_F(DispatcherTest, GoingInactiveFinishesTheDeliveryUnderWayAndDropsTheQueue) {
  config_.delivery.poll_interval_ms = 5;
  StageEvents(5);
  FakeSink* fake = nullptr;
  auto d = FakeDispatcher(&fake);
  // The first delivery is still under way when the handover begins: it ends
  // only once the dispatcher is inactive.
  fake->HoldDeliveriesUntil([&] { return !d->active(); });
  ASSERT_TRUE(d->Start().ok());
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return fake->started() >= 1; }, 5'000));
  d->SetActive(false);
  const size_t at_handover = fake->delivered().size();
  EXPECT_GE(at_handover, 1u) << "SetActive(false) returned before the delivery under way finished";
  const uint64_t rounds = d->scheduler_rounds();
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return d->scheduler_rounds() >= rounds + 60; }, 30'000));
  EXPECT_EQ(static_cast<size_t>(fake->started()), at_handover) << "an inactive dispatcher started a delivery in 60 rounds";
  EXPECT_EQ(fake->delivered().size(), at_handover) << "an inactive dispatcher delivered";
  EXPECT_EQ(ReadOutbox(*store_).size(), 5u - at_handover);
  fake->HoldDeliveriesUntil(nullptr);
  d->SetActive(true);
  ASSERT_TRUE(logdex::testing::WaitFor([&] { return fake->delivered().size() >= 5; }, 10'000));
  d->Stop();
  std::set<std::string> keys;
  for (const auto& n : fake->delivered()) keys.insert(n.idempotency_key);
  EXPECT_EQ(keys.size(), 5u);
  EXPECT_EQ(fake->delivered().size(), 5u);
  EXPECT_TRUE(ReadOutbox(*store_).empty());
}

TEST_F(DispatcherTest, MetricsExpositionPassesPromtool) {
  StageEvents(2);
  receiver_.set_status(503);
  auto d = HttpDispatcher();
  ASSERT_TRUE(d->DeliverDue().ok());
  ASSERT_TRUE(d->CheckBacklog().ok());
  const std::string text = prometheus::TextSerializer().Serialize(registry_.Collect());
  for (const char* name : {"logdex_alerting_alerts_detected_total", "logdex_alerting_notifications_staged_total",
                           "logdex_alerting_notifications_failed_total", "logdex_alerting_notifications_retried_total",
                           "logdex_alerting_outbox_due_notifications", "logdex_alerting_circuit_open"})
    EXPECT_NE(text.find(std::string("# HELP ") + name), std::string::npos) << name;
  if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "promtool not installed (scripts/install-deps.sh --servers)";
  const std::string path = dir_.path() + "/metrics.txt";
  std::ofstream(path) << text;
  const int rc = std::system(("/usr/bin/promtool check metrics < " + path + " > " + path + ".out 2>&1").c_str());
  std::ifstream out(path + ".out");
  EXPECT_EQ(rc, 0) << std::string(std::istreambuf_iterator<char>(out), {});
}

}  // namespace
}  // namespace logdex::alerting
