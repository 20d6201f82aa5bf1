// The rule GroupConsumer uses to tell lost messages from harmless offset gaps.
//
// A partition's next message should be at `expected` (the offset after the
// last one consumed, or the committed offset after an assignment). When it
// comes at `offset` > expected, the offsets [expected, offset) were not
// delivered, for one of three reasons:
//   1. retention (on librdkafka's mock cluster, its ~5 MiB / 100,000-batch cap
//      per partition) deleted them before they were fetched: the fetch at
//      `expected` was out of range and the client reset to the log start;
//   2. transaction markers (control records) and aborted transactional
//      messages take offsets that a read_committed consumer never sees;
//   3. compaction removed superseded keys.
// Only 1 loses data. Offsets deleted by retention lie below the partition's
// log-start offset; those of 2 and 3 are at or above it. So, only when a gap
// is seen, the consumer asks the broker for the log start and counts
// [expected, min(offset, log_start)) as lost. (Markers that retention
// deleted in the same range are counted too: a few at most, and only when
// data was lost anyway.)
#pragma once

#include <algorithm>
#include <cstdint>

namespace logdex {

// Messages lost in a gap: `expected` < `offset`, `log_start` the partition's
// log-start offset now (< 0: unknown, nothing counted).
inline int64_t LostInGap(int64_t expected, int64_t offset, int64_t log_start) {
  if (expected < 0 || offset <= expected || log_start <= expected) return 0;
  return std::min(offset, log_start) - expected;
}

}  // namespace logdex
