// Test helpers for ship/: a capturing ChunkSink, and parse's loghub helpers
// (tests/parse/helpers.h).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/chunk_codec.h"
#include "ship/chunk_sink.h"
#include "tests/parse/helpers.h"

namespace logdex::ship::testing {

using parse::testing::CsvColumn;
using parse::testing::LoghubPath;
using parse::testing::ReadAll;
using parse::testing::ReadLines;

// Keeps every chunk; delivers at once.
class CapturingChunkSink : public ChunkSink {
 public:
  Status Send(OutgoingChunk c) override {
    report.delivered_chunks++;
    report.delivered_records += c.records;
    chunks.push_back(std::move(c));
    return Status::Ok();
  }
  void Poll(int) override {}
  uint64_t LowestUnresolved() const override { return UINT64_MAX; }
  DeliveryReport Finish(int64_t) override { return report; }

  // Decodes every chunk (full validation) into records, per chunk.
  std::vector<proto::RecordBatch> Decode(const Clock& clock) const {
    DecodeOptions o;
    o.clock = &clock;
    std::vector<proto::RecordBatch> out;
    for (const OutgoingChunk& c : chunks) {
      auto chunk = DecodeChunk(c.value, o);
      EXPECT_TRUE(chunk.ok()) << chunk.error().ToString();
      if (!chunk.ok()) continue;
      auto recs = UnpackRecords(*chunk, o);
      EXPECT_TRUE(recs.ok()) << recs.error().ToString();
      if (recs.ok()) out.push_back(*recs);
    }
    return out;
  }

  std::vector<OutgoingChunk> chunks;
  DeliveryReport report;
};

}  // namespace logdex::ship::testing
