// Backlog: chunks waiting while Kafka is unavailable. Bounded (bytes and
// chunk count); over the bound the OLDEST chunks are dropped; taking from it
// gives the NEWEST first (a stack), so on-call sees the latest logs first
// after an outage. Ordered by sequence, so a chunk that comes back after a
// failed delivery takes its place by age, not at the top.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "ship/chunk_sink.h"

namespace logdex::ship {

class Backlog {
 public:
  // 0 = no limit on that dimension.
  Backlog(uint64_t max_bytes, uint64_t max_chunks) : max_bytes_(max_bytes), max_chunks_(max_chunks) {}

  // Adds a chunk; returns the chunks dropped to respect the bound (oldest
  // first; possibly `chunk` itself if it is the oldest).
  std::vector<OutgoingChunk> Push(OutgoingChunk chunk) {
    bytes_ += Size(chunk);
    const uint64_t seq = chunk.sequence;
    entries_.emplace(seq, std::move(chunk));
    std::vector<OutgoingChunk> dropped;
    while (!entries_.empty() && ((max_bytes_ && bytes_ > max_bytes_) || (max_chunks_ && entries_.size() > max_chunks_))) {
      auto it = entries_.begin();
      bytes_ -= Size(it->second);
      dropped.push_back(std::move(it->second));
      entries_.erase(it);
    }
    return dropped;
  }
  // Removes and returns the newest chunk.
  std::optional<OutgoingChunk> PopNewest() {
    if (entries_.empty()) return std::nullopt;
    auto it = std::prev(entries_.end());
    OutgoingChunk c = std::move(it->second);
    entries_.erase(it);
    bytes_ -= Size(c);
    return c;
  }
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t lowest_sequence() const { return entries_.empty() ? UINT64_MAX : entries_.begin()->first; }
  // Every chunk, oldest first (for reporting at the end).
  std::vector<OutgoingChunk> TakeAll() {
    std::vector<OutgoingChunk> all;
    for (auto& [seq, c] : entries_) all.push_back(std::move(c));
    entries_.clear();
    bytes_ = 0;
    return all;
  }

 private:
  static uint64_t Size(const OutgoingChunk& c) { return c.key.size() + c.value.size(); }
  uint64_t max_bytes_, max_chunks_;
  uint64_t bytes_ = 0;
  std::map<uint64_t, OutgoingChunk> entries_;
};

}  // namespace logdex::ship
