#include "common/record_columns.h"

#include <array>
#include <cstring>

#include "common/varint.h"

namespace logdex {
namespace {

constexpr uint64_t kLayoutVersion = 1;
// The columns, in their order in the layout.
enum Column { kTs, kSeverity, kMessageSize, kTagCount, kTagSize, kTagBytes, kMessages, kColumnCount };

// LogRecord's and RecordBatch's field keys (proto/logdex.proto).
constexpr uint8_t kRecordKey = (1 << 3) | 2, kTsKey = (1 << 3) | 0, kSeverityKey = (2 << 3) | 0,
                  kMessageKey = (3 << 3) | 2, kTagKey = (4 << 3) | 2;

uint64_t ZigZag(uint64_t v) { return (v << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(v) >> 63); }
uint64_t UnZigZag(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

// Bytes read front to back; every read checks the end.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;

  explicit Reader(std::string_view s)
      : p(reinterpret_cast<const uint8_t*>(s.data())), end(reinterpret_cast<const uint8_t*>(s.data()) + s.size()) {}

  bool done() const { return p == end; }
  size_t left() const { return static_cast<size_t>(end - p); }
  bool Next(uint8_t key) const { return p != end && *p == key; }

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p == end) return false;
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  // `n` bytes as a view, this reader past them.
  bool Take(uint64_t n, std::string_view* out) {
    if (n > left()) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }
  bool Bytes(std::string_view* out) {
    uint64_t n = 0;
    return Varint(&n) && Take(n, out);
  }
};

}  // namespace

bool RecordsToColumns(std::string_view records, std::string* out) {
  std::array<std::string, kColumnCount> col;
  col[kMessages].reserve(records.size());
  Reader in(records);
  uint64_t count = 0, prev_ts = 0;
  while (!in.done()) {
    std::string_view body;
    if (!in.Next(kRecordKey)) return false;
    ++in.p;
    if (!in.Bytes(&body)) return false;
    Reader r(body);
    uint64_t ts = 0, severity = 0;
    std::string_view message;
    if (r.Next(kTsKey) && !(++r.p, r.Varint(&ts))) return false;
    if (r.Next(kSeverityKey) && !(++r.p, r.Varint(&severity))) return false;
    if (r.Next(kMessageKey) && !(++r.p, r.Bytes(&message))) return false;
    uint64_t tags = 0;
    while (r.Next(kTagKey)) {
      ++r.p;
      std::string_view tag;
      if (!r.Bytes(&tag)) return false;
      AppendVarint(col[kTagSize], tag.size());
      col[kTagBytes].append(tag);
      ++tags;
    }
    if (!r.done()) return false;  // another field, or one out of order
    AppendVarint(col[kTs], ZigZag(ts - prev_ts));
    prev_ts = ts;
    AppendVarint(col[kSeverity], severity);
    AppendVarint(col[kMessageSize], message.size());
    AppendVarint(col[kTagCount], tags);
    col[kMessages].append(message);
    ++count;
  }
  out->clear();
  AppendVarint(*out, kLayoutVersion);
  AppendVarint(*out, count);
  for (int c = 0; c + 1 < kColumnCount; ++c) AppendVarint(*out, col[c].size());
  for (const std::string& c : col) out->append(c);
  if (out->size() >= records.size()) return false;
  // The proof: the layout reads back to exactly these bytes (a default
  // written explicitly, or a varint longer than needed, would not).
  std::string back;
  return ColumnsToRecords(*out, records.size(), &back) && back == records;
}

bool ColumnsToRecords(std::string_view columns, uint64_t records_size, std::string* out) {
  Reader in(columns);
  uint64_t version = 0, count = 0;
  if (!in.Varint(&version) || version != kLayoutVersion || !in.Varint(&count)) return false;
  if (count > records_size / 2) return false;  // a record takes 2 bytes at least
  std::array<Reader, kColumnCount> col{Reader(std::string_view()), Reader(std::string_view()),
                                       Reader(std::string_view()), Reader(std::string_view()),
                                       Reader(std::string_view()), Reader(std::string_view()),
                                       Reader(std::string_view())};
  std::array<uint64_t, kColumnCount - 1> sizes{};
  for (uint64_t& s : sizes) {
    if (!in.Varint(&s)) return false;
  }
  for (int c = 0; c + 1 < kColumnCount; ++c) {
    std::string_view bytes;
    if (!in.Take(sizes[c], &bytes)) return false;
    col[c] = Reader(bytes);
  }
  col[kMessages] = in;

  out->resize(records_size);
  char* p = out->data();
  const char* const end = p + records_size;
  uint64_t ts = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t delta = 0, severity = 0, message_size = 0, tags = 0;
    if (!col[kTs].Varint(&delta) || !col[kSeverity].Varint(&severity) || !col[kMessageSize].Varint(&message_size) ||
        !col[kTagCount].Varint(&tags) || message_size > col[kMessages].left()) {
      return false;
    }
    ts += UnZigZag(delta);
    // The body's size: every length is within `columns`, so no sum overflows.
    uint64_t body = (ts ? 1 + VarintSize(ts) : 0) + (severity ? 1 + VarintSize(severity) : 0) +
                    (message_size ? 1 + VarintSize(message_size) + message_size : 0);
    Reader tag_sizes = col[kTagSize];
    uint64_t tag_bytes = 0;
    for (uint64_t t = 0; t < tags; ++t) {
      uint64_t n = 0;
      if (!tag_sizes.Varint(&n) || n > col[kTagBytes].left() - tag_bytes) return false;
      tag_bytes += n;
      body += 1 + VarintSize(n) + n;
    }
    if (1 + VarintSize(body) + body > static_cast<uint64_t>(end - p)) return false;
    *p++ = static_cast<char>(kRecordKey);
    p = PutVarint(p, body);
    if (ts) {
      *p++ = static_cast<char>(kTsKey);
      p = PutVarint(p, ts);
    }
    if (severity) {
      *p++ = static_cast<char>(kSeverityKey);
      p = PutVarint(p, severity);
    }
    if (message_size) {
      *p++ = static_cast<char>(kMessageKey);
      p = PutVarint(p, message_size);
      std::memcpy(p, col[kMessages].p, message_size);
      col[kMessages].p += message_size;
      p += message_size;
    }
    for (uint64_t t = 0; t < tags; ++t) {
      uint64_t n = 0;
      col[kTagSize].Varint(&n);  // read above
      *p++ = static_cast<char>(kTagKey);
      p = PutVarint(p, n);
      if (n) std::memcpy(p, col[kTagBytes].p, n);  // an empty column's pointer may be null
      col[kTagBytes].p += n;
      p += n;
    }
  }
  for (const Reader& c : col) {
    if (!c.done()) return false;
  }
  return p == end;
}

}  // namespace logdex
