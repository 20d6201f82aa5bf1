// The outbox's durability contract on every TableStore backend (tests/backends.h):
// restart, replay and a failed batch write.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "alerting/dispatcher.h"
#include "alerting/stager.h"
#include "tests/alerting/alerting_test_util.h"
#include "alerting/webhook_receiver.h"
#include "tests/backends.h"
#include "tests/failing_store.h"

namespace logdex::alerting {
namespace {

using testing::AddRecord;
using testing::Chunk;
using testing::kT0;
using testing::ReadOutbox;

class AlertingOnBackend : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    config_.sinks.push_back(testing::WebhookSinkConfig("hook", receiver_.url()));
    Reopen();
  }
  void Reopen() {
    stager_.reset();
    store_.reset();
    store_ = GetParam().open(dir_.path(), &clock_);
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(CreateAlertingTables(*store_, config_).ok());
    stager_ = std::make_unique<AlertStager>(config_, *store_, clock_, registry_);
  }
  Status StageOne(uint64_t chunk_number, const std::string& message) {
    proto::RecordBatch b;
    AddRecord(b, clock_.NowMs(), message);
    WriteBatch batch;
    auto n = stager_->Stage(Chunk("api", "h"), ChunkId(chunk_number), b, clock_.NowMs(), batch);
    if (!n.ok()) return n.error();
    return store_->Write(batch);
  }
  std::vector<std::string> DeliverAll() {
    SinkDispatcher d(config_, *store_, MakeSinks(config_, clock_), clock_, registry_, 3);
    EXPECT_TRUE(d.DeliverDue().ok());
    std::vector<std::string> keys;
    for (const auto& r : receiver_.requests()) keys.push_back(r.Header("Idempotency-Key"));
    return keys;
  }

  WebhookReceiver receiver_;
  TempDir dir_;
  ManualClock clock_{kT0};
  prometheus::Registry registry_;
  AlertingConfig config_;
  std::unique_ptr<TableStore> store_;
  std::unique_ptr<AlertStager> stager_;
};

TEST_P(AlertingOnBackend, PendingAlertsSurviveAReopenAndAreDeliveredOnce) {
  ASSERT_TRUE(StageOne(1, "disk failure").ok());
  ASSERT_TRUE(StageOne(2, "network failure").ok());
  Reopen();
  EXPECT_EQ(ReadOutbox(*store_).size(), 2u);
  auto keys = DeliverAll();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()),
            (std::set<std::string>{"ev:" + Hex16(1) + ":0", "ev:" + Hex16(2) + ":0"}));
  EXPECT_TRUE(ReadOutbox(*store_).empty());
}

TEST_P(AlertingOnBackend, ReplayAfterDeliveryAndReopenNotifiesNoOne) {
  ASSERT_TRUE(StageOne(7, "disk failure").ok());
  ASSERT_EQ(DeliverAll().size(), 1u);
  Reopen();
  clock_.AdvanceMs(600'000);
  ASSERT_TRUE(StageOne(7, "disk failure").ok());
  EXPECT_TRUE(ReadOutbox(*store_).empty());
  EXPECT_EQ(DeliverAll().size(), 1u);
}

TEST_P(AlertingOnBackend, AFailedBatchWriteIsStagedAgainAfterDiscardCache) {
  if (!GetParam().fault_injection) GTEST_SKIP() << "no fault injection on " << GetParam().name;
  GetParam().fail_writes_at(*store_, 0);
  EXPECT_FALSE(StageOne(9, "disk failure").ok());
  GetParam().fail_writes_at(*store_, -1);
  stager_->DiscardCache();  // serve's contract after a failed batch
  ASSERT_TRUE(StageOne(9, "disk failure").ok());
  auto keys = DeliverAll();
  EXPECT_EQ(keys, std::vector<std::string>{"ev:" + Hex16(9) + ":0"});
}

INSTANTIATE_TEST_SUITE_P(AllBackends, AlertingOnBackend, ::testing::ValuesIn(AllBackends()), BackendName());

// A member's view of a shared store that lets another member act once,
// just before this member's first conditional write: the race the stager
// must survive.
class InterleavingStore final : public logdex::testing::SharedForwardingStore {
 public:
  using SharedForwardingStore::SharedForwardingStore;
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override {
    if (++calls_ == run_before_call && meanwhile) std::exchange(meanwhile, nullptr)();
    return base_.CheckAndPut(table, key, expected, value);
  }
  Status Write(const WriteBatch& b) override {
    if (fail_writes > 0) {
      --fail_writes;
      return Status(Errc::kUnavailable, "injected write failure");
    }
    return base_.Write(b);
  }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    if (table == kStateTable && fail_state_reads > 0) {
      --fail_state_reads;
      return Error{Errc::kUnavailable, "injected read failure"};
    }
    return base_.Get(table, key);
  }
  std::function<void()> meanwhile;  // runs once
  int run_before_call = 1;
  int fail_writes = 0;       // the next writes of batches that fail
  int fail_state_reads = 0;  // the next reads of alert_state that fail

 private:
  int calls_ = 0;
};

class AlertingOnSharedBackend : public AlertingOnBackend {
 protected:
  void SetUp() override {
    AlertingOnBackend::SetUp();
    if (!store_->shared() || !store_->conditional_writes()) GTEST_SKIP() << "members share only an HBase store";
    view_a_ = std::make_unique<InterleavingStore>(*store_);
    StartMembers();
  }
  // (Re)starts both members with config_.
  void StartMembers() {
    member_a_ = std::make_unique<AlertStager>(config_, *view_a_, clock_, registry_a_);
    member_b_ = std::make_unique<AlertStager>(config_, *store_, clock_, registry_b_);
  }
  static proto::RecordBatch Records(int64_t ts_ms, const std::vector<std::string>& messages) {
    proto::RecordBatch b;
    for (const auto& m : messages) AddRecord(b, ts_ms, m);
    return b;
  }
  Status Stage(AlertStager& member, TableStore& view, const std::string& host, uint64_t chunk_number,
               const std::vector<std::string>& messages) {
    WriteBatch batch;
    auto n = member.Stage(Chunk("api", host), ChunkId(chunk_number), Records(clock_.NowMs(), messages),
                          clock_.NowMs(), batch);
    if (!n.ok()) return n.error();
    return view.Write(batch);
  }
  // kind -> the counts of its notifications in the outbox (one sink).
  std::map<NotificationKind, std::vector<uint64_t>> Outbox() {
    std::map<NotificationKind, std::vector<uint64_t>> out;
    for (const auto& [key, e] : ReadOutbox(*store_)) out[e.n.kind].push_back(e.n.count);
    return out;
  }

  std::unique_ptr<InterleavingStore> view_a_;
  prometheus::Registry registry_a_, registry_b_;
  std::unique_ptr<AlertStager> member_a_, member_b_;
};

TEST_P(AlertingOnSharedBackend, MembersStagingAtOnceKeepOneGlobalCapAndCountEveryRecord) {
  config_.limits.global = 3;
  config_.limits.per_app = 0;
  StartMembers();
  // Member B stages and writes its chunk between A's reads and A's writes.
  view_a_->meanwhile = [&] {
    ASSERT_TRUE(Stage(*member_b_, *store_, "h2", 2, {"cpu overheat", "fan stopped"}).ok());
  };
  ASSERT_TRUE(Stage(*member_a_, *view_a_, "h1", 1, {"disk failure", "network failure"}).ok());

  auto outbox = Outbox();
  // The cap holds across members: B's two events and one of A's; A's other
  // record counts into the window's storm summary.
  EXPECT_EQ(outbox[NotificationKind::kEvent].size(), 3u);
  EXPECT_EQ(outbox[NotificationKind::kStormSummary], std::vector<uint64_t>{1});
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_state_conflicts_total", {{"outcome", "restaged"}}), 1);
  // A's counters count its records once, though it staged them twice.
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_alerts_detected_total", {{"severity", "ERROR"}}), 2);
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_notifications_staged_total", {{"kind", "event"}}), 1);
}

TEST_P(AlertingOnSharedBackend, AStagingThatLosesAfterWritingSomeRowsPutsThemBack) {
  // A writes its storm window's and app's rows first, then loses its group's row to B,
  // which staged the same group from another host in the next limit window
  // (so B leaves A's storm window alone): A puts its storm row back and
  // stages its record again, in B's window.
  const int64_t old_slot = clock_.NowMs() - clock_.NowMs() % config_.limits.limit_window_ms;
  view_a_->run_before_call = 2;
  view_a_->meanwhile = [&] {
    clock_.AdvanceMs(config_.limits.limit_window_ms);
    ASSERT_TRUE(Stage(*member_b_, *store_, "h2", 2, {"disk failure"}).ok());
  };
  ASSERT_TRUE(Stage(*member_a_, *view_a_, "h1", 1, {"disk failure"}).ok());

  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_state_conflicts_total", {{"outcome", "restaged"}}), 1);
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_state_conflicts_total", {{"outcome", "overcounted"}}),
            -1);
  // No state row is left of A's first staging: each row names its window.
  ScanSpec spec;
  spec.table = std::string(kStateTable);
  int old_windows = 0, rows = 0;
  ASSERT_TRUE(store_->Scan(spec, [&](std::string_view, std::string_view v) {
    ++rows;
    if (v.empty()) return true;  // put back where there was none
    auto j = nlohmann::json::parse(v);
    if (j.at("start").get<int64_t>() < old_slot + config_.limits.limit_window_ms) ++old_windows;
    return true;
  }).ok());
  EXPECT_GT(rows, 0);
  EXPECT_EQ(old_windows, 0);
  // One event (B's, the group's first); A's record counts into the group's digest.
  auto outbox = Outbox();
  EXPECT_EQ(outbox[NotificationKind::kEvent].size(), 1u);
  EXPECT_EQ(outbox[NotificationKind::kGroupDigest], std::vector<uint64_t>{1});
}

// A batch whose chunks' state was written and that is then staged again
// (here salvaged message by message, as serve does after the store refused
// it; serve's whole-batch retry after a staging failure is the next test):
// each chunk gives the notifications it gave, counted once, though its
// state rows already count it.
TEST_P(AlertingOnSharedBackend, ABatchStagedAgainAfterItsStateWasWrittenNotifiesAsBeforeAndCountsOnce) {
  auto stage = [&](uint64_t chunk_number, const std::string& message, WriteBatch& batch) {
    auto n = member_a_->Stage(Chunk("api", "h1"), ChunkId(chunk_number), Records(clock_.NowMs(), {message}),
                              clock_.NowMs(), batch);
    ASSERT_TRUE(n.ok()) << n.error().ToString();
    EXPECT_EQ(*n, 1u);
  };
  WriteBatch whole;
  stage(1, "disk failure", whole);
  stage(2, "network failure", whole);
  view_a_->fail_writes = 1;
  ASSERT_FALSE(view_a_->Write(whole).ok());
  member_a_->DiscardCache();  // serve's contract after a failed batch

  // Salvaged message by message: the second is staged after the first was written.
  for (uint64_t chunk : {1, 2}) {
    WriteBatch one;
    stage(chunk, chunk == 1 ? "disk failure" : "network failure", one);
    ASSERT_TRUE(view_a_->Write(one).ok());
    member_a_->BatchWritten();
    member_a_->DiscardCache();  // as serve does on a shared store
  }
  auto outbox = Outbox();
  EXPECT_EQ(outbox[NotificationKind::kEvent].size(), 2u) << "each first record of its group stays an event";
  EXPECT_TRUE(outbox[NotificationKind::kGroupDigest].empty());
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_alerts_detected_total", {{"severity", "ERROR"}}), 2);

  // Once written, a chunk staged again is a replay.
  WriteBatch again;
  auto n = member_a_->Stage(Chunk("api", "h1"), ChunkId(1), Records(clock_.NowMs(), {"disk failure"}), clock_.NowMs(),
                            again);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

// A batch whose first chunk failed to stage is staged again whole: that
// chunk now counts into the group digest a kept chunk staged the first
// time, and the kept chunk, later in the batch, gives the digest with the
// newer count, not the one it staged.
TEST_P(AlertingOnSharedBackend, AChunkStagedAgainGivesItsDigestWithTheNewestCount) {
  auto stage = [&](uint64_t chunk_number, WriteBatch& batch) {
    return member_a_->Stage(Chunk("api", "h1"), ChunkId(chunk_number), Records(clock_.NowMs(), {"disk failure"}),
                            clock_.NowMs(), batch);
  };
  WriteBatch first;
  view_a_->fail_state_reads = 1;
  ASSERT_FALSE(stage(1, first).ok());
  ASSERT_TRUE(stage(2, first).ok());  // the group's event
  ASSERT_TRUE(stage(3, first).ok());  // its digest: 1
  member_a_->DiscardCache();          // the batch failed

  WriteBatch again;
  for (uint64_t chunk : {1, 2, 3}) ASSERT_TRUE(stage(chunk, again).ok());
  ASSERT_TRUE(view_a_->Write(again).ok());
  member_a_->BatchWritten();
  auto outbox = Outbox();
  EXPECT_EQ(outbox[NotificationKind::kEvent].size(), 1u);
  EXPECT_EQ(outbox[NotificationKind::kGroupDigest], std::vector<uint64_t>{2});
  EXPECT_EQ(testing::MetricValue(registry_a_, "logdex_alerting_alerts_detected_total", {{"severity", "ERROR"}}), 3);
}

// Members write a digest's outbox row in their batches with the count each
// staged: A's batch, staged before B's but landing after it, leaves A's
// smaller count in the outbox. The dispatcher sends the count the window's
// state row holds, which counts every member's records: a group's digest
// (one message), an app's and a storm's (a message each, over the limit).
TEST_P(AlertingOnSharedBackend, ADigestWhoseBatchLandedLateIsSentWithItsWindowsCount) {
  struct Case {
    NotificationKind kind;
    std::string key_prefix;
    uint32_t per_app, global;
    std::vector<std::string> messages;  // A's event, A's late record, B's two
  };
  const std::vector<Case> cases = {
      {NotificationKind::kGroupDigest, "gd:", 20, 100, {"disk failure", "disk failure", "disk failure", "disk failure"}},
      {NotificationKind::kAppDigest, "ad:", 1, 100, {"disk failure", "fan stopped", "cpu overheat", "link down"}},
      {NotificationKind::kStormSummary, "st:", 20, 1, {"disk failure", "fan stopped", "cpu overheat", "link down"}},
  };
  uint64_t chunk = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key_prefix);
    config_.limits.per_app = c.per_app;
    config_.limits.global = c.global;
    StartMembers();
    const size_t earlier = receiver_.requests().size();
    ASSERT_TRUE(Stage(*member_a_, *view_a_, "h1", ++chunk, {c.messages[0]}).ok());  // an event
    member_a_->BatchWritten();
    WriteBatch late;
    ASSERT_TRUE(member_a_->Stage(Chunk("api", "h1"), ChunkId(++chunk), Records(clock_.NowMs(), {c.messages[1]}),
                                 clock_.NowMs(), late)
                    .ok());  // the digest: 1
    ASSERT_TRUE(Stage(*member_b_, *store_, "h2", ++chunk, {c.messages[2], c.messages[3]}).ok());  // 3, written first
    ASSERT_EQ(Outbox()[c.kind], std::vector<uint64_t>{3});
    ASSERT_TRUE(view_a_->Write(late).ok());
    member_a_->BatchWritten();
    ASSERT_EQ(Outbox()[c.kind], std::vector<uint64_t>{1}) << "the premise: the late row's count";

    clock_.AdvanceMs(std::max(config_.limits.group_window_ms, config_.limits.limit_window_ms) +
                     config_.limits.digest_delay_ms);
    prometheus::Registry registry;
    SinkDispatcher d(config_, *store_, MakeSinks(config_, clock_), clock_, registry, 3);
    ASSERT_TRUE(d.DeliverDue().ok());
    std::vector<uint64_t> digests;
    const std::vector<ReceivedRequest> requests = receiver_.requests();
    for (size_t i = earlier; i < requests.size(); ++i) {
      const ReceivedRequest& r = requests[i];
      if (r.Header("Idempotency-Key").starts_with(c.key_prefix)) {
        digests.push_back(nlohmann::json::parse(r.body).at("count"));
      }
    }
    EXPECT_EQ(digests, std::vector<uint64_t>{3});
    EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_digest_state_reads_total", {{"outcome", "raised"}}), 1);
    EXPECT_TRUE(ReadOutbox(*store_).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, AlertingOnSharedBackend, ::testing::ValuesIn(AllBackends()), BackendName());

// A's late digest of a group (count 1, where the state row counts 3), and
// sends to come: a group's next window may have begun by then (its row
// keeps the window before), and the state row may not be readable.
class LateGroupDigest : public AlertingOnSharedBackend {
 protected:
  void SetUp() override {
    AlertingOnSharedBackend::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(Stage(*member_a_, *view_a_, "h1", 1, {"disk failure"}).ok());  // the group's event
    member_a_->BatchWritten();
    WriteBatch late;
    ASSERT_TRUE(member_a_->Stage(Chunk("api", "h1"), ChunkId(2), Records(clock_.NowMs(), {"disk failure"}),
                                 clock_.NowMs(), late)
                    .ok());
    ASSERT_TRUE(Stage(*member_b_, *store_, "h2", 3, {"disk failure", "disk failure"}).ok());
    ASSERT_TRUE(view_a_->Write(late).ok());
    member_a_->BatchWritten();
    ASSERT_EQ(Outbox()[NotificationKind::kGroupDigest], std::vector<uint64_t>{1});
    for (const auto& [key, e] : ReadOutbox(*store_)) {
      if (e.n.kind == NotificationKind::kGroupDigest) late_key_ = e.n.idempotency_key;
    }
  }
  // The counts of the late digest that `store`'s dispatcher sends now.
  std::vector<uint64_t> SendDigests(TableStore& store, prometheus::Registry& registry) {
    SinkDispatcher d(config_, store, MakeSinks(config_, clock_), clock_, registry, 3);
    EXPECT_TRUE(d.DeliverDue().ok());
    std::vector<uint64_t> counts;
    for (const auto& r : receiver_.requests()) {
      if (r.Header("Idempotency-Key") == late_key_) counts.push_back(nlohmann::json::parse(r.body).at("count"));
    }
    return counts;
  }
  // A later window of the group, staged by B: an event, and `folded` records into its digest.
  void NextWindow(uint64_t chunk, int folded) {
    clock_.AdvanceMs(config_.limits.group_window_ms);
    ASSERT_TRUE(Stage(*member_b_, *store_, "h2", chunk, std::vector<std::string>(1 + folded, "disk failure")).ok());
  }

  std::string late_key_;
};

TEST_P(LateGroupDigest, IsRaisedFromTheWindowBeforeWhenTheGroupsNextWindowHasBegun) {
  NextWindow(4, 0);  // the window closed, its digest not yet due
  clock_.AdvanceMs(config_.limits.digest_delay_ms);
  prometheus::Registry registry;
  EXPECT_EQ(SendDigests(*store_, registry), std::vector<uint64_t>{3});
  EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_digest_state_reads_total", {{"outcome", "raised"}}), 1);
}

TEST_P(LateGroupDigest, IsRaisedAfterLaterWindowsThatFoldedNothing) {
  NextWindow(4, 0);
  NextWindow(5, 0);
  prometheus::Registry registry;
  EXPECT_EQ(SendDigests(*store_, registry), std::vector<uint64_t>{3});
  EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_digest_state_reads_total", {{"outcome", "raised"}}), 1);
}

TEST_P(LateGroupDigest, IsSentAsStagedOnceALaterWindowHadADigestOfItsOwn) {
  NextWindow(4, 1);  // the row now keeps this window's digest as the one before
  NextWindow(5, 0);
  prometheus::Registry registry;
  EXPECT_EQ(SendDigests(*store_, registry), std::vector<uint64_t>{1});
  EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_digest_state_reads_total", {{"outcome", "gone"}}), 1);
}

TEST_P(LateGroupDigest, IsSentAsStagedAndCountedWhenItsStateCannotBeRead) {
  clock_.AdvanceMs(config_.limits.group_window_ms + config_.limits.digest_delay_ms);
  view_a_->fail_state_reads = 1;
  prometheus::Registry registry;
  EXPECT_EQ(SendDigests(*view_a_, registry), std::vector<uint64_t>{1});
  EXPECT_EQ(view_a_->fail_state_reads, 0) << "the dispatcher read the state";
  EXPECT_EQ(testing::MetricValue(registry, "logdex_alerting_digest_state_reads_total", {{"outcome", "failed"}}), 1);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, LateGroupDigest, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex::alerting
