// The body of the JSON-lines and text-lines libFuzzer targets: the bytes are
// one Kafka message value marked `logdex-format: json|text`, taken through
// the path `logdex serve` runs on consumer input:
//   ShipLineDecoder::Decode (ship's LineParser + RecordAssembler)
//   -> ValidateChunk of every chunk made -> BatchProcessor::Add
//   -> Indexer::Stage into a WriteBatch (store reads answer "absent"),
// and, line by line, ship's LineParser (the format itself and kAuto), as
// `logdex ship --format json|auto` parses a file.
// Invariants (a violation traps, so libFuzzer saves the input):
// - nothing crashes, leaks or reads out of bounds (ASan, UBSan);
// - Add() either stages rows or dead-letters the message with a reason, never
//   both and never neither, and always advances the partition's offset;
// - a chunk the decoder made that passes ValidateChunk also unpacks, with
//   record_count records: a stored chunk is never one queries skip as corrupt.
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
#include "ship/parsers.h"
#include "store/table_store.h"

namespace logdex::fuzz {

inline constexpr int64_t kNowMs = 1'800'000'000'000;  // 2027-01-15

// A store with no rows that accepts every write: Stage() only reads it (meta).
class EmptyStore final : public TableStore {
 public:
  Status CreateTable(std::string_view, const TableOptions&) override { return Status::Ok(); }
  bool HasTable(std::string_view) const override { return true; }
  Status Write(const WriteBatch&) override { return Status::Ok(); }
  Result<std::optional<std::string>> Get(std::string_view, std::string_view) override {
    return std::optional<std::string>();
  }
  Status Scan(const ScanSpec&, const RowVisitor&) override { return Status::Ok(); }
  Status FuzzyScan(const FuzzyScanSpec&, const RowVisitor&) override { return Status::Ok(); }
  StoreCounters counters() const override { return {}; }
};

class LinesTarget {
 public:
  LinesTarget()
      : clock_(kNowMs),
        indexer_(store_, Options(clock_)),
        decoder_("fuzz-app", "fuzz-host", clock_),
        processor_(indexer_, ProcessorOptions(clock_), &decoder_, nullptr) {
    for (ship::Format f : {ship::Format::kJson, ship::Format::kAuto}) {
      ship::ParserOptions po;
      po.format = f;
      (f == ship::Format::kJson ? json_ : auto_) = ship::LineParser::Create(po, clock_).value();
    }
  }

  void Run(const uint8_t* data, size_t size, InputFormat format) {
    InMessage m;
    m.topic = "fuzz";
    m.partition = 3;
    m.offset = static_cast<int64_t>(++offset_);
    m.timestamp_ms = kNowMs - 1000;
    m.value.assign(reinterpret_cast<const char*>(data), size);
    m.headers.emplace_back("logdex-format", format == InputFormat::kJson ? "json" : "text");

    // The decoder alone: what it makes, once valid, must unpack.
    DecodeOptions decode = ProcessorOptions(clock_).decode;
    auto chunks = decoder_.Decode(m, format);
    if (chunks.ok()) {
      for (proto::LogChunk& c : *chunks) {
        c.set_producer_id(1);
        c.set_sequence(offset_);
        if (!ValidateChunk(c, decode).ok()) continue;
        auto records = UnpackRecords(c, decode);
        if (!records.ok()) __builtin_trap();  // would be stored, then skipped as corrupt
        if (static_cast<uint64_t>(records->records_size()) != c.record_count()) __builtin_trap();
      }
    }

    // The batch path, as the consumer runs it.
    ProcessedBatch batch;
    processor_.Add(m, batch);
    const bool dead = !batch.dead_letters.empty();
    if (dead && (batch.dead_letters.size() != 1 || batch.dead_letters[0].reason.empty())) __builtin_trap();
    if (dead == (batch.chunks > 0)) __builtin_trap();  // indexed whole or dead-lettered whole
    auto next = batch.next_offsets.find({m.topic, m.partition});
    if (next == batch.next_offsets.end() || next->second != m.offset + 1) __builtin_trap();
    processor_.Settle(false);

    // Ship's parsers, line by line, as `logdex ship --format json|auto` reads a file.
    std::string_view rest = m.value;
    ship::ParsedLine line;
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      const std::string_view one = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      (format == InputFormat::kJson ? *json_ : *auto_).Parse(one, &line);
      if (line.message.size() > one.size() && !line.parsed) __builtin_trap();  // unparsed: the line itself
    }
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
  std::unique_ptr<ship::LineParser> json_, auto_;
  uint64_t offset_ = 0;
};

}  // namespace logdex::fuzz
