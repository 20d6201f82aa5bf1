#include "consumer/metrics.h"

namespace logdex {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}
prometheus::Histogram& Seconds(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
}

}  // namespace

ConsumerMetrics::ConsumerMetrics(prometheus::Registry& r)
    : messages(Counter(r, "logdex_consumer_messages_total", "Kafka messages consumed")),
      bytes(Counter(r, "logdex_consumer_bytes_total", "Bytes of Kafka message values consumed")),
      records(Counter(r, "logdex_indexer_records_total", "Log records indexed")),
      chunks(Counter(r, "logdex_indexer_chunks_total", "Chunks indexed")),
      batches(Counter(r, "logdex_consumer_batches_total", "Batches written to the store and committed")),
      batch_seconds(Seconds(r, "logdex_consumer_batch_seconds", "Time from a batch's first message to its commit")),
      commit_seconds(Seconds(r, "logdex_consumer_commit_seconds", "Latency of Kafka offset commits")),
      commit_failures(Counter(r, "logdex_consumer_commit_failures_total",
                              "Offset commits that failed (the batch is replayed idempotently)")),
      store_write_seconds(Seconds(r, "logdex_store_write_seconds", "Latency of store write batches")),
      store_write_failures(Counter(r, "logdex_store_write_failures_total", "Store write batches that failed")),
      paused(Gauge(r, "logdex_consumer_paused", "1 while partitions are paused because the store or DLQ fails")),
      pauses(Counter(r, "logdex_consumer_pauses_total", "Times the consumer paused its partitions")),
      dlq_failures(Counter(r, "logdex_consumer_dlq_failures_total", "Failed attempts to produce to the dead-letter topic")),
      dlq_truncated(Counter(r, "logdex_consumer_dlq_truncated_total",
                            "Dead letters over the size Kafka accepts, produced cut (the whole message stays in its "
                            "source topic)")),
      dlq_flush_timeouts(Counter(r, "logdex_consumer_dlq_flush_timeouts_total",
                                 "Times dead letters were still unacknowledged after a 5 s flush; they are waited "
                                 "for, not produced again")),
      store_rejected_batches(Counter(r, "logdex_consumer_store_rejected_batches_total",
                                     "Batches the store rejected with a permanent error; their messages were then "
                                     "written one by one and the rejected ones dead-lettered (reason store_rejected)")),
      kafka_errors(Counter(r, "logdex_consumer_kafka_errors_total", "Kafka client errors (broker down, transport)")),
      assigned_partitions(Gauge(r, "logdex_consumer_assigned_partitions", "Partitions assigned to this member")),
      rebalances(Counter(r, "logdex_consumer_rebalances_total", "Consumer group rebalances seen")),
      alerts_staged(Counter(r, "logdex_consumer_alerts_staged_total", "Alerts written to the outbox with their batch")),
      flush_seconds(Seconds(r, "logdex_store_flush_seconds",
                            "Latency of the memtable flushes that precede offset commits (durability skip_wal)")),
      flush_failures(Counter(r, "logdex_store_flush_failures_total",
                             "Store flushes that failed; their offsets stay uncommitted (durability skip_wal)")),
      unflushed_messages(Gauge(r, "logdex_consumer_unflushed_messages",
                               "Messages written but not yet flushed, so not committed (durability skip_wal)")),
      dead_lettered_(BuildCounter()
                         .Name("logdex_consumer_dead_lettered_total")
                         .Help("Messages sent to the dead-letter topic, by reason")
                         .Register(r)),
      rows_written_(BuildCounter()
                        .Name("logdex_store_rows_written_total")
                        .Help("Rows written to the store, by table")
                        .Register(r)),
      lag_(BuildGauge()
               .Name("logdex_consumer_lag_messages")
               .Help("Messages behind the partition's high watermark")
               .Register(r)),
      lost_(BuildCounter()
                .Name("logdex_consumer_lost_messages_total")
                .Help("Messages the broker deleted (retention) before this member consumed them: offsets skipped "
                      "below the partition's log start")
                .Register(r)) {}

prometheus::Counter& ConsumerMetrics::DeadLettered(const std::string& reason) {
  return dead_lettered_.Add({{"reason", reason}});
}
prometheus::Counter& ConsumerMetrics::RowsWritten(const std::string& table) {
  return rows_written_.Add({{"table", table}});
}
prometheus::Gauge& ConsumerMetrics::Lag(const std::string& topic, int32_t partition) {
  return lag_.Add({{"topic", topic}, {"partition", std::to_string(partition)}});
}

prometheus::Counter& ConsumerMetrics::LostMessages(const std::string& topic, int32_t partition) {
  return lost_.Add({{"topic", topic}, {"partition", std::to_string(partition)}});
}

}  // namespace logdex
