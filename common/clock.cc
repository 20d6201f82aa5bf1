#include "common/clock.h"

#include <chrono>

namespace logdex {

int64_t SystemClock::NowMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::MonotonicNs() const {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

const Clock& SystemClock::Instance() {
  static const SystemClock clock;
  return clock;
}

}  // namespace logdex
