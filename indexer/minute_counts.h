// A merged chunk's record counts per minute of its records' times, in
// `cnt` (kMinuteCountsTable) keyed by its main key: what Volume() counts a
// merged chunk from when it crosses a bucket edge, instead of decompressing
// it (a merged chunk spans up to hours, so most cross one; indexer/query.h,
// "Volume"). The index rows of a chunk that has one say so
// (IndexValue::has_minute_counts).
//
// Value: version u8 (1) · varint the first minute (record time / 60,000 ms)
// · per minute that holds records, oldest first: varint minutes since the
// entry before (0 for the first entry, at least 1 after) · varint records
// (at least 1). About 3 bytes per minute with records: a merged chunk of
// 8,192 records over 3 hours takes under 600 bytes beside its ~150 KB.
//
// Hand-written: a list of small integers, read by one query per merged
// chunk; a protobuf message would cost a parse and a dependency of the
// query's hot path for no gain.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace logdex {

inline constexpr int64_t kCountMinuteMs = 60'000;

struct MinuteCount {
  int64_t start_ms = 0;  // the minute's start (a multiple of kCountMinuteMs)
  uint64_t records = 0;
};

// From the chunk's record times, oldest first, none negative (the chunk
// codec refuses negative times).
std::string EncodeMinuteCounts(std::span<const int64_t> sorted_ts_ms);

// The entries of `value`, oldest first, or nullopt when it is not a value
// of the format above, its counts do not add up to `records` (the chunk's
// record count, from its index row), or a minute lies outside the minutes
// of [first_ts_ms, last_ts_ms] (the chunk's span): the caller then reads
// the chunk instead.
std::optional<std::vector<MinuteCount>> DecodeMinuteCounts(std::string_view value, uint64_t records,
                                                           int64_t first_ts_ms, int64_t last_ts_ms);

}  // namespace logdex
