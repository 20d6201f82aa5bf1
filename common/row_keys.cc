#include "common/row_keys.h"

#include "common/bytes.h"

namespace logdex {
namespace {

// Appends fields to a key under construction.
class KeyWriter {
 public:
  explicit KeyWriter(size_t size) { out_.reserve(size); }
  KeyWriter& U8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  KeyWriter& U64(uint64_t v) {
    AppendBigEndian64(out_, v);
    return *this;
  }
  template <class Kind>
  KeyWriter& U64(Id<Kind> id) {
    return U64(id.value());
  }
  KeyWriter& Ts(int64_t v) { return U64(static_cast<uint64_t>(v)); }
  KeyWriter& Sev(Severity s) { return U8(SeverityCode(s)); }
  std::string Done() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields of a key of known length; ok() turns false on a bad severity.
class KeyReader {
 public:
  explicit KeyReader(std::string_view key) : p_(key.data()) {}
  uint8_t U8() { return static_cast<uint8_t>(*p_++); }
  uint64_t U64() {
    uint64_t v = GetBigEndian64(p_);
    p_ += 8;
    return v;
  }
  template <class IdType>
  IdType Id() {
    return IdType(U64());
  }
  int64_t Ts() { return static_cast<int64_t>(U64()); }
  Severity Sev() {
    auto s = SeverityFromCode(U8());
    if (!s) ok_ = false;
    return s.value_or(Severity::kInfo);
  }
  bool ok() const { return ok_; }

 private:
  const char* p_;
  bool ok_ = true;
};

template <class K>
std::optional<K> Finish(const KeyReader& r, K key) {
  if (!r.ok()) return std::nullopt;
  return key;
}

}  // namespace

std::string LevelIndexTable(Severity s) { return "idx_" + std::string(SeverityTableSuffix(s)); }

std::string MainKey::Encode() const {
  return KeyWriter(kSize).U8(salt).U64(app).Sev(severity).Ts(first_ts_ms).U64(host).U64(chunk).Done();
}

std::optional<MainKey> MainKey::Decode(std::string_view key) {
  if (key.size() != kSize) return std::nullopt;
  KeyReader r(key);
  MainKey k;
  k.salt = r.U8();
  k.app = r.Id<AppId>();
  k.severity = r.Sev();
  k.first_ts_ms = r.Ts();
  k.host = r.Id<HostId>();
  k.chunk = r.Id<ChunkId>();
  return Finish(r, k);
}

std::string LevelIndexKey::Encode() const {
  return KeyWriter(kSize).U64(app).Ts(ts_ms).U64(host).U64(chunk).Done();
}

std::optional<LevelIndexKey> LevelIndexKey::Decode(std::string_view key) {
  if (key.size() != kSize) return std::nullopt;
  KeyReader r(key);
  LevelIndexKey k;
  k.app = r.Id<AppId>();
  k.ts_ms = r.Ts();
  k.host = r.Id<HostId>();
  k.chunk = r.Id<ChunkId>();
  return Finish(r, k);
}

std::string HostIndexKey::Encode() const {
  return KeyWriter(kSize).U64(host).U64(app).Ts(ts_ms).Sev(severity).U64(chunk).Done();
}

std::optional<HostIndexKey> HostIndexKey::Decode(std::string_view key) {
  if (key.size() != kSize) return std::nullopt;
  KeyReader r(key);
  HostIndexKey k;
  k.host = r.Id<HostId>();
  k.app = r.Id<AppId>();
  k.ts_ms = r.Ts();
  k.severity = r.Sev();
  k.chunk = r.Id<ChunkId>();
  return Finish(r, k);
}

std::string MergedKey::Encode() const {
  std::string key = KeyWriter(kSize).U64(host).U64(app).Sev(severity).Ts(last_ts_ms).U64(chunk).Done();
  if (format != 1) key.push_back(static_cast<char>(format));
  return key;
}

std::optional<MergedKey> MergedKey::Decode(std::string_view key) {
  if (key.size() != kSize && key.size() != kSize + 1) return std::nullopt;
  MergedKey k;
  if (key.size() > kSize) {
    k.format = static_cast<uint8_t>(key.back());
    if (k.format == 1) return std::nullopt;  // format 1 has no byte
    key.remove_suffix(1);
  }
  KeyReader r(key);
  k.host = r.Id<HostId>();
  k.app = r.Id<AppId>();
  k.severity = r.Sev();
  k.last_ts_ms = r.Ts();
  k.chunk = r.Id<ChunkId>();
  return Finish(r, k);
}

std::string TagIndexKey::Encode() const {
  return KeyWriter(kSize).U64(tag).Ts(ts_ms).U64(app).U64(host).Sev(severity).U64(chunk).Done();
}

std::optional<TagIndexKey> TagIndexKey::Decode(std::string_view key) {
  if (key.size() != kSize) return std::nullopt;
  KeyReader r(key);
  TagIndexKey k;
  k.tag = r.Id<TagId>();
  k.ts_ms = r.Ts();
  k.app = r.Id<AppId>();
  k.host = r.Id<HostId>();
  k.severity = r.Sev();
  k.chunk = r.Id<ChunkId>();
  return Finish(r, k);
}

std::string MetaKey::Encode() const {
  if (kind == MetaKind::kStream) {
    return KeyWriter(kStreamSize).U8(static_cast<uint8_t>(kind)).U64(id).U64(app).Sev(severity).Done();
  }
  return KeyWriter(kNameSize).U8(static_cast<uint8_t>(kind)).U64(id).Done();
}

std::optional<MetaKey> MetaKey::Decode(std::string_view key) {
  if (key.empty()) return std::nullopt;
  KeyReader r(key);
  MetaKey k;
  uint8_t kind = r.U8();
  if (kind < 1 || kind > 4) return std::nullopt;
  k.kind = static_cast<MetaKind>(kind);
  size_t want = k.kind == MetaKind::kStream ? kStreamSize : kNameSize;
  if (key.size() != want) return std::nullopt;
  k.id = r.U64();
  if (k.kind == MetaKind::kStream) {
    k.app = r.U64();
    k.severity = r.Sev();
  }
  return Finish(r, k);
}

std::string OutboxKey::Encode() const { return KeyWriter(kSize).Ts(due_ms).U64(alert_id).Done(); }

std::optional<OutboxKey> OutboxKey::Decode(std::string_view key) {
  if (key.size() != kSize) return std::nullopt;
  KeyReader r(key);
  OutboxKey k;
  k.due_ms = r.Ts();
  k.alert_id = r.U64();
  return Finish(r, k);
}

}  // namespace logdex
