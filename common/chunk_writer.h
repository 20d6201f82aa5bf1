// ChunkWriter: builds a chunk record by record, writing each record straight
// into the payload's wire bytes (a serialized RecordBatch) and its tags into
// the tag summary as they arrive. PackChunk() is this writer over a
// RecordBatch, so there is one chunk encoder.
//
// Why by hand: protobuf's generated code needs a LogRecord object (and a Tag
// object per tag) per record, then a size pass and a serialize pass; for
// JSON lines of ten fields that was most of `logdex ship`'s time. The bytes
// written here are the protobuf wire format of proto/logdex.proto, the same
// bytes SerializeAsString would write for the same RecordBatch (a test holds
// them equal), and they are read back by the generated parser.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/chunk_codec.h"
#include "common/tag_view.h"

namespace logdex {

class ChunkWriter {
 public:
  // `summarize_tags`: whether Finish writes a TagSummary (PackOptions); it
  // leaves out one larger than kMaxTagSummaryShare of the compressed
  // payload, or of the records' uncompressed bytes at some point past the
  // chunk's first 8 KiB (then it stops building it). The summary holds each
  // distinct tag among each record's first kMaxIndexedTagsPerRecord once, in
  // the order first seen.
  explicit ChunkWriter(bool summarize_tags = true);
  ~ChunkWriter();
  ChunkWriter(ChunkWriter&&) noexcept;
  ChunkWriter& operator=(ChunkWriter&&) noexcept;

  // Appends one record. `lead` tags come before `tags` (the re-stamp tag
  // goes first, among the tags the indexer indexes). `body_bytes`: the
  // record's RecordBodyBytes() of these same arguments, for a caller that
  // needed them first (the writer aborts after writing if they differ).
  void Add(int64_t ts_ms, uint32_t severity, std::string_view message, std::span<const TagView> lead,
           std::span<const TagView> tags, size_t body_bytes);
  void Add(int64_t ts_ms, uint32_t severity, std::string_view message, std::span<const TagView> lead,
           std::span<const TagView> tags) {
    Add(ts_ms, severity, message, lead, tags, RecordBodyBytes(ts_ms, severity, message, lead, tags));
  }
  void Add(int64_t ts_ms, uint32_t severity, std::string_view message, std::span<const TagView> tags) {
    Add(ts_ms, severity, message, {}, tags);
  }

  // Appends one record already serialized as a LogRecord (its body, without
  // the field key and length): PackChunk's path, which keeps whatever fields
  // a newer producer added. `ts_ms`, `severity` and `tags` are the record's
  // own, for the header and the summary.
  void AddSerialized(int64_t ts_ms, uint32_t severity, std::string_view record, std::span<const TagView> tags);

  // The bytes AddSerialized() appends to the payload for this record body.
  static size_t SerializedRecordBytes(std::string_view record);

  // The size of this record's serialized LogRecord, without its field key
  // and length: what Add() takes as `body_bytes`.
  static size_t RecordBodyBytes(int64_t ts_ms, uint32_t severity, std::string_view message,
                                std::span<const TagView> lead, std::span<const TagView> tags);
  // The bytes Add() appends to the payload for a record of `body_bytes`.
  static size_t RecordBytes(size_t body_bytes);

  size_t records() const { return records_; }
  // The serialized RecordBatch so far (before compression).
  size_t payload_bytes() const { return payload_.size(); }

  // Appends the serialized LogChunk of the records added since the last
  // Finish to `*out` (see PackChunk for the header's fields) and starts a new
  // chunk; the payload buffer keeps its capacity. `options.summarize_tags` is
  // ignored (the constructor's choice holds). `scratch` holds the compressed
  // payload on the way (writers of one thread may share one); null: the
  // writer's own. With CODEC_ZSTD_COLUMNS, records the columns cannot hold
  // (RecordsToColumns refuses them) are written with CODEC_ZSTD instead,
  // and the header says so.
  void Finish(std::string_view app, std::string_view host, const PackOptions& options, std::string* out,
              std::string* scratch = nullptr);

  // Drops the records added since the last Finish (a chunk given up on);
  // the buffers keep their capacity.
  void Discard();

 private:
  struct Summary;
  // The index of the summary entry for key=value, added if new.
  uint32_t Summarize(std::string_view key, std::string_view value);
  void Account(int64_t ts_ms, uint32_t severity, std::span<const TagView> lead, std::span<const TagView> tags);

  std::string payload_;  // a serialized RecordBatch
  size_t records_ = 0;
  uint32_t severity_ = kMixedSeverity;
  int64_t first_ts_ = 0, last_ts_ = 0;
  std::unique_ptr<Summary> summary_;  // null: no summary
  // This chunk's summary was given up on: too large for its records (Account).
  bool summary_given_up_ = false;
  static constexpr size_t kSummaryCheckBytes = 8 << 10;
  // The summary entry of the last record's tag at each position (records of
  // a stream tend to repeat their keys, and many values): a cheap check first.
  std::vector<uint32_t> last_at_;
  std::string compressed_;
  std::string columns_;  // CODEC_ZSTD_COLUMNS: the payload by columns (common/record_columns.h)
};

}  // namespace logdex
