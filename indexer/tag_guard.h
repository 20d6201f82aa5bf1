// The tag index's cardinality guard: an allow list and a deny list of tag
// keys, and per key a cap on distinct values per hour (of record time).
// Values over the cap are not indexed (they are counted, and a query with
// `scan: true` still finds them by filtering).
//
// The state is in memory: after a restart, counting starts again, so a
// restarted indexer may index up to `max_values_per_hour` more values of an
// hour that was already capped. Not thread-safe.
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
};

class TagGuard {
 public:
  enum class Verdict { kIndex, kDenied, kOverCap };

  explicit TagGuard(TagGuardOptions options) : options_(std::move(options)) {}

  // Whether the tag key=value of a chunk starting at `ts_ms` is indexed.
  Verdict Check(std::string_view key, std::string_view value, int64_t ts_ms);

 private:
  TagGuardOptions options_;
  // (key id, hour) -> ids of the values indexed in that hour.
  std::map<std::pair<uint64_t, int64_t>, std::unordered_set<uint64_t>> seen_;
  int64_t newest_hour_ = 0;
};

}  // namespace logdex
