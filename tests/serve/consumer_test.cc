// GroupConsumer on librdkafka's mock cluster (a real Kafka protocol peer):
// bad input goes to the DLQ with its reason and never stalls a partition;
// store failures and a broker outage pause consumption without losing data.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <set>
#include <thread>

#include "common/crc32c.h"
#include "common/defaults.h"
#include "common/row_keys.h"
#include "consumer/batch_processor.h"
#include "consumer/embedded_kafka.h"
#include "consumer/group_consumer.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "server/ingest_adapters.h"
#include "store/rocksdb_store.h"
#include "tests/serve/kafka_test_util.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using testing::ReadTopic;
using testing::TestProducer;
using testing::WaitFor;

constexpr int kPartitions = 4;

class ConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto k = EmbeddedKafka::Start(1);
    ASSERT_TRUE(k.ok());
    kafka_ = std::move(*k);
    ASSERT_TRUE(kafka_->CreateTopic("t", kPartitions).ok());
    ASSERT_TRUE(kafka_->CreateTopic("t.dlq", 1).ok());
    RocksDbOptions ro;
    ro.path = dir_.path() + "/store";
    auto s = RocksDbStore::Open(ro);
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    ASSERT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    indexer_ = std::make_unique<Indexer>(*store_, IndexerOptions{});
    lines_ = std::make_unique<ShipLineDecoder>("", "", SystemClock::Instance());
    BatchProcessorOptions bo;
    bo.messages_outlive_batch = true;  // as serve runs it: main rows borrow the message bytes
    processor_ = std::make_unique<BatchProcessor>(*indexer_, bo, lines_.get(), nullptr);
    metrics_ = std::make_unique<ConsumerMetrics>(registry_);
    GroupConsumerOptions o;
    o.kafka["bootstrap.servers"] = kafka_->bootstrap();
    o.kafka["log_level"] = "2";
    o.group_id = "g";
    o.topics = {"t"};
    o.session_timeout_ms = 6000;
    o.retry_backoff_max_ms = 200;
    Configure(o);
    consumer_ = std::make_unique<GroupConsumer>(o, *store_, *processor_, *metrics_, SystemClock::Instance());
    ASSERT_TRUE(consumer_->Start().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(consumer_->Run(stop_).ok()); });
  }

  virtual void Configure(GroupConsumerOptions&) {}

  void TearDown() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  static std::string Chunk(uint64_t seq, int records = 3, const std::string& app = "app") {
    proto::RecordBatch b;
    for (int i = 0; i < records; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(SystemClock::Instance().NowMs() - 60'000 + i);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message("good record " + std::to_string(seq) + "." + std::to_string(i));
    }
    PackOptions po;
    po.producer_id = 42;
    po.sequence = seq;
    return PackChunk(app, "h1", b, po).SerializeAsString();
  }

  uint64_t MainRows() {
    uint64_t n = 0;
    EXPECT_TRUE(store_->Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto, auto) {
      return ++n, true;
    }).ok());
    return n;
  }

  TempDir dir_;
  std::unique_ptr<EmbeddedKafka> kafka_;
  std::unique_ptr<RocksDbStore> store_;
  std::unique_ptr<Indexer> indexer_;
  std::unique_ptr<ShipLineDecoder> lines_;
  std::unique_ptr<BatchProcessor> processor_;
  prometheus::Registry registry_;
  std::unique_ptr<ConsumerMetrics> metrics_;
  std::unique_ptr<GroupConsumer> consumer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(ConsumerTest, BadMessagesGoToTheDlqWithTheirReasonAndGoodOnesAreIndexed) {
  TestProducer producer(kafka_->bootstrap());
  // Bad messages of every kind, each followed by good ones on the same partition.
  proto::LogChunk bad_crc, bad_snappy, wrong_version, oversized, empty_app;
  ASSERT_TRUE(bad_crc.ParseFromString(Chunk(1000)));
  (*bad_crc.mutable_payload())[3] ^= 1;
  ASSERT_TRUE(bad_snappy.ParseFromString(Chunk(1001)));
  bad_snappy.set_payload("\x10not snappy");
  bad_snappy.set_payload_crc32c(Crc32c(bad_snappy.payload()));
  ASSERT_TRUE(wrong_version.ParseFromString(Chunk(1002)));
  wrong_version.set_format_major(9);
  ASSERT_TRUE(oversized.ParseFromString(Chunk(1003)));
  oversized.set_uncompressed_size(1ull << 40);
  empty_app.ParseFromString(Chunk(1004, 3, "x"));
  empty_app.clear_app();
  const std::string good0 = Chunk(1);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"malformed", good0.substr(0, good0.size() / 2)},  // truncated
      {"crc_mismatch", bad_crc.SerializeAsString()},
      {"bad_snappy", bad_snappy.SerializeAsString()},
      {"unsupported_version", wrong_version.SerializeAsString()},
      {"too_large", oversized.SerializeAsString()},
      {"empty_app", empty_app.SerializeAsString()},
      {"malformed", std::string("\xff\xfe garbage \x00\x01", 14)},
      {"unparseable_lines", "{\"msg\":\"no timestamp\",\"app\":\"a\",\"host\":\"h\"}"},  // JSON without a timestamp
      {"bad_format_header", "whatever"},
  };
  uint64_t seq = 0;
  std::map<int64_t, std::string> bad_offsets;  // partition 0 offset -> reason
  int64_t offset = 0;
  for (const auto& [reason, value] : bad) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (reason == "unparseable_lines") headers.emplace_back(std::string(kFormatHeader), "json");
    if (reason == "bad_format_header") headers.emplace_back(std::string(kFormatHeader), "xml");
    ASSERT_TRUE(producer.Send("t", 0, value, "k", headers));
    bad_offsets[offset++] = reason;
    for (int i = 0; i < 3; ++i, ++offset) ASSERT_TRUE(producer.Send("t", 0, Chunk(++seq)));
  }
  for (int p = 1; p < kPartitions; ++p) ASSERT_TRUE(producer.Send("t", p, Chunk(++seq)));

  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000)) << "indexed " << MainRows() << " of " << seq;
  std::vector<InMessage> dlq = ReadTopic(kafka_->bootstrap(), "t.dlq", 1, bad.size());
  ASSERT_EQ(dlq.size(), bad.size());
  for (const InMessage& m : dlq) {
    ASSERT_NE(m.Header(kDlqOffsetHeader), nullptr);
    const int64_t source_offset = std::stoll(*m.Header(kDlqOffsetHeader));
    ASSERT_TRUE(bad_offsets.count(source_offset)) << source_offset;
    const std::string& reason = bad_offsets[source_offset];
    EXPECT_EQ(m.key, "k");
    EXPECT_EQ(m.value, bad[static_cast<size_t>(source_offset / 4)].second) << "the original value is kept";
    EXPECT_EQ(*m.Header(kDlqTopicHeader), "t");
    EXPECT_EQ(*m.Header(kDlqPartitionHeader), "0");
    ASSERT_NE(m.Header(kDlqErrorHeader), nullptr);
    EXPECT_EQ(m.Header(kDlqErrorHeader)->rfind(reason, 0), 0u) << *m.Header(kDlqErrorHeader) << " vs " << reason;
  }
  EXPECT_EQ(metrics_->DeadLettered("malformed").Value(), 2);
  EXPECT_EQ(metrics_->DeadLettered("crc_mismatch").Value(), 1);
  EXPECT_EQ(metrics_->DeadLettered("unparseable_lines").Value(), 1);
}

// JSON and text lines from other shippers are parsed, chunked per stream and indexed.
TEST_F(ConsumerTest, JsonAndTextLinesFromOtherShippersAreIndexed) {
  TestProducer producer(kafka_->bootstrap());
  const int64_t now = SystemClock::Instance().NowMs();
  const std::string json = "{\"ts\":" + std::to_string(now - 5000) +
                           ",\"level\":\"error\",\"msg\":\"disk full\",\"app\":\"vector-app\",\"host\":\"n1\",\"dc\":\"east\"}\n"
                           "{\"ts\":" + std::to_string(now - 4000) +
                           ",\"level\":\"info\",\"msg\":\"ok\",\"app\":\"vector-app\",\"host\":\"n2\"}";
  ASSERT_TRUE(producer.Send("t", 1, json, "", {{std::string(kFormatHeader), "json"}}));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 2; }, 20'000)) << MainRows();
  // The counters move after the write (and the commit) that made the rows visible.
  EXPECT_TRUE(WaitFor([&] { return metrics_->records.Value() == 2; }, 5'000)) << metrics_->records.Value();
}

TEST_F(ConsumerTest, StoreFailuresPauseConsumptionAndNothingIsLost) {
  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(producer.Send("t", i % kPartitions, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000));

  store_->SetWriteFaultHook([](const WriteBatch::Entry&, size_t) { return Status(Errc::kIOError, "disk on fire"); });
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(producer.Send("t", i % kPartitions, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return metrics_->paused.Value() == 1; }, 10'000)) << "the consumer must pause";
  std::this_thread::sleep_for(std::chrono::seconds(5));  // the failure lasts 5 s
  EXPECT_EQ(MainRows(), 20u) << "nothing is written while the store fails";
  EXPECT_GT(metrics_->store_write_failures.Value(), 1);
  store_->SetWriteFaultHook(nullptr);

  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000)) << "indexed " << MainRows() << " of " << seq;
  EXPECT_TRUE(WaitFor([&] { return metrics_->paused.Value() == 0; }, 5'000)) << "resumed after the write";
  EXPECT_GE(metrics_->pauses.Value(), 1);
}

TEST_F(ConsumerTest, ABrokerOutageDelaysButLosesNothing) {
  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(producer.Send("t", i % kPartitions, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000));
  const double errors_before = metrics_->kafka_errors.Value();

  ASSERT_TRUE(kafka_->SetBrokerDown(1, true).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(producer.Queue("t", i % kPartitions, Chunk(++seq)));
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(MainRows(), 10u);
  ASSERT_TRUE(kafka_->SetBrokerDown(1, false).ok());
  ASSERT_TRUE(producer.Flush());
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 30'000)) << "indexed " << MainRows() << " of " << seq;
  EXPECT_GT(metrics_->kafka_errors.Value(), errors_before) << "the outage shows in the metrics";
}

// durability skip_wal: a written batch is durable only after a flush, so its
// offsets wait for one; a failing flush commits nothing (and says so).
class SkipWalConsumerTest : public ConsumerTest {
 protected:
  void Configure(GroupConsumerOptions& o) override {
    o.flush_interval_ms = 300;
    o.flush = [this]() -> Status {
      ++flushes_;
      if (fail_flush_) return Status(Errc::kIOError, "flush refused");
      return store_->Flush();
    };
  }
  int64_t Committed() { return testing::Committed(kafka_->bootstrap(), "g", "t", kPartitions); }

  std::atomic<bool> fail_flush_{true};
  std::atomic<int> flushes_{0};
};

TEST_F(SkipWalConsumerTest, OffsetsAreCommittedOnlyAfterAFlush) {
  TestProducer producer(kafka_->bootstrap());
  for (uint64_t seq = 1; seq <= 12; ++seq) ASSERT_TRUE(producer.Send("t", static_cast<int32_t>(seq % kPartitions), Chunk(seq)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 12; }, 20'000));
  ASSERT_TRUE(WaitFor([&] { return metrics_->flush_failures.Value() >= 2; }, 10'000)) << "flushes are retried";
  EXPECT_EQ(Committed(), 0) << "written but not flushed: nothing committed";
  EXPECT_EQ(metrics_->unflushed_messages.Value(), 12);
  fail_flush_ = false;
  ASSERT_TRUE(WaitFor([&] { return Committed() == 12; }, 10'000)) << "committed " << Committed();
  EXPECT_TRUE(WaitFor([&] { return metrics_->unflushed_messages.Value() == 0; }, 5'000));
  EXPECT_GT(flushes_.load(), 2);
}

}  // namespace
}  // namespace logdex
