#include "consumer/batch_processor.h"

#include "common/defaults.h"
#include "common/ids.h"

namespace logdex {

BatchProcessor::BatchProcessor(Indexer& indexer, BatchProcessorOptions options, LineDecoder* lines)
    : indexer_(indexer), options_(std::move(options)), lines_(lines) {}

Result<InputFormat> BatchProcessor::ParseFormat(std::string_view name) {
  if (name == "chunk") return InputFormat::kChunk;
  if (name == "json") return InputFormat::kJson;
  if (name == "text") return InputFormat::kText;
  return Error{Errc::kInvalidArgument, "unknown format '" + std::string(name) + "' (chunk, json or text)"};
}

InputFormat BatchProcessor::FormatOf(const InMessage& m) const {
  if (const std::string* h = m.Header(kFormatHeader)) {
    auto f = ParseFormat(*h);
    if (f.ok()) return *f;
  }
  auto it = options_.topic_formats.find(m.topic);
  return it == options_.topic_formats.end() ? InputFormat::kChunk : it->second;
}

bool BatchProcessor::StageChunk(const InMessage& m, ChunkRef chunk, std::string_view bytes,
                                const proto::ChunkSource& source, ProcessedBatch& batch, bool bytes_outlive_batch) {
  // Stage() fails (bad records) before any observer adds a row.
  auto staged = indexer_.Stage(chunk, bytes, source, batch.writes, bytes_outlive_batch, m.timestamp_ms);
  if (!staged.ok()) {
    batch.dead_letters.push_back(
        DeadLetter{m, std::string(ChunkErrcName(staged.error().code)), staged.error().ToString()});
    return false;
  }
  if (!staged->store_failure.ok() && batch.failed.ok()) {
    batch.failed = Status(staged->store_failure.code(), "indexing: " + staged->store_failure.message());
  }
  ++batch.chunks;
  batch.records += staged->records;
  return true;
}

DecodedMessage BatchProcessor::Decode(const InMessage& m, ProcessedBatch& batch) {
  ++batch.messages;
  batch.bytes += m.value.size();
  batch.next_offsets[{m.topic, m.partition}] = m.offset + 1;
  DecodedMessage d;
  d.message = &m;
  d.source.set_topic(m.topic);
  d.source.set_partition(m.partition);
  d.source.set_offset(m.offset);
  auto dead = [&](std::string reason, std::string description) {
    d.dead.emplace(std::move(reason), std::move(description));
    d.chunks.clear();
    d.bytes.clear();
    return std::move(d);
  };

  if (const std::string* h = m.Header(kFormatHeader); h && !ParseFormat(*h).ok()) {
    return dead("bad_format_header",
                "bad_format_header: " + std::string(kFormatHeader) + ": " + ParseFormat(*h).error().message);
  }
  const InputFormat format = FormatOf(m);
  if (format == InputFormat::kChunk) {
    auto chunk = DecodeChunkView(m.value, options_.decode);
    if (!chunk.ok()) return dead(std::string(ChunkErrcName(chunk.error().code)), chunk.error().ToString());
    d.chunks.push_back(std::move(*chunk));
    d.bytes.push_back(m.value);
    d.bytes_outlive_batch = options_.messages_outlive_batch;
    return d;
  }
  if (!lines_) return dead("unsupported_format", "unsupported_format: this server has no line decoder");
  auto chunks = lines_->Decode(m, format);
  if (!chunks.ok()) return dead("unparseable_lines", "unparseable_lines: " + chunks.error().message);
  // Every chunk passes the validator chunk input passes (ValidateChunk) before
  // any is staged, so a message is indexed whole or dead-lettered whole. The
  // views point into line_chunks, whose strings never move.
  const size_t kept = batch.line_chunks.size();
  for (std::string& bytes : *chunks) {
    const std::string& owned = batch.line_chunks.emplace_back(std::move(bytes));
    auto c = DecodeChunkView(owned, options_.decode);
    if (!c.ok()) {
      batch.line_chunks.resize(kept);
      return dead(std::string(ChunkErrcName(c.error().code)), c.error().ToString());
    }
    d.chunks.push_back(std::move(*c));
    d.bytes.push_back(owned);
  }
  d.bytes_outlive_batch = true;
  return d;
}

void BatchProcessor::Stage(ProcessedBatch& batch, size_t first) {
  std::vector<ChunkToStage> ahead;
  for (size_t i = first; i < batch.decoded.size(); ++i) {
    for (const ChunkView& c : batch.decoded[i].chunks) ahead.push_back(ChunkToStage{&c.header, &batch.decoded[i].source});
  }
  indexer_.Prefetch(ahead);
  for (size_t i = first; i < batch.decoded.size(); ++i) {
    const DecodedMessage& d = batch.decoded[i];
    if (d.dead) {
      batch.dead_letters.push_back(DeadLetter{*d.message, d.dead->first, d.dead->second});
      continue;
    }
    for (size_t j = 0; j < d.chunks.size(); ++j) {
      StageChunk(*d.message, d.chunks[j].ref(), d.bytes[j], d.source, batch, d.bytes_outlive_batch);
    }
  }
}

void BatchProcessor::Add(std::span<const InMessage> messages, ProcessedBatch& batch) {
  const size_t first = batch.decoded.size();
  for (const InMessage& m : messages) batch.decoded.push_back(Decode(m, batch));
  Stage(batch, first);
}

void BatchProcessor::Restage(ProcessedBatch& batch) {
  batch.writes.Clear();
  batch.dead_letters.clear();
  batch.chunks = 0;
  batch.records = 0;
  batch.failed = Status::Ok();
  Stage(batch, 0);
}

ChunkIds LineChunkIds(const InMessage& m, uint32_t index) {
  LOGDEX_CHECK(index < kMaxChunksPerLineMessage);
  return ChunkIds{Hash64(m.topic + "/" + std::to_string(m.partition)) | 1,
                  (static_cast<uint64_t>(m.offset) << 16) | index};
}

}  // namespace logdex
