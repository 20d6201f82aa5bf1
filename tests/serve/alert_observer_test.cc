// serve's alert observer (server/ingest_adapters.h): alerting as the last link
// of the indexer's chain. It, not the indexer, decides which chunks are
// decompressed for alerts; its notifications join the batch that stores the
// chunk, and a written batch is reported with its count.
#include "server/ingest_adapters.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <vector>

#include "alerting/notification.h"
#include "alerting/stager.h"
#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/row_keys.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "store/rocksdb_store.h"
#include "tests/alerting/alerting_test_util.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'795'910'400'000;  // 2026-11-29T00:00:00Z

class AlertObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RocksDbOptions ro;
    ro.path = dir_.path() + "/store";
    ro.clock = &clock_;
    auto store = RocksDbStore::Open(ro);
    ASSERT_TRUE(store.ok()) << store.error().ToString();
    store_ = std::move(*store);
    ASSERT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    ASSERT_TRUE(alerting::CreateAlertingTables(*store_, config_).ok());
    stager_ = std::make_unique<alerting::AlertStager>(config_, *store_, clock_, registry_);
    IndexerOptions io;
    io.decode.clock = &clock_;
    indexer_ = std::make_unique<Indexer>(*store_, io);
    indexer_->AddObserver(std::make_unique<AlertObserver>(*stager_, /*shared_store=*/false,
                                                          [this](size_t n) { written_counts_.push_back(n); }));
  }

  // One chunk of `severity` records from producer 7, sequence `seq`.
  static std::string Chunk(Severity severity, uint64_t seq) {
    proto::RecordBatch b;
    for (int i = 0; i < 3; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(kNow - 1'000 + i);
      r->set_severity(SeverityCode(severity));
      r->set_message("payment " + std::to_string(seq) + " failed: card declined");
    }
    PackOptions po;
    po.producer_id = 7;
    po.sequence = seq;
    return PackChunk("billing", "web-1", b, po).SerializeAsString();
  }

  // Stages `bytes` into a fresh batch; writes it when `write`, then settles.
  void Ingest(const std::string& bytes, bool write) {
    auto chunk = DecodeChunk(bytes, indexer_->options().decode);
    ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
    WriteBatch batch;
    auto staged = indexer_->Stage(*chunk, bytes, proto::ChunkSource{}, batch, false, kNow - 500);
    ASSERT_TRUE(staged.ok()) << staged.error().ToString();
    ASSERT_TRUE(staged->store_failure.ok()) << staged->store_failure.ToString();
    if (write) {
      ASSERT_TRUE(store_->Write(batch).ok());
    }
    indexer_->Settle(write);
  }

  // The notifications in the outbox.
  std::vector<alerting::Notification> Outbox() {
    std::vector<alerting::Notification> out;
    EXPECT_TRUE(store_->Scan(ScanSpec{std::string(kOutboxTable), "", "", false, 0}, [&](auto, std::string_view v) {
      auto e = alerting::DecodeOutboxEntry(v);
      EXPECT_TRUE(e.ok());
      if (e.ok()) out.push_back(e->n);
      return true;
    }).ok());
    return out;
  }

  size_t OutboxRows() {
    size_t n = 0;
    EXPECT_TRUE(store_->Scan(ScanSpec{std::string(kOutboxTable), "", "", false, 0}, [&](auto, auto) {
      ++n;
      return true;
    }).ok());
    return n;
  }

  TempDir dir_;
  ManualClock clock_{kNow};
  prometheus::Registry registry_;
  std::unique_ptr<TableStore> store_;
  alerting::AlertingConfig config_ = alerting::testing::OneSinkNoLimits();
  std::unique_ptr<alerting::AlertStager> stager_;
  std::unique_ptr<Indexer> indexer_;
  std::vector<size_t> written_counts_;
};

TEST_F(AlertObserverTest, OnlyChunksAtAnAlertingSeverityAreDecompressedAndTheirAlertsGoWithTheirBatch) {
  Ingest(Chunk(Severity::kInfo, 1), true);
  EXPECT_EQ(indexer_->counters().decompressed, 0u) << "no rule takes INFO: its chunk is checked, not unpacked";
  EXPECT_TRUE(written_counts_.empty());
  EXPECT_EQ(OutboxRows(), 0u);

  Ingest(Chunk(Severity::kError, 2), true);
  EXPECT_EQ(indexer_->counters().decompressed, 1u) << "the observer wants ERROR records";
  ASSERT_EQ(written_counts_.size(), 1u) << "a written batch with notifications is reported once";
  EXPECT_GE(written_counts_[0], 1u);
  EXPECT_EQ(OutboxRows(), written_counts_[0]) << "what was counted is in the outbox";
}

TEST_F(AlertObserverTest, ABatchNotWrittenReportsNothingAndItsChunkAlertsWhenItComesAgain) {
  Ingest(Chunk(Severity::kError, 3), /*write=*/false);
  EXPECT_TRUE(written_counts_.empty()) << "nothing reached the store";
  EXPECT_EQ(OutboxRows(), 0u);
  Ingest(Chunk(Severity::kError, 3), true);  // the consumer processes it again
  ASSERT_EQ(written_counts_.size(), 1u) << "not taken for a replay: the first staging was dropped";
  const size_t rows = OutboxRows();
  EXPECT_EQ(rows, written_counts_[0]);
  Ingest(Chunk(Severity::kError, 3), true);  // a real replay of a written chunk
  EXPECT_EQ(written_counts_.size(), 1u) << "a replay stages nothing";
  EXPECT_EQ(OutboxRows(), rows);
}

// A chunk of mixed severities (another producer's: no tag summary) is split
// by severity before the observers see it: the ERROR part alerts, with the
// time the chunk reached Kafka, and the INFO part does not.
TEST_F(AlertObserverTest, TheErrorPartOfAMixedChunkAlertsWithTheChunksKafkaTime) {
  proto::RecordBatch b;
  for (int i = 0; i < 6; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(kNow - 1'000 + i);
    r->set_severity(SeverityCode(i == 4 ? Severity::kError : Severity::kInfo));
    r->set_message(i == 4 ? "disk full on /var" : "request served");
  }
  PackOptions po;
  po.producer_id = 8;
  po.sequence = 1;
  po.summarize_tags = false;
  Ingest(PackChunk("billing", "web-2", b, po).SerializeAsString(), true);
  EXPECT_EQ(indexer_->counters().split_by_severity, 1u);
  const std::vector<alerting::Notification> sent = Outbox();
  ASSERT_EQ(sent.size(), 1u) << "one ERROR record, one sink";
  EXPECT_EQ(sent[0].message, "disk full on /var");
  EXPECT_EQ(sent[0].kafka_ts_ms, kNow - 500) << "the latency starts when the chunk reached Kafka";
  ASSERT_EQ(written_counts_.size(), 1u);
  EXPECT_EQ(written_counts_[0], 1u);
}

}  // namespace
}  // namespace logdex
