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
//     start of each pass, between streams and before each write, so passes
//     must come more often than a third of the period. Each write phase is
//     fenced (Fence): one conditional write, which fails once another
//     member has taken over. The writes after a fence must land within the
//     period: the compactor fences again before each batch once half the
//     period is gone, and gives the batch a send deadline of the half
//     period left (WriteBatch::set_send_within_ms: the HBase client starts
//     no attempt past it), so half the period must exceed one attempt's
//     send and receive (serve: lease_period >= 4 × rpc_timeout; the
//     timeouts are per socket call, so a large frame sent in many calls can
//     take longer: periods well above the minimum are safer), plus the
//     HBase gateway's own operation timeout, until which it may apply a put
//     it received, or a write still in flight could land after a takeover.
//   - Release (at shutdown) marks the row released: the next member need
//     not wait out the period. Only once every write has answered: a write
//     that failed may still land (a gateway retries it).
// A conditional put that answers "no" may have landed on a retry after its
// answer was lost (TableStore::CheckAndPut): the row is then read back and
// compared with what was written (a random token per holding and the
// counter make each value unique).
//
// The row also carries the store's layout epoch (indexer/store_epoch.h):
// `begun` counts the holders' write phases begun, `ended` is set to `begun`
// when a phase's writes have all answered. The epoch is odd while they
// differ. A phase whose write failed stays open for the period (the write
// may still land); a takeover closes it (a whole period has passed). Every
// new value carries them on, so the epoch never goes down, whoever holds.
//
// The row also carries the holder's removal delay (CompactorOptions::
// removal_delay_ms): queries of every member re-read the epoch after a page
// that ran about that long (LeaseRowEpoch::RecheckAfterMs).
//
// Row value, version 2: version u8 (2) · released u8 (0 or 1) · token u64 ·
// counter u64 · period_ms u64 · written_ms u64 (the writer's wall clock, for
// operators) · begun u64 · ended u64 · removal_delay_ms u64 · the holder's
// name (the rest), integers big-endian. Version 1 (no begun, ended, delay)
// reads as begun = ended = 0, no delay.
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
  int64_t removal_delay_ms = 0;    // the compactor's, written in the row for queries (see above)
};

// The row's value, decoded.
struct CompactionLeaseValue {
  bool released = false;
  uint64_t token = 0;
  uint64_t counter = 0;
  int64_t period_ms = 0;
  int64_t written_ms = 0;
  uint64_t begun = 0;  // write phases begun
  uint64_t ended = 0;  // == begun once the last one's writes all answered
  int64_t removal_delay_ms = 0;
  std::string owner;

  // The store's layout epoch: top bit set (never equal to a LocalStoreEpoch,
  // which counts from twice the wall clock in ms), odd while a phase is open.
  uint64_t Epoch() const;
  std::string Encode() const;
  static std::optional<CompactionLeaseValue> Decode(std::string_view v);
};

// The epoch a lease row's value (absent: nullopt inside) holds; nullopt when
// it does not decode. An absent row: 1 << 63 (nothing was ever merged).
std::optional<uint64_t> CompactionLeaseEpoch(const std::optional<std::string>& row);

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
  // Before writes: renews the lease with a conditional write. True: held
  // for a period from now (the writes must land within it). False: another
  // member took it (or it was never held): do not write. `begin_phase`: the
  // writes that follow change the layout: the epoch turns odd (begun + 1)
  // until EndPhase.
  Result<bool> Fence(bool begin_phase = false);
  // After a phase's writes all answered: the epoch turns even (one more
  // conditional write). False: the lease went to another member.
  Result<bool> EndPhase();
  // A write of the phase failed and may land later (a gateway retries it):
  // the epoch stays odd for a period from now.
  void NoteUnanswered();
  // Marks the row released, when held; the lease is then not held. Not
  // while a write may still land (a phase open, or a failure within the
  // period): the lease is then given up without a write, left to expire.
  // True: released.
  Result<bool> Release();

  bool held() const;
  // Whether this member last knew itself the holder (its period may have
  // passed since: held() says).
  bool holding() const { return mine_.has_value(); }
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
  bool unanswered_recently() const;
  int64_t NowNs() const { return clock_.MonotonicNs(); }

  TableStore& store_;
  const CompactionLeaseOptions options_;
  const Clock& clock_;
  // What this member last wrote (while it holds the lease) and when.
  std::optional<CompactionLeaseValue> mine_;
  int64_t written_ns_ = 0;     // the start of the write that landed last
  int64_t held_since_ns_ = 0;  // the start of the write that took it
  uint64_t tried_counter_ = 0; // the highest counter written or tried in this holding
  bool in_phase_ = false;      // between Fence(true) and EndPhase or NoteUnanswered
  std::optional<int64_t> unanswered_ns_;  // the last NoteUnanswered
  // Another member's value as first seen, and when.
  std::optional<std::string> seen_;
  int64_t seen_ns_ = 0;
  uint64_t takeovers_ = 0;
};

}  // namespace logdex
