#include "indexer/store_epoch.h"

#include <algorithm>

#include "common/row_keys.h"
#include "indexer/compaction_lease.h"

namespace logdex {
namespace {

constexpr int64_t kOddHoldNs = 100'000'000;  // a write phase ends soon: read again sooner

}  // namespace

LeaseRowEpoch::LeaseRowEpoch(TableStore& store, const Clock& clock, int64_t hold_ms,
                             std::function<void(const Error&)> on_failure, std::function<void()> on_read)
    : store_(store), clock_(clock), hold_ns_(std::max<int64_t>(hold_ms, 0) * 1'000'000),
      on_failure_(std::move(on_failure)), on_read_(std::move(on_read)) {}

std::optional<uint64_t> LeaseRowEpoch::Read() {
  reads_.fetch_add(1);
  if (on_read_) on_read_();
  auto row = store_.Get(kMetaTable, kCompactionLeaseRow);
  if (!row.ok()) {
    if (on_failure_) on_failure_(row.error());
    return std::nullopt;
  }
  std::optional<CompactionLeaseValue> value;
  if (row->has_value()) {
    value = CompactionLeaseValue::Decode(**row);
    if (!value) {
      if (on_failure_) on_failure_(Error{Errc::kCorruption, "the compaction lease row (meta) does not decode"});
      return std::nullopt;
    }
  }
  uint64_t epoch = *CompactionLeaseEpoch(std::nullopt);
  if (value) {
    epoch = value->Epoch();
    row_delay_ms_.store(value->removal_delay_ms);
    if (epoch % 2 == 1) {
      std::lock_guard lock(odd_mu_);
      const int64_t now = clock_.MonotonicNs();
      if (odd_row_ != **row) {
        odd_row_ = **row;
        odd_since_ns_ = now;
      } else if (now - odd_since_ns_ >= std::max<int64_t>(value->period_ms, 0) * 1'000'000) {
        ++epoch;  // what a takeover would write: the phase's writes have all landed
      }
    }
  }
  // The last read, not the highest: a row recreated lower (deleted by an
  // operator) must read as moved, not as the old value.
  held_.store(epoch);
  return epoch;
}

int64_t LeaseRowEpoch::RecheckAfterMs(int64_t configured_ms) const {
  const int64_t delay = row_delay_ms_.load();
  if (delay <= 0) return configured_ms;
  // Members' monotonic clocks run at slightly different rates.
  const int64_t within = std::max<int64_t>(1, delay - std::max<int64_t>(1'000, delay / 100));
  return configured_ms > 0 ? std::min(configured_ms, within) : within;
}

std::optional<uint64_t> LeaseRowEpoch::Now() { return Read(); }

std::optional<uint64_t> LeaseRowEpoch::Held() {
  auto held = [&]() -> std::optional<uint64_t> {
    const uint64_t h = held_.load();
    return h == 0 ? std::nullopt : std::optional<uint64_t>(h);
  };
  if (clock_.MonotonicNs() < next_read_ns_.load()) return held();
  std::unique_lock<std::mutex> lock(reading_, std::try_to_lock);
  if (!lock.owns_lock()) return held();  // another query is reading it
  const int64_t start = clock_.MonotonicNs();
  if (start < next_read_ns_.load()) return held();
  auto read = Read();
  const bool odd = read.value_or(held_.load()) % 2 == 1;
  next_read_ns_.store(start + (odd ? std::min(hold_ns_, kOddHoldNs) : hold_ns_));
  return read ? read : held();
}

}  // namespace logdex
