#include "common/chunk_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <snappy.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "common/chunk_writer.h"
#include "common/crc32c.h"
#include "common/record_columns.h"
#include "common/severity.h"
#include "common/zstd_codec.h"

namespace logdex {
namespace {

ChunkError Fail(ChunkErrc code, std::string detail) { return ChunkError{code, std::move(detail)}; }

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

std::string_view ChunkErrcName(ChunkErrc code) {
  switch (code) {
    case ChunkErrc::kMalformed: return "malformed";
    case ChunkErrc::kUnsupportedVersion: return "unsupported_version";
    case ChunkErrc::kEmptyApp: return "empty_app";
    case ChunkErrc::kEmptyHost: return "empty_host";
    case ChunkErrc::kBadCodec: return "bad_codec";
    case ChunkErrc::kCrcMismatch: return "crc_mismatch";
    case ChunkErrc::kBadSnappy: return "bad_snappy";
    case ChunkErrc::kBadZstd: return "bad_zstd";
    case ChunkErrc::kTooLarge: return "too_large";
    case ChunkErrc::kCountMismatch: return "count_mismatch";
    case ChunkErrc::kBadTimestamp: return "bad_timestamp";
    case ChunkErrc::kBadSeverity: return "bad_severity";
  }
  return "unknown";
}

std::string ChunkError::ToString() const { return std::string(ChunkErrcName(code)) + ": " + detail; }

proto::LogChunk PackChunk(std::string_view app, std::string_view host, const proto::RecordBatch& batch,
                          const PackOptions& options) {
  // Each record as protobuf serializes it: a record from a newer producer
  // keeps the fields this build does not know.
  ChunkWriter writer(options.summarize_tags);
  std::vector<TagView> tags;
  std::string record;
  for (const proto::LogRecord& r : batch.records()) {
    tags.clear();
    for (const proto::Tag& t : r.tags()) tags.push_back({t.key(), t.value()});
    record.clear();
    r.AppendToString(&record);
    writer.AddSerialized(r.ts_ms(), r.severity(), record, tags);
  }
  std::string bytes;
  writer.Finish(app, host, options, &bytes);
  proto::LogChunk chunk;
  LOGDEX_CHECK(chunk.ParseFromString(bytes));
  return chunk;
}

ChunkResult<bool> ValidateChunk(ChunkRef r, const DecodeOptions& o) {
  const proto::LogChunk& c = r.header;
  if (c.format_major() == 0) return Fail(ChunkErrc::kUnsupportedVersion, "format_major is missing");
  if (c.format_major() > kChunkFormatMajor) {
    return Fail(ChunkErrc::kUnsupportedVersion,
                "format " + Num(c.format_major()) + "." + Num(c.format_minor()) +
                    " is newer than this build reads (" + Num(kChunkFormatMajor) + ".x)");
  }
  if (c.app().empty()) return Fail(ChunkErrc::kEmptyApp, "app is empty");
  if (c.host().empty()) return Fail(ChunkErrc::kEmptyHost, "host is empty");
  if (c.severity() != kMixedSeverity && !SeverityFromCode(c.severity())) {
    return Fail(ChunkErrc::kBadSeverity, "stream severity " + Num(c.severity()) + " is not a known code");
  }
  if (c.codec() != proto::CODEC_NONE && c.codec() != proto::CODEC_SNAPPY && c.codec() != proto::CODEC_ZSTD &&
      c.codec() != proto::CODEC_ZSTD_COLUMNS) {
    return Fail(ChunkErrc::kBadCodec, "codec " + Num(c.codec()) + " is not supported");
  }
  if (c.uncompressed_size() > o.max_uncompressed_bytes) {
    return Fail(ChunkErrc::kTooLarge, "declared uncompressed size " + Num(c.uncompressed_size()) +
                                          " exceeds the limit of " + Num(o.max_uncompressed_bytes));
  }
  // A chunk holds at least one record: 0 is proto3's default, the mark of a
  // producer that forgot the field, and storing nothing for it would lose
  // whatever its payload holds without a trace.
  if (c.record_count() == 0) {
    return Fail(ChunkErrc::kCountMismatch, "record_count is 0 (unset?): a chunk holds at least one record");
  }
  {
    // Both ends TimestampAccepted (every record lies between them).
    const int64_t max_ts = o.clock->NowMs() + o.max_future_ms;
    if (c.first_ts_ms() > c.last_ts_ms()) {
      return Fail(ChunkErrc::kBadTimestamp, "first_ts_ms " + Num(c.first_ts_ms()) + " is after last_ts_ms " +
                                                Num(c.last_ts_ms()));
    }
    if (c.first_ts_ms() < o.min_ts_ms) {
      return Fail(ChunkErrc::kBadTimestamp,
                  "first_ts_ms " + Num(c.first_ts_ms()) + " is before the minimum " + Num(o.min_ts_ms));
    }
    if (c.last_ts_ms() > max_ts) {
      return Fail(ChunkErrc::kBadTimestamp,
                  "last_ts_ms " + Num(c.last_ts_ms()) + " is more than " + Num(o.max_future_ms) +
                      " ms in the future");
    }
  }
  uint32_t crc = Crc32c(r.payload);
  if (crc != c.payload_crc32c()) {
    return Fail(ChunkErrc::kCrcMismatch,
                "payload crc32c " + Num(crc) + " != header " + Num(c.payload_crc32c()));
  }
  return true;
}

ChunkResult<proto::LogChunk> DecodeChunk(std::string_view bytes, const DecodeOptions& options) {
  // Parsed with the nesting budget it has where it is read back, inside a
  // MainRow (one level less than at the top): a chunk whose unknown groups
  // nest 100 deep would otherwise pass here and fail every query.
  proto::LogChunk chunk;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(99);
  if (!chunk.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return Fail(ChunkErrc::kMalformed, "not a LogChunk protobuf (" + Num(bytes.size()) + " bytes)");
  }
  auto valid = ValidateChunk(chunk, options);
  if (!valid) return valid.error();
  return chunk;
}

namespace {

// A snappy payload's declared length (its length header), within the limit.
ChunkResult<size_t> SnappyLength(std::string_view payload, const DecodeOptions& o) {
  size_t n = 0;
  if (!snappy::GetUncompressedLength(payload.data(), payload.size(), &n)) {
    return Fail(ChunkErrc::kBadSnappy, "payload has no valid snappy length header");
  }
  if (n > o.max_uncompressed_bytes) {
    return Fail(ChunkErrc::kTooLarge,
                "payload expands to " + Num(n) + " bytes, over the limit of " + Num(o.max_uncompressed_bytes));
  }
  return n;
}

// A zstd payload's content size from its frame header, checked against the
// limit and the chunk header before anything is allocated: the header's
// uncompressed_size, or at most that with CODEC_ZSTD_COLUMNS (its columns
// are smaller than the records they give).
ChunkResult<uint64_t> ZstdFrameSize(ChunkRef r, const DecodeOptions& o) {
  const proto::LogChunk& c = r.header;
  const std::optional<uint64_t> n = ZstdContentSize(r.payload);
  if (!n) return Fail(ChunkErrc::kBadZstd, "payload is not one zstd frame with its content size");
  if (*n > o.max_uncompressed_bytes) {
    return Fail(ChunkErrc::kTooLarge,
                "payload expands to " + Num(*n) + " bytes, over the limit of " + Num(o.max_uncompressed_bytes));
  }
  // By columns, the records' size is the header's alone: held to the limit
  // here too, since stored chunks are read without ValidateChunk and their
  // headers are not under the crc.
  if (c.codec() == proto::CODEC_ZSTD_COLUMNS && c.uncompressed_size() > o.max_uncompressed_bytes) {
    return Fail(ChunkErrc::kTooLarge, "declared uncompressed size " + Num(c.uncompressed_size()) +
                                          " exceeds the limit of " + Num(o.max_uncompressed_bytes));
  }
  if (c.codec() == proto::CODEC_ZSTD_COLUMNS ? *n > c.uncompressed_size() : *n != c.uncompressed_size()) {
    return Fail(ChunkErrc::kBadZstd, "payload expands to " + Num(*n) + " bytes, header says " +
                                         (c.codec() == proto::CODEC_ZSTD_COLUMNS ? "at most " : "") +
                                         Num(c.uncompressed_size()));
  }
  return *n;
}

ChunkResult<std::string_view> PayloadBytes(ChunkRef r, const DecodeOptions& o, std::string& raw);  // below

}  // namespace

ChunkResult<bool> VerifyPayload(ChunkRef r, const DecodeOptions& o, PayloadCheck check) {
  const proto::LogChunk& c = r.header;
  if (c.codec() == proto::CODEC_NONE) {
    if (r.payload.size() != c.uncompressed_size()) {
      return Fail(ChunkErrc::kMalformed, "payload of " + Num(r.payload.size()) + " bytes, header says " +
                                             Num(c.uncompressed_size()));
    }
    return true;
  }
  if (c.codec() == proto::CODEC_ZSTD_COLUMNS) {
    auto n = ZstdFrameSize(r, o);
    if (!n) return n.error();
    if (check == PayloadCheck::kStream) {  // the frame, and the records its columns give
      std::string raw;
      if (auto records = PayloadBytes(r, o, raw); !records.ok()) return records.error();
    }
    return true;
  }
  if (c.codec() == proto::CODEC_ZSTD) {
    auto n = ZstdFrameSize(r, o);
    if (!n) return n.error();
    if (check == PayloadCheck::kStream && !ZstdValidate(r.payload, *n)) {
      return Fail(ChunkErrc::kBadZstd, "payload is not valid zstd");
    }
    return true;
  }
  if (c.codec() != proto::CODEC_SNAPPY) return Fail(ChunkErrc::kBadCodec, "codec " + Num(c.codec()) + " is not supported");
  auto n = SnappyLength(r.payload, o);
  if (!n) return n.error();
  if (*n != c.uncompressed_size()) {
    return Fail(ChunkErrc::kBadSnappy,
                "payload expands to " + Num(*n) + " bytes, header says " + Num(c.uncompressed_size()));
  }
  if (check == PayloadCheck::kStream && !snappy::IsValidCompressedBuffer(r.payload.data(), r.payload.size())) {
    return Fail(ChunkErrc::kBadSnappy, "payload is not valid snappy");
  }
  return true;
}

namespace {

// The payload's serialized RecordBatch: decompressed into `raw`, or the
// payload itself when uncompressed.
ChunkResult<std::string_view> PayloadBytes(ChunkRef r, const DecodeOptions& o, std::string& raw) {
  const proto::LogChunk& c = r.header;
  switch (c.codec()) {
    case proto::CODEC_SNAPPY: {
      // The length snappy declares is checked against the limit, not against
      // uncompressed_size: stores hold chunks whose producers left that field
      // wrong, and their records stay readable (VerifyPayload, the ingest
      // check, is the strict one).
      if (auto n = SnappyLength(r.payload, o); !n) return n.error();
      if (!snappy::Uncompress(r.payload.data(), r.payload.size(), &raw)) {
        return Fail(ChunkErrc::kBadSnappy, "payload is not valid snappy");
      }
      return std::string_view(raw);
    }
    case proto::CODEC_ZSTD: {
      // New with zstd, so strict from the start: the frame's size must be the header's.
      auto n = ZstdFrameSize(r, o);
      if (!n) return n.error();
      if (!ZstdDecompress(r.payload, *n, &raw)) return Fail(ChunkErrc::kBadZstd, "payload is not valid zstd");
      return std::string_view(raw);
    }
    case proto::CODEC_ZSTD_COLUMNS: {
      auto n = ZstdFrameSize(r, o);
      if (!n) return n.error();
      // The columns are read once, into the records: a buffer per thread,
      // let go when a large chunk left it large.
      thread_local std::string columns;
      const bool read = ZstdDecompress(r.payload, *n, &columns);
      const bool given = read && ColumnsToRecords(columns, c.uncompressed_size(), &raw);
      if (columns.capacity() > (16u << 20)) std::string().swap(columns);
      if (!read) return Fail(ChunkErrc::kBadZstd, "payload is not valid zstd");
      if (!given) return Fail(ChunkErrc::kMalformed, "payload's columns do not give its records");
      return std::string_view(raw);
    }
    case proto::CODEC_NONE:
      if (r.payload.size() > o.max_uncompressed_bytes) {
        return Fail(ChunkErrc::kTooLarge, "payload of " + Num(r.payload.size()) + " bytes is over the limit");
      }
      return r.payload;
    default:
      return Fail(ChunkErrc::kBadCodec, "codec " + Num(c.codec()) + " is not supported");
  }
}

// Checks one record's time and severity against its chunk's header.
ChunkResult<bool> CheckRecord(const proto::LogChunk& c, int64_t i, int64_t ts_ms, uint32_t severity) {
  if (ts_ms < c.first_ts_ms() || ts_ms > c.last_ts_ms()) {
    return Fail(ChunkErrc::kBadTimestamp, "record " + Num(i) + " ts_ms " + Num(ts_ms) + " is outside the header's [" +
                                              Num(c.first_ts_ms()) + ", " + Num(c.last_ts_ms()) + "]");
  }
  if (!SeverityFromCode(severity)) {
    return Fail(ChunkErrc::kBadSeverity, "record " + Num(i) + " severity " + Num(severity) + " is not a known code");
  }
  if (c.severity() != kMixedSeverity && severity != c.severity()) {
    return Fail(ChunkErrc::kBadSeverity, "record " + Num(i) + " severity " + Num(severity) +
                                             " differs from the stream severity " + Num(c.severity()));
  }
  return true;
}

// A reader of protobuf wire format over a byte range, with the protobuf
// parser's rules (those of CodedInputStream, which this replaced on the ingest
// path: its out-of-line limit checks cost more than the walk itself).
// Written by hand because the generated parser builds every record, which is
// what the walk avoids; DecodeChunkView, VerifyRecords and ViewRecords are
// held to the parser's verdicts by ChunkCodecTest and the chunk_decoder fuzz target.
class WireReader {
 public:
  WireReader(const char* begin, const char* end)
      : p_(reinterpret_cast<const uint8_t*>(begin)), end_(reinterpret_cast<const uint8_t*>(end)) {}

  bool done() const { return p_ == end_; }
  const char* position() const { return reinterpret_cast<const char*>(p_); }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  // The bytes not read yet, where they are.
  std::string_view Rest() const { return std::string_view(position(), left()); }

  // A varint of at most 10 bytes (the 10th without a continuation bit), its
  // bits past 64 dropped, as CodedInputStream::ReadVarint64 reads it.
  bool Varint64(uint64_t* out) { return Varint(10, out); }

  // A tag as the protobuf parser reads it: at most 5 bytes (a 64-bit varint
  // would take 10 and drop the high bits, passing what the parser refuses),
  // the low 32 bits kept. 0 at the end or on a bad one.
  uint32_t Tag() {
    uint64_t v = 0;
    if (p_ == end_ || !Varint(5, &v)) return 0;
    return static_cast<uint32_t>(v);
  }

  // A length as the parser reads it: at most 5 bytes, and refused above
  // INT32_MAX before anything is cut (2^32 + 3 is not 3).
  bool Length(uint32_t* out) {
    uint64_t v = 0;
    if (!Varint(5, &v) || v > static_cast<uint64_t>(INT32_MAX)) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  }

  // A length-delimited field's bytes, and this reader past them.
  std::optional<std::string_view> Bytes() {
    uint32_t n = 0;
    if (!Length(&n) || n > left()) return std::nullopt;
    const char* at = position();
    p_ += n;
    return std::string_view(at, n);
  }

  bool Skip(size_t n) {
    if (n > left()) return false;
    p_ += n;
    return true;
  }

  // The next `n` bytes as a reader of their own (a nested message), and
  // this one past them; none if fewer are left.
  std::optional<WireReader> Sub(size_t n) {
    if (n > left()) return std::nullopt;
    WireReader sub(position(), position() + n);
    p_ += n;
    return sub;
  }

 private:
  // A varint that must end within `max_bytes` (all 10 bytes of a varint64
  // may carry a continuation bit but the last).
  bool Varint(int max_bytes, uint64_t* out) {
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (b < 0x80) {
        *out = v;
        return true;
      }
    }
    return false;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// Skips the field whose tag was just read, as the protobuf parser skips an
// unknown field: groups (a protobuf 2 wire type that logdex never writes,
// but a well-formed message may hold) to their matching end, with a stack
// instead of recursion, nested at most `depth_left` deep: the parser's
// budget of 100 less the messages around the field (a record takes one, a
// tag another).
bool SkipField(WireReader& in, uint32_t tag, int depth_left) {
  constexpr int kMaxGroupDepth = 100;
  uint32_t open[kMaxGroupDepth];
  int depth = 0;
  for (;;) {
    if ((tag >> 3) == 0) return false;  // field number 0 is illegal
    uint64_t v = 0;
    uint32_t n = 0;
    switch (tag & 7) {
      case 0:
        if (!in.Varint64(&v)) return false;
        break;
      case 1:
        if (!in.Skip(8)) return false;
        break;
      case 2:
        if (!in.Length(&n) || !in.Skip(n)) return false;
        break;
      case 3:
        if (depth == kMaxGroupDepth || depth == depth_left) return false;
        open[depth++] = tag >> 3;
        break;
      case 4:
        if (depth == 0 || open[depth - 1] != (tag >> 3)) return false;
        --depth;
        break;
      case 5:
        if (!in.Skip(4)) return false;
        break;
      default: return false;
    }
    if (depth == 0) return true;
    tag = in.Tag();
    if (tag == 0) return false;
  }
}

}  // namespace

ChunkResult<ChunkView> DecodeChunkView(std::string_view bytes, const DecodeOptions& options) {
  // Hand-walked (protobuf's generated parser copies every bytes field): the
  // top-level fields are copied to a header buffer, except the payload's,
  // whose place is only noted; the header is then parsed as DecodeChunk
  // parses the whole, so both refuse the same bytes.
  static_assert(proto::LogChunk::kPayloadFieldNumber == 10, "the payload's tag below is field 10, wire type 2");
  constexpr uint32_t kPayloadTag = (10u << 3) | 2u;
  const auto malformed = [&] {
    return Fail(ChunkErrc::kMalformed, "not a LogChunk protobuf (" + Num(bytes.size()) + " bytes)");
  };
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return malformed();
  WireReader in(bytes.data(), bytes.data() + bytes.size());
  std::string header;
  std::string_view payload;
  while (!in.done()) {
    const char* start = in.position();
    const uint32_t tag = in.Tag();
    if (tag == 0) return malformed();
    if (tag == kPayloadTag) {  // of several, the last counts, as in protobuf
      auto bytes_of = in.Bytes();
      if (!bytes_of) return malformed();
      payload = *bytes_of;
      continue;
    }
    if (!SkipField(in, tag, 100)) return malformed();  // the parse below applies the real nesting limit
    header.append(start, in.position());
  }
  ChunkView view;
  google::protobuf::io::CodedInputStream header_in(reinterpret_cast<const uint8_t*>(header.data()),
                                                   static_cast<int>(header.size()));
  header_in.SetRecursionLimit(99);  // as DecodeChunk's
  if (!view.header.ParseFromCodedStream(&header_in) || !header_in.ConsumedEntireMessage()) return malformed();
  view.payload = payload;
  auto valid = ValidateChunk(view.ref(), options);
  if (!valid) return valid.error();
  return view;
}

namespace {

// The records walk of VerifyRecords and ViewRecords: one pass over a
// RecordBatch's wire bytes, checking what UnpackRecords checks; with `out`,
// each record's fields are kept as views (of a repeated singular field the
// last, as the parser keeps it).
ChunkResult<bool> WalkRecords(const proto::LogChunk& c, std::string_view bytes, RecordViews* out) {
  const auto malformed = [] { return Fail(ChunkErrc::kMalformed, "payload is not a RecordBatch protobuf"); };
  constexpr uint32_t kRecordTag = (1u << 3) | 2u, kTsTag = (1u << 3) | 0u, kSeverityTag = (2u << 3) | 0u,
                     kMessageTag = (3u << 3) | 2u, kTagTag = (4u << 3) | 2u, kKeyTag = (1u << 3) | 2u,
                     kValueTag = (2u << 3) | 2u;
  static_assert(proto::RecordBatch::kRecordsFieldNumber == 1 && proto::LogRecord::kTsMsFieldNumber == 1 &&
                    proto::LogRecord::kSeverityFieldNumber == 2 && proto::LogRecord::kMessageFieldNumber == 3 &&
                    proto::LogRecord::kTagsFieldNumber == 4 && proto::Tag::kKeyFieldNumber == 1 &&
                    proto::Tag::kValueFieldNumber == 2,
                "the tags above");
  WireReader in(bytes.data(), bytes.data() + bytes.size());
  int64_t records = 0;
  while (!in.done()) {
    const uint32_t tag = in.Tag();
    if (tag == 0) return malformed();
    if (tag != kRecordTag) {  // not a record: unknown, skipped as the parser would
      if (!SkipField(in, tag, 100)) return malformed();
      continue;
    }
    uint32_t len = 0;
    if (!in.Length(&len)) return malformed();
    std::optional<WireReader> sub = in.Sub(len);
    if (!sub) return malformed();
    WireReader& record = *sub;
    RecordView view;
    if (out) view.wire = record.Rest();
    if (out) view.first_tag = static_cast<uint32_t>(out->tags.size());
    while (!record.done()) {
      const uint32_t t = record.Tag();
      if (t == 0) return malformed();
      uint64_t v = 0;
      if (t == kTsTag) {
        if (!record.Varint64(&v)) return malformed();
        view.ts_ms = static_cast<int64_t>(v);  // int64: the varint's bits, as the parser takes them
      } else if (t == kSeverityTag) {
        if (!record.Varint64(&v)) return malformed();
        view.severity = static_cast<uint32_t>(v);  // uint32: the low 32 bits, as the parser takes them
      } else if (t == kMessageTag && out) {
        auto m = record.Bytes();
        if (!m) return malformed();
        view.message = *m;
      } else if (t == kTagTag) {  // a Tag: its fields are checked for shape too
        uint32_t tag_len = 0;
        if (!record.Length(&tag_len)) return malformed();
        std::optional<WireReader> tag_fields = record.Sub(tag_len);
        if (!tag_fields) return malformed();
        TagView kv;
        while (!tag_fields->done()) {
          const uint32_t tt = tag_fields->Tag();
          if (tt == 0) return malformed();
          if (out && (tt == kKeyTag || tt == kValueTag)) {
            auto f = tag_fields->Bytes();
            if (!f) return malformed();
            (tt == kKeyTag ? kv.key : kv.value) = *f;
          } else if (!SkipField(*tag_fields, tt, 98)) {
            return malformed();
          }
        }
        if (out) out->tags.push_back(kv);
      } else if (!SkipField(record, t, 99)) {
        return malformed();
      }
    }
    if (auto ok = CheckRecord(c, records, view.ts_ms, view.severity); !ok.ok()) return ok.error();
    if (out) {
      view.tag_count = static_cast<uint32_t>(out->tags.size() - view.first_tag);
      out->records.push_back(view);
    }
    ++records;
  }
  if (static_cast<uint64_t>(records) != c.record_count()) {
    return Fail(ChunkErrc::kCountMismatch,
                "payload holds " + Num(records) + " records, header says " + Num(c.record_count()));
  }
  return true;
}

}  // namespace

ChunkResult<bool> VerifyRecords(ChunkRef r, const DecodeOptions& o, std::string* scratch) {
  std::string local;
  auto payload = PayloadBytes(r, o, scratch ? *scratch : local);
  if (!payload.ok()) return payload.error();
  return WalkRecords(r.header, *payload, nullptr);
}

ChunkResult<bool> ViewRecords(ChunkRef r, const DecodeOptions& o, std::string& scratch, RecordViews& out) {
  out.records.clear();
  out.tags.clear();
  auto payload = PayloadBytes(r, o, scratch);
  if (!payload.ok()) return payload.error();
  auto walked = WalkRecords(r.header, *payload, &out);
  if (!walked.ok()) {
    out.records.clear();
    out.tags.clear();
  }
  return walked;
}

ChunkResult<proto::RecordBatch> UnpackRecords(ChunkRef r, const DecodeOptions& o, std::string* scratch) {
  const proto::LogChunk& c = r.header;
  std::string local;
  auto payload = PayloadBytes(r, o, scratch ? *scratch : local);
  if (!payload.ok()) return payload.error();
  const std::string_view bytes = *payload;

  proto::RecordBatch batch;
  if (!batch.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Fail(ChunkErrc::kMalformed, "payload is not a RecordBatch protobuf");
  }
  if (static_cast<uint64_t>(batch.records_size()) != c.record_count()) {
    return Fail(ChunkErrc::kCountMismatch, "payload holds " + Num(batch.records_size()) +
                                               " records, header says " + Num(c.record_count()));
  }
  for (int i = 0; i < batch.records_size(); ++i) {
    const proto::LogRecord& r = batch.records(i);
    if (auto ok = CheckRecord(c, i, r.ts_ms(), r.severity()); !ok.ok()) return ok.error();
  }
  return batch;
}

}  // namespace logdex
