// Proleptic Gregorian dates <-> days since 1970-01-01, for every parser and
// formatter of times (common/time_parse.cc, parse/timestamp.cc): Abseil's
// civil-time types (Debian's libabsl-dev), whose years span int64, so any
// int64 of milliseconds formats.
#pragma once

#include <cstdint>

namespace logdex {

// Days since 1970-01-01 of y-m-d (m in 1..12, d in 1..31: callers check).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d);

struct CivilDate {
  int64_t year;
  int month, day;
};
CivilDate CivilFromDays(int64_t days);

}  // namespace logdex
