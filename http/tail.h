// TailHub: live tail. Records reach subscribers (GET /api/v1/tail, `logdex
// query --follow`) as their batch is written, without slowing ingest:
//
//   consumer thread   Publish(batch) after the store write: when anyone
//                     listens, copies the batch's main rows (the chunk bytes)
//                     into a pending queue bounded by max_pending_bytes, and
//                     returns; nothing is decoded on the consumer's thread.
//                     Over the bound the batch is not queued (counted:
//                     logdex_tail_batches_dropped_total) and every subscriber
//                     is told it missed records (a gap).
//   hub thread        decodes each chunk once and hands each record to every
//                     subscriber whose filter it passes (app, host,
//                     severities, tags, text filters: Query's meaning; no
//                     time range).
//   subscriber        a bounded queue (max_client_bytes): a client that does
//                     not keep up is ended with the reason, never waited for
//                     (logdex_tail_clients_dropped_total).
//
// Order: records come in the order their chunks were written (per chunk in
// record order), not sorted by time across chunks. With
// store.durability: skip_wal a written batch is durable at the next flush,
// so tail can show a record a crash before that flush would lose (Kafka
// replays it). Chunks the compactor writes are not tailed (their records
// were tailed when they arrived). The messages of a batch the store refused
// for good, which the consumer then writes one by one (GroupConsumer's
// salvage), are tailed one by one.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/result.h"
#include "indexer/query.h"
#include "store/table_store.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Counter;
class Gauge;
}  // namespace prometheus

namespace logdex {

struct TailOptions {
  // Chunk bytes waiting for the hub thread; over it a batch is skipped (a gap). Default 64 MiB.
  size_t max_pending_bytes = 64ull << 20;
  // Records queued for one client (message and tag bytes); over it the client is ended. Default 8 MiB.
  size_t max_client_bytes = 8ull << 20;
  // Subscribers at once; one more is refused (kResourceExhausted). Default 16.
  size_t max_clients = 16;
};

// What a subscriber receives.
struct TailBatch {
  std::vector<ResultRecord> records;
  uint64_t missed_batches = 0;  // batches skipped since the last call (the pending queue was full)
  bool ended = false;           // no more will come: `end_reason` says why
  std::string end_reason;
};

class TailSubscription;

class TailHub {
 public:
  // `decode` checks the chunks as queries do. Registers its metrics at once.
  TailHub(TailOptions options, DecodeOptions decode, prometheus::Registry& registry);
  ~TailHub();  // Stop()
  TailHub(const TailHub&) = delete;
  TailHub& operator=(const TailHub&) = delete;

  // Called once a batch is written: see above. Cheap when nobody listens.
  void Publish(const WriteBatch& written);

  // A new subscriber with `filter` (from/to, limit, cursor and scan are not
  // used). Errors: kInvalidArgument for a text filter that does not compile;
  // kResourceExhausted at max_clients; kUnavailable once stopped.
  Result<std::shared_ptr<TailSubscription>> Subscribe(const Query& filter);

  // Ends every subscription ("the server is stopping") and the hub thread.
  void Stop();

  size_t subscribers() const { return subscriber_count_.load(); }

 private:
  friend class TailSubscription;
  struct Pending {
    std::vector<std::string> main_rows;
    size_t bytes = 0;
  };
  void Run();
  void Deliver(const Pending& p);
  void Remove(TailSubscription* s);

  const TailOptions options_;
  const DecodeOptions decode_;
  prometheus::Counter& published_;
  prometheus::Counter& dropped_batches_;
  prometheus::Counter& dropped_clients_;
  prometheus::Counter& records_sent_;
  prometheus::Gauge& clients_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;  // guarded by mu_
  size_t pending_bytes_ = 0;     // guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  std::vector<std::shared_ptr<TailSubscription>> subs_;  // guarded by mu_
  std::atomic<size_t> subscriber_count_{0};
  int64_t last_drop_log_ns_ = 0;  // guarded by mu_
  std::thread thread_;
};

class TailSubscription {
 public:
  // Waits up to `timeout_ms` for records (or the end); returns what came
  // (possibly nothing, on timeout).
  TailBatch Next(int timeout_ms);
  // Ends the subscription from the client's side (it went away).
  void Close();

  TailSubscription(TailHub& hub, Query filter, TextMatcher text, size_t max_bytes)
      : hub_(&hub), filter_(std::move(filter)), text_(std::move(text)), max_bytes_(max_bytes) {}

 private:
  friend class TailHub;
  bool Matches(const ResultRecord& r) const;
  // False when no record of the chunk can match (by its header).
  bool MayMatch(const proto::LogChunk& c) const;
  enum class Pushed { kQueued, kEnded, kEndedNow };
  // From the hub thread. kEndedNow: this record was over max_bytes (the
  // client did not keep up); kEnded: it had ended before.
  Pushed Push(ResultRecord r, size_t bytes);
  void Missed();
  void End(std::string reason);

  std::atomic<TailHub*> hub_;  // null once removed from the hub
  const Query filter_;
  const TextMatcher text_;  // filter_.text, compiled
  const size_t max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ResultRecord> queue_;
  size_t bytes_ = 0;
  uint64_t missed_ = 0;
  bool ended_ = false;
  std::string end_reason_;
};

}  // namespace logdex
