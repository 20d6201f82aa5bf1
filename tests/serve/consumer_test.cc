// GroupConsumer on librdkafka's mock cluster (a real Kafka protocol peer):
// bad input goes to the DLQ with its reason and never stalls a partition;
// store failures and a broker outage pause consumption without losing data.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <prometheus/registry.h>

#include <random>
#include <set>
#include <thread>

#include "common/crc32c.h"
#include "common/defaults.h"
#include "common/row_keys.h"
#include "consumer/batch_processor.h"
#include "consumer/embedded_kafka.h"
#include "consumer/group_consumer.h"
#include "consumer/offset_gap.h"
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
    auto k = EmbeddedKafka::Start(Brokers());
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
    processor_ = std::make_unique<BatchProcessor>(*indexer_, bo, lines_.get());
    metrics_ = std::make_unique<ConsumerMetrics>(registry_);
    GroupConsumerOptions o = BaseOptions();
    Configure(o);
    consumer_ = std::make_unique<GroupConsumer>(o, ConsumerStore(), *processor_, *metrics_, ConsumerClock());
    ASSERT_TRUE(consumer_->Start().ok());
    thread_ = std::thread([this] { EXPECT_TRUE(consumer_->Run(stop_).ok()); });
  }

  GroupConsumerOptions BaseOptions() const {
    GroupConsumerOptions o;
    o.kafka["bootstrap.servers"] = kafka_->bootstrap();
    o.kafka["log_level"] = "2";
    o.group_id = "g";
    o.topics = {"t"};
    o.session_timeout_ms = 6000;
    o.retry_backoff_max_ms = 200;
    return o;
  }
  virtual void Configure(GroupConsumerOptions&) {}
  virtual int Brokers() { return 1; }
  // The store the consumer writes to (a fake may wrap store_).
  virtual TableStore& ConsumerStore() { return *store_; }
  virtual const Clock& ConsumerClock() { return SystemClock::Instance(); }

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

// A message over the size Kafka accepts by default (message.max.bytes
// 1,000,000) used to stall its partition: its dead letter could never be
// produced and was retried forever with every partition paused. It is cut to
// kDlqMaxValueBytes, says so in a header, is counted, and the partition moves on.
TEST_F(ConsumerTest, ADeadLetterTooLargeForKafkaIsProducedCutAndThePartitionMovesOn) {
  TestProducer producer(kafka_->bootstrap());
  const std::string huge(3'000'000, '\x01');  // garbage: not a LogChunk
  ASSERT_TRUE(producer.Send("t", 0, huge, "k"));
  ASSERT_TRUE(producer.Send("t", 0, Chunk(1)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 1; }, 30'000)) << "the partition stalled behind the dead letter";
  std::vector<InMessage> dlq = ReadTopic(kafka_->bootstrap(), "t.dlq", 1, 1);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].value.size(), kDlqMaxValueBytes);
  EXPECT_EQ(dlq[0].value.view(), std::string_view(huge).substr(0, kDlqMaxValueBytes));
  ASSERT_NE(dlq[0].Header(kDlqTruncatedHeader), nullptr);
  EXPECT_EQ(*dlq[0].Header(kDlqTruncatedHeader), "3000000");
  EXPECT_EQ(*dlq[0].Header(kDlqOffsetHeader), "0") << "where the whole message stays";
  EXPECT_EQ(metrics_->dlq_truncated.Value(), 1);
  EXPECT_EQ(metrics_->DeadLettered("malformed").Value(), 1);
}

// The dead letter's headers count against message.max.bytes too: a 600 kB
// header (quoted again by the error text) made a dead letter no broker
// takes, and the partition stalled. The error text is cut and an oversized
// header is left out, named in logdex-headers-dropped.
TEST_F(ConsumerTest, ADeadLetterWithHugeHeadersIsProducedWithinKafkasLimit) {
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(producer.Send("t", 0, "small", "k", {{std::string(kFormatHeader), std::string(600'000, 'x')}}));
  ASSERT_TRUE(producer.Send("t", 0, Chunk(1)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 1; }, 30'000)) << "the partition stalled behind the dead letter";
  std::vector<InMessage> dlq = ReadTopic(kafka_->bootstrap(), "t.dlq", 1, 1);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].value, "small");
  ASSERT_NE(dlq[0].Header("logdex-headers-dropped"), nullptr);
  EXPECT_EQ(*dlq[0].Header("logdex-headers-dropped"), "1");
  EXPECT_LE(dlq[0].Header(kDlqErrorHeader)->size(), 4096u);
  EXPECT_EQ(dlq[0].Header(kDlqErrorHeader)->rfind("bad_format_header", 0), 0u);
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
  // The failure lasts until the consumer has retried the write 3 more times.
  const double failures = metrics_->store_write_failures.Value();
  const bool retried = WaitFor([&] { return metrics_->store_write_failures.Value() >= failures + 3; }, 60'000);
  const uint64_t rows_while_failing = MainRows();
  store_->SetWriteFaultHook(nullptr);
  ASSERT_TRUE(retried) << metrics_->store_write_failures.Value();
  EXPECT_EQ(rows_while_failing, 20u) << "nothing is written while the store fails";

  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000)) << "indexed " << MainRows() << " of " << seq;
  EXPECT_TRUE(WaitFor([&] { return metrics_->paused.Value() == 0; }, 5'000)) << "resumed after the write";
  EXPECT_GE(metrics_->pauses.Value(), 1);
}

// A member knows the committed offsets of its own partitions; a compactor
// on a store the group shares merges chunks of every member's partitions,
// and asks the broker for the others' (RefreshCommitted).
TEST_F(ConsumerTest, AMemberReadsTheOffsetsAnotherMemberCommittedWhenAsked) {
  TempDir dir;
  RocksDbOptions ro;
  ro.path = dir.path() + "/store";
  auto store = RocksDbStore::Open(ro);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(CreateTables(**store, TableLayout{}).ok());
  Indexer indexer(**store, IndexerOptions{});
  ShipLineDecoder lines("", "", SystemClock::Instance());
  BatchProcessor processor(indexer, BatchProcessorOptions{}, &lines);
  prometheus::Registry registry;
  ConsumerMetrics metrics(registry);
  GroupConsumer other(BaseOptions(), **store, processor, metrics, SystemClock::Instance());
  ASSERT_TRUE(other.Start().ok());
  std::atomic<bool> stop{false};
  std::thread thread([&] { EXPECT_TRUE(other.Run(stop).ok()); });
  struct Joins {  // also when an assertion ends the test early
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joins() {
      stop = true;
      if (thread.joinable()) thread.join();
    }
  } joins{stop, thread};
  ASSERT_TRUE(WaitFor([&] {
    const size_t mine = consumer_->State(1'000'000).assigned, theirs = other.State(1'000'000).assigned;
    return mine > 0 && theirs > 0 && mine + theirs == kPartitions;
  }, 60'000)) << "the two members share the partitions";

  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  for (int round = 0; round < 3; ++round) {
    for (int p = 0; p < kPartitions; ++p) ASSERT_TRUE(producer.Send("t", p, Chunk(++seq)));
  }
  // Each owner has seen its own commits answered.
  ASSERT_TRUE(WaitFor([&] {
    for (int p = 0; p < kPartitions; ++p) {
      if (consumer_->CommittedOffset("t", p) != 3 && other.CommittedOffset("t", p) != 3) return false;
    }
    return true;
  }, 30'000));
  std::vector<std::pair<std::string, int32_t>> all;
  int unknown = 0;
  for (int p = 0; p < kPartitions; ++p) {
    all.emplace_back("t", p);
    const std::optional<int64_t> mine = consumer_->CommittedOffset("t", p), theirs = other.CommittedOffset("t", p);
    EXPECT_TRUE(mine == 3 || theirs == 3) << "partition " << p << ": its owner knows its own commit";
    unknown += mine != 3;
  }
  EXPECT_EQ(unknown, static_cast<int>(kPartitions - consumer_->State(1'000'000).assigned))
      << "the other member's commits are not seen unasked";
  ASSERT_TRUE(consumer_->RefreshCommitted(all, 10'000).ok());
  for (int p = 0; p < kPartitions; ++p) EXPECT_EQ(consumer_->CommittedOffset("t", p), 3) << "partition " << p;

  stop = true;
  thread.join();
  // A member that left its group reads nothing (its own partitions are
  // no longer skipped: it owns none).
  Status after = other.RefreshCommitted(all, 1'000);
  EXPECT_EQ(after.code(), Errc::kUnavailable) << after.message();
}

// The consumer's retries wait on its clock: on a ManualClock a test reads
// each delay the consumer chose and moves time exactly that far, instead of
// sleeping through the backoff and hoping the machine kept up.
class ManualClockConsumerTest : public ConsumerTest {
 protected:
  const Clock& ConsumerClock() override { return clock_; }
  ManualClock clock_{1'800'000'000'000};
};

TEST_F(ManualClockConsumerTest, StoreRetriesWaitOutAJitteredDoublingBackoffOnTheConsumersClock) {
  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  ASSERT_TRUE(producer.Send("t", 0, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000));

  store_->SetWriteFaultHook([](const WriteBatch::Entry&, size_t) { return Status(Errc::kIOError, "disk on fire"); });
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(producer.Send("t", i % kPartitions, Chunk(++seq)));
  // The fixture's policy: from 100 ms, doubling, capped at 200 ms.
  for (const int64_t ceiling : {100, 200, 200, 200}) {
    ASSERT_TRUE(clock_.WaitForSleepers(1, 30'000)) << "the consumer waits on its clock after a failed write";
    const int64_t delay = clock_.NextWakeMs() - clock_.NowMs();
    EXPECT_GE(delay, ceiling / 2);
    EXPECT_LE(delay, ceiling);
    EXPECT_EQ(metrics_->paused.Value(), 1) << "paused while it waits";
    const double failures = metrics_->store_write_failures.Value();
    clock_.AdvanceMs(delay);
    ASSERT_TRUE(WaitFor([&] { return metrics_->store_write_failures.Value() == failures + 1; }, 30'000))
        << "one retry once its delay has passed";
  }
  EXPECT_EQ(MainRows(), 1u) << "nothing is written while the store fails";
  store_->SetWriteFaultHook(nullptr);
  ASSERT_TRUE(clock_.WaitForSleepers(1, 30'000));
  clock_.AdvanceMs(clock_.NextWakeMs() - clock_.NowMs());
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000)) << "indexed " << MainRows() << " of " << seq;
  EXPECT_TRUE(WaitFor([&] { return metrics_->paused.Value() == 0; }, 20'000)) << "resumed after the write";
}

TEST_F(ConsumerTest, ABrokerOutageDelaysButLosesNothing) {
  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(producer.Send("t", i % kPartitions, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 20'000));
  const double errors_before = metrics_->kafka_errors.Value();

  ASSERT_TRUE(kafka_->SetBrokerDown(1, true).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(producer.Queue("t", i % kPartitions, Chunk(++seq)));
  // The consumer has met the outage once it counts a Kafka error.
  ASSERT_TRUE(WaitFor([&] { return metrics_->kafka_errors.Value() > errors_before; }, 60'000))
      << "the outage shows in the metrics";
  EXPECT_EQ(MainRows(), 10u) << "nothing arrives while the broker is down";
  ASSERT_TRUE(kafka_->SetBrokerDown(1, false).ok());
  ASSERT_TRUE(producer.Flush());
  ASSERT_TRUE(WaitFor([&] { return MainRows() == seq; }, 30'000)) << "indexed " << MainRows() << " of " << seq;
}

// An offset commit whose answer is slow is not waited for past the commit
// timeout: it counts as failed and its offsets go with the next commit, so
// that a broker outage during a commit does not hold the loop (commitSync
// waited without a bound: a commit in flight when the broker went down held
// consumption, its error counts and a stop for the whole outage).
class SlowCommitConsumerTest : public ConsumerTest {
 protected:
  void Configure(GroupConsumerOptions& o) override {
    o.commit_timeout_ms = 1'000;
    // Heartbeats share the coordinator's connection, whose answers the mock
    // sends in order: the slow answer delays theirs by 3 s, well within this.
    o.session_timeout_ms = 15'000;
  }
};

TEST_F(SlowCommitConsumerTest, ACommitAnsweredPastItsTimeoutCountsAsFailedAndGoesWithTheNext) {
  ASSERT_TRUE(WaitFor([&] { return metrics_->assigned_partitions.Value() == kPartitions; }, 20'000));
  auto committed = [&] { return testing::Committed(kafka_->bootstrap(), "g", "t", kPartitions); };
  // The next OffsetCommit (API key 8) is refused, and its answer comes after
  // 3 s, three times the commit timeout (refused, so that only the next
  // commit can carry its offsets: the mock stores an accepted commit as soon
  // as it reads it).
  ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(kafka_->cluster(), 1, /*OffsetCommit*/ 8, 1,
                                                         RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE, 3'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(producer.Send("t", 0, Chunk(1)));
  ASSERT_TRUE(WaitFor([&] { return metrics_->commit_failures.Value() >= 1; }, 30'000))
      << "the slow commit is given up on, not waited for";
  EXPECT_EQ(MainRows(), 1u);
  EXPECT_EQ(committed(), 0) << "the slow commit was refused";
  ASSERT_TRUE(producer.Send("t", 1, Chunk(2)));
  EXPECT_TRUE(WaitFor([&] { return committed() == 2; }, 30'000))
      << "committed " << committed() << ": partition 0's offset went with partition 1's";
}

// A refused offset commit is not forgotten: its offsets go with the next
// commit, and a member that leaves commits them before its partitions move,
// so their next owner does not write those batches again.
TEST_F(ConsumerTest, ARefusedCommitIsRetriedWithTheNextOneAndBeforeTheRevoke) {
  auto refuse_commits = [&](int n) {
    std::vector<rd_kafka_resp_err_t> errors(n, RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE);
    rd_kafka_mock_push_request_errors_array(kafka_->cluster(), /*OffsetCommit*/ 8, errors.size(), errors.data());
  };
  auto committed = [&] { return testing::Committed(kafka_->bootstrap(), "g", "t", kPartitions); };
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(WaitFor([&] { return metrics_->assigned_partitions.Value() == kPartitions; }, 20'000));
  uint64_t seq = 0;
  // Two batches whose commits are refused, then one whose commit is taken.
  refuse_commits(2);
  for (int32_t p : {0, 1}) {
    const double failures = metrics_->commit_failures.Value();
    ASSERT_TRUE(producer.Send("t", p, Chunk(++seq)));
    ASSERT_TRUE(WaitFor([&] { return metrics_->commit_failures.Value() > failures; }, 20'000)) << "partition " << p;
  }
  EXPECT_EQ(committed(), 0);
  ASSERT_TRUE(producer.Send("t", 2, Chunk(++seq)));
  EXPECT_TRUE(WaitFor([&] { return committed() == 3; }, 20'000))
      << "committed " << committed() << ": the refused offsets of partitions 0 and 1 went with partition 2's";

  // A refused commit, then the member leaves: it commits at its revoke.
  refuse_commits(1);
  const double failures = metrics_->commit_failures.Value();
  ASSERT_TRUE(producer.Send("t", 3, Chunk(++seq)));
  ASSERT_TRUE(WaitFor([&] { return metrics_->commit_failures.Value() > failures; }, 20'000));
  EXPECT_EQ(committed(), 3);
  stop_ = true;
  thread_.join();  // Run() ends with close(): the revoke
  EXPECT_EQ(committed(), 4) << "the refused commit was made before the partitions were given up";
  EXPECT_EQ(MainRows(), seq);
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

std::string ConsumerTestChunk(uint64_t seq) {
  proto::RecordBatch b;
  for (int i = 0; i < 3; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(SystemClock::Instance().NowMs() - 60'000 + i);
    r->set_severity(SeverityCode(Severity::kInfo));
    r->set_message("good record " + std::to_string(seq) + "." + std::to_string(i));
  }
  PackOptions po;
  po.producer_id = 42;
  po.sequence = seq;
  return PackChunk("app", "h1", b, po).SerializeAsString();
}

uint64_t MainRowsOf(TableStore& store) {
  uint64_t n = 0;
  EXPECT_TRUE(store.Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto, auto) {
    return ++n, true;
  }).ok());
  return n;
}

// The offset-gap rule (consumer/offset_gap.h): only offsets below the
// partition's log start are lost; a gap at or above it (transaction markers,
// aborted or compacted messages) is not.
TEST(OffsetGap, OnlyOffsetsBelowTheLogStartCountAsLost) {
  EXPECT_EQ(LostInGap(100, 5000, 5000), 4900) << "retention deleted 100..4999";
  EXPECT_EQ(LostInGap(100, 5000, 7000), 4900) << "the log start moved on since: only the skipped range counts";
  EXPECT_EQ(LostInGap(100, 5000, 3000), 2900) << "100..2999 deleted; 3000..4999 were markers or aborted";
  EXPECT_EQ(LostInGap(10, 11, 0), 0) << "a commit marker at offset 10";
  EXPECT_EQ(LostInGap(10, 13, 10), 0) << "markers at the log start itself";
  EXPECT_EQ(LostInGap(-1, 13, 20), 0) << "no expectation yet";
  EXPECT_EQ(LostInGap(10, 13, -1), 0) << "log start unknown";
  EXPECT_EQ(LostInGap(10, 10, 50), 0) << "no gap";
}

// A chunk of `records` records of ~10 KB of random letters each: snappy
// cannot shrink it, so a few of them fill the mock cluster's 5 MiB.
std::string BigChunk(uint64_t seq, int records = 20) {
  std::mt19937_64 rng(seq);
  proto::RecordBatch b;
  for (int i = 0; i < records; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(SystemClock::Instance().NowMs() - 60'000 + i);
    r->set_severity(SeverityCode(Severity::kInfo));
    std::string text(10'000, 'a');
    for (char& c : text) c = static_cast<char>('a' + rng() % 26);
    r->set_message(text);
  }
  PackOptions po;
  po.producer_id = 43;
  po.sequence = seq;
  return PackChunk("big", "h1", b, po).SerializeAsString();
}

// The "lags while it pauses for a slow store": while the store
// fails, the partition is paused and the mock cluster deletes what it no
// longer keeps. The loss is counted per partition, named with its range and
// reported in State(); the partition does not stall: the rest is indexed.
void LoseMessagesWhilePaused(RocksDbStore& store, const std::string& bootstrap,
                             ConsumerMetrics& metrics, GroupConsumer& consumer) {
  TestProducer producer(bootstrap);
  for (uint64_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE(producer.Send("t", 0, ConsumerTestChunk(seq)));  // offsets 0..2
  ASSERT_TRUE(WaitFor([&] { return MainRowsOf(store) == 3; }, 20'000));
  store.SetWriteFaultHook([](const WriteBatch::Entry&, size_t) { return Status(Errc::kIOError, "slow disk"); });
  ASSERT_TRUE(producer.Send("t", 0, ConsumerTestChunk(4)));  // offset 3: its batch is retried, the partition paused
  ASSERT_TRUE(WaitFor([&] { return metrics.paused.Value() == 1; }, 20'000));
  const int big = 40;  // ~8 MB: over the 5 MiB the mock keeps
  for (int i = 0; i < big; ++i) ASSERT_TRUE(producer.Queue("t", 0, BigChunk(100 + static_cast<uint64_t>(i))));
  ASSERT_TRUE(producer.Flush());
  const int64_t low = testing::LogStart(bootstrap, "t", 0);
  ASSERT_GT(low, 4) << "the premise: retention deleted offsets from 4 on";
  ASSERT_LT(low, 4 + big);
  EXPECT_EQ(consumer.State(1'000'000).lost_messages, 0u) << "nothing is lost until it is seen";
  store.SetWriteFaultHook(nullptr);

  ASSERT_TRUE(WaitFor([&] { return metrics.LostMessages("t", 0).Value() == static_cast<double>(low - 4); }, 30'000))
      << metrics.LostMessages("t", 0).Value() << " vs " << low - 4;
  const ConsumerState state = consumer.State(1'000'000);
  EXPECT_EQ(state.lost_messages, static_cast<uint64_t>(low - 4));
  EXPECT_NE(state.lost.find("of t[0] (offsets 4.." + std::to_string(low - 1) + ")"), std::string::npos) << state.lost;
  const uint64_t kept = static_cast<uint64_t>(4 + big - low);
  ASSERT_TRUE(WaitFor([&] { return MainRowsOf(store) == 4 + kept; }, 30'000))
      << MainRowsOf(store) << " of " << 4 + kept;
  EXPECT_EQ(metrics.LostMessages("t", 1).Value(), 0) << "other partitions lost nothing";
}

TEST_F(ConsumerTest, MessagesDeletedWhilePausedAreCountedAsLostAndThePartitionMovesOn) {
  LoseMessagesWhilePaused(*store_, kafka_->bootstrap(), *metrics_, *consumer_);
}

// A topic regex matches the consumer's own dead-letter topic (t.dlq): it is
// left out of the assignment, so a dead letter is not consumed and
// dead-lettered again.
class RegexConsumerTest : public ConsumerTest {
 protected:
  void Configure(GroupConsumerOptions& o) override {
    o.topics.clear();
    o.topic_regex = "^t.*";
  }
};

TEST_F(RegexConsumerTest, ItsOwnDeadLetterTopicIsNotConsumed) {
  ASSERT_TRUE(WaitFor([&] { return metrics_->assigned_partitions.Value() > 0; }, 20'000));
  EXPECT_EQ(metrics_->assigned_partitions.Value(), kPartitions) << "t's partitions, not t.dlq's";
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(producer.Send("t", 0, "garbage that is no chunk"));
  ASSERT_TRUE(producer.Send("t", 1, Chunk(1)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 1 && metrics_->DeadLettered("malformed").Value() == 1; }, 20'000));
  ASSERT_EQ(ReadTopic(kafka_->bootstrap(), "t.dlq", 1, 1).size(), 1u);
  // Past the dead letter, the partitions are consumed: a second good chunk
  // on the dead letter's partition is indexed, and still one dead letter.
  ASSERT_TRUE(producer.Send("t", 0, Chunk(2)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 2; }, 20'000));
  EXPECT_EQ(metrics_->DeadLettered("malformed").Value(), 1);
  EXPECT_EQ(metrics_->assigned_partitions.Value(), kPartitions);
}

// The DLQ's partition has its own broker (2), whose Produce answers can be
// delayed or failed without touching the consumer's fetches.
class SlowDlqConsumerTest : public ConsumerTest {
 protected:
  int Brokers() override { return 2; }
  void Configure(GroupConsumerOptions& o) override {
    o.dlq_flush_timeout_ms = 1'000;  // an acknowledgement 3 s late outlasts it with room to spare
    for (int p = 0; p < kPartitions; ++p) rd_kafka_mock_partition_set_leader(kafka_->cluster(), "t", p, 1);
    rd_kafka_mock_partition_set_leader(kafka_->cluster(), "t.dlq", 0, 2);
  }
  int64_t Committed() { return testing::Committed(kafka_->bootstrap(), "g", "t", kPartitions); }
  // Every dead letter in t.dlq, by source offset, once the one from
  // `last_offset` is there (the DLQ producer keeps order: all before it are
  // in by then).
  std::map<int64_t, int> DeadLettersUpTo(int64_t last_offset) {
    std::map<int64_t, int> copies;
    WaitFor([&] {
      copies.clear();
      for (const InMessage& m : ReadTopic(kafka_->bootstrap(), "t.dlq", 1, 10, 3'000)) {
        if (const std::string* o = m.Header(kDlqOffsetHeader)) ++copies[std::stoll(*o)];
      }
      return copies.count(last_offset) > 0;
    }, 30'000);
    return copies;
  }
};

// A dead letter whose acknowledgement is slower than the 1 s flush is waited
// for, not produced a second time; its offset is committed once it is
// delivered. One whose delivery fails outright is produced again.
TEST_F(SlowDlqConsumerTest, ADeadLetterInFlightIsWaitedForAndAFailedOneProducedAgain) {
  ASSERT_TRUE(WaitFor([&] { return metrics_->assigned_partitions.Value() == kPartitions; }, 20'000));
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(producer.Send("t", 1, Chunk(1)));
  ASSERT_TRUE(WaitFor([&] { return MainRows() == 1; }, 20'000)) << "the DLQ producer is connected";
  // The next Produce answer of broker 2 comes after 3 s.
  ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(kafka_->cluster(), 2, /*Produce*/ 0, 1,
                                                         RD_KAFKA_RESP_ERR_NO_ERROR, 3000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  ASSERT_TRUE(producer.Send("t", 0, "not a chunk"));  // t[0]@0
  ASSERT_TRUE(WaitFor([&] { return metrics_->dlq_flush_timeouts.Value() >= 1; }, 20'000));
  EXPECT_EQ(Committed(), 1) << "only t[1]'s chunk: the dead letter is not acknowledged yet";
  ASSERT_TRUE(WaitFor([&] { return Committed() == 2; }, 30'000)) << "committed after the slow acknowledgement";

  // The next two Produce requests fail outright: the dead letter is produced again.
  // (A permanent error for librdkafka: the batch fails, the idempotent producer bumps its epoch.)
  rd_kafka_mock_broker_push_request_error_rtts(kafka_->cluster(), 2, 0, 2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, 0,
                                               RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, 0);
  ASSERT_TRUE(producer.Send("t", 0, "not a chunk either"));  // t[0]@1
  std::map<int64_t, int> copies = DeadLettersUpTo(1);
  EXPECT_EQ(copies[0], 1) << "the slow dead letter is in the DLQ once";
  EXPECT_EQ(copies[1], 1) << "the failed one, once it got through";
  EXPECT_GE(metrics_->dlq_failures.Value(), 1);
  ASSERT_TRUE(WaitFor([&] { return Committed() == 3; }, 30'000)) << Committed();
  EXPECT_EQ(metrics_->DeadLettered("malformed").Value(), 2);
}

// Stopping while a dead letter is in flight: Run() returns without
// committing its offset, and destroying the consumer serves the purged
// message's report (which frees its ticket: ASan's leak check sees it).
TEST_F(SlowDlqConsumerTest, StoppingWithADeadLetterInFlightCommitsNothingAndLeavesNothingDangling) {
  ASSERT_TRUE(WaitFor([&] { return metrics_->assigned_partitions.Value() == kPartitions; }, 20'000));
  ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(kafka_->cluster(), 2, /*Produce*/ 0, 1,
                                                         RD_KAFKA_RESP_ERR_NO_ERROR, 20'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  TestProducer producer(kafka_->bootstrap());
  ASSERT_TRUE(producer.Send("t", 0, "not a chunk"));
  ASSERT_TRUE(WaitFor([&] { return metrics_->dlq_flush_timeouts.Value() >= 1; }, 20'000));
  stop_ = true;
  thread_.join();
  consumer_.reset();
  EXPECT_EQ(Committed(), 0);
}

// A store that refuses, for good, every batch holding a main row of the app
// "poison" (as HBase refuses a row over its call limit), and fails the
// first `flaky_failures` batches holding one of the app "flaky" transiently.
class PickyStore : public TableStore {
 public:
  explicit PickyStore(TableStore& inner) : inner_(inner) {}
  Status CreateTable(std::string_view name, const TableOptions& options) override {
    return inner_.CreateTable(name, options);
  }
  bool HasTable(std::string_view name) const override { return inner_.HasTable(name); }
  Status Write(const WriteBatch& batch) override {
    bool flaky = false;
    for (const WriteBatch::Entry& e : batch.entries()) {
      if (e.table != kMainTable) continue;
      const std::string value = e.Value();
      if (value.find("poison") != std::string::npos) {
        return Status(Errc::kInvalidArgument, "row of 3000000 bytes in logs exceeds max_call_bytes 2097152");
      }
      flaky |= value.find("flaky") != std::string::npos;
    }
    if (flaky && flaky_failures > 0) {
      --flaky_failures;
      return Status(Errc::kUnavailable, "Thrift transport: connection reset");
    }
    return inner_.Write(batch);
  }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    return inner_.Get(table, key);
  }
  Status Scan(const ScanSpec& spec, const RowVisitor& visit) override { return inner_.Scan(spec, visit); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) override {
    return inner_.FuzzyScan(spec, visit);
  }
  StoreCounters counters() const override { return inner_.counters(); }

  std::atomic<int> flaky_failures{3};

 private:
  TableStore& inner_;
};

class PickyStoreConsumerTest : public ConsumerTest {
 protected:
  TableStore& ConsumerStore() override {
    picky_ = std::make_unique<PickyStore>(*store_);
    return *picky_;
  }
  // Main rows handed to on_written (what live tail publishes).
  void Configure(GroupConsumerOptions& o) override {
    o.on_written = [this](const ProcessedBatch& b) {
      for (const WriteBatch::Entry& e : b.writes.entries()) {
        if (e.op == WriteBatch::Op::kPut && e.table == kMainTable) ++handed_over_;
      }
    };
  }
  std::unique_ptr<PickyStore> picky_;
  std::atomic<uint64_t> handed_over_{0};
};

// A permanent store error does not stall the partition: the rejected
// message goes to the DLQ (store_rejected, with the store's error), its
// batch's other messages are written and everything is committed. A
// transient one is retried until it passes, and dead-letters nothing.
TEST_F(PickyStoreConsumerTest, RowsTheStoreRejectsForGoodAreDeadLetteredAndTheRestIsWritten) {
  TestProducer producer(kafka_->bootstrap());
  uint64_t seq = 0;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(producer.Queue("t", 0, Chunk(++seq)));
  ASSERT_TRUE(producer.Queue("t", 0, Chunk(100, 3, "poison")));  // t[0]@3
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(producer.Queue("t", 0, Chunk(++seq)));
  ASSERT_TRUE(producer.Queue("t", 1, Chunk(200, 3, "flaky")));
  for (int p = 1; p < kPartitions; ++p) ASSERT_TRUE(producer.Queue("t", p, Chunk(++seq)));
  ASSERT_TRUE(producer.Flush());
  const uint64_t good = seq + 1;  // and the flaky one

  ASSERT_TRUE(WaitFor([&] { return MainRows() == good; }, 30'000)) << "indexed " << MainRows() << " of " << good;
  ASSERT_TRUE(WaitFor([&] {
    return testing::Committed(kafka_->bootstrap(), "g", "t", kPartitions) == static_cast<int64_t>(seq + 2);
  }, 20'000)) << "every offset is committed, the rejected one's too";
  std::vector<InMessage> dlq = ReadTopic(kafka_->bootstrap(), "t.dlq", 1, 1);
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(*dlq[0].Header(kDlqOffsetHeader), "3");
  EXPECT_EQ(*dlq[0].Header(kDlqPartitionHeader), "0");
  EXPECT_EQ(dlq[0].Header(kDlqErrorHeader)->rfind("store_rejected: ", 0), 0u) << *dlq[0].Header(kDlqErrorHeader);
  EXPECT_NE(dlq[0].Header(kDlqErrorHeader)->find("exceeds max_call_bytes"), std::string::npos);
  EXPECT_EQ(metrics_->DeadLettered("store_rejected").Value(), 1);
  EXPECT_GE(metrics_->store_rejected_batches.Value(), 1);
  EXPECT_EQ(picky_->flaky_failures.load(), 0) << "the transient failures were retried through";
  // Every written chunk reached on_written once, the salvaged batch's too (before, live tail missed them).
  EXPECT_EQ(handed_over_.load(), good);
  EXPECT_GE(metrics_->store_write_failures.Value(), 4);
  EXPECT_EQ(metrics_->paused.Value(), 0);
}

// A rejected librdkafka setting never shows a secret's value in the error.
TEST(GroupConsumerStart, ARejectedSecretPropertyIsRedactedInTheError) {
  TempDir dir;
  RocksDbOptions ro;
  ro.path = dir.path() + "/store";
  auto store = RocksDbStore::Open(ro);
  ASSERT_TRUE(store.ok());
  Indexer indexer(**store, IndexerOptions{});
  BatchProcessor processor(indexer, BatchProcessorOptions{}, nullptr);
  prometheus::Registry registry;
  ConsumerMetrics metrics(registry);
  const std::string secret = "hunter2-very-secret";
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"enable.sasl.oauthbearer.unsecure.jwt", secret},  // a bool: librdkafka quotes the bad value
           {"sasl.oauthbearer.method", secret},
           {"sasl.pasword", secret}}) {  // a typo: no such property
    GroupConsumerOptions o;
    o.kafka["bootstrap.servers"] = "127.0.0.1:9";
    o.kafka[key] = value;
    o.topics = {"t"};
    GroupConsumer consumer(o, **store, processor, metrics, SystemClock::Instance());
    Status s = consumer.Start();
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_EQ(s.message().find(secret), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("kafka." + key), std::string::npos) << s.message();
  }
  using Properties = std::map<std::string, std::string>;
  EXPECT_EQ(RedactSecrets("bad \"" + secret + "\"", Properties{{"sasl.password", secret}}), "bad \"[redacted]\"");

  // Properties under which the consumer would lose or stall data are refused:
  // auto.offset.reset=error stalls a partition whose position retention deleted;
  // cooperative-sticky's incremental rebalances are not handled.
  for (const auto& [key, value] : Properties{{"auto.offset.reset", "error"},
                                             {"partition.assignment.strategy", "cooperative-sticky"}}) {
    GroupConsumerOptions o;
    o.kafka["bootstrap.servers"] = "127.0.0.1:9";
    o.kafka[key] = value;
    o.topics = {"t"};
    GroupConsumer consumer(o, **store, processor, metrics, SystemClock::Instance());
    Status s = consumer.Start();
    EXPECT_EQ(s.code(), Errc::kInvalidArgument) << key;
    EXPECT_NE(s.message().find("kafka." + key), std::string::npos) << s.message();
  }
  EXPECT_EQ(RedactSecrets("bad \"x\"", Properties{{"client.id", "x"}}), "bad \"x\"") << "only secrets are redacted";
}

}  // namespace
}  // namespace logdex
