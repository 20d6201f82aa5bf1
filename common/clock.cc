#include "common/clock.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace logdex {

int64_t SystemClock::NowMs() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::MonotonicNs() const {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

namespace {
constexpr int64_t kStopCheckMs = 10;
}

bool SystemClock::SleepFor(int64_t ms, const std::atomic<bool>* stop) const {
  using namespace std::chrono;
  const auto end = steady_clock::now() + milliseconds(std::max<int64_t>(0, ms));
  for (;;) {
    if (stop && stop->load()) return false;
    const auto now = steady_clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(std::min<steady_clock::duration>(end - now, milliseconds(kStopCheckMs)));
  }
}

bool ManualClock::SleepFor(int64_t ms, const std::atomic<bool>* stop) const {
  const int64_t until = now_ms_.load() + std::max<int64_t>(0, ms);
  std::unique_lock lock(mu_);
  const auto wake = wakes_.insert(until);
  cv_.notify_all();
  bool stopped = false;
  for (;;) {
    if (stop && stop->load()) {
      stopped = true;
      break;
    }
    if (now_ms_.load() >= until) break;
    cv_.wait_for(lock, std::chrono::milliseconds(kStopCheckMs));
  }
  wakes_.erase(wake);
  cv_.notify_all();
  return !stopped;
}

void ManualClock::AdvanceMs(int64_t ms) {
  std::lock_guard lock(mu_);
  now_ms_ += ms;
  cv_.notify_all();
}

void ManualClock::SetMs(int64_t ms) {
  std::lock_guard lock(mu_);
  now_ms_ = ms;
  cv_.notify_all();
}

int ManualClock::sleepers() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(wakes_.size());
}

int64_t ManualClock::NextWakeMs() const {
  std::lock_guard lock(mu_);
  return wakes_.empty() ? -1 : *wakes_.begin();
}

bool ManualClock::WaitForSleepers(int n, int64_t timeout_ms) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return static_cast<int>(wakes_.size()) >= n; });
}

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

const Clock& SystemClock::Instance() {
  static const SystemClock clock;
  return clock;
}

}  // namespace logdex
