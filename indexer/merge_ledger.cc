#include "indexer/merge_ledger.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "common/bytes.h"
#include "common/varint.h"

namespace logdex {

std::string EncodeLedger(std::span<const LedgerPart> parts) {
  std::vector<uint64_t> bare;
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (const LedgerPart& p : parts) {
    if (p.paired && ChunkIdOf(p.a, p.b) == p.id) {
      pairs.emplace_back(p.a, p.b);
    } else {
      bare.push_back(p.id.value());
    }
  }
  std::sort(bare.begin(), bare.end());
  bare.erase(std::unique(bare.begin(), bare.end()), bare.end());
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());

  std::string out;
  AppendVarint(out, bare.size());
  for (uint64_t id : bare) AppendBigEndian64(out, id);
  for (size_t i = 0; i < pairs.size();) {
    size_t end = i;
    while (end < pairs.size() && pairs[end].first == pairs[i].first) ++end;
    AppendBigEndian64(out, pairs[i].first);
    AppendVarint(out, end - i);
    AppendVarint(out, pairs[i].second);
    for (size_t j = i + 1; j < end; ++j) AppendVarint(out, pairs[j].second - pairs[j - 1].second);
    i = end;
  }
  return out;
}

namespace {

// Format 1: ids, 8 bytes each, ascending.
std::optional<bool> HoldsFormat1(std::string_view value, ChunkId id) {
  if (value.size() % 8 != 0) return std::nullopt;
  size_t lo = 0, hi = value.size() / 8;
  while (lo < hi) {  // the ids are sorted
    const size_t mid = (lo + hi) / 2;
    const ChunkId v(GetBigEndian64(value.data() + mid * 8));
    if (v == id) return true;
    if (v < id) lo = mid + 1; else hi = mid;
  }
  return false;
}

std::optional<bool> HoldsFormat2(std::string_view in, ChunkId id, std::optional<std::pair<uint64_t, uint64_t>> pair) {
  if (pair && ChunkIdOf(pair->first, pair->second) != id) pair.reset();
  // A listed pair is the chunk: by the pair itself, or by its id's hash.
  auto is = [&](uint64_t a, uint64_t b) { return pair ? *pair == std::pair(a, b) : ChunkIdOf(a, b) == id; };
  bool found = false;
  uint64_t bare = 0;
  if (!GetVarint(in, &bare) || bare > in.size() / 8) return std::nullopt;
  uint64_t previous = 0;
  for (uint64_t i = 0; i < bare; ++i) {
    const uint64_t v = GetBigEndian64(in.data());
    in.remove_prefix(8);
    if (i > 0 && v <= previous) return std::nullopt;
    found = found || v == id.value();
    previous = v;
  }
  // Every run is checked whole: a value with anything wrong is not trusted.
  bool first_run = true;
  uint64_t previous_producer = 0;
  while (!in.empty()) {
    if (in.size() < 8) return std::nullopt;
    const uint64_t producer = GetBigEndian64(in.data());
    in.remove_prefix(8);
    if (!first_run && producer <= previous_producer) return std::nullopt;
    first_run = false;
    previous_producer = producer;
    uint64_t n = 0, sequence = 0;
    // Each sequence takes a byte at least.
    if (!GetVarint(in, &n) || n == 0 || n > in.size() || !GetVarint(in, &sequence)) return std::nullopt;
    found = found || is(producer, sequence);
    for (uint64_t j = 1; j < n; ++j) {
      uint64_t gap = 0;
      if (!GetVarint(in, &gap) || gap == 0 || __builtin_add_overflow(sequence, gap, &sequence)) return std::nullopt;
      found = found || is(producer, sequence);
    }
  }
  return found;
}

}  // namespace

std::optional<bool> LedgerHolds(uint8_t format, std::string_view value, ChunkId id,
                                std::optional<std::pair<uint64_t, uint64_t>> pair) {
  switch (format) {
    case 1: return HoldsFormat1(value, id);
    case 2: return HoldsFormat2(value, id, pair);
    default: return std::nullopt;
  }
}

}  // namespace logdex
