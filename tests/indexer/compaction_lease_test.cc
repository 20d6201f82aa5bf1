// The compaction lease (indexer/compaction_lease.h) on every backend with
// conditional writes (the HBase gateway; a real HBase in real.hbase.*): one
// holder at a time, a takeover only after a whole period without a write,
// on each member's own clock, a release taken at once, lost answers read
// back, and a store failure that keeps the lease only within its period.
#include "indexer/compaction_lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/row_keys.h"
#include "indexer/store_epoch.h"
#include "indexer/tables.h"
#include "tests/backends.h"
#include "tests/failing_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

constexpr int64_t kPeriod = 60'000;

// An answer, not an error, and the one wanted.
bool Is(const Result<bool>& answer, bool wanted) { return answer.ok() && *answer == wanted; }

class CompactionLeaseTest : public ::testing::TestWithParam<Backend> {
 public:
  void SetUp() override {
    store_ = GetParam().open(dir_.path() + "/a", &clock_);
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    if (!store_->conditional_writes()) GTEST_SKIP() << "a store without conditional writes needs no lease";
  }

  std::unique_ptr<CompactionLease> Lease(const std::string& owner, const Clock& clock, TableStore* store = nullptr) {
    CompactionLeaseOptions o;
    o.owner = owner;
    o.period_ms = kPeriod;
    auto lease = CompactionLease::Create(store ? *store : *store_, o, clock);
    EXPECT_TRUE(lease.ok());
    return lease.ok() ? std::move(*lease) : nullptr;
  }

  std::optional<CompactionLeaseValue> Row() {
    auto row = store_->Get(kMetaTable, kCompactionLeaseRow);
    EXPECT_TRUE(row.ok());
    if (!row.ok() || !row->has_value()) return std::nullopt;
    return CompactionLeaseValue::Decode(**row);
  }

  ManualClock clock_{1'700'000'000'000};
  TempDir dir_;
  std::unique_ptr<TableStore> store_;
};

TEST(CompactionLeaseRocksDb, AStoreOneProcessOwnsNeedsNoLease) {
  for (const Backend& b : AllBackends()) {
    if (b.name != "rocksdb") continue;
    TempDir dir;
    ManualClock clock(0);
    auto store = b.open(dir.path(), &clock);
    ASSERT_NE(store, nullptr);
    auto lease = CompactionLease::Create(*store, CompactionLeaseOptions{}, clock);
    ASSERT_FALSE(lease.ok());
    EXPECT_EQ(lease.error().code, Errc::kFailedPrecondition);
  }
}

// Members' monotonic clocks have nothing in common: each contender waits a
// whole period of its own from when it first saw the holder's latest write.
TEST_P(CompactionLeaseTest, AnotherMemberTakesOverOnlyAfterAWholePeriodWithoutAWrite) {
  ManualClock a_clock(5'000), b_clock(987'654'321);
  auto a = Lease("a:1", a_clock), b = Lease("b:2", b_clock);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Is(a->Hold(), true));
  EXPECT_TRUE(a->held());
  EXPECT_EQ(Row()->owner, "a:1");
  EXPECT_TRUE(Is(b->Hold(), false)) << "held: b starts counting";
  // a renews every third of the period; b never sees the same value for a
  // whole period.
  for (int i = 0; i < 6; ++i) {
    a_clock.AdvanceMs(kPeriod / 3);
    b_clock.AdvanceMs(kPeriod / 3);
    const uint64_t before = Row()->counter;
    ASSERT_TRUE(Is(a->Hold(), true)) << i;
    EXPECT_GT(Row()->counter, before) << "a renewal writes the row";
    ASSERT_TRUE(Is(b->Hold(), false)) << i;
  }
  EXPECT_EQ(a->held_for_ms(), 2 * kPeriod);
  // Within a third of the period a holder does not write.
  const uint64_t counter = Row()->counter;
  a_clock.AdvanceMs(1'000);
  ASSERT_TRUE(Is(a->Hold(), true));
  EXPECT_EQ(Row()->counter, counter);

  // a stops writing (stalled or dead): b waits out a period from its last sight.
  ASSERT_TRUE(Is(b->Hold(), false));
  b_clock.AdvanceMs(kPeriod - 1);
  ASSERT_TRUE(Is(b->Hold(), false));
  b_clock.AdvanceMs(1);
  ASSERT_TRUE(Is(b->Hold(), true));
  EXPECT_EQ(b->takeovers(), 1u);
  EXPECT_EQ(Row()->owner, "b:2");
  // a's next fence fails: it must not write; it no longer holds the lease.
  EXPECT_TRUE(Is(a->Fence(), false));
  EXPECT_FALSE(a->held());
  EXPECT_TRUE(Is(a->Hold(), false));
  EXPECT_TRUE(Is(b->Fence(), true));
}

TEST_P(CompactionLeaseTest, AReleasedLeaseIsTakenAtOnce) {
  ManualClock a_clock(0), b_clock(0);
  auto a = Lease("a:1", a_clock), b = Lease("b:2", b_clock);
  ASSERT_TRUE(Is(a->Hold(), true));
  ASSERT_TRUE(Is(b->Hold(), false));
  ASSERT_TRUE(Is(a->Release(), true));
  EXPECT_FALSE(a->held());
  EXPECT_TRUE(Row()->released);
  EXPECT_TRUE(Is(b->Hold(), true)) << "no period to wait out";
  EXPECT_EQ(b->takeovers(), 0u);
  EXPECT_TRUE(Is(a->Fence(), false));
  EXPECT_TRUE(Is(a->Release(), false)) << "not held: nothing to do";
  EXPECT_EQ(Row()->owner, "b:2");
  EXPECT_FALSE(Row()->released);
}

// Members racing for a free lease: exactly one gets it.
TEST_P(CompactionLeaseTest, OfMembersTakingAFreeLeaseAtOnceExactlyOneHoldsIt) {
  for (int round = 0; round < 3; ++round) {
    std::vector<std::unique_ptr<CompactionLease>> leases;
    for (int i = 0; i < 6; ++i) leases.push_back(Lease("m" + std::to_string(i), clock_));
    std::atomic<int> holders{0}, errors{0};
    std::vector<std::thread> threads;
    for (auto& lease : leases) {
      threads.emplace_back([&lease, &holders, &errors] {
        auto held = lease->Hold();
        if (!held.ok()) ++errors;
        else holders += *held;
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(holders, 1) << "round " << round;
    for (auto& lease : leases) ASSERT_TRUE(lease->Release().ok());
  }
}

// A conditional put whose answer was lost after it landed (the client's
// retry then saw its own value) answers no, or fails: the lease reads the
// row back and knows it wrote it.
class LosesAnswers final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override {
    auto landed = base_.CheckAndPut(table, key, expected, value);
    if (!landed.ok() || !*landed || mode == kAnswer) return landed;
    if (mode == kNo) return false;
    return Error{Errc::kUnavailable, "injected: the answer was lost"};
  }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    if (fail_gets > 0) {
      --fail_gets;
      return Error{Errc::kUnavailable, "injected read failure"};
    }
    return base_.Get(table, key);
  }
  bool conditional_writes() const override { return base_.conditional_writes(); }
  enum { kAnswer, kNo, kError } mode = kAnswer;
  int fail_gets = 0;
};

TEST_P(CompactionLeaseTest, AWriteWhoseAnswerWasLostIsReadBack) {
  LosesAnswers store(*store_);
  ManualClock a_clock(0), b_clock(0);
  auto a = Lease("a:1", a_clock, &store), b = Lease("b:2", b_clock, &store);
  store.mode = LosesAnswers::kNo;
  ASSERT_TRUE(Is(a->Hold(), true));
  EXPECT_TRUE(Is(b->Hold(), false)) << "b's own answer is true: a holds it";
  store.mode = LosesAnswers::kError;
  EXPECT_TRUE(Is(a->Fence(), true));
  ASSERT_TRUE(Is(a->Release(), true));
  EXPECT_TRUE(Row()->released);
  store.mode = LosesAnswers::kAnswer;
  EXPECT_TRUE(Is(b->Hold(), true));
}

// A fence whose write landed but whose answer and read-back both failed:
// the next fence finds the row past what the member knew, with its own
// token, and writes over it: the lease stays with it.
TEST_P(CompactionLeaseTest, AFenceThatLandedUnansweredIsRecognisedByTheNextOne) {
  LosesAnswers store(*store_);
  ManualClock a_clock(0), b_clock(0);
  auto a = Lease("a:1", a_clock, &store), b = Lease("b:2", b_clock, &store);
  ASSERT_TRUE(Is(a->Hold(), true));
  const uint64_t first = Row()->counter;
  store.mode = LosesAnswers::kError;
  store.fail_gets = 1;
  EXPECT_FALSE(a->Fence().ok()) << "landed, but neither answer nor read-back came";
  EXPECT_GT(Row()->counter, first);
  store.mode = LosesAnswers::kAnswer;
  ASSERT_TRUE(Is(a->Fence(), true));
  EXPECT_TRUE(a->held());
  EXPECT_EQ(Row()->owner, "a:1");
  EXPECT_GT(Row()->counter, first + 1) << "written over the unanswered write";
  EXPECT_TRUE(Is(b->Hold(), false));
}

// A contender's read that takes long: the holder's value may have landed
// while it ran, so the contender counts its period from the read's end.
TEST_P(CompactionLeaseTest, AContenderCountsThePeriodFromWhenItsReadReturned) {
  ManualClock a_clock(0), b_clock(0);
  class SlowReads final : public testing::ForwardingStore {
   public:
    SlowReads(TableStore& base, ManualClock& clock) : ForwardingStore(base), clock_(clock) {}
    Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
      auto row = base_.Get(table, key);
      clock_.AdvanceMs(slow_ms);
      slow_ms = 0;
      return row;
    }
    Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                             std::string_view value) override {
      return base_.CheckAndPut(table, key, expected, value);
    }
    bool conditional_writes() const override { return base_.conditional_writes(); }
    int64_t slow_ms = 0;

   private:
    ManualClock& clock_;
  } slow(*store_, b_clock);
  auto a = Lease("a:1", a_clock), b = Lease("b:2", b_clock, &slow);
  ASSERT_TRUE(Is(a->Hold(), true));
  slow.slow_ms = 30'000;
  ASSERT_TRUE(Is(b->Hold(), false));
  b_clock.AdvanceMs(kPeriod - 1);
  EXPECT_TRUE(Is(b->Hold(), false)) << "a period from the read's end has not passed";
  b_clock.AdvanceMs(1);
  EXPECT_TRUE(Is(b->Hold(), true));
}

// A store that fails every call: the holder keeps the lease only within the
// period of its last write, then checks with a conditional write.
TEST_P(CompactionLeaseTest, AFailingStoreKeepsTheLeaseOnlyWithinItsPeriod) {
  class Failing final : public testing::ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
      if (failing) return Error{Errc::kUnavailable, "injected read failure"};
      return base_.Get(table, key);
    }
    Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                             std::string_view value) override {
      if (failing) return Error{Errc::kUnavailable, "injected write failure"};
      return base_.CheckAndPut(table, key, expected, value);
    }
    bool conditional_writes() const override { return base_.conditional_writes(); }
    bool failing = false;
  } store(*store_);
  ManualClock clock(0);
  auto a = Lease("a:1", clock, &store);
  ASSERT_TRUE(Is(a->Hold(), true));
  store.failing = true;
  clock.AdvanceMs(kPeriod / 3 - 1);
  EXPECT_TRUE(Is(a->Hold(), true)) << "no write due yet";
  clock.AdvanceMs(1);
  auto renewed = a->Hold();
  ASSERT_FALSE(renewed.ok());
  EXPECT_EQ(renewed.error().code, Errc::kUnavailable);
  EXPECT_TRUE(a->held()) << "within the period of the last write";
  EXPECT_FALSE(a->Fence().ok());
  clock.AdvanceMs(kPeriod - kPeriod / 3);
  EXPECT_FALSE(a->held()) << "a period after the last write that landed";
  EXPECT_EQ(a->held_for_ms(), 0);
  store.failing = false;
  EXPECT_TRUE(Is(a->Hold(), true)) << "no one took it meanwhile: still this member's";
  EXPECT_TRUE(a->held());
}

TEST_P(CompactionLeaseTest, ARowOfAnotherShapeIsAnErrorNotAFreeLease) {
  ASSERT_TRUE(store_->CheckAndPut(kMetaTable, kCompactionLeaseRow, std::nullopt, "\x09garbage").ok());
  auto a = Lease("a:1", clock_);
  auto held = a->Hold();
  ASSERT_FALSE(held.ok());
  EXPECT_EQ(held.error().code, Errc::kCorruption);
  CompactionLeaseValue v;
  v.released = true, v.token = 7, v.counter = 9, v.period_ms = 1234, v.written_ms = 99, v.owner = "host:1";
  auto back = CompactionLeaseValue::Decode(v.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->released);
  EXPECT_EQ(back->token, 7u);
  EXPECT_EQ(back->counter, 9u);
  EXPECT_EQ(back->period_ms, 1234);
  EXPECT_EQ(back->written_ms, 99);
  EXPECT_EQ(back->owner, "host:1");
  v.begun = 12, v.ended = 11;
  back = CompactionLeaseValue::Decode(v.Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->begun, 12u);
  EXPECT_EQ(back->ended, 11u);
  EXPECT_EQ(back->owner, "host:1");
  v.begun = 10;
  EXPECT_FALSE(CompactionLeaseValue::Decode(v.Encode()).has_value()) << "more phases ended than begun";
  // Version 1 (no phase counters), as the first lease code wrote it.
  std::string v1 = std::string("\x01\x00", 2) + std::string(15, '\0') + "\x05" + std::string(16, '\0') + "host:2";
  back = CompactionLeaseValue::Decode(v1);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->counter, 5u);
  EXPECT_EQ(back->begun, 0u);
  EXPECT_EQ(back->ended, 0u);
  EXPECT_EQ(back->owner, "host:2");
  EXPECT_EQ(CompactionLeaseEpoch(v1), uint64_t{1} << 63);
  EXPECT_EQ(CompactionLeaseEpoch(std::nullopt), uint64_t{1} << 63) << "no row: nothing merged yet";
  EXPECT_FALSE(CompactionLeaseEpoch(std::string("\x09garbage")).has_value());
}

// The store's layout epoch (indexer/store_epoch.h) in the lease row: odd
// from a write phase's fence until it ends, and while a failed write of it
// may still land (a period); never lower, whoever holds the lease.
TEST_P(CompactionLeaseTest, AWritePhaseMakesTheEpochOddUntilItsWritesHaveAllAnswered) {
  ManualClock a_clock(1'700'000'000'000), b_clock(0);
  auto a = Lease("a:1", a_clock), b = Lease("b:2", b_clock);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Is(a->Hold(), true));
  EXPECT_EQ(Row()->begun, 1'700'000'000'000u) << "a new row starts at its holder's wall clock";
  const uint64_t e0 = Row()->Epoch();
  EXPECT_EQ(e0, uint64_t{1} << 63 | 3'400'000'000'000u);
  ASSERT_TRUE(Is(a->Fence(true), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 1) << "a phase under way";
  ASSERT_TRUE(Is(a->Fence(), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 1) << "a fence inside the phase";
  ASSERT_TRUE(Is(a->EndPhase(), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 2);

  // A write of the next phase fails: odd until a period after the failure.
  ASSERT_TRUE(Is(a->Fence(true), true));
  a->NoteUnanswered();
  a_clock.AdvanceMs(kPeriod / 3);
  ASSERT_TRUE(Is(a->Hold(), true));  // renews
  EXPECT_EQ(Row()->Epoch(), e0 + 3) << "the failed write may still land";
  ASSERT_TRUE(Is(a->Fence(true), true));
  ASSERT_TRUE(Is(a->EndPhase(), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 5) << "a later phase ends, the failed write may still land";
  ASSERT_TRUE(Is(a->Release(), false));
  EXPECT_FALSE(Row()->released) << "not released while a write may land";
  EXPECT_TRUE(Is(b->Hold(), false));
  b_clock.AdvanceMs(kPeriod);
  ASSERT_TRUE(Is(b->Hold(), true)) << "taken over after a period";
  EXPECT_EQ(Row()->Epoch(), e0 + 6) << "the taker ends the open phase: a period has passed";

  // b stops in a phase; a takes over, and the epoch goes on from b's.
  ASSERT_TRUE(Is(b->Fence(true), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 7);
  EXPECT_TRUE(Is(a->Hold(), false));
  a_clock.AdvanceMs(kPeriod);
  ASSERT_TRUE(Is(a->Hold(), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 8);
  EXPECT_TRUE(Is(b->Fence(), false)) << "b's next fence finds it gone";
  ASSERT_TRUE(Is(a->Fence(true), true));
  ASSERT_TRUE(Is(a->EndPhase(), true));
  ASSERT_TRUE(Is(a->Release(), true));
  EXPECT_TRUE(Row()->released);
  EXPECT_EQ(Row()->Epoch(), e0 + 10);
  ASSERT_TRUE(Is(b->Hold(), true)) << "a released lease";
  EXPECT_EQ(Row()->Epoch(), e0 + 10) << "a release keeps the epoch";
  EXPECT_TRUE(Is(b->EndPhase(), true)) << "nothing to end";
  EXPECT_EQ(Row()->Epoch(), e0 + 10);
  ASSERT_TRUE(Is(b->Fence(true), true));
  ASSERT_TRUE(Is(b->Fence(true), true)) << "as when a phase's fence is retried";
  ASSERT_TRUE(Is(b->EndPhase(), true));
  EXPECT_EQ(Row()->Epoch(), e0 + 14);
}

// LeaseRowEpoch: Held() reads the row once per hold (sooner while odd),
// Now() at every call; a failed read keeps what is held and is reported.
TEST_P(CompactionLeaseTest, TheSharedEpochIsReadOncePerHoldAndFreshWhenAsked) {
  ManualClock q_clock(0);
  std::vector<std::string> failures;
  testing::FailingReads reads(*store_);
  LeaseRowEpoch epoch(reads, q_clock, 1'000, [&](const Error& e) { failures.push_back(e.ToString()); });
  ASSERT_EQ(epoch.Held(), uint64_t{1} << 63) << "no row";
  EXPECT_EQ(epoch.reads(), 1u);
  auto a = Lease("a:1", clock_);
  ASSERT_TRUE(Is(a->Hold(), true));
  const uint64_t e0 = Row()->Epoch();
  EXPECT_EQ(epoch.Held(), uint64_t{1} << 63) << "held for a second";
  EXPECT_EQ(epoch.reads(), 1u);
  EXPECT_EQ(epoch.Now(), e0);
  EXPECT_EQ(epoch.reads(), 2u);
  EXPECT_EQ(epoch.Held(), e0) << "Now() raised the value held";
  ASSERT_TRUE(Is(a->Fence(true), true));
  q_clock.AdvanceMs(1'000);
  EXPECT_EQ(epoch.Held(), e0 + 1);
  EXPECT_EQ(epoch.reads(), 3u);
  ASSERT_TRUE(Is(a->EndPhase(), true));
  q_clock.AdvanceMs(100);
  EXPECT_EQ(epoch.Held(), e0 + 2) << "read again sooner while odd";
  EXPECT_EQ(epoch.reads(), 4u);
  reads.fail_table = std::string(kMetaTable);
  q_clock.AdvanceMs(1'000);
  EXPECT_EQ(epoch.Held(), e0 + 2) << "a failed read keeps the value held";
  EXPECT_FALSE(epoch.Now().has_value());
  EXPECT_EQ(failures.size(), 2u);
}

// A holder that stopped inside a write phase leaves the row odd; with no
// member to take over, queries would resume by record for good. Unchanged
// for its period, the row reads as the even value a takeover writes. A row
// recreated lower (an operator deleted it) reads as moved, not as the old
// value. Pages re-read the epoch after the holder's removal delay less a
// margin, or the member's own when shorter.
TEST_P(CompactionLeaseTest, TheSharedEpochEndsAStalePhaseFollowsARecreatedRowAndTheHoldersDelay) {
  ManualClock q_clock(0), a_clock(1'700'000'000'000);
  LeaseRowEpoch epoch(*store_, q_clock, 0);
  EXPECT_EQ(epoch.RecheckAfterMs(30'000), 30'000) << "no row: the member's own";
  CompactionLeaseOptions o;
  o.owner = "a:1";
  o.period_ms = kPeriod;
  o.removal_delay_ms = 120'000;
  auto a = CompactionLease::Create(*store_, o, a_clock);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(Is((*a)->Hold(), true));
  ASSERT_TRUE(Is((*a)->Fence(true), true));  // and a stops here for good
  const uint64_t odd = Row()->Epoch();
  ASSERT_EQ(odd % 2, 1u);
  EXPECT_EQ(epoch.Now(), odd);
  EXPECT_EQ(epoch.RecheckAfterMs(0), 118'800) << "the holder's delay less 1 %";
  EXPECT_EQ(epoch.RecheckAfterMs(60'000), 60'000);
  q_clock.AdvanceMs(kPeriod - 1);
  EXPECT_EQ(epoch.Now(), odd) << "within the holder's period";
  q_clock.AdvanceMs(1);
  EXPECT_EQ(epoch.Now(), odd + 1) << "unchanged for a period: its writes have landed";
  EXPECT_EQ(epoch.Held(), odd + 1);

  // Deleted, and recreated by a member whose wall clock is behind.
  WriteBatch del;
  del.Delete(std::string(kMetaTable), std::string(kCompactionLeaseRow));
  ASSERT_TRUE(store_->Write(del).ok());
  ManualClock behind(1'600'000'000'000);
  auto b = CompactionLease::Create(*store_, o, behind);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(Is((*b)->Hold(), true));
  ASSERT_LT(Row()->Epoch(), odd);
  EXPECT_EQ(epoch.Now(), Row()->Epoch()) << "a lower row reads as it is: the epoch moved";
}

INSTANTIATE_TEST_SUITE_P(Backends, CompactionLeaseTest, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex
