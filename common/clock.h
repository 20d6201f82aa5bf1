// The clock seam: the only way logdex code reads the time and waits out a
// delay. Production uses SystemClock; tests use ManualClock and move time by
// hand instead of sleeping. Implementations are safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace logdex {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time: milliseconds since the Unix epoch, UTC.
  virtual int64_t NowMs() const = 0;
  // Monotonic time in nanoseconds from an arbitrary origin (for durations).
  virtual int64_t MonotonicNs() const = 0;
  // Waits until `ms` have passed on this clock, or until `*stop` is set (it
  // is looked at every 10 ms of real time at most). Returns false when
  // stopped. Retry loops wait here, so that a test on a ManualClock moves
  // them on by advancing time instead of sleeping.
  virtual bool SleepFor(int64_t ms, const std::atomic<bool>* stop = nullptr) const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t MonotonicNs() const override;
  bool SleepFor(int64_t ms, const std::atomic<bool>* stop = nullptr) const override;
  // A process-wide instance, for wiring in main() and defaults.
  static const Clock& Instance();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ms);
  ~ManualClock() override;
  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t MonotonicNs() const override { return now_ms_.load() * 1'000'000; }
  // Returns once AdvanceMs or SetMs has moved time `ms` on (or on a stop).
  bool SleepFor(int64_t ms, const std::atomic<bool>* stop = nullptr) const override;
  void AdvanceMs(int64_t ms);
  void SetMs(int64_t ms);
  // Threads inside SleepFor now; WaitForSleepers waits (in real time, up to
  // timeout_ms) until at least n are, so that a test advances time only
  // once the thread it drives is waiting.
  int sleepers() const;
  bool WaitForSleepers(int n, int64_t timeout_ms) const;
  // When the earliest sleeper is due (NowMs() time), or -1 when none sleeps:
  // a test reads the delay a retry loop chose and advances exactly that far.
  int64_t NextWakeMs() const;

 private:
  // The sleepers' state (clock.cc), so that the many includers of this
  // header do not pay for <mutex>, <condition_variable> and <set>.
  struct Sleepers;

  std::atomic<int64_t> now_ms_;
  const std::unique_ptr<Sleepers> sleepers_;
};

// CPU time the calling thread has used, in nanoseconds (for cost figures:
// what a step took of the machine, not of the wall clock).
int64_t ThreadCpuNs();

}  // namespace logdex
