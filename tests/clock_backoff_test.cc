// The clock that sleeps (common/clock.h) and the one retry schedule
// (common/backoff.h). Time here is a ManualClock's: no test waits out a delay.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/backoff.h"
#include "common/clock.h"

namespace logdex {
namespace {

constexpr int64_t kGenerous = 60'000;  // real-time bound of a wait that should end at once

TEST(Backoff, DoublesFromItsStartUpToItsCapAndJittersWithinTheUpperHalf) {
  const BackoffPolicy p{100, 1'000};
  EXPECT_EQ(p.CeilingMs(0), 100);
  EXPECT_EQ(p.CeilingMs(1), 100);
  EXPECT_EQ(p.CeilingMs(2), 200);
  EXPECT_EQ(p.CeilingMs(4), 800);
  EXPECT_EQ(p.CeilingMs(5), 1'000);
  EXPECT_EQ(p.CeilingMs(4'000'000'000u), 1'000) << "no overflow however many attempts";
  std::mt19937_64 rng(7);
  for (uint32_t attempt = 1; attempt <= 8; ++attempt) {
    const int64_t d = p.CeilingMs(attempt);
    int64_t lowest = d, highest = 0;
    for (int i = 0; i < 400; ++i) {
      const int64_t got = p.DelayMs(attempt, rng);
      ASSERT_GE(got, d / 2) << attempt;
      ASSERT_LE(got, d) << attempt;
      lowest = std::min(lowest, got);
      highest = std::max(highest, got);
    }
    EXPECT_LT(lowest, highest) << "jittered, attempt " << attempt;
  }
}

TEST(Backoff, NoDelayIsNoDelayAndAnyOtherIsAtLeastOneMillisecond) {
  std::mt19937_64 rng(1);
  EXPECT_EQ((BackoffPolicy{0, 10'000}.DelayMs(3, rng)), 0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ((BackoffPolicy{1, 1}.DelayMs(1, rng)), 1);
}

TEST(ManualClock, ASleeperWakesWhenTimeIsAdvancedPastItsDelayAndNotBefore) {
  ManualClock clock(1'000);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    EXPECT_TRUE(clock.SleepFor(500));
    woke = true;
  });
  ASSERT_TRUE(clock.WaitForSleepers(1, kGenerous));
  EXPECT_EQ(clock.NextWakeMs(), 1'500);
  clock.AdvanceMs(499);
  // Still asleep at 499 of 500 ms: the sleeper is still counted (it leaves
  // the count only on its way out, after time passed its deadline).
  EXPECT_EQ(clock.sleepers(), 1);
  EXPECT_FALSE(woke.load());
  clock.AdvanceMs(1);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(clock.sleepers(), 0);
  EXPECT_EQ(clock.NextWakeMs(), -1);
}

TEST(ManualClock, AStopEndsASleepWithoutTimeMoving) {
  ManualClock clock(0);
  std::atomic<bool> stop{false};
  std::atomic<int> result{-1};
  std::thread sleeper([&] { result = clock.SleepFor(3'600'000, &stop) ? 1 : 0; });
  ASSERT_TRUE(clock.WaitForSleepers(1, kGenerous));
  stop = true;
  sleeper.join();
  EXPECT_EQ(result.load(), 0) << "a stopped sleep says so";
  EXPECT_EQ(clock.NowMs(), 0);
  EXPECT_TRUE(clock.SleepFor(0, nullptr)) << "no delay returns at once";
}

TEST(SystemClock, AStopSetBeforehandReturnsAtOnceAndASleepLastsItsDelay) {
  const Clock& clock = SystemClock::Instance();
  std::atomic<bool> stop{true};
  const int64_t t0 = clock.MonotonicNs();
  EXPECT_FALSE(clock.SleepFor(3'600'000, &stop));
  EXPECT_LT(clock.MonotonicNs() - t0, int64_t{kGenerous} * 1'000'000);
  const int64_t t1 = clock.MonotonicNs();
  EXPECT_TRUE(clock.SleepFor(20));
  EXPECT_GE(clock.MonotonicNs() - t1, 20'000'000) << "never shorter than asked";
}

}  // namespace
}  // namespace logdex
