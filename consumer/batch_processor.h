// BatchProcessor: turns a batch of Kafka messages into one store write batch
// (chunk rows, index rows, meta rows and, through the alert observer, outbox
// rows) plus the dead letters of messages that could not be decoded. A batch
// is decoded once and staged: all its messages' reads of the store are made
// at once, and a staging that failed (a store read) is staged again without
// decoding again. It knows
// nothing of Kafka clients: GroupConsumer feeds it and does the I/O.
//
// Formats: the message header `logdex-format` (chunk | json | text) wins;
// else the topic's configured format; else chunk. JSON and text lines are
// turned into chunks by a LineDecoder (from the shipper's parsers), with
// deterministic chunk ids derived from (topic, partition, offset), so replays
// rewrite the same rows.
//
// Not thread-safe: one processor per consumer loop.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/chunk_codec.h"
#include "consumer/message.h"
#include "consumer/topic_partition.h"
#include "indexer/indexer.h"

namespace logdex {

enum class InputFormat { kChunk, kJson, kText };

// Chunks made from one message of lines: at most this many (the index is
// the low 16 bits of the sequence, below the message's offset).
inline constexpr uint32_t kMaxChunksPerLineMessage = 1u << 16;

// The producer id and sequence of the `index`-th chunk made from a message
// of lines: derived from (topic, partition, offset, index), so a replay of
// the message rewrites the same rows. `index` < kMaxChunksPerLineMessage.
struct ChunkIds {
  uint64_t producer_id = 0;
  uint64_t sequence = 0;
};
ChunkIds LineChunkIds(const InMessage& message, uint32_t index);

// Converts a message of JSON or text lines into chunks, one per (app, host,
// severity), as serialized LogChunks, the i-th named by LineChunkIds(message,
// i). Errors are reasons for the dead-letter topic.
class LineDecoder {
 public:
  virtual ~LineDecoder() = default;
  virtual Result<std::vector<std::string>> Decode(const InMessage& message, InputFormat format) = 0;
};

// A message that goes to the dead-letter topic, and why.
struct DeadLetter {
  InMessage message;
  std::string reason;       // stable snake_case name, a metric label
  std::string description;  // the full error, for the logdex-error header
};

// One message as decoded (BatchProcessor::Add): its chunks, or why it goes
// to the dead-letter topic. Kept with its batch, so that a batch staged again
// (BatchProcessor::Restage) is not decoded again.
struct DecodedMessage {
  const InMessage* message = nullptr;  // outlives the batch (see Add)
  proto::ChunkSource source;
  // Its chunks, each a header and a view of its payload in `bytes` (the
  // message's value, or line_chunks): no payload is copied.
  std::vector<ChunkView> chunks;
  std::vector<std::string_view> bytes;  // each chunk as received
  bool bytes_outlive_batch = false;     // main rows may borrow `bytes`
  // Set: it could not be decoded, and why (DeadLetter::reason, description).
  std::optional<std::pair<std::string, std::string>> dead;
};

struct ProcessedBatch {
  // What staging made (BatchProcessor::Restage makes it again).
  WriteBatch writes;
  std::vector<DeadLetter> dead_letters;  // in message order
  uint64_t chunks = 0;
  uint64_t records = 0;
  // Not OK when the batch cannot be written as it is (an observer, such as
  // alert staging, could not read the store): the consumer settles it as
  // unwritten and stages it again (BatchProcessor::Restage).
  Status failed;

  // What decoding made, once per message.
  std::vector<DecodedMessage> decoded;
  // Per (topic, partition): the offset to commit (last processed + 1).
  std::map<TopicPartition, int64_t> next_offsets;
  uint64_t messages = 0;
  uint64_t bytes = 0;
  // Chunks made from lines: main rows borrow their bytes, which live as
  // long as `writes` (a deque never moves its elements).
  std::deque<std::string> line_chunks;

  void Clear() { *this = ProcessedBatch{}; }
};

struct BatchProcessorOptions {
  std::map<std::string, InputFormat> topic_formats;
  DecodeOptions decode;
  // The caller keeps every message given to Add() (and so its value's
  // bytes) alive until the ProcessedBatch is written or dropped, as
  // GroupConsumer does: main rows then borrow the chunk bytes instead of
  // copying them.
  bool messages_outlive_batch = false;
};

class BatchProcessor {
 public:
  // `indexer` must outlive the processor; `lines` may be null. Everything a
  // stored chunk yields, alerts included, comes from the indexer's observers.
  BatchProcessor(Indexer& indexer, BatchProcessorOptions options, LineDecoder* lines);

  // Adds messages to `batch`: each is decoded, then all are staged (their
  // rows, or a dead letter each). Before staging, the indexer's observers
  // read the rows they need for all of the messages' chunks at once
  // (Indexer::Prefetch). The messages must outlive `batch`.
  void Add(std::span<const InMessage> messages, ProcessedBatch& batch);
  void Add(const InMessage& message, ProcessedBatch& batch) { Add(std::span(&message, 1), batch); }

  // Stages every message of `batch` again, after a staging that failed
  // (batch.failed) was settled as unwritten: what staging made is replaced;
  // nothing is decoded again.
  void Restage(ProcessedBatch& batch);

  // After the batch was written (or not): see Indexer::Settle.
  void Settle(bool written) { indexer_.Settle(written); }

  static Result<InputFormat> ParseFormat(std::string_view name);

 private:
  InputFormat FormatOf(const InMessage& m) const;
  DecodedMessage Decode(const InMessage& m, ProcessedBatch& batch);
  // Stages batch.decoded from `first` on.
  void Stage(ProcessedBatch& batch, size_t first);
  // Stages one decoded chunk; false (and a dead letter) when its records are bad.
  bool StageChunk(const InMessage& m, ChunkRef chunk, std::string_view bytes,
                  const proto::ChunkSource& source, ProcessedBatch& batch, bool bytes_outlive_batch);

  Indexer& indexer_;
  BatchProcessorOptions options_;
  LineDecoder* lines_;
};

}  // namespace logdex
