// The `cnt` value format (indexer/minute_counts.h): what is written reads
// back; what no writer makes, or what does not fit its chunk, is refused
// (the query then reads the chunk).
#include "indexer/minute_counts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace logdex {
namespace {

TEST(MinuteCounts, TheEncodingIsPinnedByTheFormat) {
  // 3 records in minute 2, 1 in minute 4 (gap 2), 1 in minute 300 (gap 296).
  const std::vector<int64_t> ts{120'000, 150'000, 179'999, 240'000, 18'000'000};
  const std::string want = std::string("\x01\x02\x00\x03\x02\x01\xa8\x02\x01", 9);
  EXPECT_EQ(EncodeMinuteCounts(ts), want);
  auto got = DecodeMinuteCounts(want, 5, 120'000, 18'000'000);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].start_ms, 120'000);
  EXPECT_EQ((*got)[0].records, 3u);
  EXPECT_EQ((*got)[1].start_ms, 240'000);
  EXPECT_EQ((*got)[1].records, 1u);
  EXPECT_EQ((*got)[2].start_ms, 18'000'000);
  EXPECT_EQ((*got)[2].records, 1u);
}

TEST(MinuteCounts, RandomRecordTimesReadBackAsTheirCountsPerMinute) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int64_t start = static_cast<int64_t>(rng() % 4'000'000'000'000ULL);
    const int64_t span = 1 + static_cast<int64_t>(rng() % (round % 2 ? 600'000 : 10'800'000));
    std::vector<int64_t> ts(1 + rng() % 3000);
    for (int64_t& t : ts) t = start + static_cast<int64_t>(rng() % static_cast<uint64_t>(span));
    std::sort(ts.begin(), ts.end());
    std::map<int64_t, uint64_t> want;
    for (int64_t t : ts) ++want[t / 60'000 * 60'000];
    auto got = DecodeMinuteCounts(EncodeMinuteCounts(ts), ts.size(), ts.front(), ts.back());
    ASSERT_TRUE(got.has_value()) << "round " << round;
    std::map<int64_t, uint64_t> have;
    for (const MinuteCount& m : *got) have[m.start_ms] = m.records;
    EXPECT_EQ(have, want) << "round " << round;
  }
}

TEST(MinuteCounts, ValuesNoWriterMakesOrThatDoNotFitTheChunkAreRefused) {
  const std::vector<int64_t> ts{120'000, 150'000, 240'000};
  const std::string good = EncodeMinuteCounts(ts);
  ASSERT_TRUE(DecodeMinuteCounts(good, 3, 120'000, 240'000).has_value());
  auto refused = [](std::string_view v, uint64_t records, int64_t first, int64_t last) {
    return !DecodeMinuteCounts(v, records, first, last).has_value();
  };
  EXPECT_TRUE(refused("", 3, 120'000, 240'000));
  EXPECT_TRUE(refused(std::string(1, '\x02') + good.substr(1), 3, 120'000, 240'000)) << "another version";
  EXPECT_TRUE(refused(good, 4, 120'000, 240'000)) << "counts that do not add up to the chunk's";
  EXPECT_TRUE(refused(good, 2, 120'000, 240'000));
  EXPECT_TRUE(refused(good, 3, 180'000, 240'000)) << "a minute before the chunk's first";
  EXPECT_TRUE(refused(good, 3, 120'000, 179'999)) << "a minute after the chunk's last";
  EXPECT_TRUE(refused(good, 3, 240'000, 120'000)) << "a chunk that ends before it starts";
  for (size_t n = 0; n < good.size(); ++n) EXPECT_TRUE(refused(good.substr(0, n), 3, 120'000, 240'000)) << n;
  EXPECT_TRUE(refused(std::string("\x01\x02", 2), 0, 120'000, 240'000)) << "no entry";
  EXPECT_TRUE(refused(std::string("\x01\x02\x00\x00", 4), 0, 120'000, 240'000)) << "an entry of no records";
  EXPECT_TRUE(refused(std::string("\x01\x02\x00\x01\x00\x01", 6), 2, 120'000, 240'000)) << "a minute twice";
  EXPECT_TRUE(refused(std::string("\x01\x02\x01\x01", 4), 1, 120'000, 240'000)) << "a first entry with a gap";
  // A gap past the last minute, however large (no wrap-around).
  EXPECT_TRUE(refused(std::string("\x01\x02\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x01", 15), 2, 120'000,
                      240'000));
  // Hostile bytes: refused or read, never a crash; what reads adds up.
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20'000; ++i) {
    std::string v(1 + rng() % 12, '\0');
    for (char& c : v) c = static_cast<char>(rng());
    if (i % 2) v[0] = '\x01';
    const uint64_t records = rng() % 300;
    auto got = DecodeMinuteCounts(v, records, 0, static_cast<int64_t>(rng() % 100'000'000));
    if (!got) continue;
    uint64_t sum = 0;
    for (const MinuteCount& m : *got) sum += m.records;
    EXPECT_EQ(sum, records);
  }
}

}  // namespace
}  // namespace logdex
