// logdex_store_disk_bytes{kind="sst"|"wal"|"other"}: what the store holds on
// local disk, sampled on a thread of its own every `interval_ms` (a listing
// of the store directory: tens of files, well under a millisecond). A WAL
// larger than `wal_warn_bytes` is a degraded mode (flushes are not keeping
// up, or the bound is misconfigured): logdex_store_wal_over_bound_total
// counts the samples that found it so, and a warn line says so when it
// first crosses the bound and again at most once a minute while it stays over.
// A store with no local files (HBase) exports nothing.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "store/table_store.h"

namespace logdex {

class StoreDiskMetrics {
 public:
  // `store` and `clock` must outlive this object. wal_warn_bytes 0: no warning.
  StoreDiskMetrics(prometheus::Registry& registry, const TableStore& store, const Clock& clock,
                   uint64_t wal_warn_bytes);
  ~StoreDiskMetrics();  // stops the sampler

  // Samples once now (the sampler thread calls it; tests call it directly).
  // Returns what it found (nullopt for a store with no local files).
  std::optional<StoreDiskUsage> Sample();

  // Starts sampling every interval_ms on a thread of its own (first sample at once).
  void Start(int64_t interval_ms);

 private:
  const TableStore& store_;
  const Clock& clock_;
  const uint64_t wal_warn_bytes_;
  prometheus::Gauge* sst_ = nullptr;
  prometheus::Gauge* wal_ = nullptr;
  prometheus::Gauge* other_ = nullptr;
  prometheus::Counter* over_bound_ = nullptr;
  std::mutex sample_mu_;  // Sample() runs on the sampler thread and in tests
  bool was_over_ = false;
  int64_t warned_ms_ = INT64_MIN / 2;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace logdex
