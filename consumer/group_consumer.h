// GroupConsumer: a member of a Kafka consumer group that indexes what it
// consumes. One thread runs Run(); the rest of the methods may be called
// from other threads (HTTP readiness, metrics).
//
// Delivery rules (docs/ARCHITECTURE.md, "Delivery and consistency"):
// - a batch closes at batch_max_messages, batch_max_bytes or batch_max_wait,
//   or as soon as it holds messages and the client has no more fetched;
// - its dead letters are produced to <topic><dlq_suffix> and acknowledged,
//   then its rows (and staged alerts) are written to the store in one write
//   batch, then its offsets are committed: nothing is committed before it is
//   durable, and a crash replays the batch (chunk ids make that a no-op);
//   with `flush` set (skip_wal), durable means flushed, and the offsets wait
//   for the next flush;
// - while the store or the DLQ fails, every assigned partition is paused and
//   the batch is retried with backoff (log line, `logdex_consumer_paused`);
//   nothing is ever dropped; a dead letter still in flight after a flush is
//   waited for, never produced twice;
// - a store error that can never succeed (kInvalidArgument: a row over the
//   HBase call limit, an empty key, ...) is not retried: the batch's messages
//   are written one by one, those the store rejects are dead-lettered with
//   reason `store_rejected`, and the batch is committed;
// - offset gaps: a partition's next message beyond the offset expected (last
//   consumed + 1, or the committed offset after an assignment) is checked
//   against the partition's log start (consumer/offset_gap.h); what retention
//   deleted is counted in `logdex_consumer_lost_messages_total`, logged with
//   its range and reported by State();
// - with `topic_regex`, topics ending with `dlq_suffix` are never consumed
//   (their partitions are left out of the assignment, logged once);
// - on revocation, messages of revoked partitions not yet processed are
//   abandoned (their offsets were not committed: the new owner reads them);
// - Run() returns after `stop` is set: it finishes the batch, commits and
//   leaves the group.
// - A batch's messages (their values borrow librdkafka's buffers) live until
//   the batch is written or dropped, so a BatchProcessor may run with
//   messages_outlive_batch.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "consumer/batch_processor.h"
#include "consumer/metrics.h"
#include "store/table_store.h"

namespace logdex {

struct GroupConsumerOptions {
  std::map<std::string, std::string> kafka;  // librdkafka properties (bootstrap.servers, SASL, TLS, ...)
  std::string group_id = "logdex";
  std::vector<std::string> topics;           // or
  std::string topic_regex;                   // e.g. "^logs\\..*"
  std::string dlq_suffix = ".dlq";
  uint32_t batch_max_messages = 2000;
  uint64_t batch_max_bytes = 32ull << 20;
  int64_t batch_max_wait_ms = 50;
  int64_t session_timeout_ms = 10'000;
  int64_t retry_backoff_max_ms = 5'000;
  // How long one wait for the dead letters' acknowledgements lasts; those
  // still unacknowledged then are waited for again (never produced twice),
  // with the partitions paused (logdex_consumer_dlq_flush_timeouts_total).
  int64_t dlq_flush_timeout_ms = 5'000;
  // How long an offset commit is waited for. Past it the commit counts as
  // failed (logdex_consumer_commit_failures_total, a warn line) and its
  // offsets go with the next commit, as a refused one's do: through a broker
  // outage, consumption and its error counts go on instead of waiting with
  // it. (librdkafka's close still waits for an abandoned commit to end.)
  int64_t commit_timeout_ms = 10'000;
  // Called on the Run thread after each batch is written; durable too, unless
  // `flush` is set (then durable at the next flush). A batch the store
  // refused for good is written message by message: each one written is
  // handed over on its own, then the batch with no writes left.
  std::function<void(const ProcessedBatch&)> on_written;
  // When set, a written batch is durable only once this returns ok (a
  // RocksDB memtable flush, for durability skip_wal: Kafka is then the
  // write-ahead log). Offsets wait and are committed after a flush, which runs
  // every flush_interval_ms or flush_bytes of written messages, before a
  // revoke and at shutdown. A crash replays from the last commit.
  std::function<Status()> flush;
  int64_t flush_interval_ms = 5'000;
  uint64_t flush_bytes = 256ull << 20;
  // The topics were created empty by this process (`serve --embedded-kafka`):
  // a partition with no committed offset is expected from offset 0, so what
  // retention deleted before the first fetch counts as lost. Otherwise such a
  // partition starts wherever auto.offset.reset puts it, and gap checks begin
  // at its first message.
  bool topics_start_empty = false;
  // Called on the Run thread after every assignment change with the
  // partitions this member now owns (empty after a revoke).
  std::function<void(const std::set<TopicPartition>&)> on_assignment;
};

// Where this member stands, for /readyz.
struct ConsumerState {
  bool ready = false;
  std::string reason;
  size_t assigned = 0;
  int64_t max_lag = 0;
  // Messages the broker deleted before this member consumed them (summed
  // over partitions, since start), and the latest such loss in words, e.g.
  // "lost 4900 messages of logs[3] (offsets 100..4999) ...". Readiness does
  // not depend on them: the loss is in the past and no restart or rerouting
  // brings it back; alert on the metric instead.
  uint64_t lost_messages = 0;
  std::string lost;
};

class GroupConsumer {
 public:
  // `store`, `processor`, `metrics` and `clock` must outlive the consumer.
  GroupConsumer(GroupConsumerOptions options, TableStore& store, BatchProcessor& processor,
                ConsumerMetrics& metrics, const Clock& clock);
  ~GroupConsumer();

  // Creates the Kafka clients and subscribes.
  Status Start();

  // Consumes, indexes and commits until `stop` is set, then leaves the group.
  Status Run(const std::atomic<bool>& stop);

  // Ready when partitions are assigned and each is within `max_lag` messages.
  ConsumerState State(int64_t max_lag) const;

  // The next offset of the partition this member has seen committed (by its
  // own commits, or read at an assignment); nullopt before any. A message
  // below it is never replayed to the group (unless its offsets are reset).
  // Thread-safe.
  std::optional<int64_t> CommittedOffset(const std::string& topic, int32_t partition) const;

  // Reads the group's committed offsets of `partitions` from the broker, this
  // member's or any other's, into what CommittedOffset() answers (which
  // otherwise knows only this member's partitions). Blocks up to
  // `timeout_ms`. Thread-safe; fails once the consumer left its group.
  // For a compactor on a store the group shares: its parts come from every
  // member's partitions.
  Status RefreshCommitted(const std::vector<std::pair<std::string, int32_t>>& partitions, int timeout_ms);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex
