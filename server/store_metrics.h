// logdex_store_disk_bytes{kind="sst"|"wal"|"other"}: what the store holds on
// local disk, sampled on a thread of its own every `interval_ms` (a listing
// of the store directory: tens of files, well under a millisecond). A WAL
// larger than `wal_warn_bytes` is a degraded mode (flushes are not keeping
// up, or the bound is misconfigured): logdex_store_wal_over_bound_total
// counts the samples that found it so, and a warn line says so when it
// first crosses the bound and again at most once a minute while it stays over.
// A store with no local files (HBase) exports nothing.
//
// The same samples flush a quiet store's memtables (`flush_after_ms`,
// store.flush_after): RocksDB flushes a memtable only when it fills or the
// WAL reaches its bound, so a store that takes a few MB an hour kept all of
// it in the WAL for days: rows as written (a quiet stream's chunks of a line
// or two compress little), parts a merge has deleted beside the merged
// chunk, and no table file's compression (the peer benchmark's real-time
// run: 2.9-5.7 bytes on disk per raw byte, nearly all WAL). When the WAL has not
// shrunk (RocksDB deletes a WAL file once every table's rows in it are
// flushed) for flush_after_ms and holds at least kMinAgeFlushWalBytes, the
// sampler flushes every table: logdex_store_age_flushes_total{outcome}, an
// info line per flush, a warn line when it fails (tried again
// flush_after_ms later). Not while the WAL is over its bound (half of
// wal_warn_bytes): RocksDB is flushing then, and a flush asked for during a
// write stall would wait it out on this thread, the gauges and the WAL's
// warning with it. A flush otherwise waits for its memtables to be written
// (a few MB for a quiet store) before the next sample.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "store/table_store.h"

namespace logdex {

// A WAL smaller than this is not worth a flush (a table file per table).
inline constexpr uint64_t kMinAgeFlushWalBytes = 1 << 20;

class StoreDiskMetrics {
 public:
  // `store` and `clock` must outlive this object. wal_warn_bytes 0: no
  // warning; flush_after_ms 0: no flushes.
  StoreDiskMetrics(prometheus::Registry& registry, TableStore& store, const Clock& clock, uint64_t wal_warn_bytes,
                   int64_t flush_after_ms = 0);
  ~StoreDiskMetrics();  // stops the sampler

  // Samples once now (the sampler thread calls it; tests call it directly).
  // Returns what it found (nullopt for a store with no local files).
  std::optional<StoreDiskUsage> Sample();

  // Starts sampling every interval_ms on a thread of its own (first sample at once).
  void Start(int64_t interval_ms);

 private:
  void FlushIfOld(uint64_t wal_bytes, int64_t now_ns);

  TableStore& store_;
  const Clock& clock_;
  const uint64_t wal_warn_bytes_;
  const int64_t flush_after_ms_;
  prometheus::Gauge* sst_ = nullptr;
  prometheus::Gauge* wal_ = nullptr;
  prometheus::Gauge* other_ = nullptr;
  prometheus::Counter* over_bound_ = nullptr;
  prometheus::Counter* flushes_ = nullptr;
  prometheus::Counter* flush_failures_ = nullptr;
  uint64_t last_wal_ = 0;
  // Since when (Clock::MonotonicNs) the WAL has not shrunk nor been flushed by this.
  std::optional<int64_t> wal_since_ns_;
  std::mutex sample_mu_;  // Sample() runs on the sampler thread and in tests
  bool was_over_ = false;
  int64_t warned_ms_ = INT64_MIN / 2;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace logdex
