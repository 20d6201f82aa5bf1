// The compaction lease: on a store that several serve members write (HBase),
// one member at a time merges, so that two never merge the same parts into
// two chunks (each would hold the records once more, beyond repair).
//
// The lease is a meta row (kCompactionLeaseRow) written only by conditional
// puts (TableStore::CheckAndPut, on the value last read), so no two members
// hold it at once, and it needs no synchronized clocks: each member measures
// durations on its own monotonic clock.
//   - Free: no row, or a row marked released, or a row whose value has not
//     changed for the holder's period (written in it) on the contender's
//     clock since the contender first saw that value. Every write changes the
//     value (a counter rises), so a holder that keeps writing is never
//     thought gone.
//   - Held: a member that wrote the row at monotonic time S (the start of
//     the call) holds it until S + period: a contender first saw that value
//     after the write landed, after S, and waits a whole period more.
//   - The holder renews it (Hold) once a third of the period has passed
//     since its last write, when it is asked: the compactor asks at the
//     start of each pass and before each write, so passes must come more
//     often than the period. Each write phase is fenced (Fence): one
//     conditional write, which fails once another member has taken over.
//     The writes after a fence must land within the period: the compactor
//     fences again before each batch once half the period is gone, so half
//     the period must exceed the longest a batch write can take (a call per
//     table, each up to the store client's timeout × attempts; the HBase
//     gateway may apply a put until its own operation timeout), or a write
//     still in flight could land after a takeover.
//   - Release (at shutdown) marks the row released: the next member need
//     not wait out the period. Only once every write has answered: a write
//     that failed may still land (a gateway retries it).
// A conditional put that answers "no" may have landed on a retry after its
// answer was lost (TableStore::CheckAndPut): the row is then read back and
// compared with what was written (a random token per holding and the
// counter make each value unique).
//
// Row value, version 1: version u8 (1) · released u8 (0 or 1) · token u64 ·
// counter u64 · period_ms u64 · written_ms u64 (the writer's wall clock, for
// operators) · the holder's name (the rest), integers big-endian.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"
#include "store/table_store.h"

namespace logdex {

inline constexpr std::string_view kCompactionLeaseRow = "\xff" "store.compaction_lease";

struct CompactionLeaseOptions {
  std::string owner;              // who holds it, for operators (host:pid)
  int64_t period_ms = 5 * 60'000;  // see above: longer than the store's longest call
};

// The row's value, decoded.
struct CompactionLeaseValue {
  bool released = false;
  uint64_t token = 0;
  uint64_t counter = 0;
  int64_t period_ms = 0;
  int64_t written_ms = 0;
  std::string owner;

  std::string Encode() const;
  static std::optional<CompactionLeaseValue> Decode(std::string_view v);
};

// One member's side of the lease. Not thread-safe: the compactor's thread
// drives it.
class CompactionLease {
 public:
  // Fails (kFailedPrecondition) on a store without conditional writes: a
  // store one process owns (RocksDB) needs no lease.
  static Result<std::unique_ptr<CompactionLease>> Create(TableStore& store, CompactionLeaseOptions options,
                                                         const Clock& clock);

  // Takes the lease when it is free, renews it when held and a third of the
  // period has passed since this member last wrote it. Answers whether this
  // member holds it. On a store error the lease counts as held only within
  // the period of the last write that landed.
  Result<bool> Hold();
  // Before a write phase: renews the lease with a conditional write. True:
  // held for a period from now (the phase's writes must land within it).
  // False: another member took it (or it was never held): do not write.
  Result<bool> Fence();
  // Marks the row released, when held; the lease is then not held.
  Status Release();

  bool held() const;
  // What is left of the period since this member's last write (0: not held).
  int64_t remaining_ms() const;
  int64_t period_ms() const { return options_.period_ms; }
  // How long this member has held the lease without a break (0: not held).
  int64_t held_for_ms() const;
  // Takeovers of a lease whose holder stopped writing it (counted here).
  uint64_t takeovers() const { return takeovers_; }

 private:
  CompactionLease(TableStore& store, CompactionLeaseOptions options, const Clock& clock);
  // A conditional write of `next` over `expected`; true when it landed
  // (read back when the answer was no).
  // `found`: the row's value, when it answers no.
  Result<bool> Write(const std::optional<std::string>& expected, const CompactionLeaseValue& next,
                     std::optional<std::string>* found);
  CompactionLeaseValue Next() const;
  int64_t NowNs() const { return clock_.MonotonicNs(); }

  TableStore& store_;
  const CompactionLeaseOptions options_;
  const Clock& clock_;
  // What this member last wrote (while it holds the lease) and when.
  std::optional<CompactionLeaseValue> mine_;
  int64_t written_ns_ = 0;     // the start of the write that landed last
  int64_t held_since_ns_ = 0;  // the start of the write that took it
  uint64_t tried_counter_ = 0; // the highest counter written or tried in this holding
  // Another member's value as first seen, and when.
  std::optional<std::string> seen_;
  int64_t seen_ns_ = 0;
  uint64_t takeovers_ = 0;
};

}  // namespace logdex
