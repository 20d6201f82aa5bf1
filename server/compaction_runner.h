// serve's compaction thread: runs a Compactor (indexer/compactor.h) pass
// every `interval_ms`, paced to at most `max_rate_bytes` of parts
// (uncompressed) per second, at the lowest CPU priority of its process
// (nice 19), so that ingest and alerting keep theirs. Metrics:
//   logdex_compaction_merges_total, logdex_compaction_parts_total,
//   logdex_compaction_records_total, logdex_compaction_bytes_total{dir="in"|"out"}
//   (stored chunk bytes of parts and of merged chunks),
//   logdex_compaction_cpu_seconds_total, logdex_compaction_passes_total,
//   logdex_compaction_deep_passes_total (passes back to every stream's oldest record),
//   logdex_compaction_failures_total (a pass the store failed: retried next
//   pass; what it merged before is counted), logdex_compaction_corrupt_parts_total
//   (each bad part once), logdex_compaction_waiting_parts
//   (parts not yet replay-safe at the last pass), logdex_compaction_runs_left and
//   logdex_compaction_lag_seconds (closed runs the last pass had no budget
//   for, and the age of the oldest: the compactor is behind; a warn line says
//   so at most once a minute), logdex_compaction_growing_runs (runs late
//   records keep growing, left to wait: indexer/compactor.h).
// On a shared store (HBase): logdex_compaction_removed_parts_total and
//   logdex_compaction_removals_waiting (parts kept for compaction.removal_delay),
//   logdex_compaction_lease_held (1 on the member that merges),
//   logdex_compaction_lease_takeovers_total, logdex_compaction_lease_lost_total
//   (passes stopped because another member took the lease: not failures).
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
#include "indexer/compactor.h"

namespace logdex {

class CompactionRunner {
 public:
  // `compactor` and `clock` must outlive the runner.
  CompactionRunner(prometheus::Registry& registry, Compactor& compactor, const Clock& clock, int64_t interval_ms,
                   uint64_t max_rate_bytes);
  ~CompactionRunner();  // stops the thread (a pass under way stops after its current merge)

  // One pass now, paced, on the calling thread (the thread's loop; tests).
  Result<CompactionPass> RunOnce();

  // Starts the thread; its first pass comes after `first_delay_ms`.
  void Start(int64_t first_delay_ms = 0);

 private:
  Compactor& compactor_;
  const Clock& clock_;
  const int64_t interval_ms_;
  const uint64_t max_rate_bytes_;
  prometheus::Counter *token_filters_, *token_filter_bytes_, *token_filters_skipped_;
  prometheus::Counter *merges_, *parts_, *records_, *bytes_in_, *bytes_out_, *cpu_, *passes_, *deep_passes_,
      *failures_, *corrupt_, *plain_merges_;
  prometheus::Gauge *waiting_, *runs_left_, *growing_, *lag_;
  // Stores without atomic writes (HBase): removals and the lease.
  prometheus::Counter *removed_, *takeovers_, *lease_lost_;
  prometheus::Gauge *removals_waiting_, *lease_held_;
  uint64_t takeovers_seen_ = 0;
  int64_t warned_ms_ = INT64_MIN / 2;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace logdex
