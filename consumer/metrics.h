// The consumer's metrics, declared in one place (STYLE.md): names
// logdex_<component>_<what>_<unit>, `_total` for counters, help text always.
// Labels are bounded: topic and partition, table, reason.
// Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

namespace logdex {

class ConsumerMetrics {
 public:
  explicit ConsumerMetrics(prometheus::Registry& registry);

  prometheus::Counter& messages;       // messages consumed
  prometheus::Counter& bytes;          // message value bytes consumed
  prometheus::Counter& records;        // log records indexed
  prometheus::Counter& chunks;         // chunks indexed
  prometheus::Counter& batches;        // batches written and committed
  prometheus::Histogram& batch_seconds;   // from first message to commit
  prometheus::Histogram& commit_seconds;  // offset commit latency
  prometheus::Counter& commit_failures;
  prometheus::Histogram& store_write_seconds;
  prometheus::Counter& store_write_failures;
  prometheus::Gauge& paused;           // 1 while partitions are paused (store or DLQ failing)
  prometheus::Counter& pauses;         // times partitions were paused
  prometheus::Counter& dlq_failures;   // failed attempts to produce to the DLQ
  prometheus::Counter& dlq_truncated;       // dead letters whose value was cut to kDlqMaxValueBytes
  prometheus::Counter& dlq_flush_timeouts;  // dead letters still unacknowledged after a flush (waited for)
  prometheus::Counter& store_rejected_batches;  // batches the store refused permanently (then salvaged)
  prometheus::Counter& kafka_errors;   // client errors (broker down, transport, ...)
  prometheus::Gauge& assigned_partitions;
  prometheus::Counter& rebalances;
  prometheus::Counter& alerts_staged;  // notifications written with their batch (serve's AlertObserver counts them)
  // durability skip_wal: offsets wait for a store flush.
  prometheus::Histogram& flush_seconds;
  prometheus::Counter& flush_failures;
  prometheus::Gauge& unflushed_messages;  // written, offsets not yet committed

  prometheus::Counter& DeadLettered(const std::string& reason);
  prometheus::Counter& RowsWritten(const std::string& table);
  prometheus::Gauge& Lag(const std::string& topic, int32_t partition);
  // Messages the broker no longer had when this member fetched them.
  prometheus::Counter& LostMessages(const std::string& topic, int32_t partition);

 private:
  prometheus::Family<prometheus::Counter>& dead_lettered_;
  prometheus::Family<prometheus::Counter>& rows_written_;
  prometheus::Family<prometheus::Gauge>& lag_;
  prometheus::Family<prometheus::Counter>& lost_;
};

}  // namespace logdex
