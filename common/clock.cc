#include "common/clock.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
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

struct ManualClock::Sleepers {
  std::mutex mu;
  std::condition_variable cv;     // time moved, or the sleepers changed
  std::multiset<int64_t> wakes;   // each sleeper's due time
};

ManualClock::ManualClock(int64_t now_ms) : now_ms_(now_ms), sleepers_(std::make_unique<Sleepers>()) {}
ManualClock::~ManualClock() = default;

bool ManualClock::SleepFor(int64_t ms, const std::atomic<bool>* stop) const {
  const int64_t until = now_ms_.load() + std::max<int64_t>(0, ms);
  Sleepers& s = *sleepers_;
  std::unique_lock lock(s.mu);
  const auto wake = s.wakes.insert(until);
  s.cv.notify_all();
  bool stopped = false;
  for (;;) {
    if (stop && stop->load()) {
      stopped = true;
      break;
    }
    if (now_ms_.load() >= until) break;
    s.cv.wait_for(lock, std::chrono::milliseconds(kStopCheckMs));
  }
  s.wakes.erase(wake);
  s.cv.notify_all();
  return !stopped;
}

void ManualClock::AdvanceMs(int64_t ms) {
  std::lock_guard lock(sleepers_->mu);
  now_ms_ += ms;
  sleepers_->cv.notify_all();
}

void ManualClock::SetMs(int64_t ms) {
  std::lock_guard lock(sleepers_->mu);
  now_ms_ = ms;
  sleepers_->cv.notify_all();
}

int ManualClock::sleepers() const {
  std::lock_guard lock(sleepers_->mu);
  return static_cast<int>(sleepers_->wakes.size());
}

int64_t ManualClock::NextWakeMs() const {
  std::lock_guard lock(sleepers_->mu);
  return sleepers_->wakes.empty() ? -1 : *sleepers_->wakes.begin();
}

bool ManualClock::WaitForSleepers(int n, int64_t timeout_ms) const {
  Sleepers& s = *sleepers_;
  std::unique_lock lock(s.mu);
  return s.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return static_cast<int>(s.wakes.size()) >= n; });
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
