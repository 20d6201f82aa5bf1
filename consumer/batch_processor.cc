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

bool BatchProcessor::StageChunk(const InMessage& m, const proto::LogChunk& chunk, std::string_view bytes,
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

void BatchProcessor::Add(const InMessage& m, ProcessedBatch& batch) {
  ++batch.messages;
  batch.bytes += m.value.size();
  batch.next_offsets[{m.topic, m.partition}] = m.offset + 1;
  proto::ChunkSource source;
  source.set_topic(m.topic);
  source.set_partition(m.partition);
  source.set_offset(m.offset);

  if (const std::string* h = m.Header(kFormatHeader); h && !ParseFormat(*h).ok()) {
    batch.dead_letters.push_back(DeadLetter{m, "bad_format_header", "bad_format_header: " + std::string(kFormatHeader) +
                                                                        ": " + ParseFormat(*h).error().message});
    return;
  }
  const InputFormat format = FormatOf(m);
  if (format == InputFormat::kChunk) {
    auto chunk = DecodeChunk(m.value, options_.decode);
    if (!chunk.ok()) {
      batch.dead_letters.push_back(DeadLetter{m, std::string(ChunkErrcName(chunk.error().code)),
                                              chunk.error().ToString()});
      return;
    }
    StageChunk(m, *chunk, m.value, source, batch, options_.messages_outlive_batch);
    return;
  }
  if (!lines_) {
    batch.dead_letters.push_back(DeadLetter{m, "unsupported_format", "unsupported_format: this server has no line decoder"});
    return;
  }
  auto chunks = lines_->Decode(m, format);
  if (!chunks.ok()) {
    batch.dead_letters.push_back(DeadLetter{m, "unparseable_lines", "unparseable_lines: " + chunks.error().message});
    return;
  }
  // Every chunk passes the validator chunk input passes (ValidateChunk) before
  // any is staged, so a message is indexed whole or dead-lettered whole.
  std::vector<proto::LogChunk> decoded;
  decoded.reserve(chunks->size());
  for (const std::string& bytes : *chunks) {
    auto c = DecodeChunk(bytes, options_.decode);
    if (!c.ok()) {
      batch.dead_letters.push_back(DeadLetter{m, std::string(ChunkErrcName(c.error().code)), c.error().ToString()});
      return;
    }
    decoded.push_back(std::move(*c));
  }
  for (size_t i = 0; i < decoded.size(); ++i) {
    batch.line_chunks.push_back(std::move((*chunks)[i]));
    StageChunk(m, decoded[i], batch.line_chunks.back(), source, batch, true);
  }
}

ChunkIds LineChunkIds(const InMessage& m, uint32_t index) {
  LOGDEX_CHECK(index < kMaxChunksPerLineMessage);
  return ChunkIds{Hash64(m.topic + "/" + std::to_string(m.partition)) | 1,
                  (static_cast<uint64_t>(m.offset) << 16) | index};
}

}  // namespace logdex
