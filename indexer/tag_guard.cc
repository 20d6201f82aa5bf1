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
    for (auto it = seen_.begin(); it != seen_.end();) {
      it = it->first.second < newest_hour_ - kHoursKept ? seen_.erase(it) : std::next(it);
    }
  }
  auto& values = seen_[{TagKeyIdOf(key), hour}];
  const uint64_t id = TagIdOf(key, value);
  if (values.count(id)) return Verdict::kIndex;
  if (values.size() >= options_.max_values_per_hour) return Verdict::kOverCap;
  values.insert(id);
  return Verdict::kIndex;
}

}  // namespace logdex
