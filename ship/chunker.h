// Chunker: groups records by stream (app, host, severity), encodes each
// stream's records into a chunk as they arrive (ChunkWriter: zstd or snappy,
// crc32c, tag summary, producer id + sequence) and hands it to a ChunkSink.
//
// A stream's buffer is flushed when the first of these is reached:
//   - max_chunk_bytes of uncompressed record bytes (the serialized
//     RecordBatch; a record that would pass it starts the next chunk);
//   - max_chunk_records records;
//   - linger: the oldest buffered record has waited linger_ms
//     (alert_linger_ms for ERROR and FATAL streams), checked by Poll().
// Time comes from the Clock (monotonic), so tests drive linger with a
// ManualClock.
//
// A record's own app/host (syslog names them) either picks its stream
// (LineIdentity::kStream) or is kept as tags "app"/"host" on the default
// stream (LineIdentity::kTags, the default).
//
// Not thread-safe: one thread calls everything (EmbeddedShipper adds a lock).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/chunk_codec.h"
#include "common/chunk_writer.h"
#include "common/clock.h"
#include "common/result.h"
#include "parse/record.h"
#include "proto/logdex.pb.h"
#include "ship/chunk_sink.h"
#include "ship/sequence.h"

namespace logdex::ship {

enum class LineIdentity { kTags, kStream };

struct ChunkerOptions {
  // Default stream identity; both required (non-empty).
  std::string app;
  std::string host;
  // Flush thresholds (see above). Defaults: 64 KiB, 100000 records, 1 s, 20 ms.
  size_t max_chunk_bytes = 64 * 1024;
  size_t max_chunk_records = 100'000;
  int64_t linger_ms = 1000;
  int64_t alert_linger_ms = 20;
  LineIdentity line_identity = LineIdentity::kTags;
  proto::Codec codec = kDefaultCodec;
  int zstd_level = kDefaultZstdLevel;  // with CODEC_ZSTD
  bool summarize_tags = true;
  // Record times serve would refuse (outside TimestampAccepted with these
  // bounds, at the chunker's clock; the clock field is not used) are replaced
  // by the clock's now and tagged logdex_restamped_from=<the time they had>:
  // a chunk ship makes is never dead-lettered for its times. Counted.
  DecodeOptions time_bounds;
  // Records older than this are counted (past_retention): serve stores them,
  // but queries never reach them. 0: not checked. Default 7 days, serve's
  // default retention.
  int64_t retention_ms = 7ll * 24 * 3600 * 1000;
};

// The Kafka key of a stream: "<app>/<host>/<SEVERITY>". Only used for
// partitioning; consumers read the stream from the chunk header.
std::string StreamKey(std::string_view app, std::string_view host, Severity severity);

struct ChunkerStats {
  uint64_t records = 0;
  uint64_t records_by_severity[6] = {};  // index: order in kAllSeverities
  uint64_t chunks = 0;
  uint64_t uncompressed_bytes = 0;  // serialized RecordBatch bytes
  uint64_t chunk_bytes = 0;         // serialized LogChunk bytes
  uint64_t restamped = 0;           // records whose time serve would refuse, given the clock's now
  uint64_t past_retention = 0;      // records older than retention_ms (stored, never queryable)
};

int SeverityIndex(Severity s);

class Chunker final : public parse::RecordSink {
 public:
  // `sequences`, `sink` and `clock` must outlive the chunker.
  Chunker(ChunkerOptions options, SequenceAllocator& sequences, ChunkSink& sink, const Clock& clock);

  // Buffers a record; flushes its stream if a size/count threshold is reached.
  Status OnRecord(const parse::RecordView& record) override;
  // Flushes every stream whose linger has expired.
  Status Poll();
  // Flushes every non-empty stream.
  Status FlushAll();
  // Milliseconds until the next linger deadline (-1: nothing buffered).
  int64_t MsUntilNextFlush() const;
  size_t buffered_records() const;

  const ChunkerStats& stats() const { return stats_; }
  const ChunkerOptions& options() const { return options_; }

 private:
  struct Stream {
    explicit Stream(bool summarize_tags) : writer(summarize_tags) {}
    std::string app, host;
    Severity severity = Severity::kInfo;
    std::string key;
    ChunkWriter writer;
    std::vector<uint64_t> origins;  // RecordView::origin of the buffered records that have one
    int64_t first_ns = 0;
  };
  Stream* Find(const parse::RecordView& r);
  Status Flush(Stream& s);
  int64_t LingerNs(const Stream& s) const;

  ChunkerOptions options_;
  SequenceAllocator& sequences_;
  ChunkSink& sink_;
  const Clock& clock_;
  std::array<std::unique_ptr<Stream>, 6> default_streams_;
  std::unordered_map<std::string, std::unique_ptr<Stream>> other_streams_;
  std::string lookup_key_;
  std::vector<parse::TagView> tag_scratch_;
  std::string scratch_;
  std::string compressed_;  // every stream's payload on its way through the compressor
  ChunkerStats stats_;
};

}  // namespace logdex::ship
