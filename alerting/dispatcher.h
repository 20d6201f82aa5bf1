// SinkDispatcher: the delivery half of alerting. It reads due rows of
// `alert_outbox` from the TableStore, delivers each to its sink, and removes
// what was delivered; the outbox is the only queue, so a dispatcher built on a
// reopened store resumes every pending delivery.
//
// Order: due rows are read newest first (a reverse scan from now), and each
// sink's in-memory work list is a stack, so when delivery falls behind the
// latest alerts go out first.
//
// Failures, per (notification, sink) row:
//   - retryable (connect, timeout, 5xx, 408, 429): the row moves to
//     OutboxKey{now + backoff, same id} with attempts + 1; backoff is
//     common/backoff.h's schedule:
//     backoff_initial * 2^(attempts-1), capped at backoff_max, with equal
//     jitter (uniform in [backoff/2, backoff]); dropped after max_attempts;
//   - permanent (other 4xx): dropped at once (reason rejected);
//   - older than max_age when due: dropped (reason expired).
// Circuit breaker per sink: `circuit.failures` consecutive failed attempts
// open it for `circuit.open_ms` (no attempts; rows stay due in the outbox);
// then one trial attempt closes it on success or re-opens it.
// Concurrency per sink: at most `concurrency` requests at once (that many
// worker threads). Each degraded mode logs one warn line (rate-limited) and
// moves a metric (metrics.h).
//
// A digest is sent with the count its window's state row holds when that is
// higher than its outbox row's: members sharing a store write the row with
// the count each staged (AlertStager::RaiseDigestToItsState; metric
// logdex_alerting_digest_state_reads_total).
//
// Delivery is at-least-once: a crash between a delivery and the outbox
// delete re-sends it after restart with the same idempotency key.
//
// Time: every decision (due, backoff, circuit, age, latency) reads the Clock
// seam; only the wait between passes is real time (poll_interval_ms, or Wake()).
//
// Ownership: borrows the store, clock and registry (they must outlive it);
// owns the sinks. Thread-safety: Start/Stop/Wake from any thread; DeliverDue
// and CheckBacklog only while not started (tests, or a serve without threads).
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alerting/config.h"
#include "alerting/metrics.h"
#include "alerting/notification.h"
#include "alerting/sinks.h"
#include "common/clock.h"
#include "store/table_store.h"

namespace logdex::alerting {

// Outcome counts of DeliverDue().
struct PassStats {
  size_t attempted = 0;  // deliveries tried
  size_t delivered = 0;
  size_t retried = 0;    // rescheduled with backoff
  size_t dropped = 0;    // removed without delivery (max_attempts, rejected, expired, unknown sink, corrupt)
  size_t deferred = 0;   // due but not tried (circuit open)
};

// Backlog at a CheckBacklog().
struct Backlog {
  size_t due_rows = 0;          // counted up to a cap (10 x backlog_warn_rows)
  int64_t oldest_due_age_ms = 0;
};

class SinkDispatcher {
 public:
  // `sinks` are matched to outbox rows by name(); rows naming a sink that is
  // not here are dropped (reason unknown_sink). `jitter_seed` seeds backoff jitter.
  SinkDispatcher(AlertingConfig config, TableStore& store, std::vector<std::unique_ptr<AlertSink>> sinks,
                 const Clock& clock, prometheus::Registry& registry, uint64_t jitter_seed = std::random_device{}());
  ~SinkDispatcher();  // Stop()s
  SinkDispatcher(const SinkDispatcher&) = delete;
  SinkDispatcher& operator=(const SinkDispatcher&) = delete;

  // Starts the scheduler thread and `concurrency` workers per sink.
  // kFailedPrecondition when already started.
  Status Start();
  // Stops and joins every thread; in-flight requests finish (bounded by the
  // sinks' timeouts); queued work stays in the outbox for the next start.
  void Stop();
  // Makes the scheduler rescan now (serve calls it after writing a batch with alerts).
  void Wake();
  // Whether this dispatcher delivers (default true). While inactive it reads
  // nothing from the outbox and drops its queued work (the rows stay in the
  // outbox). SetActive(false) returns once the requests already under way
  // have finished (at most the longest sink timeout + 1 s). Serve sets it from
  // partition ownership when members share one outbox (DeliveryConfig::Dispatch).
  void SetActive(bool active);
  bool active() const { return active_.load(); }

  // One synchronous pass on the calling thread: every due row (up to
  // scan_batch), newest first. kFailedPrecondition while started.
  Result<PassStats> DeliverDue();
  // Counts due rows and the oldest due age; sets the backlog gauges and warns
  // past the thresholds. Run by the scheduler every 5 s of clock time.
  Result<Backlog> CheckBacklog();

  bool CircuitOpen(const std::string& sink) const;

  // Scheduler rounds finished since Start() (active or not): a test waits
  // for rounds to pass instead of sleeping.
  uint64_t scheduler_rounds() const { return scheduler_rounds_.load(); }

 private:
  struct Lane;
  struct Task {
    std::string key;  // encoded OutboxKey
    OutboxEntry entry;
  };
  enum class Gate { kAllow, kDeny };

  // Reads up to scan_batch due rows not in flight, newest first.
  Status ScanDue(int64_t now, std::vector<Task>* out, size_t* corrupt);
  // Checks age/sink; false when the row was dropped.
  bool Admit(const Task& t, int64_t now, Lane** lane);
  Gate CircuitGate(Lane& lane, int64_t now);
  void Deliver(Lane& lane, Task& task, PassStats* stats);
  // A digest takes the count its window's state row holds, when higher
  // (AlertStager::RaiseDigestToItsState); a failed read sends it as it is.
  void RaiseDigest(Notification& n);
  void Apply(Lane& lane, const Task& task, const DeliveryResult& r, PassStats* stats);
  void DropRow(const std::string& key, const std::string& sink, const std::string& reason, const std::string& why);
  int64_t Backoff(uint32_t attempts);
  void SchedulerLoop();
  // One scheduler pass: backlog check when due, then due rows onto the lanes.
  void SchedulePass();
  void WorkerLoop(Lane& lane);

  const AlertingConfig config_;
  TableStore& store_;
  const Clock& clock_;
  AlertingMetrics metrics_;
  std::unordered_map<std::string, std::unique_ptr<Lane>> lanes_;

  std::mutex rng_mu_;
  std::mt19937_64 rng_;

  // Threaded mode.
  std::mutex mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> active_{true};
  std::atomic<uint64_t> scheduler_rounds_{0};
  std::condition_variable idle_cv_;  // with mu_: inflight_ became empty
  std::unordered_set<std::string> inflight_;  // outbox keys queued or being delivered
  // Keys whose delivery finished (row deleted or moved) -> scan generation at
  // that moment. A scan that started earlier may still see the old row in its
  // snapshot, so such keys are skipped until a scan that started later.
  std::unordered_map<std::string, uint64_t> completed_;
  uint64_t scan_gen_ = 0;
  std::thread scheduler_;
  int64_t next_backlog_check_ms_ = 0;
  int64_t last_backlog_warn_ms_ = INT64_MIN / 2;
  std::atomic<int64_t> last_digest_warn_ms_{INT64_MIN / 2};
};

}  // namespace logdex::alerting
