#include "common/severity.h"

#include <gtest/gtest.h>

namespace logdex {
namespace {

TEST(Severity, ParsesEverySpellingCaseInsensitively) {
  struct Case {
    const char* text;
    Severity want;
  };
  const Case cases[] = {
      {"TRACE", Severity::kTrace}, {"verbose", Severity::kTrace}, {"v", Severity::kTrace},
      {"Finest", Severity::kTrace}, {"DEBUG", Severity::kDebug},  {"d", Severity::kDebug},
      {"fine", Severity::kDebug},  {"info", Severity::kInfo},     {"I", Severity::kInfo},
      {"Notice", Severity::kInfo}, {"INFORMATION", Severity::kInfo}, {"warn", Severity::kWarn},
      {"WARNING", Severity::kWarn}, {"w", Severity::kWarn},       {"error", Severity::kError},
      {"ERR", Severity::kError},   {"e", Severity::kError},       {"SEVERE", Severity::kError},
      {"fatal", Severity::kFatal}, {"F", Severity::kFatal},       {"critical", Severity::kFatal},
      {"CRIT", Severity::kFatal},  {"emerg", Severity::kFatal},   {"EMERGENCY", Severity::kFatal},
      {"alert", Severity::kFatal}, {"Panic", Severity::kFatal},
  };
  for (const Case& c : cases) {
    auto got = ParseSeverity(c.text);
    ASSERT_TRUE(got.has_value()) << c.text;
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(Severity, MapsSyslogNumbers) {
  const Severity want[] = {Severity::kFatal, Severity::kFatal, Severity::kFatal, Severity::kError,
                           Severity::kWarn,  Severity::kInfo,  Severity::kInfo,  Severity::kDebug};
  for (int n = 0; n <= 7; ++n) {
    EXPECT_EQ(ParseSeverity(std::to_string(n)), want[n]) << n;
    EXPECT_EQ(SeverityFromSyslog(n), want[n]) << n;
  }
  EXPECT_FALSE(ParseSeverity("8").has_value());
  EXPECT_FALSE(SeverityFromSyslog(-1).has_value());
}

TEST(Severity, RejectsUnknownSpellings) {
  for (const char* text : {"", "INF", "WARNINGS", "X", "informational!", "10", "ERRORR", "debugging"}) {
    EXPECT_FALSE(ParseSeverity(text).has_value()) << text;
  }
}

TEST(Severity, CodesSortBySeverityAndRoundTrip) {
  for (size_t i = 0; i < kAllSeverities.size(); ++i) {
    Severity s = kAllSeverities[i];
    EXPECT_EQ(SeverityFromCode(SeverityCode(s)), s);
    EXPECT_EQ(ParseSeverity(SeverityName(s)), s);
    if (i > 0) {
      EXPECT_LT(SeverityCode(kAllSeverities[i - 1]), SeverityCode(s));
    }
  }
  EXPECT_FALSE(SeverityFromCode(0).has_value());
  EXPECT_FALSE(SeverityFromCode(35).has_value());
  EXPECT_TRUE(IsAlertLevel(Severity::kError));
  EXPECT_TRUE(IsAlertLevel(Severity::kFatal));
  EXPECT_FALSE(IsAlertLevel(Severity::kWarn));
}

}  // namespace
}  // namespace logdex
