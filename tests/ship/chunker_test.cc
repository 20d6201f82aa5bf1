#include "ship/chunker.h"

#include <gtest/gtest.h>

#include "ship/embedded.h"
#include "ship/framing.h"
#include "tests/ship/helpers.h"
#include "tests/test_util.h"

namespace logdex::ship {
namespace {

using parse::RecordView;
using testing::CapturingChunkSink;

constexpr int64_t kNow = 1'795'910'400'000;

RecordView Rec(Severity s, std::string_view msg, int64_t ts = kNow) {
  RecordView r;
  r.ts_ms = ts;
  r.severity = s;
  r.message = msg;
  return r;
}

ChunkerOptions Opts() {
  ChunkerOptions o;
  o.app = "app";
  o.host = "h1";
  return o;
}

TEST(Chunker, GroupsByStreamAndFlushesAtTheByteThreshold) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(77);
  CapturingChunkSink sink;
  ChunkerOptions o = Opts();
  o.max_chunk_bytes = 1000;
  Chunker c(o, *seq, sink, clock);
  const std::string msg(84, 'x');  // 100 estimated bytes per record
  for (int i = 0; i < 25; ++i) ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, msg)).ok());
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kWarn, "w")).ok());
  ASSERT_EQ(sink.chunks.size(), 2u);  // 10 + 10 INFO records; 5 INFO and 1 WARN wait
  EXPECT_EQ(sink.chunks[0].records, 10u);
  EXPECT_EQ(c.buffered_records(), 6u);
  ASSERT_TRUE(c.FlushAll().ok());
  ASSERT_EQ(sink.chunks.size(), 4u);
  auto batches = sink.Decode(clock);
  ASSERT_EQ(batches.size(), 4u);
  DecodeOptions d;
  d.clock = &clock;
  auto last = DecodeChunk(sink.chunks[3].value, d);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->severity(), SeverityCode(Severity::kWarn));
  EXPECT_EQ(last->app(), "app");
  EXPECT_EQ(last->producer_id(), 77u);
  EXPECT_EQ(sink.chunks[3].key, "app/h1/WARN");
  for (size_t i = 1; i < sink.chunks.size(); ++i) EXPECT_GT(sink.chunks[i].sequence, sink.chunks[i - 1].sequence);
}

TEST(Chunker, FlushesAtTheRecordCount) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(1);
  CapturingChunkSink sink;
  ChunkerOptions o = Opts();
  o.max_chunk_records = 3;
  Chunker c(o, *seq, sink, clock);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "m")).ok());
  EXPECT_EQ(sink.chunks.size(), 2u);
  EXPECT_EQ(c.buffered_records(), 1u);
}

TEST(Chunker, LingerFlushesErrorsAfter20msAndInfoAfter1s) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(1);
  CapturingChunkSink sink;
  Chunker c(Opts(), *seq, sink, clock);
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "i")).ok());
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kError, "e")).ok());
  EXPECT_EQ(c.MsUntilNextFlush(), 20);
  clock.AdvanceMs(19);
  ASSERT_TRUE(c.Poll().ok());
  EXPECT_TRUE(sink.chunks.empty());
  clock.AdvanceMs(1);
  ASSERT_TRUE(c.Poll().ok());
  ASSERT_EQ(sink.chunks.size(), 1u);
  EXPECT_EQ(sink.chunks[0].severity, Severity::kError);
  EXPECT_EQ(c.MsUntilNextFlush(), 980);
  clock.AdvanceMs(979);
  ASSERT_TRUE(c.Poll().ok());
  EXPECT_EQ(sink.chunks.size(), 1u);
  clock.AdvanceMs(1);
  ASSERT_TRUE(c.Poll().ok());
  EXPECT_EQ(sink.chunks.size(), 2u);
  EXPECT_EQ(c.MsUntilNextFlush(), -1);
}

TEST(Chunker, LineHostAndAppBecomeTagsOrPickTheStream) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(1);
  for (LineIdentity mode : {LineIdentity::kTags, LineIdentity::kStream}) {
    CapturingChunkSink sink;
    ChunkerOptions o = Opts();
    o.line_identity = mode;
    Chunker c(o, *seq, sink, clock);
    RecordView r = Rec(Severity::kInfo, "m");
    r.host = "combo";
    r.app = "sshd";
    ASSERT_TRUE(c.OnRecord(r).ok());
    ASSERT_TRUE(c.FlushAll().ok());
    ASSERT_EQ(sink.chunks.size(), 1u);
    DecodeOptions d;
    d.clock = &clock;
    auto chunk = DecodeChunk(sink.chunks[0].value, d);
    ASSERT_TRUE(chunk.ok());
    auto records = UnpackRecords(*chunk, d);
    ASSERT_TRUE(records.ok()) << records.error().ToString();
    ASSERT_EQ(records->records_size(), 1);
    const proto::LogRecord& got = records->records(0);
    if (mode == LineIdentity::kTags) {
      EXPECT_EQ(chunk->host(), "h1");
      ASSERT_EQ(got.tags_size(), 2);
      EXPECT_EQ(got.tags(0).key(), "app");
      EXPECT_EQ(got.tags(0).value(), "sshd");
      EXPECT_EQ(got.tags(1).key(), "host");
      EXPECT_EQ(got.tags(1).value(), "combo");
    } else {
      EXPECT_EQ(chunk->host(), "combo");
      EXPECT_EQ(chunk->app(), "sshd");
      EXPECT_EQ(sink.chunks[0].key, "sshd/combo/INFO");
      EXPECT_EQ(got.tags_size(), 0);
    }
  }
}

TEST(SequenceAllocator, ARestartNeverReusesASequence) {
  TempDir dir;
  uint64_t id = 0, last = 0;
  {
    auto a = SequenceAllocator::Open(dir.path(), 10);
    ASSERT_TRUE(a.ok()) << a.error().ToString();
    id = (*a)->producer_id();
    for (int i = 0; i < 25; ++i) last = *(*a)->Next();
    // A second process may not share the directory.
    auto b = SequenceAllocator::Open(dir.path(), 10);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.error().code, Errc::kFailedPrecondition);
  }
  auto a = SequenceAllocator::Open(dir.path(), 10);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->producer_id(), id);
  EXPECT_GT(*(*a)->Next(), last);
}

TEST(Framing, RoundTripsAndRejectsTruncation) {
  std::string bytes;
  AppendFrame("abc", &bytes);
  AppendFrame("", &bytes);
  AppendFrame(std::string(300, 'z'), &bytes);
  EXPECT_EQ(bytes.substr(0, 4), std::string("\0\0\0\3", 4));
  auto v = SplitFrames(bytes);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 3u);
  EXPECT_EQ((*v)[2].size(), 300u);
  EXPECT_FALSE(SplitFrames(bytes.substr(0, bytes.size() - 1)).ok());
}

TEST(EmbeddedShipper, LogsFromManyThreadsAndDeliversAllOnClose) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(5);
  CapturingChunkSink sink;
  ChunkerOptions o = Opts();
  o.max_chunk_records = 50;
  EmbeddedShipper shipper(o, *seq, sink, clock, /*background=*/true, /*tick_ms=*/1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        ASSERT_TRUE(shipper.Log(t == 0 ? Severity::kError : Severity::kInfo, "m" + std::to_string(i),
                                {{"thread", std::to_string(t)}, {"k=v", "x"}})
                        .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  DeliveryReport r = shipper.Close(1000);
  EXPECT_EQ(r.delivered_records, 1000u);
  EXPECT_TRUE(r.complete());
  uint64_t records = 0;
  for (const auto& b : sink.Decode(clock)) {
    records += b.records_size();
    for (const auto& rec : b.records()) EXPECT_EQ(rec.tags(1).key(), "k_v");
  }
  EXPECT_EQ(records, 1000u);
  EXPECT_FALSE(shipper.Log(Severity::kInfo, "late").ok());
}

// Issue 12: a record time serve would refuse is re-stamped (and tagged with
// the time it had) so that its chunk is never dead-lettered; a record older
// than the retention is shipped as it is, and counted.
TEST(Chunker, RestampsTimesServeRefusesAndCountsRecordsPastRetention) {
  ManualClock clock(kNow);
  auto seq = SequenceAllocator::InMemory(77);
  CapturingChunkSink sink;
  Chunker c(Opts(), *seq, sink, clock);
  const int64_t day = 86'400'000;
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "at zero", 0)).ok());
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "two days ahead", kNow + 2 * day)).ok());
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "eight days old", kNow - 8 * day)).ok());
  ASSERT_TRUE(c.OnRecord(Rec(Severity::kInfo, "fine", kNow - day)).ok());
  ASSERT_TRUE(c.FlushAll().ok());
  EXPECT_EQ(c.stats().restamped, 2u);
  EXPECT_EQ(c.stats().past_retention, 1u);
  auto batches = sink.Decode(clock);  // full validation, as serve decodes
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].records_size(), 4);
  const std::string from[] = {"0", std::to_string(kNow + 2 * day)};
  for (int i = 0; i < 2; ++i) {
    const proto::LogRecord& r = batches[0].records(i);
    EXPECT_EQ(r.ts_ms(), kNow);
    ASSERT_EQ(r.tags_size(), 1);
    EXPECT_EQ(r.tags(0).key(), kRestampedTag);
    EXPECT_EQ(r.tags(0).value(), from[i]);
  }
  EXPECT_EQ(batches[0].records(2).ts_ms(), kNow - 8 * day);
  EXPECT_EQ(batches[0].records(2).tags_size(), 0);
}

}  // namespace
}  // namespace logdex::ship
