// Helpers shared by the benchmarks: time, CPU time, rounding, scratch
// directories and a store with logdex's tables.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/severity.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "store/rocksdb_store.h"

namespace logdex::bench {

inline int64_t NowNs() { return SystemClock::Instance().MonotonicNs(); }

// User + system CPU seconds of the whole process (all threads).
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The lines of the Loghub samples in `dir` (tests/data/loghub), in a fixed
// order; a CRLF line end is one line end, as ship reads it.
inline std::vector<std::string> LoadLines(const std::string& dir) {
  std::vector<std::string> lines;
  for (const char* name : {"HDFS_2k.log", "Spark_2k.log", "OpenStack_2k.log", "Apache_2k.log", "Android_2k.log",
                           "Linux_2k.log", "OpenSSH_2k.log"}) {
    std::ifstream in(std::filesystem::path(dir) / name);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) lines.push_back(std::move(line));
    }
  }
  return lines;
}

// A replay's severity mix: INFO 88 %, WARN 8 %, ERROR 3 %, DEBUG 1 %.
inline Severity PickSeverity(std::mt19937_64& rng) {
  const uint64_t p = rng() % 100;
  if (p < 88) return Severity::kInfo;
  if (p < 96) return Severity::kWarn;
  if (p < 99) return Severity::kError;
  return Severity::kDebug;
}

// Line i of `lines` spread evenly over the 24 h from start_ms (a replay's).
inline int64_t DayLineTime(int64_t start_ms, uint64_t i, uint64_t lines) {
  return start_ms + static_cast<int64_t>(i * (24ull * 3600 * 1000) / lines);
}

// Two decimals, for JSON figures.
inline double Round2(double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; }

// A JSON log line (no newline) of about 200-250 bytes, the shape structured
// loggers write: time (UTC, milliseconds), level, a message, host, app and
// fields of their own (a user, a request id, a duration, a status), the
// variable parts drawn from r and r2.
inline std::string JsonLogLine(int64_t ts_ms, std::string_view level, std::string_view app, std::string_view host,
                               uint64_t r, uint64_t r2) {
  static const char* const kPaths[] = {"/api/v1/orders", "/api/v1/users", "/healthz", "/api/v2/cart/items", "/login"};
  char ts[32];
  const time_t secs = static_cast<time_t>(ts_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  char line[512];
  const int n = std::snprintf(
      line, sizeof line,
      "{\"ts\":\"%s.%03dZ\",\"level\":\"%.*s\",\"msg\":\"%s %s/%llu completed in %llu ms\",\"host\":\"%.*s\","
      "\"app\":\"%.*s\",\"user_id\":\"u-%llu\",\"request_id\":\"%016llx\",\"duration_ms\":%llu.%llu,\"status\":%d%s}",
      ts, static_cast<int>(ts_ms % 1000), static_cast<int>(level.size()), level.data(), r % 3 ? "GET" : "POST",
      kPaths[(r >> 8) % 5], static_cast<unsigned long long>((r >> 12) % 100000),
      static_cast<unsigned long long>((r >> 20) % 900), static_cast<int>(host.size()), host.data(),
      static_cast<int>(app.size()), app.data(), static_cast<unsigned long long>((r >> 34) % 90000),
      static_cast<unsigned long long>(r2), static_cast<unsigned long long>((r >> 40) % 900),
      static_cast<unsigned long long>((r >> 50) % 10), r % 6 == 5 ? 500 : 200,
      r % 4 == 0 ? ",\"tags\":[\"beta\",\"eu\"],\"retry\":false" : "");
  return std::string(line, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof line) - 1)));
}

// A new directory under `base` (or the system temp dir), removed with
// everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir(const std::string& base, const std::string& name) {
    std::filesystem::path root = base.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(base);
    std::filesystem::create_directories(root);
    std::string tmpl = (root / ("logdex-bench-" + name + "-XXXXXX")).string();
    LOGDEX_CHECK(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// A RocksDB store at `dir` holding logdex's tables (default options).
inline std::unique_ptr<RocksDbStore> OpenStoreWithTables(const std::string& dir,
                                                        Durability durability = Durability::kAsync) {
  RocksDbOptions ro;
  ro.path = dir;
  ro.durability = durability;
  auto store = RocksDbStore::Open(ro);
  LOGDEX_CHECK(store.ok());
  LOGDEX_CHECK(CreateTables(**store, TableLayout{}).ok());
  return std::move(*store);
}

// Serve's alert observer (server/ingest_adapters.h) has the indexer
// decompress the records of ERROR and FATAL chunks, the default rules'
// severities. A benchmark's indexer gets this stand-in so that it does the
// work serve's does (it wants the same records and stages nothing).
class AlertLevelRecords final : public ChunkObserver {
 public:
  bool WantsRecords(Severity severity) const override { return severity >= Severity::kError; }
  bool ObservesMergedChunks() const override { return false; }
  Status Observe(const StreamChunk&, WriteBatch&) override { return Status::Ok(); }
};

inline void DecompressAlertLevels(Indexer& indexer) { indexer.AddObserver(std::make_unique<AlertLevelRecords>()); }

}  // namespace logdex::bench
