#include "parse/timestamp.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace logdex::parse {
namespace {

// 2026-11-29T00:00:00Z
const ManualClock kClock(1'795'910'400'000);

class Timestamps : public ::testing::Test {
 protected:
  TimeZone utc_;
  TimeContext ctx_{&utc_, &kClock};
  std::optional<int64_t> Leading(std::string_view s) {
    auto m = ParseLeadingTimestamp(s, ctx_);
    if (!m) return std::nullopt;
    return m->ts_ms;
  }
};

TEST_F(Timestamps, ReadsTheCommonLeadingFormats) {
  const int64_t t = 1494892800008;  // 2017-05-16 00:00:00.008 UTC
  EXPECT_EQ(Leading("2017-05-16 00:00:00.008 INFO x"), t);
  EXPECT_EQ(Leading("2017-05-16 00:00:00,008 INFO x"), t);
  EXPECT_EQ(Leading("2017-05-16T00:00:00.008Z x"), t);
  EXPECT_EQ(Leading("2017-05-16T02:00:00.008+02:00 x"), t);
  EXPECT_EQ(Leading("2017-05-15T19:00:00.008-0500 x"), t);
  EXPECT_EQ(Leading("[2017-05-16 00:00:00.008] x"), t);
  EXPECT_EQ(Leading("2017/05/16 00:00:00 x"), t - 8);
  EXPECT_EQ(Leading("17/05/16 00:00:00 x"), t - 8);
  EXPECT_EQ(Leading("170516 000000 148 INFO"), t - 8);
  EXPECT_EQ(Leading("Tue May 16 00:00:00 2017 x"), t - 8);
  EXPECT_EQ(Leading("[Tue May 16 00:00:00.008123 2017] [core:error]"), t);
  EXPECT_EQ(Leading("16/May/2017:02:00:00 +0200 \"GET\""), t - 8);
}

TEST_F(Timestamps, InfersTheYearForFormatsWithoutOne) {
  // Earlier this year.
  EXPECT_EQ(Leading("Jun 14 15:16:01 combo"), 1781450161000);  // 2026-06-14 15:16:01
  EXPECT_EQ(Leading("Jun  4 15:16:01 combo"), 1780586161000);
  EXPECT_EQ(Leading("03-17 16:13:38.811  1702"), 1773764018811);
  // A December line read in November would be in the future: last year.
  EXPECT_EQ(Leading("Dec 10 06:55:46 LabSZ"), 1765349746000);  // 2025-12-10
}

TEST_F(Timestamps, RejectsNonTimestamps) {
  EXPECT_FALSE(Leading("nova-api.log.1.2017-05-16_13:53:08 2017"));
  EXPECT_FALSE(Leading("12345 hello"));
  EXPECT_FALSE(Leading("2017-13-16 00:00:00 x"));
  EXPECT_FALSE(Leading("Junk 14 15:16:01"));
  EXPECT_FALSE(Leading(""));
}

TEST_F(Timestamps, EpochNumbersByMagnitude) {
  EXPECT_EQ(ParseEpochNumber("1494892800"), 1494892800000);
  EXPECT_EQ(ParseEpochNumber("1494892800.008"), 1494892800008);
  EXPECT_EQ(ParseEpochNumber("1494892800008"), 1494892800008);
  EXPECT_EQ(ParseEpochNumber("1494892800008000"), 1494892800008);
  EXPECT_EQ(ParseEpochNumber("1494892800008000000"), 1494892800008);
  EXPECT_FALSE(ParseEpochNumber("12a"));
  // 19 digits pass INT64_MAX: read unsigned (signed overflow before, found by
  // text_lines_fuzz); 20 digits are not an epoch.
  EXPECT_EQ(ParseEpochNumber("9999999999999999999"), 9'999'999'999'999);
  EXPECT_EQ(ParseEpochNumber("9223372036854775808.5"), 9'223'372'036'854);
  EXPECT_FALSE(ParseEpochNumber("99999999999999999999"));
}

TEST_F(Timestamps, ZonesApplyToTimestampsWithoutOffset) {
  auto plus2 = TimeZone::Load("+02:00");
  ASSERT_TRUE(plus2.ok());
  TimeContext c{&*plus2, &kClock};
  EXPECT_EQ(ParseLeadingTimestamp("2017-05-16 02:00:00.008 x", c)->ts_ms, 1494892800008);
  // An explicit offset wins over the zone.
  EXPECT_EQ(ParseLeadingTimestamp("2017-05-16T00:00:00.008Z x", c)->ts_ms, 1494892800008);

  auto berlin = TimeZone::Load("Europe/Berlin");
  ASSERT_TRUE(berlin.ok()) << berlin.error().ToString();
  TimeContext b{&*berlin, &kClock};
  // Summer (CEST, +2) and winter (CET, +1).
  EXPECT_EQ(ParseLeadingTimestamp("2017-05-16 02:00:00.008 x", b)->ts_ms, 1494892800008);
  EXPECT_EQ(ParseLeadingTimestamp("2017-01-16 01:00:00 x", b)->ts_ms, 1484524800000);
  EXPECT_FALSE(TimeZone::Load("Nowhere/Atlantis").ok());
  EXPECT_FALSE(TimeZone::Load("+25:00").ok());
}

// Around DST changes (Abseil's cctz since issue 12): in the spring gap and
// the autumn overlap the earlier offset wins, as before.
TEST_F(Timestamps, DstGapsAndOverlapsTakeTheEarlierOffset) {
  auto berlin = TimeZone::Load("Europe/Berlin");
  ASSERT_TRUE(berlin.ok()) << berlin.error().ToString();
  TimeContext b{&*berlin, &kClock};
  // 2017-03-26 02:30 does not exist (02:00 CET -> 03:00 CEST): read with +1.
  EXPECT_EQ(ParseLeadingTimestamp("2017-03-26 02:30:00 x", b)->ts_ms, 1490491800000);  // 01:30Z
  // 2017-10-29 02:30 happens twice (CEST, then CET): the first, +2.
  EXPECT_EQ(ParseLeadingTimestamp("2017-10-29 02:30:00 x", b)->ts_ms, 1509237000000);  // 00:30Z
  EXPECT_EQ(berlin->OffsetAt(1490489999), 3600);  // 2017-03-26T00:59:59Z: CET
  EXPECT_EQ(berlin->OffsetAt(1490490000), 7200);  // 01:00Z: CEST
}

// $TZDIR names where zones are read from; a zone not there is a clear error.
// (Abseil remembers a name that failed to load for the life of the process,
// so the zone loaded afterwards is another one.)
TEST_F(Timestamps, ZonesAreReadFromTzdir) {
  const char* old = std::getenv("TZDIR");
  const std::string keep = old ? old : "";
  ::setenv("TZDIR", "/nonexistent-zoneinfo", 1);
  auto missing = TimeZone::Load("Pacific/Chatham");
  if (old) ::setenv("TZDIR", keep.c_str(), 1);
  else ::unsetenv("TZDIR");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent-zoneinfo"), std::string::npos) << missing.error().message;
  EXPECT_TRUE(TimeZone::Load("Asia/Tokyo").ok());
}

TEST_F(Timestamps, TimeFormatWithFractionalSeconds) {
  auto f = TimeFormat::Compile("%d.%m.%Y %H:%M:%S.%f");
  ASSERT_TRUE(f.ok());
  auto m = f->Parse("16.05.2017 00:00:00.008123 rest", ctx_);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->ts_ms, 1494892800008);
  EXPECT_EQ(m->length, 26u);
  auto g = TimeFormat::Compile("%b %e %Y %I:%M:%S %p %z");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->Parse("May 16 2017 2:00:00 AM +0200", ctx_)->ts_ms, 1494892800000);
  auto e = TimeFormat::Compile("%s.%f");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->Parse("1494892800.008", ctx_)->ts_ms, 1494892800008);
  EXPECT_FALSE(f->Parse("2017-05-16", ctx_));
  EXPECT_FALSE(TimeFormat::Compile("%Q").ok());
  EXPECT_FALSE(TimeFormat::Compile("abc %").ok());
}

}  // namespace
}  // namespace logdex::parse
