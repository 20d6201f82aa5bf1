#include "server/compaction_runner.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "indexer/compaction_lease.h"

namespace logdex {
namespace {

prometheus::Counter* Counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {}) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}
prometheus::Gauge* Gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

CompactionRunner::CompactionRunner(prometheus::Registry& registry, Compactor& compactor, const Clock& clock,
                                   int64_t interval_ms, uint64_t max_rate_bytes)
    : compactor_(compactor), clock_(clock), interval_ms_(interval_ms), max_rate_bytes_(max_rate_bytes) {
  merges_ = Counter(registry, "logdex_compaction_merges_total", "Merged chunks the compactor wrote");
  parts_ = Counter(registry, "logdex_compaction_parts_total", "Small stored chunks merged into them (and deleted)");
  records_ = Counter(registry, "logdex_compaction_records_total", "Records the compactor rewrote");
  auto& bytes = prometheus::BuildCounter()
                    .Name("logdex_compaction_bytes_total")
                    .Help("Stored chunk bytes the compactor read (dir=in: the parts) and wrote (dir=out: the merged chunks)")
                    .Register(registry);
  bytes_in_ = &bytes.Add({{"dir", "in"}});
  bytes_out_ = &bytes.Add({{"dir", "out"}});
  token_filters_ = Counter(registry, "logdex_compaction_token_filters_total",
                           "Token filters written with merged chunks (text queries skip chunks they rule out)");
  token_filter_bytes_ = Counter(registry, "logdex_compaction_token_filter_bytes_total", "Bytes of those token filters");
  token_filters_skipped_ = Counter(registry, "logdex_compaction_token_filters_skipped_total",
                                   "Merged chunks written without a token filter: too many distinct tokens for its "
                                   "byte share (compaction.token_filter_percent); text queries read them");
  plain_merges_ = Counter(registry, "logdex_compaction_plain_merges_total",
                          "Merged chunks written as plain zstd, not by columns (compaction.columns): their records "
                          "are in a form the columns do not hold (a newer producer's fields, or encoded otherwise "
                          "than logdex writes them) or would not be smaller; kept as they are");
  cpu_ = Counter(registry, "logdex_compaction_cpu_seconds_total", "CPU time of compaction passes");
  passes_ = Counter(registry, "logdex_compaction_passes_total", "Compaction passes run");
  deep_passes_ = Counter(registry, "logdex_compaction_deep_passes_total",
                         "Passes that looked back to every stream's oldest record, not compaction.lookback (the "
                         "first, then one every compaction.deep_interval, and the next after one stopped or left "
                         "runs older than the lookback for want of budget; RocksDB only): chunks written with older "
                         "times merge too");
  failures_ = Counter(registry, "logdex_compaction_failures_total",
                      "Compaction passes a store error stopped (what was merged stays merged; the next pass retries)");
  corrupt_ = Counter(registry, "logdex_compaction_corrupt_parts_total",
                     "Stored chunks the compactor could not decode, each counted once: left as they are");
  waiting_ = Gauge(registry, "logdex_compaction_waiting_parts",
                   "Parts the last pass left because their Kafka offsets are not committed yet");
  growing_ = Gauge(registry, "logdex_compaction_growing_runs",
                   "Runs the last pass left because late records kept arriving into them: grown since the pass "
                   "before, or their stream merged within compaction.settle");
  runs_left_ = Gauge(registry, "logdex_compaction_runs_left",
                     "Closed runs of small chunks the last pass had no budget for (compaction.max_pass_bytes)");
  lag_ = Gauge(registry, "logdex_compaction_lag_seconds",
               "Age of the newest record of the oldest run the last pass left unmerged (0: none left)");
  removed_ = Counter(registry, "logdex_compaction_removed_parts_total",
                     "Parts removed after their merged chunk landed (stores without atomic writes: HBase)");
  removals_waiting_ = Gauge(registry, "logdex_compaction_removals_waiting",
                            "Parts a merged chunk lists that stay for compaction.removal_delay (HBase)");
  lease_held_ = Gauge(registry, "logdex_compaction_lease_held",
                      "1 while this member holds the compaction lease of a shared store (HBase): only it merges");
  takeovers_ = Counter(registry, "logdex_compaction_lease_takeovers_total",
                       "Compaction leases this member took over from a holder that stopped renewing it");
  lease_lost_ = Counter(registry, "logdex_compaction_lease_lost_total",
                        "Passes stopped because the compaction lease went to another member (this one stalled)");
}

CompactionRunner::~CompactionRunner() {
  compactor_.RequestStop();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<CompactionPass> CompactionRunner::RunOnce() {
  const int64_t start_ns = clock_.MonotonicNs();
  // Pacing: after each merge, wait until the bytes merged so far fit max_rate.
  auto pace = [&](uint64_t bytes) {
    const int64_t due_ns = start_ns + static_cast<int64_t>(static_cast<double>(bytes) / max_rate_bytes_ * 1e9);
    std::unique_lock lock(mu_);
    const int64_t wait_ns = due_ns - clock_.MonotonicNs();
    if (wait_ns > 0) cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns), [this] { return stop_; });
    return !stop_;
  };
  auto result = compactor_.Pass(clock_.NowMs(), pace);
  passes_->Increment();
  if (compactor_.last_pass().deep) deep_passes_->Increment();
  // What a pass that stopped on an error merged before it is counted too.
  const CompactionPass* pass = &compactor_.last_pass();
  if (pass->lease_lost) {
    lease_lost_->Increment();
    spdlog::info("compaction: the lease went to another member (this one did not renew it within "
                 "compaction.lease_period); the pass stopped after {} merges",
                 pass->merges);
  } else if (!result.ok()) {
    failures_->Increment();
    spdlog::warn("compaction: the pass stopped on a store error ({}) after {} merges; the next pass retries",
                 result.error().ToString(), pass->merges);
  }
  if (CompactionLease* lease = compactor_.options().lease) {
    lease_held_->Set(lease->held() ? 1 : 0);
    takeovers_->Increment(static_cast<double>(lease->takeovers() - takeovers_seen_));
    if (lease->takeovers() > takeovers_seen_) {
      spdlog::info("compaction: took the lease over from a member that stopped renewing it");
    }
    takeovers_seen_ = lease->takeovers();
  }
  removed_->Increment(static_cast<double>(pass->repaired_parts));
  merges_->Increment(static_cast<double>(pass->merges));
  parts_->Increment(static_cast<double>(pass->parts));
  records_->Increment(static_cast<double>(pass->records));
  bytes_in_->Increment(static_cast<double>(pass->bytes_in));
  bytes_out_->Increment(static_cast<double>(pass->bytes_out));
  cpu_->Increment(static_cast<double>(pass->cpu_ns) / 1e9);
  token_filters_->Increment(static_cast<double>(pass->token_filters));
  token_filter_bytes_->Increment(static_cast<double>(pass->token_filter_bytes));
  token_filters_skipped_->Increment(static_cast<double>(pass->token_filters_skipped));
  corrupt_->Increment(static_cast<double>(pass->corrupt_parts));
  plain_merges_->Increment(static_cast<double>(pass->plain_merges));
  if (pass->lease_elsewhere) {  // another member merges: nothing waits here
    for (prometheus::Gauge* g : {waiting_, runs_left_, growing_, lag_, removals_waiting_}) g->Set(0);
  } else if (result.ok() && !pass->stopped) {  // a pass cut short saw only part of what waits
    waiting_->Set(static_cast<double>(pass->unsafe_parts));
    runs_left_->Set(static_cast<double>(pass->runs_left));
    growing_->Set(static_cast<double>(pass->runs_growing));
    lag_->Set(static_cast<double>(pass->lag_ms) / 1000.0);
    removals_waiting_->Set(static_cast<double>(pass->removals_waiting));
  }
  if (pass->merges > 0) {
    spdlog::info("compaction: merged {} chunks into {} ({} records; {} -> {} bytes) in {:.1f} ms of CPU", pass->parts,
                 pass->merges, pass->records, pass->bytes_in, pass->bytes_out, pass->cpu_ns / 1e6);
  }
  if (pass->token_filters_skipped > 0) {
    spdlog::info("compaction: {} merged chunks got no token filter (too many distinct tokens for {} % of their bytes, "
                 "compaction.token_filter_percent); text queries read them",
                 pass->token_filters_skipped, compactor_.options().indexer.token_filter_max_ratio * 100);
  }
  if (pass->plain_merges > 0) {
    spdlog::info("compaction: {} merged chunks written as plain zstd, not by columns: their records are in a form "
                 "the columns do not hold (a newer producer's fields, or encoded otherwise than logdex writes them) "
                 "or would not be smaller; kept as they are",
                 pass->plain_merges);
  }
  if (pass->corrupt_parts > 0) {
    spdlog::warn("compaction: {} stored chunks did not decode and were left as they are", pass->corrupt_parts);
  }
  const int64_t now = clock_.NowMs();
  if (pass->runs_left > 0 && now - warned_ms_ >= 60'000) {
    warned_ms_ = now;
    spdlog::warn("compaction: behind: {} closed runs left, the oldest ending {} s ago (compaction.max_pass_bytes, "
                 "compaction.max_rate)",
                 pass->runs_left, pass->lag_ms / 1000);
  }
  return result;
}

void CompactionRunner::Start(int64_t first_delay_ms) {
  if (thread_.joinable()) return;
  thread_ = std::thread([this, first_delay_ms] {
    // The lowest priority: compaction takes only CPU that ingest, queries and
    // alerting leave (Linux: per-thread nice through the thread id).
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19) != 0) {
      spdlog::info("compaction: could not lower the thread's priority; it runs at the process's");
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(first_delay_ms, 0)), [this] { return stop_; });
    while (!stop_) {
      lock.unlock();
      (void)RunOnce();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_; });
    }
  });
}

}  // namespace logdex
