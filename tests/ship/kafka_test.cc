// Round trip through librdkafka's mock cluster, and a short outage.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "ship/kafka_producer.h"
#include "ship/pipeline.h"
#include "tests/ship/helpers.h"
#include "tests/ship/mock_kafka.h"
#include "tests/ship/outage_scenario.h"
#include "tests/test_util.h"

namespace logdex::ship {
namespace {

TEST(KafkaRoundTrip, EveryLineArrivesExactlyOnceInOrderWithinItsStream) {
  testing::MockKafka kafka(3);
  kafka.CreateTopic("ship.rt", 4);
  prometheus::Registry registry;
  ProducerOptions po;
  po.brokers = kafka.bootstraps();
  po.topic = "ship.rt";
  po.kafka = {{"log_level", "0"}};
  const Clock& clock = SystemClock::Instance();
  auto producer = KafkaChunkProducer::Create(po, registry, clock);
  ASSERT_TRUE(producer.ok()) << producer.error().ToString();
  auto seq = SequenceAllocator::InMemory(1234);

  // Android: five severities, so five streams; small chunks, so many of them.
  const std::string input = testing::LoghubPath("Android_2k.log");
  PipelineOptions o;
  o.inputs = {input};
  o.chunker.app = "android";
  o.chunker.host = "h1";
  o.chunker.max_chunk_bytes = 4096;
  o.parser.format = parse::Format::kLogcat;
  o.delivery_timeout_ms = 30'000;
  Pipeline p(o, **producer, *seq, clock, registry);
  auto r = p.Run();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  ASSERT_TRUE(r->delivery.complete());
  ASSERT_EQ(r->delivery.delivered_records, 2000u);

  auto got = kafka.ConsumeAll("ship.rt", 4, r->delivery.delivered_chunks, 20'000);
  ASSERT_EQ(got.size(), r->delivery.delivered_chunks);
  // Expected per stream: the input lines of that severity, in input order.
  const auto levels = testing::CsvColumn(input + "_structured.csv", "Level");
  const auto lines = testing::ReadLines(input);
  std::map<std::string, std::vector<std::string>> want, have;
  const std::map<std::string, std::string> kName = {{"V", "TRACE"}, {"D", "DEBUG"}, {"I", "INFO"},
                                                    {"W", "WARN"},  {"E", "ERROR"}, {"F", "FATAL"}};
  for (size_t i = 0; i < lines.size(); ++i) want["android/h1/" + kName.at(levels[i])].push_back(lines[i]);
  // Partition order is produce order for a stream (one key, one partition).
  std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  DecodeOptions d;
  std::set<uint64_t> sequences;
  for (const auto& m : got) {
    auto chunk = DecodeChunk(m.value, d);
    ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
    EXPECT_TRUE(sequences.insert(chunk->sequence()).second) << "duplicate chunk";
    EXPECT_EQ(chunk->producer_id(), 1234u);
    auto recs = UnpackRecords(*chunk, d);
    ASSERT_TRUE(recs.ok()) << recs.error().ToString();
    const std::string stream = chunk->app() + "/" + chunk->host() + "/" +
                               std::string(SeverityName(*SeverityFromCode(chunk->severity())));
    EXPECT_EQ(m.key, stream);
    for (const auto& rec : recs->records()) have[stream].push_back(rec.message());
  }
  EXPECT_EQ(have, want);
  EXPECT_EQ(testing::CounterValue(registry, "logdex_ship_delivered_records_total"), 2000.0);
}

// Issue 12: a chunk the producer gave up on used to count as resolved, so the
// checkpoint moved past lines that never reached Kafka. It stays unresolved.
TEST(KafkaChunkProducerTest, AChunkThatFailedStaysUnresolvedSoNoCheckpointPassesIt) {
  testing::MockKafka kafka(1);
  kafka.CreateTopic("ship.fail", 1);
  prometheus::Registry registry;
  ProducerOptions po;
  po.brokers = kafka.bootstraps();
  po.topic = "ship.fail";
  po.kafka = {{"log_level", "0"}, {"message.max.bytes", "4096"}};
  auto producer = KafkaChunkProducer::Create(po, registry, SystemClock::Instance());
  ASSERT_TRUE(producer.ok()) << producer.error().ToString();
  auto chunk = [](uint64_t seq, size_t bytes) {
    OutgoingChunk c;
    c.key = "app/h1/INFO";
    c.value = std::string(bytes, 'x');
    c.sequence = seq;
    c.records = 1;
    return c;
  };
  ASSERT_TRUE((*producer)->Send(chunk(1, 100)).ok());
  ASSERT_TRUE((*producer)->Send(chunk(2, 100'000)).ok());  // over message.max.bytes: refused for good
  ASSERT_TRUE((*producer)->Send(chunk(3, 100)).ok());
  const DeliveryReport report = (*producer)->Finish(30'000);
  EXPECT_EQ(report.delivered_chunks, 2u);
  EXPECT_EQ(report.failed_chunks, 1u);
  EXPECT_EQ((*producer)->LowestUnresolved(), 2u) << "chunk 2 was never delivered";
}

// Every ship metric passes promtool's lint (names, HELP, _total on counters).
TEST(ShipMetrics, ExpositionPassesPromtoolLint) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) GTEST_SKIP() << "promtool not installed";
  prometheus::Registry registry;
  ProducerOptions po;
  po.brokers = "127.0.0.1:1";  // never contacted: metrics are registered at creation
  po.topic = "t";
  auto producer = KafkaChunkProducer::Create(po, registry, SystemClock::Instance());
  ASSERT_TRUE(producer.ok());
  auto seq = SequenceAllocator::InMemory(1);
  PipelineOptions o;
  o.inputs = {"-"};
  o.chunker.app = "a";
  o.chunker.host = "h";
  Pipeline p(o, **producer, *seq, SystemClock::Instance(), registry);
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("logdex_ship_backlog_dropped_chunks_total"), std::string::npos);
  EXPECT_NE(text.find("logdex_ship_records_total{severity=\"ERROR\"}"), std::string::npos);
  TempDir dir;
  {
    std::ofstream f(dir.path() + "/m.txt");
    f << text;
  }
  EXPECT_EQ(std::system(("promtool check metrics < " + dir.path() + "/m.txt").c_str()), 0) << text;
}

TEST(KafkaOutage, TwoSecondsDownThenNewestFirstAndDropsCounted) { testing::RunOutageScenario(2'000); }

}  // namespace
}  // namespace logdex::ship
