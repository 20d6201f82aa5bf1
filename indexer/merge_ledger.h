// The value of a `merged` row (the compactor's ledger, common/row_keys.h
// MergedKey): the chunks one merged chunk holds, so that a part re-sent after
// its merge is recognised (Indexer::WasMerged) and not stored twice.
//
// A chunk id is ChunkIdOf(a, b): (producer id, sequence) for a shipped chunk,
// (topic hash ^ partition, offset) for one that came without them. A merge's
// parts are mostly one producer's, with sequences close together, so the
// ledger keeps those pairs, each producer once and its sequences as
// deltas, about 1-2 bytes a part where an id takes 8 (in real time, 200
// streams of 1 line/s, the ledger was larger than the merged chunks it
// describes). Parts whose pair is unknown (a chunk split at ingest) keep
// their 8-byte id.
//
// Format 2 (MergedKey::format): varint count of bare ids, the ids (u64
// big-endian, ascending); then runs to the end: producer u64 big-endian,
// varint count n >= 1, the first sequence (varint), n - 1 gaps to the next
// (varint >= 1). Format 1 is the sorted ids alone, 8 bytes each.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/ids.h"

namespace logdex {

struct LedgerPart {
  ChunkId id;
  // Its (a, b), when known: kept only if ChunkIdOf(a, b) == id.
  bool paired = false;
  uint64_t a = 0, b = 0;
};

// Format 2. Every part's id is found in it again; duplicates are kept once.
std::string EncodeLedger(std::span<const LedgerPart> parts);

// Whether the value (of `format`) holds `id`; nullopt when the value is not
// one the format allows (then nothing in it is trusted). `pair`, the chunk's
// (a, b) when known, is compared as it is, without a hash per listed part
// (a merge lists up to 8,192), if ChunkIdOf(pair) is `id`.
std::optional<bool> LedgerHolds(uint8_t format, std::string_view value, ChunkId id,
                                std::optional<std::pair<uint64_t, uint64_t>> pair = std::nullopt);

}  // namespace logdex
