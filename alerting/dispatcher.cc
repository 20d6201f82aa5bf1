#include "alerting/dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "alerting/stager.h"
#include "common/backoff.h"
#include "common/row_keys.h"

namespace logdex::alerting {
namespace {

constexpr int64_t kBacklogCheckEveryMs = 5'000;
constexpr int64_t kWarnEveryMs = 60'000;
constexpr size_t kScanVisitFactor = 8;  // rows visited per pass <= scan_batch * this

}  // namespace

struct SinkDispatcher::Lane {
  std::unique_ptr<AlertSink> sink;
  CircuitConfig circuit;
  uint32_t concurrency = 1;

  mutable std::mutex mu;  // guards everything below
  // Circuit breaker.
  uint32_t consecutive_failures = 0;
  bool open = false;
  int64_t open_until_ms = 0;
  bool trial_in_flight = false;
  bool failing = false;  // the last attempt failed (for warn-on-transition)
  int64_t last_warn_ms = INT64_MIN / 2;
  // Threaded mode: the sink's work stack (newest on top) and its workers.
  std::condition_variable cv;
  std::vector<Task> stack;
  size_t capacity = 64;
  std::vector<std::thread> workers;
};

SinkDispatcher::SinkDispatcher(AlertingConfig config, TableStore& store, std::vector<std::unique_ptr<AlertSink>> sinks,
                               const Clock& clock, prometheus::Registry& registry, uint64_t jitter_seed)
    : config_(std::move(config)), store_(store), clock_(clock), metrics_(registry), rng_(jitter_seed) {
  for (auto& s : sinks) {
    auto lane = std::make_unique<Lane>();
    for (const auto& sc : config_.sinks) {
      if (sc.name == s->name()) {
        lane->circuit = sc.circuit;
        lane->concurrency = std::max<uint32_t>(1, sc.concurrency);
      }
    }
    lane->capacity = std::max<size_t>(64, lane->concurrency * 8);
    metrics_.CircuitOpen(s->name()).Set(0);
    const std::string name = s->name();
    lane->sink = std::move(s);
    LOGDEX_CHECK(lanes_.emplace(name, std::move(lane)).second);  // sink names are unique
  }
  metrics_.DispatcherActive().Set(1);
}

SinkDispatcher::~SinkDispatcher() { Stop(); }

bool SinkDispatcher::CircuitOpen(const std::string& sink) const {
  auto it = lanes_.find(sink);
  if (it == lanes_.end()) return false;
  std::lock_guard lock(it->second->mu);
  return it->second->open;
}

int64_t SinkDispatcher::Backoff(uint32_t attempts) {
  const auto& d = config_.delivery;
  std::lock_guard lock(rng_mu_);
  return BackoffPolicy{d.backoff_initial_ms, d.backoff_max_ms}.DelayMs(attempts, rng_);
}

Status SinkDispatcher::ScanDue(int64_t now, std::vector<Task>* out, size_t* corrupt) {
  const size_t want = config_.delivery.scan_batch;
  const size_t visit_cap = want * kScanVisitFactor;
  size_t visited = 0;
  std::vector<std::string> bad;
  ScanSpec spec;
  spec.table = std::string(kOutboxTable);
  spec.stop = OutboxKey{now + 1, 0}.Encode();
  spec.reverse = true;
  const bool threaded = running_.load();
  if (threaded) {
    std::lock_guard lock(mu_);
    const uint64_t gen = ++scan_gen_;
    // Finished before this scan began: this scan's snapshot no longer has them.
    std::erase_if(completed_, [&](const auto& kv) { return kv.second < gen; });
  }
  Status s = store_.Scan(spec, [&](std::string_view key, std::string_view value) {
    ++visited;
    std::string k(key);
    if (threaded) {
      std::lock_guard lock(mu_);
      if (inflight_.count(k) || completed_.count(k)) return visited < visit_cap;
    }
    auto e = DecodeOutboxEntry(value);
    if (!e.ok() || !OutboxKey::Decode(key)) {
      bad.push_back(std::move(k));
      return visited < visit_cap;
    }
    if (threaded) {
      // Rows whose sink cannot take work now stay in the outbox for a later pass.
      auto it = lanes_.find(e->sink);
      if (it != lanes_.end()) {
        Lane& lane = *it->second;
        std::lock_guard lock(lane.mu);
        if ((lane.open && (now < lane.open_until_ms || lane.trial_in_flight)) || lane.stack.size() >= lane.capacity)
          return visited < visit_cap;
      }
    }
    out->push_back(Task{std::move(k), std::move(e.value())});
    return out->size() < want && visited < visit_cap;
  });
  for (const auto& k : bad) DropRow(k, "unknown", "corrupt", "undecodable outbox row");
  *corrupt = bad.size();
  return s;
}

void SinkDispatcher::DropRow(const std::string& key, const std::string& sink, const std::string& reason,
                             const std::string& why) {
  WriteBatch b;
  b.Delete(kOutboxTable, key);
  if (Status s = store_.Write(b); !s.ok()) {
    spdlog::warn("alerting: could not remove outbox row ({}): {}", reason, s.ToString());
    return;
  }
  metrics_.Dropped(sink, reason).Increment();
  spdlog::warn("alerting: dropped a notification for sink {} ({}): {}", sink, reason, why);
}

bool SinkDispatcher::Admit(const Task& t, int64_t now, Lane** lane) {
  auto it = lanes_.find(t.entry.sink);
  if (it == lanes_.end()) {
    DropRow(t.key, t.entry.sink, "unknown_sink", "no sink with this name is configured");
    return false;
  }
  if (now - t.entry.n.staged_ms > config_.delivery.max_age_ms) {
    DropRow(t.key, t.entry.sink, "expired",
            "older than max_age (" + std::to_string(config_.delivery.max_age_ms) + " ms), key " +
                t.entry.n.idempotency_key);
    return false;
  }
  *lane = it->second.get();
  return true;
}

SinkDispatcher::Gate SinkDispatcher::CircuitGate(Lane& lane, int64_t now) {
  std::lock_guard lock(lane.mu);
  if (!lane.open) return Gate::kAllow;
  if (now < lane.open_until_ms || lane.trial_in_flight) return Gate::kDeny;
  lane.trial_in_flight = true;  // half-open: one trial
  return Gate::kAllow;
}

void SinkDispatcher::Deliver(Lane& lane, Task& task, PassStats* stats) {
  if (CircuitGate(lane, clock_.NowMs()) == Gate::kDeny) {
    ++stats->deferred;
    return;
  }
  ++stats->attempted;
  RaiseDigest(task.entry.n);
  const DeliveryResult r = lane.sink->Deliver(task.entry.n);
  Apply(lane, task, r, stats);
}

void SinkDispatcher::RaiseDigest(Notification& n) {
  // Only members sharing a store write a window's state and its digest in
  // different writes; elsewhere they are one batch and agree.
  if (n.kind == NotificationKind::kEvent || !store_.shared()) return;
  auto raised = AlertStager::RaiseDigestToItsState(store_, n);
  if (raised.ok()) {
    switch (*raised) {
      case DigestState::kRaised: metrics_.DigestStateReads("raised").Increment(); break;
      case DigestState::kUnchanged: metrics_.DigestStateReads("unchanged").Increment(); break;
      case DigestState::kGone: metrics_.DigestStateReads("gone").Increment(); break;
    }
    return;
  }
  metrics_.DigestStateReads("failed").Increment();
  const int64_t now = clock_.NowMs();
  if (int64_t last = last_digest_warn_ms_.load(); now - last >= kWarnEveryMs &&
                                                   last_digest_warn_ms_.compare_exchange_strong(last, now)) {
    spdlog::warn("alerting: could not read the window state of digest {} ({}); sent with the count its outbox row "
                 "holds, which may miss records another member counted",
                 n.idempotency_key, raised.error().ToString());
  }
}

void SinkDispatcher::Apply(Lane& lane, const Task& task, const DeliveryResult& r, PassStats* stats) {
  const int64_t now = clock_.NowMs();
  const std::string& sink = lane.sink->name();
  const bool sink_up = r.ok || !r.retryable;  // a 4xx answer means the sink is up
  {
    std::lock_guard lock(lane.mu);
    if (sink_up) {
      if (lane.open) {
        spdlog::info("alerting: sink {} circuit closed (trial delivery succeeded)", sink);
        metrics_.CircuitOpen(sink).Set(0);
      }
      if (lane.failing) spdlog::info("alerting: sink {} recovered", sink);
      lane.open = false;
      lane.trial_in_flight = false;
      lane.consecutive_failures = 0;
      lane.failing = false;
    } else {
      ++lane.consecutive_failures;
      if (!lane.failing || now - lane.last_warn_ms >= kWarnEveryMs) {
        spdlog::warn("alerting: sink {} delivery failed ({}): {}; retrying with backoff", sink, r.reason, r.error);
        lane.last_warn_ms = now;
      }
      lane.failing = true;
      if (lane.open) {  // the half-open trial failed
        lane.open_until_ms = now + lane.circuit.open_ms;
        lane.trial_in_flight = false;
      } else if (lane.consecutive_failures >= lane.circuit.failures) {
        lane.open = true;
        lane.open_until_ms = now + lane.circuit.open_ms;
        metrics_.CircuitOpen(sink).Set(1);
        metrics_.CircuitOpened(sink).Increment();
        spdlog::warn("alerting: sink {} circuit opened after {} consecutive failures; pausing it for {} ms", sink,
                     lane.consecutive_failures, lane.circuit.open_ms);
      }
    }
  }

  const Notification& n = task.entry.n;
  if (r.ok) {
    WriteBatch b;
    b.Delete(kOutboxTable, task.key);
    if (Status s = store_.Write(b); !s.ok())
      spdlog::warn("alerting: delivered {} to {} but could not remove it from the outbox: {} (it may be sent again)",
                   n.idempotency_key, sink, s.ToString());
    metrics_.Sent(sink).Increment();
    if (n.kind == NotificationKind::kEvent && n.kafka_ts_ms > 0 && now >= n.kafka_ts_ms)
      metrics_.Latency(sink).Observe(static_cast<double>(now - n.kafka_ts_ms) / 1000.0);
    ++stats->delivered;
    return;
  }
  metrics_.Failed(sink, r.reason).Increment();
  if (!r.retryable) {
    DropRow(task.key, sink, "rejected", "sink refused " + n.idempotency_key + ": " + r.error);
    ++stats->dropped;
    return;
  }
  OutboxEntry next = task.entry;
  next.attempts += 1;
  next.last_error = r.error;
  if (next.attempts >= config_.delivery.max_attempts) {
    DropRow(task.key, sink, "max_attempts",
            n.idempotency_key + " failed " + std::to_string(next.attempts) + " times, last: " + r.error);
    ++stats->dropped;
    return;
  }
  auto old_key = OutboxKey::Decode(task.key);
  LOGDEX_CHECK(old_key.has_value());  // ScanDue only passes decodable keys
  // The new row first, then the old one's delete: a store that applies a
  // batch row by row (HBase) and fails half-way then keeps the old row (due
  // again: at least once) rather than losing the notification.
  const std::string new_key = OutboxKey{now + Backoff(next.attempts), old_key->alert_id}.Encode();
  WriteBatch b;
  b.Put(kOutboxTable, new_key, EncodeOutboxEntry(next));
  if (new_key != task.key) b.Delete(kOutboxTable, task.key);
  if (Status s = store_.Write(b); !s.ok()) {
    spdlog::warn("alerting: could not reschedule {} for {}: {} (it stays due)", n.idempotency_key, sink, s.ToString());
    return;
  }
  metrics_.Retried(sink).Increment();
  ++stats->retried;
}

Result<PassStats> SinkDispatcher::DeliverDue() {
  if (running_.load()) return Error{Errc::kFailedPrecondition, "DeliverDue() while the dispatcher runs threads"};
  PassStats stats;
  const int64_t now = clock_.NowMs();
  std::vector<Task> tasks;
  size_t corrupt = 0;
  if (Status s = ScanDue(now, &tasks, &corrupt); !s.ok()) return s.error();
  stats.dropped += corrupt;
  for (auto& t : tasks) {
    Lane* lane = nullptr;
    if (!Admit(t, now, &lane)) {
      ++stats.dropped;
      continue;
    }
    Deliver(*lane, t, &stats);
  }
  return stats;
}

Result<Backlog> SinkDispatcher::CheckBacklog() {
  const int64_t now = clock_.NowMs();
  Backlog b;
  ScanSpec spec;
  spec.table = std::string(kOutboxTable);
  spec.stop = OutboxKey{now + 1, 0}.Encode();
  spec.limit = static_cast<uint64_t>(config_.delivery.backlog_warn_rows) * 10;
  bool first = true;
  Status s = store_.Scan(spec, [&](std::string_view key, std::string_view) {
    if (first) {
      if (auto k = OutboxKey::Decode(key)) b.oldest_due_age_ms = std::max<int64_t>(0, now - k->due_ms);
      first = false;
    }
    ++b.due_rows;
    return true;
  });
  if (!s.ok()) return s.error();
  metrics_.OutboxDue().Set(static_cast<double>(b.due_rows));
  metrics_.OutboxOldestDueAge().Set(static_cast<double>(b.oldest_due_age_ms) / 1000.0);
  const auto& d = config_.delivery;
  if ((b.due_rows >= d.backlog_warn_rows || b.oldest_due_age_ms >= d.backlog_warn_age_ms)) {
    std::lock_guard lock(mu_);
    if (now - last_backlog_warn_ms_ >= kWarnEveryMs) {
      last_backlog_warn_ms_ = now;
      spdlog::warn("alerting: outbox backlog: {}{} notifications due, oldest waiting {} ms", b.due_rows,
                   b.due_rows >= spec.limit ? "+" : "", b.oldest_due_age_ms);
    }
  }
  return b;
}

Status SinkDispatcher::Start() {
  std::lock_guard lock(mu_);
  if (running_.load()) return Status(Errc::kFailedPrecondition, "dispatcher already started");
  stopping_ = false;
  running_ = true;
  for (auto& [name, lane] : lanes_)
    for (uint32_t i = 0; i < lane->concurrency; ++i) lane->workers.emplace_back([this, l = lane.get()] { WorkerLoop(*l); });
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  return Status::Ok();
}

void SinkDispatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    if (!running_.load()) return;
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  for (auto& [name, lane] : lanes_) {
    {
      std::lock_guard lock(lane->mu);
      lane->stack.clear();
    }
    lane->cv.notify_all();
    for (auto& t : lane->workers) t.join();
    lane->workers.clear();
  }
  std::lock_guard lock(mu_);
  inflight_.clear();
  completed_.clear();
  running_ = false;
}

void SinkDispatcher::Wake() {
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  wake_cv_.notify_all();
}

void SinkDispatcher::SetActive(bool active) {
  if (active_.exchange(active) == active) return;
  metrics_.DispatcherActive().Set(active ? 1 : 0);
  spdlog::info("alerting: this member {} from the outbox", active ? "now delivers" : "no longer delivers");
  if (!active) {
    for (auto& [name, lane] : lanes_) {
      std::vector<Task> dropped;
      {
        std::lock_guard lock(lane->mu);
        dropped.swap(lane->stack);
      }
      std::lock_guard lock(mu_);
      for (const Task& t : dropped) inflight_.erase(t.key);
    }
    // Deliveries under way finish before this returns (bounded by the sinks'
    // timeouts): the member that takes over must not meet a row this one is
    // still delivering or rescheduling.
    int64_t longest = 0;
    for (const auto& sc : config_.sinks) longest = std::max(longest, sc.timeout_ms);
    std::unique_lock lock(mu_);
    if (!idle_cv_.wait_for(lock, std::chrono::milliseconds(longest + 1000), [&] { return inflight_.empty(); })) {
      spdlog::warn("alerting: {} deliveries still under way after handing the outbox over", inflight_.size());
    }
  }
  Wake();
}

void SinkDispatcher::SchedulerLoop() {
  while (!stopping_.load()) {
    if (active_.load()) {
      SchedulePass();
    } else {
      // The backlog gauges describe what this member delivers: nothing.
      metrics_.OutboxDue().Set(0);
      metrics_.OutboxOldestDueAge().Set(0);
    }
    ++scheduler_rounds_;
    std::unique_lock lock(mu_);
    wake_cv_.wait_for(lock, std::chrono::milliseconds(config_.delivery.poll_interval_ms),
                      [&] { return wake_ || stopping_.load(); });
    wake_ = false;
  }
}

void SinkDispatcher::SchedulePass() {
  const int64_t now = clock_.NowMs();
  if (now >= next_backlog_check_ms_) {
    next_backlog_check_ms_ = now + kBacklogCheckEveryMs;
    if (auto b = CheckBacklog(); !b.ok()) spdlog::warn("alerting: backlog check failed: {}", b.error().ToString());
  }
  std::vector<Task> tasks;
  size_t corrupt = 0;
  if (Status s = ScanDue(now, &tasks, &corrupt); !s.ok()) spdlog::warn("alerting: outbox scan failed: {}", s.ToString());
  // Per sink, newest first; pushed oldest first so that the newest is on top of the stack.
  std::unordered_map<Lane*, std::vector<Task*>> per_lane;
  for (auto& t : tasks) {
    Lane* lane = nullptr;
    if (Admit(t, now, &lane)) per_lane[lane].push_back(&t);
  }
  for (auto& [lane, list] : per_lane) {
    {
      std::lock_guard lock(mu_);
      for (Task* t : list) inflight_.insert(t->key);
    }
    bool queued;
    {
      std::lock_guard lock(lane->mu);  // SetActive(false) clears the stack under it
      queued = active_.load();
      if (queued) {
        for (auto it = list.rbegin(); it != list.rend(); ++it) lane->stack.push_back(std::move(**it));
      }
    }
    if (!queued) {
      std::lock_guard lock(mu_);
      for (Task* t : list) inflight_.erase(t->key);
      if (inflight_.empty()) idle_cv_.notify_all();
      continue;
    }
    lane->cv.notify_all();
  }
}

void SinkDispatcher::WorkerLoop(Lane& lane) {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(lane.mu);
      lane.cv.wait(lock, [&] { return stopping_.load() || !lane.stack.empty(); });
      if (stopping_.load()) return;
      task = std::move(lane.stack.back());
      lane.stack.pop_back();
    }
    PassStats ignored;
    Deliver(lane, task, &ignored);
    {
      std::lock_guard lock(mu_);
      inflight_.erase(task.key);
      completed_[task.key] = scan_gen_;
      if (inflight_.empty()) idle_cv_.notify_all();
    }
    if (ignored.retried || ignored.deferred) continue;
    // This sink ran out of queued work: rescan now rather than at the next poll
    // (older rows may be waiting behind the ones just delivered).
    bool idle;
    {
      std::lock_guard lock(lane.mu);
      idle = lane.stack.empty();
    }
    if (idle) Wake();
  }
}

}  // namespace logdex::alerting
