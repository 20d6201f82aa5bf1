// The dry-run output (`logdex ship --dry-run --out FILE`): the chunks that
// would be produced, length-prefixed.
//
// Framing, repeated until end of file:
//   4 bytes  length N of the value, unsigned, big-endian
//   N bytes  the Kafka message value: a serialized logdex.proto.LogChunk
// (the key is not written: it is derived from the chunk's app/host/severity,
// see StreamKey). An empty file holds no chunks; a file that ends inside a
// frame is corrupt.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "ship/chunk_sink.h"

namespace logdex::ship {

// Appends framed chunks to a file. Delivery = written (and flushed to the OS
// at Finish). Not thread-safe.
class FramedFileSink final : public ChunkSink {
 public:
  // Creates or truncates `path` ("-" = stdout).
  static Result<std::unique_ptr<FramedFileSink>> Open(const std::string& path);
  ~FramedFileSink() override;

  Status Send(OutgoingChunk chunk) override;
  void Poll(int) override {}
  uint64_t LowestUnresolved() const override { return UINT64_MAX; }
  DeliveryReport Finish(int64_t timeout_ms) override;

 private:
  FramedFileSink() = default;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  DeliveryReport report_;
  bool failed_ = false;
};

// Appends one frame to `out`.
void AppendFrame(std::string_view value, std::string* out);
// Splits framed bytes into values; fails on a truncated frame.
Result<std::vector<std::string>> SplitFrames(std::string_view bytes);
// Reads and splits a framed file.
Result<std::vector<std::string>> ReadFramedFile(const std::string& path);

}  // namespace logdex::ship
