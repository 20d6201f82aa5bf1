#include "common/civil.h"

#include <absl/time/civil_time.h>

namespace logdex {

int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  return absl::CivilDay(y, static_cast<int>(m), static_cast<int>(d)) - absl::CivilDay(1970, 1, 1);
}

CivilDate CivilFromDays(int64_t days) {
  const absl::CivilDay day = absl::CivilDay(1970, 1, 1) + days;
  return CivilDate{day.year(), day.month(), day.day()};
}

}  // namespace logdex
