#include "indexer/minute_counts.h"

#include "common/varint.h"

namespace logdex {

namespace {
constexpr char kVersion = 1;
}  // namespace

std::string EncodeMinuteCounts(std::span<const int64_t> sorted_ts_ms) {
  std::string out(1, kVersion);
  if (sorted_ts_ms.empty()) return out;
  uint64_t minute = static_cast<uint64_t>(sorted_ts_ms.front()) / kCountMinuteMs;
  AppendVarint(out, minute);
  uint64_t gap = 0, n = 0;
  for (int64_t ts : sorted_ts_ms) {
    const uint64_t m = static_cast<uint64_t>(ts) / kCountMinuteMs;
    if (m != minute) {
      AppendVarint(out, gap);
      AppendVarint(out, n);
      gap = m - minute;
      minute = m;
      n = 0;
    }
    ++n;
  }
  AppendVarint(out, gap);
  AppendVarint(out, n);
  return out;
}

std::optional<std::vector<MinuteCount>> DecodeMinuteCounts(std::string_view value, uint64_t records,
                                                           int64_t first_ts_ms, int64_t last_ts_ms) {
  if (value.empty() || value.front() != kVersion || first_ts_ms < 0 || last_ts_ms < first_ts_ms) return std::nullopt;
  value.remove_prefix(1);
  const uint64_t lo = static_cast<uint64_t>(first_ts_ms) / kCountMinuteMs;
  const uint64_t hi = static_cast<uint64_t>(last_ts_ms) / kCountMinuteMs;
  uint64_t minute = 0, total = 0;
  if (!GetVarint(value, &minute) || minute < lo || minute > hi) return std::nullopt;
  std::vector<MinuteCount> out;
  while (!value.empty()) {
    uint64_t gap = 0, n = 0;
    if (!GetVarint(value, &gap) || !GetVarint(value, &n) || n == 0) return std::nullopt;
    if ((out.empty() ? gap != 0 : gap == 0) || gap > hi - minute || n > records - total) return std::nullopt;
    minute += gap;  // within [lo, hi]: lo <= minute <= hi throughout
    total += n;
    out.push_back(MinuteCount{static_cast<int64_t>(minute * kCountMinuteMs), n});
  }
  if (total != records || out.empty()) return std::nullopt;
  return out;
}

}  // namespace logdex
