// KafkaChunkProducer: a ChunkSink that produces chunks to Kafka with
// librdkafka's idempotent producer (enable.idempotence=true), key = stream,
// and tracks every chunk until its delivery report.
//
// Availability and the backlog:
//   - At most max_in_flight chunks are handed to librdkafka at a time. While
//     Kafka is healthy and the window is full, Send() blocks (backpressure)
//     and order within a stream is kept.
//   - Kafka is "unavailable" when in-flight chunks make no progress for
//     unavailable_after_ms, or librdkafka reports all brokers down. Then
//     Send() never blocks: chunks go to a bounded Backlog (backlog.h).
//     Over the bound the oldest are dropped: counted in
//     logdex_ship_backlog_dropped_{chunks,records}_total and logged at warn
//     (at most once a second, with totals). Never silent.
//   - While unavailable one chunk (the newest) probes the cluster. When a
//     delivery succeeds, Kafka is available again and the backlog drains
//     newest first. New chunks join the backlog while it is not empty, so
//     the newest data always goes first.
//   - A delivery that fails with a retriable error (timeouts, transport,
//     leader changes) puts the chunk back in the backlog by age; other
//     errors fail it (counted, logged, reported by Finish()).
//
// Metrics (all `logdex_ship_*`) are registered in the registry given to
// Create(). Threading: one thread calls every method; delivery callbacks run
// inside Send()/Poll()/Finish() on that thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "ship/backlog.h"
#include "ship/chunk_sink.h"

namespace prometheus {
class Registry;
}

namespace logdex::ship {

struct ProducerOptions {
  std::string brokers;  // bootstrap.servers; required
  std::string topic;    // required
  // librdkafka settings applied last (--kafka KEY=VALUE); may override ours.
  std::vector<std::pair<std::string, std::string>> kafka;
  size_t max_in_flight = 64;                 // chunks handed to librdkafka
  uint64_t backlog_max_bytes = 256ull << 20;  // 0 = no limit
  uint64_t backlog_max_chunks = 0;           // 0 = no limit
  int64_t unavailable_after_ms = 5000;       // no progress this long = down
};

class KafkaChunkProducer final : public ChunkSink {
 public:
  static Result<std::unique_ptr<KafkaChunkProducer>> Create(const ProducerOptions& options,
                                                            prometheus::Registry& registry, const Clock& clock);
  ~KafkaChunkProducer() override;

  Status Send(OutgoingChunk chunk) override;
  void Poll(int timeout_ms) override;
  uint64_t LowestUnresolved() const override;
  DeliveryReport Finish(int64_t timeout_ms) override;

  bool available() const;
  size_t backlog_size() const;
  size_t in_flight() const;
  // Sequences in the order their delivery succeeded (kept when
  // record_delivery_order is on; for tests and diagnostics).
  void set_record_delivery_order(bool on);
  const std::vector<uint64_t>& delivery_order() const;
  const DeliveryReport& report() const;

  struct Impl;

 private:
  explicit KafkaChunkProducer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex::ship
