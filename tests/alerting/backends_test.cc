// The outbox's durability contract on every TableStore backend (tests/backends.h):
// restart, replay and a failed batch write.
#include <gtest/gtest.h>

#include <set>

#include "alerting/dispatcher.h"
#include "alerting/stager.h"
#include "tests/alerting/alerting_test_util.h"
#include "alerting/webhook_receiver.h"
#include "tests/backends.h"

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
  GetParam().fail_writes_at(*store_, 0);
  EXPECT_FALSE(StageOne(9, "disk failure").ok());
  GetParam().fail_writes_at(*store_, -1);
  stager_->DiscardCache();  // serve's contract after a failed batch
  ASSERT_TRUE(StageOne(9, "disk failure").ok());
  auto keys = DeliverAll();
  EXPECT_EQ(keys, std::vector<std::string>{"ev:" + Hex16(9) + ":0"});
}

INSTANTIATE_TEST_SUITE_P(AllBackends, AlertingOnBackend, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex::alerting
