#include "indexer/tag_guard.h"

#include <algorithm>

#include "common/ids.h"

namespace logdex {
namespace {
constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kHoursKept = 48;  // older hours are forgotten (bounded memory)
}  // namespace

TagGuard::Verdict TagGuard::Check(std::string_view key, std::string_view value, int64_t ts_ms) {
  auto listed = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), key) != list.end();
  };
  if (listed(options_.deny) || (!options_.allow.empty() && !listed(options_.allow))) return Verdict::kDenied;

  const int64_t hour = ts_ms / kHourMs;
  if (hour > newest_hour_) {
    newest_hour_ = hour;
    ForgetHoursBefore(newest_hour_ - kHoursKept);
  }
  const std::pair<uint64_t, int64_t> slot{TagKeyIdOf(key).value(), hour};
  auto it = seen_.find(slot);
  if (it == seen_.end()) {
    uint32_t& keys = keys_per_hour_[hour];
    if (keys >= options_.max_keys_per_hour) return Verdict::kKeyOverCap;
    if (tracked_values_ >= options_.max_tracked_values) return Verdict::kOverCap;
    ++keys;
    it = seen_.emplace(slot, std::unordered_set<uint64_t>{}).first;
  }
  auto& values = it->second;
  const uint64_t id = TagIdOf(key, value).value();
  if (values.count(id)) return Verdict::kIndex;
  if (values.size() >= options_.max_values_per_hour || tracked_values_ >= options_.max_tracked_values) {
    return Verdict::kOverCap;
  }
  values.insert(id);
  ++tracked_values_;
  return Verdict::kIndex;
}

void TagGuard::ForgetHoursBefore(int64_t hour) {
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (it->first.second < hour) {
      tracked_values_ -= it->second.size();
      it = seen_.erase(it);
    } else {
      ++it;
    }
  }
  keys_per_hour_.erase(keys_per_hour_.begin(), keys_per_hour_.lower_bound(hour));
}

}  // namespace logdex
