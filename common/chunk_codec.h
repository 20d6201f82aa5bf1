// The chunk codec: packs a stream's records into a LogChunk (the Kafka
// message) and unpacks one with full validation. Every way a received chunk
// can be wrong is a distinct ChunkErrc, so that the consumer can dead-letter
// it with a precise reason.
//
// Decoding is split in two so that the hot path decompresses only when it
// must (docs/ARCHITECTURE.md, "Chunk format"): DecodeChunk() parses and
// checks the header and the payload's crc32c; UnpackRecords() decompresses
// and checks the records.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "common/tag_view.h"
#include "common/zstd_codec.h"
#include "proto/logdex.pb.h"

namespace logdex {

// The format version this build writes. Readers accept any minor version of
// a major they know and reject a newer major.
inline constexpr uint32_t kChunkFormatMajor = 1;
inline constexpr uint32_t kChunkFormatMinor = 0;

// The stream severity of a chunk whose records mix severities.
inline constexpr uint32_t kMixedSeverity = 0;

enum class ChunkErrc {
  kMalformed,           // truncated or garbage protobuf (chunk or payload)
  kUnsupportedVersion,  // format_major missing or newer than this build
  kEmptyApp,
  kEmptyHost,
  kBadCodec,            // a codec this build does not know
  kCrcMismatch,         // payload does not match payload_crc32c
  kBadSnappy,           // payload is not valid snappy
  kBadZstd,             // payload is not one valid zstd frame of the declared size
  kTooLarge,            // uncompressed size over DecodeOptions::max_uncompressed_bytes
  kCountMismatch,       // records in payload != record_count
  kBadTimestamp,        // outside sane bounds, or outside the header's [first, last]
  kBadSeverity,         // not in the code table, or not the stream's severity
};

// A stable snake_case name, used as a metric label and in DLQ headers.
std::string_view ChunkErrcName(ChunkErrc code);

struct ChunkError {
  ChunkErrc code;
  std::string detail;

  // "<name>: <detail>"
  std::string ToString() const;
};

template <class T>
using ChunkResult = Result<T, ChunkError>;

// Tags of a record that may be indexed: its first kMaxIndexedTagsPerRecord
// (a record with 20,000 keys must not write 20,000 index rows). The rest stay
// in the record, found by filtering. PackChunk's tag summary and the
// indexer's own summary both follow this rule.
inline constexpr int kMaxIndexedTagsPerRecord = 64;

// The codec logdex's own writers use: ship's Chunker and serve's line input.
// zstd level 1 (not snappy) since its chunks are 37 % smaller on Loghub text
// and 20 % on JSON lines with random ids, for the same ship CPU on text and
// about 20 % more on JSON, and a chunk unpacks at 70-95 % of snappy's speed
// (README, "Chunk codecs"). PackOptions keeps snappy as its own default: it is the codec
// every reader has known longest, and tests build snappy payloads by hand.
inline constexpr proto::Codec kDefaultCodec = proto::CODEC_ZSTD;

struct PackOptions {
  proto::Codec codec = proto::CODEC_SNAPPY;
  // With CODEC_ZSTD: kMinZstdLevel..kMaxZstdLevel (common/zstd_codec.h).
  int zstd_level = kDefaultZstdLevel;
  uint64_t producer_id = 0;
  uint64_t sequence = 0;
  // Write a TagSummary (distinct key=value pairs of each record's first
  // kMaxIndexedTagsPerRecord tags) into the header, unless it would take
  // more than kMaxTagSummaryShare of the compressed payload's bytes (or of
  // the records' uncompressed bytes past the first 8 KiB: ChunkWriter).
  bool summarize_tags = true;
};

// A tag summary saves the indexer a read of the records, and costs its bytes
// in every stored copy of the chunk. Where the tags vary per record (JSON
// lines with request ids) it outgrows the compressed payload it summarizes
// (`logdex bench ship`'s JSON chunks were 2.85x their size without it), so
// it is left out past this share of the payload (an absent summary means
// "unknown": the indexer reads the tags from the records, which its default
// full check reads anyway). ChunkWriter also gives up building it early.
inline constexpr double kMaxTagSummaryShare = 0.125;

// Packs `batch` (records of one app and host) into a chunk. The stream
// severity is the records' common severity, or kMixedSeverity.
// first/last_ts_ms are the min and max record timestamps (0 when empty).
proto::LogChunk PackChunk(std::string_view app, std::string_view host,
                          const proto::RecordBatch& batch, const PackOptions& options);

struct DecodeOptions {
  // Guard against compression bombs. Default 64 MiB.
  uint64_t max_uncompressed_bytes = 64ull << 20;
  // Timestamps before this are rejected. Default 2000-01-01T00:00:00Z.
  int64_t min_ts_ms = 946'684'800'000;
  // Timestamps more than this ahead of the clock are rejected. Default 1 day.
  int64_t max_future_ms = 24ll * 3600 * 1000;
  // Whose "now" bounds the future; never null.
  const Clock* clock = &SystemClock::Instance();
};

// Whether ValidateChunk accepts a record time at `now_ms`: within
// [min_ts_ms, now_ms + max_future_ms]. ship (Chunker) and serve's line input
// re-stamp a record outside it, so no chunk they make is refused for its time.
inline bool TimestampAccepted(int64_t ts_ms, int64_t now_ms, const DecodeOptions& options) {
  return ts_ms >= options.min_ts_ms && ts_ms <= now_ms + options.max_future_ms;
}

// The tag a re-stamped record carries: the time it had, in ms since the epoch.
inline constexpr std::string_view kRestampedTag = "logdex_restamped_from";

// A chunk's header and its payload, wherever each lives: a LogChunk parsed
// whole (ChunkRef::Of), or a ChunkView, whose payload stays in the bytes it
// was decoded from. The functions below read a chunk through it.
struct ChunkRef {
  const proto::LogChunk& header;  // its payload() is not read
  std::string_view payload;
  static ChunkRef Of(const proto::LogChunk& chunk) { return ChunkRef{chunk, chunk.payload()}; }
};

// A decoded chunk whose payload was not copied: `header` holds every field
// but the payload, and `payload` views it in the decoded bytes, which must
// outlive the view. The ingest path's form: a payload is read once, where
// Kafka delivered it.
struct ChunkView {
  proto::LogChunk header;  // payload() empty
  std::string_view payload;
  ChunkRef ref() const { return ChunkRef{header, payload}; }
};

// Parses a serialized chunk and validates its header and payload crc.
ChunkResult<proto::LogChunk> DecodeChunk(std::string_view bytes, const DecodeOptions& options);

// DecodeChunk without copying the payload: the same bytes pass or fail with
// the same error, and the view's header is DecodeChunk's chunk without its
// payload (protobuf's rules kept: of several payload fields the last counts).
ChunkResult<ChunkView> DecodeChunkView(std::string_view bytes, const DecodeOptions& options);

// Validates a parsed chunk's header and payload crc (what DecodeChunk checks
// after parsing).
ChunkResult<bool> ValidateChunk(ChunkRef chunk, const DecodeOptions& options);
inline ChunkResult<bool> ValidateChunk(const proto::LogChunk& chunk, const DecodeOptions& options) {
  return ValidateChunk(ChunkRef::Of(chunk), options);
}

// How far VerifyPayload looks into a compressed payload.
enum class PayloadCheck {
  // The stream's length header: it must parse, equal uncompressed_size (by
  // columns: at most that) and be within the limit. Costs nothing; with the
  // crc it catches truncation, corruption in transit and garbage.
  kLengthHeader,
  // Also one pass over the whole stream without keeping the output (snappy's
  // IsValidCompressedBuffer; zstd decompressed through a fixed window):
  // catches a broken compressor whose output the producer signed. About as
  // costly as decompressing (~16 us per 32 KiB of snappy). By columns
  // (CODEC_ZSTD_COLUMNS) it decompresses and reads the columns back into
  // the records, into a buffer of its own.
  kStream,
};

// Checks that a validated chunk's payload is well-formed for its codec and
// expands to uncompressed_size (within the limit), without keeping what it
// decompresses: the check for chunks the hot path does not unpack.
ChunkResult<bool> VerifyPayload(ChunkRef chunk, const DecodeOptions& options,
                                PayloadCheck check = PayloadCheck::kStream);
inline ChunkResult<bool> VerifyPayload(const proto::LogChunk& chunk, const DecodeOptions& options,
                                       PayloadCheck check = PayloadCheck::kStream) {
  return VerifyPayload(ChunkRef::Of(chunk), options, check);
}

// Decompresses a validated chunk's payload and checks its records as
// UnpackRecords does (size limit, count, timestamps within the header's
// range, severities, a well-formed RecordBatch) without building them: one
// pass over the protobuf wire bytes, for the ingest check of chunks the hot
// path does not otherwise unpack (indexer.verify: full). Unknown fields are
// skipped as the parser skips them (groups included, without recursion).
// `scratch` is reused for the decompressed bytes.
ChunkResult<bool> VerifyRecords(ChunkRef chunk, const DecodeOptions& options, std::string* scratch);
inline ChunkResult<bool> VerifyRecords(const proto::LogChunk& chunk, const DecodeOptions& options,
                                       std::string* scratch) {
  return VerifyRecords(ChunkRef::Of(chunk), options, scratch);
}

// A record read in place from a chunk's decompressed payload: its bytes are
// views into the payload (or the scratch buffer it was decompressed into).
struct RecordView {
  int64_t ts_ms = 0;
  uint32_t severity = 0;
  std::string_view message;
  uint32_t first_tag = 0;  // its tags: RecordViews::tags[first_tag, first_tag + tag_count)
  uint32_t tag_count = 0;
  // The record's own LogRecord bytes as stored (fields this build does not
  // know included): what the compactor writes again (ChunkWriter::AddSerialized).
  std::string_view wire;
};
struct RecordViews {
  std::vector<RecordView> records;
  std::vector<TagView> tags;  // every record's, in order

  std::span<const TagView> TagsOf(const RecordView& r) const { return {tags.data() + r.first_tag, r.tag_count}; }
};

// UnpackRecords without building the records: decompresses a validated
// chunk's payload (into `scratch`; a payload of codec none is read where it
// is) and reads its records in place into `out` (cleared first), with
// UnpackRecords' checks and verdict (its reason too where one thing is
// wrong: the walk checks each record as it reads it, so with several faults
// it may name another) and the records its parse gives (of a repeated
// singular field the last counts; unknown fields are skipped), held to it
// by ChunkCodecTest and the chunk_decoder fuzz target. For readers that
// keep few of the records they read (a query filters them) or copy their
// bytes elsewhere (the compactor): the parser allocates every message and
// tag. The views
// stay valid while `scratch` and the chunk's payload are unchanged; reuse
// `out` and `scratch` across chunks.
ChunkResult<bool> ViewRecords(ChunkRef chunk, const DecodeOptions& options, std::string& scratch, RecordViews& out);

// Decompresses and parses a validated chunk's payload and checks its
// records: size limit, count, timestamps within the header's range, and
// severities. `scratch` is reused for the decompressed bytes.
ChunkResult<proto::RecordBatch> UnpackRecords(ChunkRef chunk, const DecodeOptions& options,
                                              std::string* scratch = nullptr);
inline ChunkResult<proto::RecordBatch> UnpackRecords(const proto::LogChunk& chunk, const DecodeOptions& options,
                                                     std::string* scratch = nullptr) {
  return UnpackRecords(ChunkRef::Of(chunk), options, scratch);
}

}  // namespace logdex
