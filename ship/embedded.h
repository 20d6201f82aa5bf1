// EmbeddedShipper: the chunker as a library, for an application that logs
// straight into logdex chunks instead of writing lines for `logdex ship`.
//
//   auto seq = ship::SequenceAllocator::Open(state_dir);           // or InMemory(RandomProducerId())
//   auto kafka = ship::KafkaChunkProducer::Create(popts, registry, SystemClock::Instance());
//   ship::EmbeddedShipper logs(copts, **seq, **kafka, SystemClock::Instance());
//   logs.Log(Severity::kError, "payment failed", {{"order", "42"}});
//   ...
//   ship::DeliveryReport r = logs.Close(30'000);
//
// Thread-safety: Log()/Add()/Tick()/Close() may be called from any thread;
// one mutex serializes them (the chunker, the sink and the sequence
// allocator are single-threaded). With `background` on, a thread calls
// Tick() every tick_ms (real time) so lingering chunks and Kafka delivery
// reports are served without the application's help; with it off the
// application (or a test with a ManualClock) calls Tick().
// The allocator, sink and clock must outlive the shipper.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "parse/record.h"
#include "ship/chunk_sink.h"
#include "ship/chunker.h"
#include "ship/sequence.h"

namespace logdex::ship {

class EmbeddedShipper {
 public:
  EmbeddedShipper(ChunkerOptions options, SequenceAllocator& sequences, ChunkSink& sink, const Clock& clock,
                  bool background = true, int64_t tick_ms = 10);
  ~EmbeddedShipper();  // Close(0) if not closed

  // A record on the default stream, stamped with the clock's time unless
  // `ts_ms` is given. Tag keys are sanitized (parsers.h rule).
  Status Log(Severity severity, std::string_view message, std::initializer_list<parse::TagView> tags = {},
             std::optional<int64_t> ts_ms = std::nullopt);
  Status Add(const parse::RecordView& record);
  // Flushes lingering chunks and serves the sink.
  Status Tick();
  // Flushes everything, waits up to `timeout_ms` for delivery, stops the
  // background thread. Later calls return the same report.
  DeliveryReport Close(int64_t timeout_ms);

  ChunkerStats stats() const;

 private:
  void Loop(int64_t tick_ms);

  mutable std::mutex mu_;
  Chunker chunker_;
  ChunkSink& sink_;
  const Clock& clock_;
  bool closed_ = false;
  DeliveryReport report_;
  std::vector<parse::TagView> tags_;
  std::vector<std::string> key_buffers_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace logdex::ship
