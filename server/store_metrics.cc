#include "server/store_metrics.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace logdex {

StoreDiskMetrics::StoreDiskMetrics(prometheus::Registry& registry, TableStore& store, const Clock& clock,
                                   uint64_t wal_warn_bytes, int64_t flush_after_ms)
    : store_(store), clock_(clock), wal_warn_bytes_(wal_warn_bytes), flush_after_ms_(flush_after_ms) {
  if (!store.disk_usage()) return;  // nothing local to report
  auto& disk = prometheus::BuildGauge()
                   .Name("logdex_store_disk_bytes")
                   .Help("Sizes of the files the store holds on local disk, by kind: sst (table files), wal "
                         "(write-ahead log), other (manifest, options, info logs)")
                   .Register(registry);
  sst_ = &disk.Add({{"kind", "sst"}});
  wal_ = &disk.Add({{"kind", "wal"}});
  other_ = &disk.Add({{"kind", "other"}});
  over_bound_ = &prometheus::BuildCounter()
                     .Name("logdex_store_wal_over_bound_total")
                     .Help("Disk samples that found the write-ahead log above twice its bound (store.max_wal, or "
                           "store.memtable_budget)")
                     .Register(registry)
                     .Add({});
  if (flush_after_ms_ > 0) {
    auto& flushes = prometheus::BuildCounter()
                        .Name("logdex_store_age_flushes_total")
                        .Help("Flushes of every table's memtables because the write-ahead log had not shrunk for "
                              "store.flush_after, by outcome (ok, failed)")
                        .Register(registry);
    flushes_ = &flushes.Add({{"outcome", "ok"}});
    flush_failures_ = &flushes.Add({{"outcome", "failed"}});
  }
}

StoreDiskMetrics::~StoreDiskMetrics() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<StoreDiskUsage> StoreDiskMetrics::Sample() {
  std::lock_guard lock(sample_mu_);
  std::optional<StoreDiskUsage> u = store_.disk_usage();
  if (!u || !sst_) return u;
  sst_->Set(static_cast<double>(u->sst));
  wal_->Set(static_cast<double>(u->wal));
  other_->Set(static_cast<double>(u->other));
  const bool over = wal_warn_bytes_ != 0 && u->wal > wal_warn_bytes_;
  if (over) {
    over_bound_->Increment();
    const int64_t now = clock_.NowMs();
    if (!was_over_ || now - warned_ms_ >= 60'000) {
      spdlog::warn("store: the write-ahead log holds {} bytes, over its bound of {} (twice store.max_wal, or "
                   "store.memtable_budget): memtable flushes are not keeping up",
                   u->wal, wal_warn_bytes_);
      warned_ms_ = now;
    }
  } else if (was_over_) {
    spdlog::info("store: the write-ahead log is back to {} bytes, within its bound of {}", u->wal, wal_warn_bytes_);
  }
  was_over_ = over;
  if (flush_after_ms_ > 0) FlushIfOld(u->wal, clock_.MonotonicNs());
  return u;
}

void StoreDiskMetrics::FlushIfOld(uint64_t wal_bytes, int64_t now_ns) {
  if (!wal_since_ns_ || wal_bytes < last_wal_) wal_since_ns_ = now_ns;
  last_wal_ = wal_bytes;
  const int64_t unflushed_ms = (now_ns - *wal_since_ns_) / 1'000'000;
  if (wal_bytes < kMinAgeFlushWalBytes || unflushed_ms < flush_after_ms_) return;
  if (wal_warn_bytes_ != 0 && wal_bytes >= wal_warn_bytes_ / 2) return;  // over its bound: RocksDB is flushing
  wal_since_ns_ = now_ns;  // the next flush (or try) comes flush_after_ms later at the earliest
  if (Status s = store_.Flush(); !s.ok()) {
    flush_failures_->Increment();
    spdlog::warn("store: flushing the memtables failed ({}); the write-ahead log keeps {} bytes; tried again in {} ms",
                 s.message(), wal_bytes, flush_after_ms_);
    return;
  }
  flushes_->Increment();
  spdlog::info("store: flushed the memtables: the write-ahead log held {} bytes and had not shrunk for {} ms "
               "(store.flush_after)",
               wal_bytes, unflushed_ms);
}

void StoreDiskMetrics::Start(int64_t interval_ms) {
  if (!sst_ || thread_.joinable()) return;
  thread_ = std::thread([this, interval_ms] {
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      Sample();
      lock.lock();
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stop_; });
    }
  });
}

}  // namespace logdex
