// A ship::ChunkSink that hands each chunk ship's Chunker makes to the
// Indexer, 256 at a time (a consumer batch), as serve does, without Kafka:
// for the benchmarks that build a store from generated lines.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "indexer/indexer.h"
#include "ship/chunker.h"

namespace logdex::bench {

class IndexingSink final : public ship::ChunkSink {
 public:
  explicit IndexingSink(Indexer& indexer) : indexer_(indexer) { source_.set_topic("bench"); }

  Status Send(ship::OutgoingChunk c) override {
    pending_.push_back(std::move(c.value));
    ++chunks_;
    if (pending_.size() >= 256) return Drain();
    return Status::Ok();
  }

  Status Drain() {
    if (pending_.empty()) return Status::Ok();
    Status s = indexer_.IngestSerialized(pending_, source_);
    pending_.clear();
    return s;
  }

  void Poll(int) override {}
  uint64_t LowestUnresolved() const override { return UINT64_MAX; }
  ship::DeliveryReport Finish(int64_t) override { return {}; }

  uint64_t chunks() const { return chunks_; }

 private:
  Indexer& indexer_;
  proto::ChunkSource source_;
  std::vector<std::string> pending_;
  uint64_t chunks_ = 0;
};

}  // namespace logdex::bench
