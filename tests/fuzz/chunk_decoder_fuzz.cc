// libFuzzer target: any bytes given to the chunk decoder either decode or
// fail with a ChunkError; nothing crashes, leaks or reads out of bounds; and
// DecodeChunkView (no payload copy) gives DecodeChunk's verdict and header;
// VerifyRecords and ViewRecords give UnpackRecords' verdict (and records);
// the records-by-columns reader (CODEC_ZSTD_COLUMNS) holds to its size.
// With LOGDEX_FUZZ_SEED_DIR set, it first writes valid chunks made by the
// real encoder there, as a seed corpus.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "common/chunk_codec.h"
#include "common/crc32c.h"
#include "common/record_columns.h"
#include "common/severity.h"

namespace {

constexpr int64_t kNow = 1'800'000'000'000;

void WriteSeeds(const std::string& dir) {
  for (int n : {0, 1, 3, 40}) {
    for (logdex::proto::Codec codec :
         {logdex::proto::CODEC_SNAPPY, logdex::proto::CODEC_NONE, logdex::proto::CODEC_ZSTD,
          logdex::proto::CODEC_ZSTD_COLUMNS}) {
      logdex::proto::RecordBatch batch;
      for (int i = 0; i < n; ++i) {
        auto* r = batch.add_records();
        r->set_ts_ms(kNow - 1000 + i);
        r->set_severity(logdex::SeverityCode(i % 7 == 3 ? logdex::Severity::kError : logdex::Severity::kInfo));
        r->set_message("seed record " + std::to_string(i) + " with a message");
        if (i % 2) {
          auto* t = r->add_tags();
          t->set_key("k");
          t->set_value(std::to_string(i % 3));
        }
      }
      logdex::PackOptions po;
      po.codec = codec;
      po.sequence = static_cast<uint64_t>(n);
      std::ofstream(dir + "/seed-" + std::to_string(n) + "-" + logdex::proto::Codec_Name(codec), std::ios::binary)
          << logdex::PackChunk("app", "host", batch, po).SerializeAsString();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LOGDEX_FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const logdex::ManualClock clock(kNow);
  logdex::DecodeOptions options;
  options.clock = &clock;
  options.max_uncompressed_bytes = 1 << 20;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto check = [&](const logdex::proto::LogChunk& chunk) {
    auto records = logdex::UnpackRecords(chunk, options);
    if (records.ok() && static_cast<uint64_t>(records->records_size()) != chunk.record_count()) __builtin_trap();
    // The ingest check (indexer.verify: full) walks the records without
    // building them: it passes exactly what the parser passes.
    std::string scratch;
    if (logdex::VerifyRecords(chunk, options, &scratch).ok() != records.ok()) __builtin_trap();
    // Queries read the records in place: the same verdict and the records
    // the parser builds, field for field.
    logdex::RecordViews views;
    if (logdex::ViewRecords(logdex::ChunkRef::Of(chunk), options, scratch, views).ok() != records.ok()) __builtin_trap();
    if (records.ok()) {
      if (views.records.size() != static_cast<size_t>(records->records_size())) __builtin_trap();
      for (int i = 0; i < records->records_size(); ++i) {
        const auto& want = records->records(i);
        const auto& got = views.records[static_cast<size_t>(i)];
        const auto tags = views.TagsOf(got);
        if (got.ts_ms != want.ts_ms() || got.severity != want.severity() || got.message != want.message() ||
            tags.size() != static_cast<size_t>(want.tags_size())) {
          __builtin_trap();
        }
        for (int t = 0; t < want.tags_size(); ++t) {
          if (tags[static_cast<size_t>(t)].key != want.tags(t).key() ||
              tags[static_cast<size_t>(t)].value != want.tags(t).value()) {
            __builtin_trap();
          }
        }
      }
    }
    // The stream check and the decompressor agree: a payload VerifyPayload
    // passes always decompresses (its records may still be wrong).
    const bool stream_ok = logdex::VerifyPayload(chunk, options, logdex::PayloadCheck::kStream).ok();
    const bool bad_stream = !records.ok() && (records.error().code == logdex::ChunkErrc::kBadSnappy ||
                                              records.error().code == logdex::ChunkErrc::kBadZstd ||
                                              records.error().code == logdex::ChunkErrc::kTooLarge);
    if (stream_ok && bad_stream) __builtin_trap();
    // zstd is strict on both paths (snappy's reader tolerates a wrong
    // uncompressed_size that VerifyPayload refuses: stored chunks have it).
    if (records.ok() && !stream_ok &&
        (chunk.codec() == logdex::proto::CODEC_ZSTD || chunk.codec() == logdex::proto::CODEC_ZSTD_COLUMNS)) {
      __builtin_trap();
    }
  };
  // As received.
  auto chunk = logdex::DecodeChunk(bytes, options);
  if (chunk.ok()) check(*chunk);
  // The ingest path's decoder, which does not copy the payload, agrees: the
  // same verdict and reason, the same header, the same payload bytes.
  auto view = logdex::DecodeChunkView(bytes, options);
  if (view.ok() != chunk.ok()) __builtin_trap();
  if (!chunk.ok() && view.error().code != chunk.error().code) __builtin_trap();
  if (chunk.ok()) {
    if (view->payload != chunk->payload()) __builtin_trap();
    logdex::proto::LogChunk header = *chunk;
    header.clear_payload();
    if (view->header.SerializeAsString() != header.SerializeAsString()) __builtin_trap();
  }
  // The columns' reader on the bytes as they come (a zstd frame keeps most
  // mutations from reaching it): the first two bytes are the records' size.
  // What it gives is exactly that size, and laid out again reads back to it.
  if (size >= 2) {
    const uint64_t records_size = data[0] | static_cast<uint64_t>(data[1]) << 8;
    std::string records, columns, again;
    if (logdex::ColumnsToRecords(bytes.substr(2), records_size, &records)) {
      if (records.size() != records_size) __builtin_trap();
      if (logdex::RecordsToColumns(records, &columns) &&
          (!logdex::ColumnsToRecords(columns, records.size(), &again) || again != records)) {
        __builtin_trap();
      }
    }
  }
  // Re-signed, so that mutated payloads get past the crc to the decompressor and parser.
  logdex::proto::LogChunk parsed;
  if (!parsed.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return 0;
  parsed.set_payload_crc32c(logdex::Crc32c(parsed.payload()));
  if (logdex::ValidateChunk(parsed, options).ok()) check(parsed);
  return 0;
}
