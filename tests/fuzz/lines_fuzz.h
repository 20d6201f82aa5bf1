// The body of the JSON-lines and text-lines libFuzzer targets: the bytes are
// one Kafka message value marked `logdex-format: json|text`, taken through
// the path `logdex serve` runs on consumer input:
//   ShipLineDecoder::Decode (parse/'s LineParser + RecordAssembler)
//   -> ValidateChunk of every chunk made -> BatchProcessor::Add
//   -> Indexer::Stage into a WriteBatch (store reads answer "absent"),
// whose LineParser (Format::kJson for json, kAuto for text) is the one
// `logdex ship --format json|auto` parses a file with.
// Invariants (a violation traps, so libFuzzer saves the input):
// - nothing crashes, leaks or reads out of bounds (ASan, UBSan);
// - Add() either stages rows or dead-letters the message with a reason, never
//   both and never neither, and always advances the partition's offset;
// - every main row staged holds a chunk that unpacks, with record_count
//   records: a stored chunk is never one that queries skip as corrupt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "consumer/batch_processor.h"
#include "indexer/indexer.h"
#include "server/ingest_adapters.h"
#include "common/row_keys.h"
#include "store/table_store.h"
#include "tests/empty_store.h"

namespace logdex::fuzz {

inline constexpr int64_t kNowMs = 1'800'000'000'000;  // 2027-01-15

// A store with no rows that accepts every write: Stage() only reads it (meta).
using testing::EmptyStore;

class LinesTarget {
 public:
  LinesTarget()
      : clock_(kNowMs),
        indexer_(store_, Options(clock_)),
        decoder_("fuzz-app", "fuzz-host", clock_),
        processor_(indexer_, ProcessorOptions(clock_), &decoder_),
        decode_(Options(clock_).decode) {}

  void Run(const uint8_t* data, size_t size, InputFormat format) {
    InMessage m;
    m.topic = "fuzz";
    m.partition = 3;
    m.offset = static_cast<int64_t>(++offset_);
    m.timestamp_ms = kNowMs - 1000;
    m.value.assign(reinterpret_cast<const char*>(data), size);
    m.headers.emplace_back("logdex-format", format == InputFormat::kJson ? "json" : "text");

    // The batch path, as the consumer runs it.
    ProcessedBatch batch;
    processor_.Add(m, batch);
    const bool dead = !batch.dead_letters.empty();
    if (dead && (batch.dead_letters.size() != 1 || batch.dead_letters[0].reason.empty())) __builtin_trap();
    if (dead == (batch.chunks > 0)) __builtin_trap();  // indexed whole or dead-lettered whole
    auto next = batch.next_offsets.find({m.topic, m.partition});
    if (next == batch.next_offsets.end() || next->second != m.offset + 1) __builtin_trap();
    // Every stored chunk (after the indexer's splits) unpacks, with record_count
    // records: none is one that queries would skip as corrupt.
    for (const WriteBatch::Entry& e : batch.writes.entries()) {
      if (e.table != kMainTable || e.op != WriteBatch::Op::kPut) continue;
      proto::MainRow row;
      if (!row.ParseFromString(e.Value())) __builtin_trap();
      auto records = UnpackRecords(row.chunk(), decode_);
      if (!records.ok()) __builtin_trap();
      if (static_cast<uint64_t>(records->records_size()) != row.chunk().record_count()) __builtin_trap();
    }
    processor_.Settle(false);
  }

 private:
  static IndexerOptions Options(const Clock& clock) {
    IndexerOptions o;
    o.decode.clock = &clock;
    o.decode.max_uncompressed_bytes = 16u << 20;
    return o;
  }
  static BatchProcessorOptions ProcessorOptions(const Clock& clock) {
    BatchProcessorOptions o;
    o.decode = Options(clock).decode;
    return o;
  }

  ManualClock clock_;
  EmptyStore store_;
  Indexer indexer_;
  ShipLineDecoder decoder_;
  BatchProcessor processor_;
  DecodeOptions decode_;
  uint64_t offset_ = 0;
};

}  // namespace logdex::fuzz
