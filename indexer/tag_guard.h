// The tag index's cardinality guard: an allow list and a deny list of tag
// keys, per key a cap on distinct values per hour (of record time), and a
// cap on distinct keys per hour. Tags over a cap are not indexed (they are
// counted, stay in their records, and a query with `scan: true` still finds
// them by filtering).
//
// The state is in memory and bounded: hours more than 48 older than the
// newest seen are forgotten, and at most `max_tracked_values` value ids are
// remembered in all (past that, new values are over the cap until old hours
// are forgotten). After a restart counting starts again, so a restarted
// indexer may index up to `max_values_per_hour` more values of an hour that
// was already capped. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace logdex {

struct TagGuardOptions {
  // When not empty, only these keys are indexed.
  std::vector<std::string> allow;
  // These keys are never indexed.
  std::vector<std::string> deny;
  // Distinct values per key per hour that are indexed. Default 10,000.
  uint32_t max_values_per_hour = 10'000;
  // Distinct keys per hour that are indexed (a record with 20,000 keys must
  // not write 20,000 index rows, nor grow this guard's state). Default 1,000.
  uint32_t max_keys_per_hour = 1'000;
  // Value ids remembered in all (memory bound, ~50 bytes each). Default 1 M.
  uint64_t max_tracked_values = 1'000'000;
};

class TagGuard {
 public:
  enum class Verdict { kIndex, kDenied, kOverCap, kKeyOverCap };

  explicit TagGuard(TagGuardOptions options) : options_(std::move(options)) {}

  // Whether the tag key=value of a chunk starting at `ts_ms` is indexed.
  Verdict Check(std::string_view key, std::string_view value, int64_t ts_ms);

  uint64_t tracked_values() const { return tracked_values_; }

 private:
  void ForgetHoursBefore(int64_t hour);

  TagGuardOptions options_;
  // (key id, hour) -> ids of the values indexed in that hour.
  std::map<std::pair<uint64_t, int64_t>, std::unordered_set<uint64_t>> seen_;
  std::map<int64_t, uint32_t> keys_per_hour_;
  uint64_t tracked_values_ = 0;
  int64_t newest_hour_ = 0;
};

}  // namespace logdex
