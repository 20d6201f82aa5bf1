// Row keys of every logdex table (docs/ARCHITECTURE.md, "Tables and row
// keys"): fixed widths, big-endian integers, so that byte order equals field
// order. Each key type has kSize, Encode() and Decode(); Decode() rejects a
// key of the wrong length or with a severity byte outside the code table.
//
// Timestamps are milliseconds since the Unix epoch; keys hold them as
// unsigned 64-bit numbers, so they must not be negative (the chunk codec
// rejects such records before any key is made).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/ids.h"
#include "common/severity.h"

namespace logdex {

// Table names.
inline constexpr std::string_view kMainTable = "logs";
inline constexpr std::string_view kHostIndexTable = "idx_host";
inline constexpr std::string_view kTagIndexTable = "idx_tag";
inline constexpr std::string_view kMetaTable = "meta";
inline constexpr std::string_view kOutboxTable = "alert_outbox";
inline constexpr std::string_view kMergedTable = "merged";
// A stored chunk's token filter (common/token_bloom.h), keyed by its main key.
inline constexpr std::string_view kTokenTable = "tok";
// A merged chunk's record counts per minute (indexer/minute_counts.h), keyed by its main key.
inline constexpr std::string_view kMinuteCountsTable = "cnt";
// "idx_<level>", e.g. idx_error.
std::string LevelIndexTable(Severity s);

// `logs`: salt u8 · app u64 · severity u8 · first_ts_ms u64 · host u64 · chunk u64.
struct MainKey {
  static constexpr size_t kSize = 34;
  uint8_t salt = 0;
  AppId app;
  Severity severity = Severity::kInfo;
  int64_t first_ts_ms = 0;
  HostId host;
  ChunkId chunk;

  std::string Encode() const;
  static std::optional<MainKey> Decode(std::string_view key);
  bool operator==(const MainKey&) const = default;
};

// `idx_<level>`: app u64 · ts_ms u64 · host u64 · chunk u64.
struct LevelIndexKey {
  static constexpr size_t kSize = 32;
  AppId app;
  int64_t ts_ms = 0;
  HostId host;
  ChunkId chunk;

  std::string Encode() const;
  static std::optional<LevelIndexKey> Decode(std::string_view key);
  bool operator==(const LevelIndexKey&) const = default;
};

// `idx_host`: host u64 · app u64 · ts_ms u64 · severity u8 · chunk u64.
struct HostIndexKey {
  static constexpr size_t kSize = 33;
  HostId host;
  AppId app;
  int64_t ts_ms = 0;
  Severity severity = Severity::kInfo;
  ChunkId chunk;

  std::string Encode() const;
  static std::optional<HostIndexKey> Decode(std::string_view key);
  bool operator==(const HostIndexKey&) const = default;
};

// `idx_tag`: tag u64 · ts_ms u64 · app u64 · host u64 · severity u8 · chunk u64.
struct TagIndexKey {
  static constexpr size_t kSize = 41;
  TagId tag;
  int64_t ts_ms = 0;
  AppId app;
  HostId host;
  Severity severity = Severity::kInfo;
  ChunkId chunk;

  std::string Encode() const;
  static std::optional<TagIndexKey> Decode(std::string_view key);
  bool operator==(const TagIndexKey&) const = default;
};

// `meta`: kind u8 · id u64, and for streams kind u8 · host u64 · app u64 · severity u8,
// so that the apps of one host are one prefix range.
enum class MetaKind : uint8_t {
  kAppName = 1,     // id = app id; value = app name
  kHostName = 2,    // id = host id; value = host name
  kTagKeyName = 3,  // id = tag key id; value = tag key
  kStream = 4,      // (host, app, severity); value = first/last seen
};

struct MetaKey {
  static constexpr size_t kNameSize = 9;
  static constexpr size_t kStreamSize = 18;
  MetaKind kind = MetaKind::kAppName;
  uint64_t id = 0;   // the name's id; for kStream, the host id
  uint64_t app = 0;  // kStream only
  Severity severity = Severity::kInfo;  // kStream only

  static MetaKey AppName(AppId app) { return MetaKey{MetaKind::kAppName, app.value(), 0, Severity::kInfo}; }
  static MetaKey HostName(HostId host) { return MetaKey{MetaKind::kHostName, host.value(), 0, Severity::kInfo}; }
  static MetaKey TagKeyName(TagKeyId key) { return MetaKey{MetaKind::kTagKeyName, key.value(), 0, Severity::kInfo}; }
  static MetaKey Stream(HostId host, AppId app, Severity severity) {
    return MetaKey{MetaKind::kStream, host.value(), app.value(), severity};
  }
  HostId stream_host() const { return HostId(id); }
  AppId stream_app() const { return AppId(app); }

  std::string Encode() const;
  static std::optional<MetaKey> Decode(std::string_view key);
  bool operator==(const MetaKey&) const = default;
};

// `merged` (the compactor's ledger, indexer/compactor.h): host u64 · app u64 ·
// severity u8 · last_ts_ms u64 · chunk u64 of a merged chunk, then the
// value's format u8 unless it is 1; the value lists the chunks merged into
// it (indexer/merge_ledger.h).
struct MergedKey {
  static constexpr size_t kSize = 33;  // format 1; others one byte more
  HostId host;
  AppId app;
  Severity severity = Severity::kInfo;
  int64_t last_ts_ms = 0;
  ChunkId chunk;
  uint8_t format = 1;

  std::string Encode() const;
  static std::optional<MergedKey> Decode(std::string_view key);
  bool operator==(const MergedKey&) const = default;
};

// `alert_outbox`: due_ms u64 · alert id u64.
struct OutboxKey {
  static constexpr size_t kSize = 16;
  int64_t due_ms = 0;
  uint64_t alert_id = 0;

  std::string Encode() const;
  static std::optional<OutboxKey> Decode(std::string_view key);
  bool operator==(const OutboxKey&) const = default;
};

}  // namespace logdex
