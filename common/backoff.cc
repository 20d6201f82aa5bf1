#include "common/backoff.h"

#include <algorithm>

namespace logdex {

int64_t BackoffPolicy::CeilingMs(uint32_t attempt) const {
  int64_t d = std::max<int64_t>(0, initial_ms);
  for (uint32_t i = 1; i < attempt && d < max_ms; ++i) d *= 2;
  return std::min(d, max_ms);
}

int64_t BackoffPolicy::DelayMs(uint32_t attempt, std::mt19937_64& rng) const {
  const int64_t d = CeilingMs(attempt);
  if (d <= 0) return 0;
  std::uniform_int_distribution<int64_t> dist(d / 2, d);
  return std::max<int64_t>(1, dist(rng));
}

}  // namespace logdex
