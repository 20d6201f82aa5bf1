// The store's layout epoch, which queries compare (QueryOptions::store_epoch):
// it moves whenever a compactor's writes change which chunks hold which
// records (a merged chunk lands, parts are removed). It is odd while such a
// write phase is under way (or after one stopped part-way) and even
// otherwise. It does not go down (but where an operator recreates its row:
// pages only ask whether it moved).
//
// A cursor carries the epoch its page was made in. A page resumes the
// cursor's saved index positions and chunks, and compares whole positions
// (chunk ids change in a merge), only when the epoch has not moved since;
// otherwise it resumes by record (the positions may be gone). A run that
// depended on its cursor's layout so, or (shared stores) ran longer than
// about a removal delay, reads the epoch again when it ends, and runs again
// when it moved meanwhile (indexer/query.cc, MergeRaced).
//
// Where one process owns the store (RocksDB) the epoch is that process's
// compactor's counter (LocalStoreEpoch). Where several members share it
// (HBase), any member's merge moves the layout under every member's cursors,
// so the epoch lives in the store: the compaction lease row's write-phase
// counters (LeaseRowEpoch, indexer/compaction_lease.h), read by every member,
// compacting or not.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "store/table_store.h"

namespace logdex {

class StoreEpoch {
 public:
  virtual ~StoreEpoch() = default;
  // A value the epoch had at some moment before the call: possibly held
  // from an earlier read. nullopt: unknown (cursors then resume by record).
  virtual std::optional<uint64_t> Held() = 0;
  // The value now: a store read where the epoch is shared. nullopt: the
  // read failed.
  virtual std::optional<uint64_t> Now() = 0;
  // Whether other processes move it (the store has no snapshots).
  virtual bool shared() const = 0;
  // How long a run may last before it reads the epoch again when it ends
  // (shared stores), given the configured value (0: never).
  virtual int64_t RecheckAfterMs(int64_t configured_ms) const { return configured_ms; }
};

// One process's compactor's counter (CompactorOptions::store_epoch).
class LocalStoreEpoch final : public StoreEpoch {
 public:
  explicit LocalStoreEpoch(const std::atomic<uint64_t>& epoch) : epoch_(epoch) {}
  std::optional<uint64_t> Held() override { return epoch_.load(); }
  std::optional<uint64_t> Now() override { return epoch_.load(); }
  bool shared() const override { return false; }

 private:
  const std::atomic<uint64_t>& epoch_;
};

// The epoch of a shared store, from the compaction lease row. Held() reads
// the row again once `hold_ms` has passed since the last read (100 ms while
// the value held is odd); one caller reads, the others use the value held
// (the last read). A failed read, or a row that does not decode, calls
// `on_failure` (for a metric and a log line): Now() answers nullopt, Held()
// the value held. A row left odd (its holder stopped in a write phase) and
// unchanged for its period reads as even: the value a takeover would write,
// since every write of that phase has landed by then (the lease's rule).
// RecheckAfterMs: the smaller of the configured value and the holder's
// removal delay in the row, less a margin for the members' clock rates.
class LeaseRowEpoch final : public StoreEpoch {
 public:
  // `on_read`: called at each read of the row (for a metric).
  LeaseRowEpoch(TableStore& store, const Clock& clock, int64_t hold_ms = 1'000,
                std::function<void(const Error&)> on_failure = {}, std::function<void()> on_read = {});
  std::optional<uint64_t> Held() override;
  std::optional<uint64_t> Now() override;
  bool shared() const override { return true; }
  int64_t RecheckAfterMs(int64_t configured_ms) const override;
  // Reads of the row so far (for tests and metrics).
  uint64_t reads() const { return reads_.load(); }

 private:
  std::optional<uint64_t> Read();

  TableStore& store_;
  const Clock& clock_;
  const int64_t hold_ns_;
  const std::function<void(const Error&)> on_failure_;
  const std::function<void()> on_read_;
  std::atomic<uint64_t> held_{0};  // 0: none read yet (a lease row's epoch has its top bit set)
  std::atomic<int64_t> next_read_ns_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<int64_t> row_delay_ms_{0};  // the holder's removal delay, last read
  std::mutex reading_;  // one Held() read at a time; the other callers use the value held
  std::mutex odd_mu_;   // guards the two below
  std::string odd_row_;  // an odd row as first seen, and when
  int64_t odd_since_ns_ = 0;
};

}  // namespace logdex
