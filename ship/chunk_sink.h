// ChunkSink: where packed chunks go. Implementations: KafkaChunkProducer
// (kafka_producer.h), FramedFileSink (dry run, framing.h), and test fakes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/severity.h"

namespace logdex::ship {

// A packed chunk ready to send: the Kafka key (the stream) and value (a
// serialized proto::LogChunk).
struct OutgoingChunk {
  std::string key;
  std::string value;
  uint64_t sequence = 0;
  uint32_t records = 0;
  Severity severity = Severity::kInfo;
  // The RecordView::origin of its records that had one (JournalSink).
  std::vector<uint64_t> origins;
};

// What a sink could not deliver, reported by Finish().
struct DeliveryReport {
  uint64_t delivered_chunks = 0;
  uint64_t delivered_records = 0;
  uint64_t dropped_chunks = 0;  // dropped by a backlog bound
  uint64_t dropped_records = 0;
  uint64_t failed_chunks = 0;   // given up on (permanent errors, or still pending at the deadline)
  uint64_t failed_records = 0;
  bool complete() const { return dropped_chunks == 0 && failed_chunks == 0; }
};

class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // Takes the chunk; may block for backpressure. A failure means the sink
  // cannot go on (the chunk is counted as failed).
  virtual Status Send(OutgoingChunk chunk) = 0;
  // Serves callbacks and retries; waits at most `timeout_ms`.
  virtual void Poll(int timeout_ms) = 0;
  // The lowest sequence not yet delivered or dropped (UINT64_MAX when none):
  // every chunk below it is resolved. A chunk that failed stays unresolved
  // (its lines must be read again). Used to checkpoint inputs.
  virtual uint64_t LowestUnresolved() const = 0;
  // Waits until everything is resolved or `timeout_ms` passes; reports.
  virtual DeliveryReport Finish(int64_t timeout_ms) = 0;
};

}  // namespace logdex::ship
