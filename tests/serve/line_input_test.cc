// serve's JSON-lines and text-lines input (ShipLineDecoder): guards against
// hostile lines, and times that a replay derives the same way.
#include "server/ingest_adapters.h"

#include <gtest/gtest.h>

#include <map>

#include "common/clock.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'795'910'400'000;  // 2026-11-29T00:00:00Z

InMessage Message(std::string value, int64_t kafka_ts_ms, int64_t offset = 1) {
  InMessage m;
  m.topic = "lines";
  m.offset = offset;
  m.value = std::move(value);
  m.timestamp_ms = kafka_ts_ms;
  return m;
}

std::vector<proto::LogRecord> Records(const std::vector<proto::LogChunk>& chunks) {
  std::vector<proto::LogRecord> out;
  for (const proto::LogChunk& c : chunks) {
    auto batch = UnpackRecords(c, DecodeOptions{});
    EXPECT_TRUE(batch.ok()) << batch.error().ToString();
    if (batch.ok()) out.insert(out.end(), batch->records().begin(), batch->records().end());
  }
  return out;
}

// Untimed text lines used to take the previous message's time (possibly
// another partition's) or the clock's, so a replay wrote other rows.
TEST(LineInput, UntimedTextLinesTakeTheirKafkaMessagesTimestampOnEveryPass) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  auto timed = d.Decode(Message("2026-11-28 23:00:00,000 INFO timed line\n", kNow - 1000), InputFormat::kText);
  ASSERT_TRUE(timed.ok());
  const int64_t kafka_ts = kNow - 5'000;
  auto first = d.Decode(Message("no time of its own\nnor this one\n", kafka_ts), InputFormat::kText);
  ASSERT_TRUE(first.ok()) << first.error().message;
  clock.AdvanceMs(60'000);
  auto replay = d.Decode(Message("no time of its own\nnor this one\n", kafka_ts), InputFormat::kText);
  ASSERT_TRUE(replay.ok());
  auto a = Records(*first), b = Records(*replay);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ts_ms(), kafka_ts) << i;
    EXPECT_EQ(b[i].SerializeAsString(), a[i].SerializeAsString()) << i;
  }
  EXPECT_EQ(d.counters().untimed_messages, 0u);
}

// Issue 12: a line whose time serve refuses used to dead-letter its whole
// message (bad_timestamp), good lines and all; a stray k=v line in a log4j
// message was read as logfmt with a guessed time. Now the format is the
// message's, and a refused time becomes the Kafka message's, tagged.
TEST(LineInput, ARefusedTimeIsRestampedAndAStrayLineKeptInsteadOfLosingTheMessage) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  const int64_t kafka_ts = kNow - 5'000;
  auto chunks = d.Decode(Message("2026-11-28 23:00:00,000 INFO [main] app: one\n"
                                 "user=bob time=not-a-time\n"
                                 "1999-01-01 10:00:00,000 ERROR [main] app: from the last century\n"
                                 "2026-11-28 23:00:01,000 INFO [main] app: two\n",
                                 kafka_ts),
                         InputFormat::kText);
  ASSERT_TRUE(chunks.ok()) << chunks.error().message;
  DecodeOptions o;
  o.clock = &clock;
  for (const proto::LogChunk& c : *chunks) {
    EXPECT_TRUE(ValidateChunk(c, o).ok()) << "every chunk passes serve's validation";
  }
  auto records = Records(*chunks);
  ASSERT_EQ(records.size(), 4u);
  std::map<std::string, proto::LogRecord> by_message;
  for (const proto::LogRecord& r : records) by_message[r.message()] = r;
  const proto::LogRecord& stray = by_message["user=bob time=not-a-time"];
  EXPECT_EQ(stray.ts_ms(), 1'795'906'800'000) << "the time of the record before (23:00:00)";
  EXPECT_EQ(stray.tags_size(), 0) << "not read as logfmt";
  const proto::LogRecord& old = by_message["1999-01-01 10:00:00,000 ERROR [main] app: from the last century"];
  EXPECT_EQ(old.ts_ms(), kafka_ts);
  ASSERT_EQ(old.tags_size(), 1);
  EXPECT_EQ(old.tags(0).key(), kRestampedTag);
  EXPECT_EQ(old.tags(0).value(), "915184800000");
  EXPECT_EQ(d.counters().restamped_records, 1u);
  EXPECT_EQ(d.counters().unparsed_lines, 1u);
}

TEST(LineInput, JsonNestedPastTheGuardDeadLettersItsMessageWithTheReason) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  std::string deep = R"({"time":"2026-11-28T23:00:00Z","msg":"m","x":)" + std::string(100'000, '[') +
                     std::string(100'000, ']') + "}\n";
  auto r = d.Decode(Message(R"({"time":"2026-11-28T23:00:00Z","msg":"good"})" "\n" + deep, kNow), InputFormat::kJson);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 2: JSON nested deeper than 64 levels"), std::string::npos)
      << r.error().message;
}

TEST(LineInput, InvalidUtf8InAJsonLineIsKeptReplacedAndCounted) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  auto r = d.Decode(Message("{\"time\":\"2026-11-28T23:00:00Z\",\"msg\":\"a \xff b\"}\n", kNow), InputFormat::kJson);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto records = Records(*r);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].message(), "a \xef\xbf\xbd b");
  EXPECT_EQ(d.counters().utf8_replaced_lines, 1u);
}

}  // namespace
}  // namespace logdex
