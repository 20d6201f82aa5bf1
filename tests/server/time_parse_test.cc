// The duration and timestamp parsers shared by the HTTP API and the CLI.
#include "common/time_parse.h"

#include <gtest/gtest.h>

namespace logdex {
namespace {

constexpr int64_t kNov29 = 1'795'946'400'000;  // 2026-11-29T10:00:00Z

TEST(ParseDuration, AcceptsEveryUnitAndCompounds) {
  EXPECT_EQ(*ParseDuration("90s"), 90'000);
  EXPECT_EQ(*ParseDuration("15m"), 900'000);
  EXPECT_EQ(*ParseDuration("72h"), 72 * 3'600'000ll);
  EXPECT_EQ(*ParseDuration("7d"), 7 * 86'400'000ll);
  EXPECT_EQ(*ParseDuration("500ms"), 500);
  EXPECT_EQ(*ParseDuration("1h30m"), 5'400'000);
  EXPECT_EQ(*ParseDuration("1d2h3m4s5ms"), 86'400'000 + 2 * 3'600'000 + 3 * 60'000 + 4'000 + 5);
}

TEST(ParseDuration, RejectsMalformedInputSayingWhatIsWrong) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : {Case{"", "empty"}, Case{"5", "unit is missing"}, Case{"h", "expected a number"},
                        Case{"-5m", "expected a number"}, Case{"5x", "unknown unit"}, Case{"1.5h", "unknown unit"},
                        Case{"0s", "more than zero"}, Case{" 5m", "expected a number"},
                        Case{"99999999999999999999d", "too large"}, Case{"9999999999999999d", "too large"}}) {
    Result<int64_t> r = ParseDuration(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_NE(r.error().message.find(c.why), std::string::npos) << c.text << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("'" + std::string(c.text) + "'"), std::string::npos) << r.error().message;
  }
}

TEST(ParseTimestamp, ReadsRfc3339WithZoneOffsetsAndFractions) {
  EXPECT_EQ(*ParseTimestamp("2026-11-29T10:00:00Z"), kNov29);
  EXPECT_EQ(*ParseTimestamp("2026-11-29t10:00:00z"), kNov29);
  EXPECT_EQ(*ParseTimestamp("2026-11-29T11:00:00+01:00"), kNov29);
  EXPECT_EQ(*ParseTimestamp("2026-11-29T04:30:00-05:30"), kNov29);
  EXPECT_EQ(*ParseTimestamp("2026-11-30T00:00:00+14:00"), kNov29);
  EXPECT_EQ(*ParseTimestamp("2026-11-29T10:00:00.123Z"), kNov29 + 123);
  EXPECT_EQ(*ParseTimestamp("2026-11-29T10:00:00.1Z"), kNov29 + 100);
  EXPECT_EQ(*ParseTimestamp("2026-11-29T10:00:00.123456789Z"), kNov29 + 123);
  EXPECT_EQ(*ParseTimestamp("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*ParseTimestamp("2028-02-29T00:00:00Z"), 1'835'395'200'000);  // a leap day
}

TEST(ParseTimestamp, ReadsIntegerMilliseconds) {
  EXPECT_EQ(*ParseTimestamp("1795946400000"), kNov29);
  EXPECT_EQ(*ParseTimestamp("0"), 0);
}

TEST(ParseTimestamp, RejectsMalformedInputSayingWhatIsWrong) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : {Case{"", "empty"}, Case{"yesterday", "YYYY-MM-DD"},
                        Case{"2026-13-01T00:00:00Z", "month 13"}, Case{"2026-02-29T00:00:00Z", "day 29"},
                        Case{"2026-11-31T00:00:00Z", "day 31"}, Case{"2026-11-29T24:00:00Z", "out of range"},
                        Case{"2026-11-29T10:00:00", "time zone is missing"},
                        Case{"2026-11-29 10:00:00Z", "'T'"}, Case{"2026-11-29T10:00Z", "HH:MM:SS"},
                        Case{"2026-11-29T10:00:00+01", "+HH:MM"}, Case{"2026-11-29T10:00:00+25:00", "offset"},
                        Case{"2026-11-29T10:00:00ZZ", "after the time zone"}, Case{"2026-11-29T10:00:00.Z", "digits"},
                        Case{"-5", "YYYY-MM-DD"}, Case{"12345678901234567890", "out of range"}}) {
    Result<int64_t> r = ParseTimestamp(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_NE(r.error().message.find(c.why), std::string::npos) << c.text << ": " << r.error().message;
  }
}

TEST(FormatTimestamp, WritesUtcWithMillisecondsAndRoundTrips) {
  EXPECT_EQ(FormatTimestamp(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatTimestamp(kNov29 + 7), "2026-11-29T10:00:00.007Z");
  EXPECT_EQ(FormatTimestamp(-1), "1969-12-31T23:59:59.999Z");
  for (int64_t ms : {int64_t{0}, kNov29, kNov29 + 999, int64_t{951'782'400'000} /* 2000-02-29 */,
                     int64_t{4'102'444'799'999} /* 2099-12-31T23:59:59.999 */}) {
    Result<int64_t> back = ParseTimestamp(FormatTimestamp(ms));
    ASSERT_TRUE(back.ok()) << FormatTimestamp(ms);
    EXPECT_EQ(*back, ms) << FormatTimestamp(ms);
  }
  // Any int64 formats (ship --check prints whatever times a file holds).
  EXPECT_EQ(FormatTimestamp(INT64_MIN), "-292275055-05-16T16:47:04.192Z");
  EXPECT_EQ(FormatTimestamp(INT64_MAX), "292278994-08-17T07:12:55.807Z");
}

}  // namespace
}  // namespace logdex
