#include "common/chunk_writer.h"

#include <absl/container/flat_hash_set.h>
#include <snappy.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "common/record_columns.h"
#include "common/varint.h"
#include "common/zstd_codec.h"

namespace logdex {
namespace {

// Wire types of the fields written below (field number << 3 | wire type);
// the numbers are those of proto/logdex.proto.
constexpr uint8_t kVarint = 0, kFixed32 = 5, kLength = 2;
constexpr uint8_t Key(int field, uint8_t type) { return static_cast<uint8_t>(field << 3 | type); }

// A proto3 scalar or bytes field is not written when it holds its default.
size_t VarintFieldSize(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }
size_t BytesFieldSize(size_t n) { return n == 0 ? 0 : 1 + VarintSize(n) + n; }

char* PutVarintField(char* p, uint8_t key, uint64_t v) {
  if (v == 0) return p;
  *p++ = static_cast<char>(key);
  return PutVarint(p, v);
}

char* PutBytesField(char* p, uint8_t key, std::string_view s) {
  if (s.empty()) return p;
  *p++ = static_cast<char>(key);
  p = PutVarint(p, s.size());
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

// Tag { bytes key = 1; bytes value = 2; }
size_t TagBodySize(std::string_view k, std::string_view v) { return BytesFieldSize(k.size()) + BytesFieldSize(v.size()); }

char* PutTag(char* p, uint8_t key, std::string_view k, std::string_view v) {
  const size_t body = TagBodySize(k, v);
  *p++ = static_cast<char>(key);  // a repeated message element is written even when empty
  p = PutVarint(p, body);
  p = PutBytesField(p, Key(1, kLength), k);
  return PutBytesField(p, Key(2, kLength), v);
}

size_t TagFieldSize(std::string_view k, std::string_view v) {
  const size_t body = TagBodySize(k, v);
  return 1 + VarintSize(body) + body;
}

uint64_t TagHash(std::string_view k, std::string_view v) {
  return XXH3_64bits_withSeed(v.data(), v.size(), XXH3_64bits(k.data(), k.size()));
}

}  // namespace

// The chunk's distinct tags (key=value), in the order first seen: their
// serialized Tag entries, and a set over them.
struct ChunkWriter::Summary {
  struct Entry {
    uint32_t key_off, key_len, value_off, value_len;
    uint64_t hash;
  };
  struct Probe {
    std::string_view key, value;
    uint64_t hash;
  };
  struct Hash {
    using is_transparent = void;
    const Summary* s;
    size_t operator()(uint32_t i) const { return s->entries[i].hash; }
    size_t operator()(const Probe& p) const { return p.hash; }
  };
  struct Eq {
    using is_transparent = void;
    const Summary* s;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, const Probe& p) const {
      const Entry& e = s->entries[a];
      return e.hash == p.hash && std::string_view(s->wire.data() + e.key_off, e.key_len) == p.key &&
             std::string_view(s->wire.data() + e.value_off, e.value_len) == p.value;
    }
    bool operator()(const Probe& p, uint32_t a) const { return (*this)(a, p); }
  };

  Summary() : seen(0, Hash{this}, Eq{this}) {}
  Summary(const Summary&) = delete;  // the set's hasher and eq point at this object
  Summary& operator=(const Summary&) = delete;

  // The same tag at entry i?
  bool Holds(uint32_t i, std::string_view key, std::string_view value) const {
    const Entry& e = entries[i];
    return std::string_view(wire.data() + e.value_off, e.value_len) == value &&
           std::string_view(wire.data() + e.key_off, e.key_len) == key;
  }

  void Clear() {
    const size_t n = entries.size();
    wire.clear();
    entries.clear();
    seen.clear();    // frees a table of more than 127 slots
    seen.reserve(n);  // so size it at once: the next chunk of a stream is much like this one
  }

  std::string wire;  // repeated Tag tags = 1 of TagSummary
  std::vector<Entry> entries;
  absl::flat_hash_set<uint32_t, Hash, Eq> seen;
};

ChunkWriter::ChunkWriter(bool summarize_tags) : summary_(summarize_tags ? std::make_unique<Summary>() : nullptr) {}
ChunkWriter::~ChunkWriter() = default;
ChunkWriter::ChunkWriter(ChunkWriter&&) noexcept = default;
ChunkWriter& ChunkWriter::operator=(ChunkWriter&&) noexcept = default;

uint32_t ChunkWriter::Summarize(std::string_view key, std::string_view value) {
  Summary& s = *summary_;
  const Summary::Probe probe{key, value, TagHash(key, value)};
  return *s.seen.lazy_emplace(probe, [&](const auto& construct) {
    const size_t at = s.wire.size();
    s.wire.resize(at + TagFieldSize(key, value));
    const char* base = s.wire.data();
    const size_t end = static_cast<size_t>(PutTag(s.wire.data() + at, Key(1, kLength), key, value) - base);
    // The entry ends [0x0A len key][0x12 len value] (a field is left out when empty).
    const size_t value_off = end - value.size();
    const size_t key_end = value.empty() ? end : value_off - 1 - VarintSize(value.size());
    Summary::Entry e;
    e.key_off = static_cast<uint32_t>(key_end - key.size());
    e.key_len = static_cast<uint32_t>(key.size());
    e.value_off = static_cast<uint32_t>(value_off);
    e.value_len = static_cast<uint32_t>(value.size());
    e.hash = probe.hash;
    s.entries.push_back(e);
    construct(static_cast<uint32_t>(s.entries.size() - 1));
  });
}

namespace {
// Whether a summary of `summary` bytes is within kMaxTagSummaryShare of `payload` bytes.
bool SummaryFits(size_t summary, size_t payload) {
  return static_cast<double>(summary) <= kMaxTagSummaryShare * static_cast<double>(payload);
}
}  // namespace

size_t ChunkWriter::SerializedRecordBytes(std::string_view record) { return RecordBytes(record.size()); }

size_t ChunkWriter::RecordBodyBytes(int64_t ts_ms, uint32_t severity, std::string_view message,
                                    std::span<const TagView> lead, std::span<const TagView> tags) {
  // LogRecord { int64 ts_ms = 1; uint32 severity = 2; bytes message = 3; repeated Tag tags = 4; }
  size_t body = VarintFieldSize(static_cast<uint64_t>(ts_ms)) + VarintFieldSize(severity) +
                BytesFieldSize(message.size());
  for (const TagView& t : lead) body += TagFieldSize(t.key, t.value);
  for (const TagView& t : tags) body += TagFieldSize(t.key, t.value);
  return body;
}

size_t ChunkWriter::RecordBytes(size_t body_bytes) { return 1 + VarintSize(body_bytes) + body_bytes; }

void ChunkWriter::Add(int64_t ts_ms, uint32_t severity, std::string_view message, std::span<const TagView> lead,
                      std::span<const TagView> tags, size_t body_bytes) {
  // RecordBatch { repeated LogRecord records = 1; }
  const size_t at = payload_.size();
  payload_.resize(at + RecordBytes(body_bytes));
  char* p = payload_.data() + at;
  *p++ = static_cast<char>(Key(1, kLength));
  p = PutVarint(p, body_bytes);
  p = PutVarintField(p, Key(1, kVarint), static_cast<uint64_t>(ts_ms));
  p = PutVarintField(p, Key(2, kVarint), severity);
  p = PutBytesField(p, Key(3, kLength), message);
  for (const TagView& t : lead) p = PutTag(p, Key(4, kLength), t.key, t.value);
  for (const TagView& t : tags) p = PutTag(p, Key(4, kLength), t.key, t.value);
  LOGDEX_CHECK(p == payload_.data() + payload_.size());  // body_bytes was this record's
  Account(ts_ms, severity, lead, tags);
}

void ChunkWriter::AddSerialized(int64_t ts_ms, uint32_t severity, std::string_view record,
                                std::span<const TagView> tags) {
  const size_t at = payload_.size();
  payload_.resize(at + RecordBytes(record.size()));
  char* p = payload_.data() + at;
  *p++ = static_cast<char>(Key(1, kLength));
  p = PutVarint(p, record.size());
  std::memcpy(p, record.data(), record.size());
  Account(ts_ms, severity, {}, tags);
}

// The header's severity and time range, and the summary.
void ChunkWriter::Account(int64_t ts_ms, uint32_t severity, std::span<const TagView> lead,
                          std::span<const TagView> tags) {
  if (records_ == 0) {
    severity_ = severity;
    first_ts_ = last_ts_ = ts_ms;
  } else {
    if (severity != severity_) severity_ = kMixedSeverity;
    first_ts_ = std::min(first_ts_, ts_ms);
    last_ts_ = std::max(last_ts_, ts_ms);
  }
  ++records_;
  if (!summary_ || summary_given_up_) return;
  // A summary that already outweighs a share of the records' uncompressed
  // bytes will, most likely, outweigh it of the compressed ones at Finish:
  // building it is given up for this chunk (on JSON lines with an id each,
  // building it was 14 % of ship's time). Checked once the chunk holds
  // enough records for the share to mean something.
  if (payload_.size() >= kSummaryCheckBytes && !SummaryFits(summary_->wire.size(), payload_.size())) {
    summary_given_up_ = true;
    return;
  }
  size_t i = 0;
  for (std::span<const TagView> part : {lead, tags}) {
    for (const TagView& t : part) {
      if (i == kMaxIndexedTagsPerRecord) return;
      if (i < last_at_.size() && summary_->Holds(last_at_[i], t.key, t.value)) {
        ++i;
        continue;
      }
      const uint32_t entry = Summarize(t.key, t.value);
      if (i < last_at_.size()) last_at_[i] = entry;
      else last_at_.push_back(entry);
      ++i;
    }
  }
}

void ChunkWriter::Finish(std::string_view app, std::string_view host, const PackOptions& options, std::string* out,
                         std::string* scratch) {
  std::string_view payload = payload_;
  proto::Codec codec = options.codec;
  if (codec == proto::CODEC_SNAPPY) {
    std::string& compressed = scratch ? *scratch : compressed_;
    compressed.resize(snappy::MaxCompressedLength(payload_.size()));
    size_t n = 0;
    snappy::RawCompress(payload_.data(), payload_.size(), compressed.data(), &n);
    payload = std::string_view(compressed.data(), n);
  } else if (codec == proto::CODEC_ZSTD_COLUMNS && !RecordsToColumns(payload_, &columns_)) {
    codec = proto::CODEC_ZSTD;  // records in a form the columns do not hold: stored as they are
  }
  if (codec == proto::CODEC_ZSTD || codec == proto::CODEC_ZSTD_COLUMNS) {
    std::string& compressed = scratch ? *scratch : compressed_;
    const std::string_view in = codec == proto::CODEC_ZSTD ? std::string_view(payload_) : std::string_view(columns_);
    const size_t n = ZstdCompress(in, options.zstd_level, &compressed);  // reallocates `compressed`
    payload = std::string_view(compressed.data(), n);
  }
  const uint32_t crc = Crc32c(payload);
  const bool summarize = summary_ != nullptr && !summary_given_up_ && SummaryFits(summary_->wire.size(), payload.size());
  const std::string_view summary = summarize ? std::string_view(summary_->wire) : std::string_view();
  const uint64_t record_count = static_cast<uint32_t>(records_);

  // LogChunk, fields in number order (as protobuf writes them).
  const size_t size = VarintFieldSize(kChunkFormatMajor) + VarintFieldSize(kChunkFormatMinor) +
                      BytesFieldSize(app.size()) + BytesFieldSize(host.size()) + VarintFieldSize(severity_) +
                      VarintFieldSize(static_cast<uint64_t>(first_ts_)) +
                      VarintFieldSize(static_cast<uint64_t>(last_ts_)) + VarintFieldSize(record_count) +
                      VarintFieldSize(static_cast<uint64_t>(codec)) + BytesFieldSize(payload.size()) +
                      (crc == 0 ? 0 : 5) + VarintFieldSize(payload_.size()) + VarintFieldSize(options.producer_id) +
                      VarintFieldSize(options.sequence) + (summarize ? 1 + VarintSize(summary.size()) + summary.size() : 0);
  const size_t at = out->size();
  out->resize(at + size);
  char* p = out->data() + at;
  p = PutVarintField(p, Key(1, kVarint), kChunkFormatMajor);
  p = PutVarintField(p, Key(2, kVarint), kChunkFormatMinor);
  p = PutBytesField(p, Key(3, kLength), app);
  p = PutBytesField(p, Key(4, kLength), host);
  p = PutVarintField(p, Key(5, kVarint), severity_);
  p = PutVarintField(p, Key(6, kVarint), static_cast<uint64_t>(first_ts_));
  p = PutVarintField(p, Key(7, kVarint), static_cast<uint64_t>(last_ts_));
  p = PutVarintField(p, Key(8, kVarint), record_count);
  p = PutVarintField(p, Key(9, kVarint), static_cast<uint64_t>(codec));
  p = PutBytesField(p, Key(10, kLength), payload);
  if (crc != 0) {
    *p++ = static_cast<char>(Key(11, kFixed32));
    for (int i = 0; i < 4; ++i) *p++ = static_cast<char>(crc >> (8 * i));  // little-endian
  }
  p = PutVarintField(p, Key(12, kVarint), payload_.size());
  p = PutVarintField(p, Key(13, kVarint), options.producer_id);
  p = PutVarintField(p, Key(14, kVarint), options.sequence);
  if (summarize) {  // present (has_tag_summary) even when it holds no tag
    *p++ = static_cast<char>(Key(15, kLength));
    p = PutVarint(p, summary.size());
    std::memcpy(p, summary.data(), summary.size());
    p += summary.size();
  }
  LOGDEX_CHECK(static_cast<size_t>(p - out->data()) == at + size);
  Discard();
}

void ChunkWriter::Discard() {
  payload_.clear();
  records_ = 0;
  severity_ = kMixedSeverity;
  first_ts_ = last_ts_ = 0;
  if (summary_) summary_->Clear();
  summary_given_up_ = false;
  last_at_.clear();
}

}  // namespace logdex
