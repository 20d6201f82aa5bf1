// AlertStager: the ingest-path half of alerting. For each decoded chunk it
// runs detection, grouping and storm control, and appends outbox rows (and
// its own state rows) to the caller's WriteBatch, the same batch that holds
// the chunk's rows, so alerts become durable exactly when the chunk does,
// before the Kafka offset commit. On a shared store the state rows are the
// exception: Stage() writes them itself (see alert_state below).
//
// What Stage() writes into the batch:
//   alert_outbox  one row per (notification, sink): events due now; digests
//                 and storm summaries due when their window closes + digest_delay
//                 (rewritten in place while their count grows)
//   alert_state   grouping and limit-window state (the stager's memory is a
//                 cache of these rows, so a restarted serve continues the
//                 same windows and counts). On a store other members write
//                 (TableStore::shared(), HBase) these rows are not in the
//                 batch: Stage() writes them itself, each conditional on the
//                 bytes it read, and stages the chunk again when another
//                 member changed one in between (so members share one count).
//                 Until BatchWritten(), a chunk whose state was written gives
//                 the same rows when staged again, without counting twice;
//                 docs/ARCHITECTURE.md ("Alerts: de-duplication and storm
//                 control") lists what can still count a chunk twice
//   alert_seen    the chunk id (after the chunk's outbox rows; only when a
//                 record reached grouping): staging a chunk id that is
//                 already there (a replay after a crash or a rebalance)
//                 notifies no one
//
// Storm control per record that a rule takes (rules: detector.h):
//   1. its group (fingerprint) has sent < per_group in its window -> it is a
//      candidate for an immediate event; otherwise it counts into the group
//      digest ("N more since 12:00:03"), delivered when the window closes;
//   2. a candidate beyond the global cap of the limit window counts into the
//      window's storm summary; beyond its app's limit, into the app digest;
//   3. otherwise it becomes an event notification, due now.
// Every detected, non-suppressed record is counted by exactly one
// notification, so the counts of all notifications sum to the records.
// Per limit window at most: `global` events, one digest per group that sent
// an event, one app digest per capped app, one storm summary.
//
// Ownership: borrows the store, clock and registry; they must outlive it.
// Thread-safety: all methods may be called concurrently (calls serialize on an
// internal mutex), but Stage(), BatchWritten() and DiscardCache() assume one
// batch in flight at a time (serve's consumer loop).
#pragma once

#include <prometheus/registry.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alerting/config.h"
#include "alerting/detector.h"
#include "alerting/metrics.h"
#include "alerting/notification.h"
#include "common/clock.h"
#include "common/ids.h"
#include "proto/logdex.pb.h"
#include "store/table_store.h"

namespace logdex::alerting {

// Creates (or opens) alert_outbox, alert_state (TTL state_ttl_s) and
// alert_seen (TTL dedup_ttl_s). Call once at startup, before constructing an
// AlertStager or SinkDispatcher on the store.
Status CreateAlertingTables(TableStore& store, const AlertingConfig& config);

// What AlertStager::RaiseDigestToItsState did.
enum class DigestState { kRaised, kUnchanged, kGone };

class AlertStager {
 public:
  // `config` should have passed ValidateAlertingConfig (ParseAlertingConfig does it).
  AlertStager(AlertingConfig config, TableStore& store, const Clock& clock, prometheus::Registry& registry);
  ~AlertStager();
  AlertStager(const AlertStager&) = delete;
  AlertStager& operator=(const AlertStager&) = delete;

  // True when some record of this chunk may be taken by a rule: the chunk's
  // severity is mixed (0) or at least MinSeverity(). Serve decompresses and
  // calls Stage() only for such chunks.
  bool Wants(const proto::LogChunk& chunk) const;
  Severity MinSeverity() const { return detector_.MinSeverity(); }

  // Detects, groups and rate-limits the records of one decoded chunk and
  // appends outbox/state/seen rows to `batch`. `chunk` supplies app, host and
  // the default severity (records with severity 0 inherit it); `records` is
  // its decoded payload; `chunk_id` names the chunk as stored (the indexer's
  // StreamChunk::id: ChunkIdOf(producer, sequence), or the id derived from
  // the Kafka source, or a split part's own id); `kafka_ts_ms` is the Kafka
  // message timestamp (ms since epoch), the origin of the delivery-latency
  // histogram (0 = unknown).
  // Returns the number of outbox rows appended (0 for a replayed chunk; a
  // digest rewritten in place counts each time it is rewritten).
  // Errors: the store's (a read, or on a shared store a conditional write of
  // state), and kUnavailable when other members changed the chunk's state
  // rows under 16 stagings in a row; the batch may then hold part of the
  // chunk's alert rows: fail the whole batch and call DiscardCache().
  Result<size_t> Stage(const proto::LogChunk& chunk, ChunkId chunk_id, const proto::RecordBatch& records,
                       int64_t kafka_ts_ms, WriteBatch& batch);

  // Reads the alert_seen rows of `chunk_ids` (the chunks of a batch about to
  // be staged) in one MultiGet: Stage() then reads none of them itself (on
  // HBase, one round trip per batch instead of one per ERROR chunk). What
  // was read holds until DiscardPrefetched() or DiscardCache().
  // Errors: the store's; nothing was read ahead, and Stage() reads each row.
  Status PrefetchSeen(const std::vector<ChunkId>& chunk_ids);
  void DiscardPrefetched();

  // Forgets cached state. Call when a batch that Stage() wrote into could not
  // be written (the cache would be ahead of the store); later calls reload
  // state from the store.
  void DiscardCache();

  // The batch that Stage() wrote into since the last call (or the last
  // DiscardCache()) was written. On a shared store Stage() keeps the rows
  // of each chunk whose state it wrote until its batch is written, so that
  // a chunk staged again in this process (its batch failed while it was
  // staged, or is salvaged message by message) gives the same
  // notifications without counting twice.
  void BatchWritten();

  // A digest (group, app or storm window) with the count its window's state
  // row now holds. Each member writes a digest's outbox row in its batch with
  // the count it staged, so a batch that lands after a later member's
  // leaves the smaller count there; the state row, written by conditional
  // writes while staging, has every member's. The dispatcher calls this
  // before it sends a digest: `n`'s count (and first time) are raised to
  // the state row's when that row holds the digest's window (the same
  // idempotency key), or held it as its last window with a digest (a
  // group's row keeps that one's count). The sample record, its time and
  // the link stay the outbox row's. kGone: an event, or a window no longer
  // held (expired, or a later one had a digest); `n` is left as it is.
  static Result<DigestState> RaiseDigestToItsState(TableStore& store, Notification& n);

 private:
  struct Sample;
  struct State;
  struct Staging;
 public:
  // For GET /api/v1/alerts: the alert groups whose latest record is at or
  // after `since_ms` (alert_state's group windows, newest first, at most
  // `limit`) and the notifications waiting in the outbox (at most `limit`),
  // as JSON {"groups": [{app, host, severity, rule, group, template, message,
  // ts, time, window_start, window_end, sent, suppressed}], "pending": [{kind,
  // sink, attempts, last_error, app, host, severity, count, ts, time,
  // summary, query_url}], "truncated": bool}. Reads the store only (any
  // member's). Errors: the store's.
  static Result<std::string> RecentJson(TableStore& store, int64_t since_ms, size_t limit);

 private:
  // Whether the chunk was staged before (durably, or in a batch not yet
  // written); a replay's matching records are counted as suppressed.
  Result<bool> IsReplay(const proto::LogChunk& chunk, ChunkId chunk_id, const proto::RecordBatch& records);
  // What a notification shows of a record `rule` took, sanitized, with its group.
  static Sample SampleOf(const std::string& app, const std::string& host, const CompiledRule& rule,
                         Severity severity, const proto::LogRecord& rec);
  // Storm control of one record a rule took (steps 1 and 2 above) in the
  // windows of `st`: true when it becomes an event; otherwise it was counted
  // into the digest that reports it. Errors: a state read failed.
  Result<bool> Admit(const Sample& sample, const std::vector<std::string>& sinks, Staging& st, WriteBatch& batch);
  // The state of a limit window (the storm summary's or an app's) of `st`'s
  // slot, opened as a `kind` digest keyed `key_prefix`<slot> when new; null
  // on a failed read (`error`).
  State* LoadLimitWindow(const std::string& key, NotificationKind kind, const std::string& key_prefix,
                         const Staging& st, Status* error);
  // The immediate notification of one record (the caller adds its query link).
  static Notification EventOf(const Sample& sample, std::string idempotency_key, int64_t kafka_ts_ms,
                              int64_t now_ms);
  State* Load(const std::string& key, bool* ok, Status* error);
  // Detection and storm control of the chunk's records into `st` and
  // `batch` (events; digests and states are written by the caller). True
  // when some record reached grouping. Errors: a state read failed.
  Result<bool> StageRecords(const proto::LogChunk& chunk, ChunkId chunk_id, const proto::RecordBatch& records,
                            int64_t kafka_ts_ms, Staging& st, WriteBatch& batch);
  void PutState(const std::string& key, const State& s, WriteBatch& batch);
  // On a shared store: writes `st`'s changed states, each only where it
  // still holds what this member read (TableStore::CheckAndPut); false when
  // another member's write came first. On a loss or an error the rows
  // written before it are put back where they still hold this member's
  // write; one that cannot be is counted (their window then counts the
  // chunk twice once it is staged again). Errors: the store's.
  Result<bool> WriteStates(Staging& st, ChunkId chunk_id);
  // The end of a staging that holds: the seen row (`seen_value` empty:
  // none) and the replay guard's memory. Returns `notifications`.
  size_t Staged(ChunkId chunk_id, const std::string& seen_value, WriteBatch& batch, size_t notifications);
  // Drops a staging that does not hold (its states are read again on a
  // shared store).
  void Forget(Staging& st);
  // Forgets kept stagings (staged_) of chunks not in the current batch:
  // all of them, or those kept for over kKeptForBatches written batches.
  void ForgetKeptStagings(bool all_but_this_batch);
  // One conditional write; true when the row now holds `value` by this call.
  Result<bool> WriteState(const std::string& key, const std::optional<std::string>& expected,
                          const std::string& value);
  size_t PutDigest(State& s, Staging& st, WriteBatch& batch);
  size_t PutEvent(const Notification& n, const std::vector<std::string>& sinks, Staging& st, WriteBatch& batch);
  // QueryLink() with the configured base (empty without one).
  std::string QueryUrl(std::string_view app, std::string_view host, Severity s, int64_t from_ms, int64_t to_ms) const;
  void MaybeEvict(int64_t now_ms);

  const AlertingConfig config_;
  TableStore& store_;
  const Clock& clock_;
  const bool conditional_;  // state rows written by CheckAndPut (a shared store)
  AlertingMetrics metrics_;
  Detector detector_;
  std::vector<std::string> all_sinks_;

  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<State>> cache_;  // state key -> state
  // Chunk ids staged recently (their seen rows may still sit in an unwritten batch).
  std::unordered_set<ChunkId> recent_chunks_;
  std::deque<ChunkId> recent_order_;
  // alert_seen rows read ahead (PrefetchSeen): chunk id -> whether it has one.
  std::unordered_map<ChunkId, bool> prefetched_seen_;
  std::mt19937_64 write_ids_{std::random_device{}()};  // State::write_id, and jitter
  // Chunks whose state was written, with their rows, until BatchWritten().
  struct StagedRows {
    struct Row {
      std::string table, key, value;
    };
    std::vector<Row> rows;   // its outbox rows (its notifications: one per sink)
    std::string seen_value;  // empty: no seen row
    uint64_t batches_written = 0;  // batches_written_ when it was staged
  };
  std::unordered_map<ChunkId, StagedRows> staged_;
  std::vector<ChunkId> batch_chunks_;  // staged since the last BatchWritten() or DiscardCache()
  uint64_t batches_written_ = 0;       // BatchWritten() calls
  // The newest value this process staged of each outbox row a kept staging
  // holds (a digest's count grows): what a kept chunk staged again gives.
  struct NewestRow {
    std::string value;
    size_t refs = 0;  // kept stagings holding the row
  };
  std::unordered_map<std::string, NewestRow> newest_rows_;
  // Erases a kept staging and its references in newest_rows_.
  std::unordered_map<ChunkId, StagedRows>::iterator Unkeep(std::unordered_map<ChunkId, StagedRows>::iterator it);
};

}  // namespace logdex::alerting
