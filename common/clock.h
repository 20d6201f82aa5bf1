// The clock seam: the only way logdex code reads the time. Production uses
// SystemClock; tests use ManualClock and move time by hand instead of sleeping.
// Implementations are safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>

namespace logdex {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time: milliseconds since the Unix epoch, UTC.
  virtual int64_t NowMs() const = 0;
  // Monotonic time in nanoseconds from an arbitrary origin (for durations).
  virtual int64_t MonotonicNs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t MonotonicNs() const override;
  // A process-wide instance, for wiring in main() and defaults.
  static const Clock& Instance();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ms) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  int64_t MonotonicNs() const override { return now_ms_.load() * 1'000'000; }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }
  void SetMs(int64_t ms) { now_ms_ = ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

// CPU time the calling thread has used, in nanoseconds (for cost figures:
// what a step took of the machine, not of the wall clock).
int64_t ThreadCpuNs();

}  // namespace logdex
