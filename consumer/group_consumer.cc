#include "consumer/group_consumer.h"

#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "common/defaults.h"

namespace logdex {
namespace {

int64_t Ms(const Clock& c) { return c.MonotonicNs() / 1'000'000; }

// Sleeps up to `ms`, waking early when `stop` is set.
void Nap(int64_t ms, const std::atomic<bool>& stop) {
  for (int64_t slept = 0; slept < ms && !stop; slept += 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// The message's fields, its value borrowed: the InMessage keeps the
// librdkafka message (and so its fetch buffer) alive instead of copying it.
InMessage Take(std::unique_ptr<RdKafka::Message> owned) {
  std::shared_ptr<RdKafka::Message> keep(std::move(owned));
  RdKafka::Message& m = *keep;
  InMessage out;
  out.topic = m.topic_name();
  out.partition = m.partition();
  out.offset = m.offset();
  if (m.key()) out.key = *m.key();
  out.value = MessageValue::Borrow(keep, std::string_view(static_cast<const char*>(m.payload()), m.len()));
  out.timestamp_ms = m.timestamp().timestamp;
  if (const RdKafka::Headers* h = m.headers()) {
    for (const RdKafka::Headers::Header& hd : h->get_all()) {
      out.headers.emplace_back(hd.key(), std::string(static_cast<const char*>(hd.value()), hd.value_size()));
    }
  }
  return out;
}

}  // namespace

class GroupConsumer::Impl : public RdKafka::RebalanceCb, public RdKafka::EventCb, public RdKafka::DeliveryReportCb {
 public:
  Impl(GroupConsumerOptions o, TableStore& store, BatchProcessor& processor, ConsumerMetrics& metrics,
       const Clock& clock)
      : o_(std::move(o)), store_(store), processor_(processor), metrics_(metrics), clock_(clock) {}

  ~Impl() override {
    if (consumer_) consumer_->close();
  }

  Status Start() {
    std::string err;
    std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    std::map<std::string, std::string> props = {
        {"group.id", o_.group_id},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"},
        {"enable.partition.eof", "false"},
        {"session.timeout.ms", std::to_string(o_.session_timeout_ms)},
        {"heartbeat.interval.ms", std::to_string(std::max<int64_t>(100, o_.session_timeout_ms / 3))},
        {"fetch.wait.max.ms", "20"},
        {"queued.max.messages.kbytes", "16384"},  // bounded prefetch: 16 MiB
        {"log_level", "4"},
    };
    for (const auto& [k, v] : o_.kafka) props[k] = v;
    for (const auto& [k, v] : props) {
      if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
        return Status(Errc::kInvalidArgument, "kafka." + k + ": " + err);
      }
    }
    if (conf->set("rebalance_cb", static_cast<RdKafka::RebalanceCb*>(this), err) != RdKafka::Conf::CONF_OK ||
        conf->set("event_cb", static_cast<RdKafka::EventCb*>(this), err) != RdKafka::Conf::CONF_OK) {
      return Status(Errc::kInternal, err);
    }
    consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), err));
    if (!consumer_) return Status(Errc::kInvalidArgument, "kafka consumer: " + err);

    // The DLQ producer: idempotent, acknowledged by all replicas.
    std::unique_ptr<RdKafka::Conf> pconf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    std::map<std::string, std::string> pprops = {{"enable.idempotence", "true"}, {"linger.ms", "5"}, {"log_level", "4"}};
    for (const auto& [k, v] : o_.kafka) pprops[k] = v;
    pprops.erase("group.id");
    for (const auto& [k, v] : pprops) {
      if (pconf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
        // Consumer-only properties do not apply to the producer.
        spdlog::debug("dlq producer ignores {}: {}", k, err);
      }
    }
    pconf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(this), err);
    pconf->set("event_cb", static_cast<RdKafka::EventCb*>(this), err);
    producer_.reset(RdKafka::Producer::create(pconf.get(), err));
    if (!producer_) return Status(Errc::kInvalidArgument, "kafka dlq producer: " + err);
    // Dead-letter topics of listed topics are named now, so that the
    // producer's first metadata request covers them; one first named at the
    // first dead letter waits for librdkafka's 1 s scan of unknown topics.
    for (const std::string& t : o_.topics) {
      dlq_topics_.emplace_back(RdKafka::Topic::create(producer_.get(), t + o_.dlq_suffix, nullptr, err));
    }

    std::vector<std::string> subs = o_.topics;
    if (!o_.topic_regex.empty()) {
      subs = {o_.topic_regex[0] == '^' ? o_.topic_regex : "^" + o_.topic_regex};
    }
    if (subs.empty()) return Status(Errc::kInvalidArgument, "no topics to consume");
    RdKafka::ErrorCode e = consumer_->subscribe(subs);
    if (e) return Status(Errc::kUnavailable, "subscribe: " + RdKafka::err2str(e));
    spdlog::info("consumer: group {} subscribed to {}", o_.group_id, subs.front() + (subs.size() > 1 ? ", ..." : ""));
    return Status::Ok();
  }

  // --- librdkafka callbacks (run inside consume()/poll() on the Run thread) ---

  void rebalance_cb(RdKafka::KafkaConsumer* consumer, RdKafka::ErrorCode err,
                    std::vector<RdKafka::TopicPartition*>& parts) override {
    metrics_.rebalances.Increment();
    // Before a revoke, what is written but not yet committed (skip_wal) is
    // made durable and committed, so that the new owners start after it.
    if (err != RdKafka::ERR__ASSIGN_PARTITIONS) {
      FlushAndCommit();
      ForgetUnflushed();  // what a failed flush left: replayed by the new owners
    }
    std::set<std::pair<std::string, int32_t>> owned;
    ApplyRebalance(consumer, err, parts, &owned);
    if (o_.on_assignment) o_.on_assignment(owned);
  }

  void ApplyRebalance(RdKafka::KafkaConsumer* consumer, RdKafka::ErrorCode err,
                      std::vector<RdKafka::TopicPartition*>& parts, std::set<std::pair<std::string, int32_t>>* owned) {
    std::lock_guard lock(mu_);
    if (err == RdKafka::ERR__ASSIGN_PARTITIONS) {
      consumer->assign(parts);
      for (auto* p : parts) assigned_[{p->topic(), p->partition()}] = 0;
      spdlog::info("consumer: assigned {} partitions, {} in all", parts.size(), assigned_.size());
    } else {
      // Abandon in-flight messages of revoked partitions: nothing of theirs
      // was committed, so their new owner reads them again.
      std::vector<std::pair<std::string, int32_t>> revoked;
      for (auto* p : parts) revoked.emplace_back(p->topic(), p->partition());
      size_t before = pending_.size();
      std::erase_if(pending_, [&](const InMessage& m) {
        return std::find(revoked.begin(), revoked.end(), std::make_pair(m.topic, m.partition)) != revoked.end();
      });
      for (auto& tp : revoked) {
        assigned_.erase(tp);
        metrics_.Lag(tp.first, tp.second).Set(0);
      }
      consumer->unassign();
      assigned_.clear();
      spdlog::info("consumer: revoked {} partitions, abandoned {} unprocessed messages", parts.size(),
                   before - pending_.size());
    }
    metrics_.assigned_partitions.Set(static_cast<double>(assigned_.size()));
    for (const auto& [tp, lag] : assigned_) owned->insert(tp);
  }

  void event_cb(RdKafka::Event& event) override {
    if (event.type() == RdKafka::Event::EVENT_ERROR) {
      metrics_.kafka_errors.Increment();
      spdlog::warn("kafka: {} ({})", event.str(), RdKafka::err2str(event.err()));
    }
  }

  void dr_cb(RdKafka::Message& m) override {
    auto* slot = static_cast<std::atomic<int>*>(m.msg_opaque());
    if (slot) *slot = m.err() ? -1 : 1;
    if (m.err()) spdlog::warn("dlq: delivery to {} failed: {}", m.topic_name(), m.errstr());
  }

  // --- the loop ---

  Status Run(const std::atomic<bool>& stop) {
    while (!stop) {
      Collect(stop);
      std::vector<InMessage> batch;
      {
        std::lock_guard lock(mu_);
        batch.swap(pending_);
      }
      UpdateLag();
      if (o_.flush && Ms(clock_) - last_flush_ms_ >= o_.flush_interval_ms) FlushAndCommit();
      if (batch.empty()) continue;
      const int64_t started = Ms(clock_);
      ProcessedBatch out;
      if (!Process(batch, out, stop) || !DeliverDeadLetters(out, stop) || !WriteDurably(out, stop)) {
        processor_.Settle(false);
        spdlog::warn("consumer: stopping with an unwritten batch of {} messages; it will be consumed again",
                     batch.size());
        break;
      }
      processor_.Settle(true);
      if (o_.on_written) o_.on_written(out);
      if (!o_.flush) {
        Commit(out.next_offsets);
      } else {
        Defer(out);
        if (unflushed_bytes_ >= o_.flush_bytes && !flush_failing_) FlushAndCommit();  // failing: the interval retries
      }
      metrics_.messages.Increment(static_cast<double>(out.messages));
      metrics_.bytes.Increment(static_cast<double>(out.bytes));
      metrics_.records.Increment(static_cast<double>(out.records));
      metrics_.chunks.Increment(static_cast<double>(out.chunks));
      metrics_.alerts_staged.Increment(static_cast<double>(out.alerts_staged));
      metrics_.batches.Increment();
      metrics_.batch_seconds.Observe((Ms(clock_) - started) / 1000.0);
    }
    FlushAndCommit();
    spdlog::info("consumer: leaving group {}", o_.group_id);
    consumer_->close();
    producer_->flush(1000);
    return Status::Ok();
  }

  ConsumerState State(int64_t max_lag) const {
    std::lock_guard lock(mu_);
    ConsumerState s;
    s.assigned = assigned_.size();
    for (auto& [tp, lag] : assigned_) s.max_lag = std::max(s.max_lag, lag);
    if (assigned_.empty()) {
      s.reason = "no partitions assigned";
    } else if (s.max_lag > max_lag) {
      s.reason = "lag " + std::to_string(s.max_lag) + " is over " + std::to_string(max_lag);
    } else {
      s.ready = true;
    }
    return s;
  }

 private:
  // Consumes until the batch is full, its time is up, or (once it holds a
  // message) what the client has fetched runs out: a lone message does not
  // wait for batch_max_wait, and a busy partition still fills whole batches.
  void Collect(const std::atomic<bool>& stop) {
    const int64_t deadline = Ms(clock_) + o_.batch_max_wait_ms;
    uint64_t bytes = 0;
    size_t count = 0;
    while (!stop && count < o_.batch_max_messages && bytes < o_.batch_max_bytes) {
      const int64_t left = deadline - Ms(clock_);
      if (left <= 0) break;
      const int wait_ms = count > 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 100));
      std::unique_ptr<RdKafka::Message> m(consumer_->consume(wait_ms));
      if (!m || m->err() == RdKafka::ERR__TIMED_OUT) {
        if (count > 0) break;  // drained
        continue;
      }
      switch (m->err()) {
        case RdKafka::ERR_NO_ERROR: {
          InMessage message = Take(std::move(m));
          bytes += message.value.size();
          std::lock_guard lock(mu_);
          pending_.push_back(std::move(message));
          count = pending_.size();
          break;
        }
        case RdKafka::ERR__PARTITION_EOF:
          break;
        default:
          metrics_.kafka_errors.Increment();
          spdlog::warn("consumer: {}", m->errstr());
      }
    }
  }

  void SetPaused(bool paused) {
    if (paused == paused_) return;
    paused_ = paused;
    std::vector<RdKafka::TopicPartition*> parts;
    consumer_->assignment(parts);
    if (paused) {
      consumer_->pause(parts);
      metrics_.pauses.Increment();
    } else {
      consumer_->resume(parts);
    }
    RdKafka::TopicPartition::destroy(parts);
    metrics_.paused.Set(paused ? 1 : 0);
  }

  // Turns messages into rows; while that fails (alert staging reads the
  // store), the partitions are paused and the batch is processed again.
  bool Process(const std::vector<InMessage>& batch, ProcessedBatch& out, const std::atomic<bool>& stop) {
    int64_t backoff = 100;
    for (;;) {
      out.Clear();
      for (const InMessage& m : batch) processor_.Add(m, out);
      if (out.failed.ok()) return true;
      processor_.Settle(false);
      metrics_.store_write_failures.Increment();
      spdlog::warn("consumer: batch processing failed: {}; partitions paused, retrying in {} ms", out.failed.ToString(),
                   backoff);
      SetPaused(true);
      if (stop) return false;
      Nap(backoff, stop);
      backoff = std::min(backoff * 2, o_.retry_backoff_max_ms);
    }
  }

  // Produces the batch's dead letters and waits for every acknowledgement,
  // retrying failures with backoff (partitions paused meanwhile).
  bool DeliverDeadLetters(const ProcessedBatch& out, const std::atomic<bool>& stop) {
    if (out.dead_letters.empty()) return true;
    std::vector<std::atomic<int>> acked(out.dead_letters.size());
    for (auto& a : acked) a = -1;
    int64_t backoff = 100;
    for (;;) {
      for (size_t i = 0; i < out.dead_letters.size(); ++i) {
        if (acked[i] == 1) continue;
        acked[i] = 0;
        const DeadLetter& d = out.dead_letters[i];
        RdKafka::Headers* h = RdKafka::Headers::create();
        h->add(std::string(kDlqErrorHeader), d.description);
        h->add(std::string(kDlqTopicHeader), d.message.topic);
        h->add(std::string(kDlqPartitionHeader), std::to_string(d.message.partition));
        h->add(std::string(kDlqOffsetHeader), std::to_string(d.message.offset));
        for (const auto& [k, v] : d.message.headers) h->add(k, v);
        RdKafka::ErrorCode e = producer_->produce(
            d.message.topic + o_.dlq_suffix, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY,
            const_cast<char*>(d.message.value.data()), d.message.value.size(),
            d.message.key.empty() ? nullptr : d.message.key.data(), d.message.key.size(), 0, h, &acked[i]);
        if (e) {
          delete h;  // not taken over on failure
          acked[i] = -1;
        }
      }
      producer_->flush(5000);
      bool all = std::all_of(acked.begin(), acked.end(), [](const std::atomic<int>& a) { return a == 1; });
      if (all) break;
      metrics_.dlq_failures.Increment();
      spdlog::warn("dlq: not every dead letter was acknowledged; partitions paused, retrying in {} ms", backoff);
      SetPaused(true);
      if (stop) return false;
      Nap(backoff, stop);
      backoff = std::min(backoff * 2, o_.retry_backoff_max_ms);
    }
    for (const DeadLetter& d : out.dead_letters) {
      metrics_.DeadLettered(d.reason).Increment();
      spdlog::warn("dlq: {}[{}]@{} -> {}{}: {}", d.message.topic, d.message.partition, d.message.offset,
                   d.message.topic, o_.dlq_suffix, d.description);
    }
    SetPaused(false);
    return true;
  }

  // Writes the batch's rows, retrying with backoff while the store fails.
  bool WriteDurably(const ProcessedBatch& out, const std::atomic<bool>& stop) {
    int64_t backoff = 100;
    for (;;) {
      const int64_t t0 = Ms(clock_);
      Status s = out.writes.empty() ? Status::Ok() : store_.Write(out.writes);
      metrics_.store_write_seconds.Observe((Ms(clock_) - t0) / 1000.0);
      if (s.ok()) break;
      metrics_.store_write_failures.Increment();
      spdlog::warn("store: write of {} rows failed: {}; partitions paused, retrying in {} ms", out.writes.size(),
                   s.ToString(), backoff);
      SetPaused(true);
      if (stop) return false;
      Nap(backoff, stop);
      backoff = std::min(backoff * 2, o_.retry_backoff_max_ms);
    }
    std::map<std::string, uint64_t> per_table;
    for (const auto& e : out.writes.entries()) ++per_table[e.table];
    for (const auto& [t, n] : per_table) metrics_.RowsWritten(t).Increment(static_cast<double>(n));
    SetPaused(false);
    return true;
  }

  // Offsets of a batch that is written but not durable until the next flush.
  void Defer(const ProcessedBatch& out) {
    for (const auto& [tp, next] : out.next_offsets) {
      int64_t& o = unflushed_offsets_[tp];
      o = std::max(o, next);
    }
    unflushed_bytes_ += out.bytes;
    unflushed_messages_ += out.messages;
    metrics_.unflushed_messages.Set(static_cast<double>(unflushed_messages_));
  }

  void ForgetUnflushed() {
    unflushed_offsets_.clear();
    unflushed_bytes_ = 0;
    unflushed_messages_ = 0;
    metrics_.unflushed_messages.Set(0);
  }

  // Flushes the store, then commits every deferred offset. A failed flush
  // keeps them deferred (retried at the next interval; a crash replays).
  // It flushes on the interval even with no offsets deferred: the alert
  // dispatcher's outbox deletes go to the memtables too, and a crash must
  // not bring back rows delivered more than one interval ago.
  // Run thread only, as are the unflushed_* members.
  void FlushAndCommit() {
    if (!o_.flush) return;
    last_flush_ms_ = Ms(clock_);
    Status s = o_.flush();
    metrics_.flush_seconds.Observe((Ms(clock_) - last_flush_ms_) / 1000.0);
    flush_failing_ = !s.ok();
    if (!s.ok()) {
      metrics_.flush_failures.Increment();
      spdlog::warn("store: flush failed ({}); offsets of {} messages stay uncommitted, retrying in {} ms",
                   s.ToString(), unflushed_messages_, o_.flush_interval_ms);
      return;
    }
    if (!unflushed_offsets_.empty()) Commit(unflushed_offsets_);
    ForgetUnflushed();
  }

  void Commit(const std::map<std::pair<std::string, int32_t>, int64_t>& next_offsets) {
    std::vector<RdKafka::TopicPartition*> offsets;
    {
      std::lock_guard lock(mu_);
      for (const auto& [tp, next] : next_offsets) {
        if (!assigned_.count(tp)) continue;  // revoked meanwhile: its new owner decides
        offsets.push_back(RdKafka::TopicPartition::create(tp.first, tp.second, next));
      }
    }
    if (offsets.empty()) return;
    const int64_t t0 = Ms(clock_);
    RdKafka::ErrorCode e = consumer_->commitSync(offsets);
    metrics_.commit_seconds.Observe((Ms(clock_) - t0) / 1000.0);
    if (e) {
      metrics_.commit_failures.Increment();
      spdlog::warn("consumer: commit failed ({}); the batch will be replayed, idempotently", RdKafka::err2str(e));
    }
    RdKafka::TopicPartition::destroy(offsets);
  }

  // Lag per assigned partition (metrics and readiness), at most every
  // 200 ms: asking the client for positions and watermarks of every
  // partition after each batch cost as much as decoding the batch.
  void UpdateLag() {
    const int64_t now = Ms(clock_);
    if (now - lag_updated_ms_ < 200 && now >= lag_updated_ms_) return;
    lag_updated_ms_ = now;
    std::vector<RdKafka::TopicPartition*> parts;
    consumer_->assignment(parts);
    consumer_->position(parts);
    std::lock_guard lock(mu_);
    for (auto* p : parts) {
      int64_t low = 0, high = 0;
      if (consumer_->get_watermark_offsets(p->topic(), p->partition(), &low, &high) != RdKafka::ERR_NO_ERROR) continue;
      const int64_t pos = p->offset() >= 0 ? p->offset() : low;
      const int64_t lag = std::max<int64_t>(0, high - pos);
      assigned_[{p->topic(), p->partition()}] = lag;
      metrics_.Lag(p->topic(), p->partition()).Set(static_cast<double>(lag));
    }
    RdKafka::TopicPartition::destroy(parts);
  }

  GroupConsumerOptions o_;
  TableStore& store_;
  BatchProcessor& processor_;
  ConsumerMetrics& metrics_;
  const Clock& clock_;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
  std::unique_ptr<RdKafka::Producer> producer_;
  std::vector<std::unique_ptr<RdKafka::Topic>> dlq_topics_;  // handles held so their metadata is known early
  mutable std::mutex mu_;  // guards pending_ and assigned_
  std::vector<InMessage> pending_;
  std::map<std::pair<std::string, int32_t>, int64_t> assigned_;  // -> lag
  bool paused_ = false;
  int64_t lag_updated_ms_ = INT64_MIN / 2;
  // With o_.flush: written, not yet durable (Run thread only).
  std::map<std::pair<std::string, int32_t>, int64_t> unflushed_offsets_;
  uint64_t unflushed_bytes_ = 0;
  uint64_t unflushed_messages_ = 0;
  int64_t last_flush_ms_ = 0;
  bool flush_failing_ = false;
};

GroupConsumer::GroupConsumer(GroupConsumerOptions options, TableStore& store, BatchProcessor& processor,
                             ConsumerMetrics& metrics, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(options), store, processor, metrics, clock)) {}
GroupConsumer::~GroupConsumer() = default;
Status GroupConsumer::Start() { return impl_->Start(); }
Status GroupConsumer::Run(const std::atomic<bool>& stop) { return impl_->Run(stop); }
ConsumerState GroupConsumer::State(int64_t max_lag) const { return impl_->State(max_lag); }

}  // namespace logdex
