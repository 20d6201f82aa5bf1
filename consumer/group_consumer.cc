#include "consumer/group_consumer.h"
#include "consumer/kafka_properties.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <random>
#include <thread>
#include <tuple>

#include "common/backoff.h"
#include "common/defaults.h"
#include "consumer/kafka_clients.h"
#include "consumer/offset_gap.h"

namespace logdex {
namespace {

int64_t Ms(const Clock& c) { return c.MonotonicNs() / 1'000'000; }

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

// A store error that retrying can never fix: the rows themselves are refused.
// Both backends say kInvalidArgument for those (HBase: a row over
// max_call_bytes, an empty key, TIllegalArgument; RocksDB: InvalidArgument).
// Everything else (I/O, unavailable, a missing table, a failed precondition,
// garbled transport) is about the store, not the rows: it may pass later, or
// after an operator acts, so it is retried with the partitions paused.
bool PermanentStoreError(const Status& s) { return !s.ok() && s.code() == Errc::kInvalidArgument; }

// The delivery state of one batch's dead letters, shared with the delivery
// reports of its copies in flight: a report that comes after
// DeliverDeadLetters returned (on stop) writes here, never into freed memory.
struct DlqDeliveries {
  enum State : int { kToSend = 0, kInFlight, kDelivered, kFailed };
  explicit DlqDeliveries(size_t n) : state(n), truncation_counted(n, false) {}
  std::vector<std::atomic<int>> state;  // per dead letter; value-initialized to kToSend
  std::vector<bool> truncation_counted;  // Run thread only: counted and logged once, not per retry
};

// One produce()'s opaque: owned by librdkafka from a successful produce()
// until its delivery report, which deletes it.
struct DlqTicket {
  std::shared_ptr<DlqDeliveries> deliveries;
  size_t index = 0;
};

}  // namespace

Status CheckConsumerKafkaProperties(const std::map<std::string, std::string>& kafka) {
  if (auto it = kafka.find("auto.offset.reset");
      it != kafka.end() && it->second != "earliest" && it->second != "smallest" && it->second != "beginning") {
    // error: librdkafka 2.0.2 then stops fetching a partition whose
    // position the broker deleted, for good (no seek restarts it).
    // latest: it skips every message still there, and only those already
    // deleted would be counted as lost. Only earliest loses nothing silently.
    return Status(Errc::kInvalidArgument,
                  "kafka.auto.offset.reset: only earliest is allowed (error stops a partition for good once "
                  "retention deletes its position; latest skips messages that still exist, uncounted)");
  }
  if (auto it = kafka.find("partition.assignment.strategy");
      it != kafka.end() && it->second.find("cooperative-sticky") != std::string::npos) {
    return Status(Errc::kInvalidArgument,
                  "kafka.partition.assignment.strategy: cooperative-sticky is not supported (logdex's rebalance "
                  "handling replaces the whole assignment; use range or roundrobin, the default is range,roundrobin)");
  }
  return Status::Ok();
}

class GroupConsumer::Impl : public RdKafka::RebalanceCb, public RdKafka::EventCb, public RdKafka::DeliveryReportCb {
 public:
  Impl(GroupConsumerOptions o, TableStore& store, BatchProcessor& processor, ConsumerMetrics& metrics,
       const Clock& clock)
      : o_(std::move(o)), store_(store), processor_(processor), metrics_(metrics), clock_(clock) {}

  ~Impl() override {
    {
      std::unique_lock lock(client_mu_);
      closed_ = true;
      refreshed_.wait(lock, [&] { return refreshing_ == 0; });  // a RefreshCommitted still in the client
    }
    if (consumer_) consumer_->close();
    if (producer_) {
      // Dead letters still queued or in flight (a stop while the DLQ was
      // slow): purge them and serve their reports, which free the tickets.
      producer_->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
      producer_->flush(2000);
    }
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
    if (Status s = CheckConsumerKafkaProperties(props); !s.ok()) return s;
    for (const auto& [k, v] : props) {
      if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
        // The value is not echoed (it may be a password); librdkafka's text may quote it.
        return Status(Errc::kInvalidArgument, "kafka." + k + ": " + RedactSecrets(err, o_.kafka));
      }
    }
    if (conf->set("rebalance_cb", static_cast<RdKafka::RebalanceCb*>(this), err) != RdKafka::Conf::CONF_OK ||
        conf->set("event_cb", static_cast<RdKafka::EventCb*>(this), err) != RdKafka::Conf::CONF_OK) {
      return Status(Errc::kInternal, err);
    }
    consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), err));
    if (!consumer_) return Status(Errc::kInvalidArgument, "kafka consumer: " + RedactSecrets(err, o_.kafka));

    // The DLQ producer: idempotent, acknowledged by all replicas.
    std::unique_ptr<RdKafka::Conf> pconf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    std::map<std::string, std::string> pprops = {{"enable.idempotence", "true"}, {"linger.ms", "5"}, {"log_level", "4"}};
    for (const auto& [k, v] : o_.kafka) pprops[k] = v;
    pprops.erase("group.id");
    for (const auto& [k, v] : pprops) {
      if (pconf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
        // Consumer-only properties do not apply to the producer.
        spdlog::debug("dlq producer ignores {}: {}", k, RedactSecrets(err, o_.kafka));
      }
    }
    pconf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(this), err);
    pconf->set("event_cb", static_cast<RdKafka::EventCb*>(this), err);
    producer_.reset(RdKafka::Producer::create(pconf.get(), err));
    if (!producer_) return Status(Errc::kInvalidArgument, "kafka dlq producer: " + RedactSecrets(err, o_.kafka));
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

  // --- librdkafka callbacks (run inside consume()/poll() on the Run thread;
  // event_cb's log events also come from librdkafka's own threads) ---

  void rebalance_cb(RdKafka::KafkaConsumer* consumer, RdKafka::ErrorCode err,
                    std::vector<RdKafka::TopicPartition*>& parts) override {
    metrics_.rebalances.Increment();
    // Before a revoke, what is written but not yet committed (skip_wal) is
    // made durable and committed, so that the new owners start after it.
    if (err != RdKafka::ERR__ASSIGN_PARTITIONS) {
      const uint64_t commits = commits_tried_;
      FlushAndCommit();
      ForgetUnflushed();  // what a failed flush left: replayed by the new owners
      // A commit refused earlier, once more while the partitions are ours
      // (not twice in one revoke, nor for an assignment already lost).
      if (!uncommitted_.empty() && commits_tried_ == commits && !consumer->assignment_lost()) Commit({});
      uncommitted_.clear();
    }
    std::set<TopicPartition> owned;
    std::vector<RdKafka::TopicPartition*> mine;
    ApplyRebalance(consumer, err, parts, &owned, &mine);
    if (err == RdKafka::ERR__ASSIGN_PARTITIONS) {
      ExpectCommittedOffsets(consumer, mine);
    } else {
      expected_.clear();
    }
    if (o_.on_assignment) o_.on_assignment(owned);
  }

  void ApplyRebalance(RdKafka::KafkaConsumer* consumer, RdKafka::ErrorCode err,
                      std::vector<RdKafka::TopicPartition*>& parts, std::set<TopicPartition>* owned,
                      std::vector<RdKafka::TopicPartition*>* mine) {
    std::lock_guard lock(mu_);
    if (err == RdKafka::ERR__ASSIGN_PARTITIONS) {
      *mine = WithoutDeadLetterTopics(parts);
      consumer->assign(*mine);
      for (auto* p : *mine) assigned_[{p->topic(), p->partition()}] = 0;
      spdlog::info("consumer: assigned {} partitions, {} in all", mine->size(), assigned_.size());
    } else {
      // Abandon in-flight messages of revoked partitions: nothing of theirs
      // was committed, so their new owner reads them again.
      std::vector<TopicPartition> revoked;
      for (auto* p : parts) revoked.emplace_back(p->topic(), p->partition());
      size_t before = pending_.size();
      std::erase_if(pending_, [&](const InMessage& m) {
        return std::find(revoked.begin(), revoked.end(), TopicPartition{m.topic, m.partition}) != revoked.end();
      });
      for (auto& tp : revoked) {
        assigned_.erase(tp);
        metrics_.Lag(tp.topic, tp.partition).Set(0);
      }
      consumer->unassign();
      assigned_.clear();
      spdlog::info("consumer: revoked {} partitions, abandoned {} unprocessed messages", parts.size(),
                   before - pending_.size());
    }
    metrics_.assigned_partitions.Set(static_cast<double>(assigned_.size()));
    for (const auto& [tp, lag] : assigned_) owned->insert(tp);
  }

  // With a topic regex, the assignment can hold our own dead-letter topics
  // (`^logs\..*` matches `logs.a.dlq`): consuming them would dead-letter
  // their bad messages again (`.dlq.dlq` chains) or stall on them. librdkafka's
  // regexes have no negative lookahead, so they are left out here, and each
  // excluded topic is logged once. A listed topic is consumed as listed.
  std::vector<RdKafka::TopicPartition*> WithoutDeadLetterTopics(const std::vector<RdKafka::TopicPartition*>& parts) {
    if (o_.topic_regex.empty() || o_.dlq_suffix.empty()) return parts;
    std::vector<RdKafka::TopicPartition*> kept;
    for (auto* p : parts) {
      const std::string& t = p->topic();
      const size_t n = o_.dlq_suffix.size();
      if (t.size() >= n && t.compare(t.size() - n, n, o_.dlq_suffix) == 0) {
        if (excluded_topics_.insert(t).second) {
          spdlog::info("consumer: not consuming {}: it matches {} but is a dead-letter topic (suffix {})", t,
                       o_.topic_regex, o_.dlq_suffix);
        }
        continue;
      }
      kept.push_back(p);
    }
    return kept;
  }

  // After an assignment, each partition's next message is expected at its
  // committed offset (or at 0 when the topics started empty in this process
  // and nothing was committed); unknown otherwise, until its first message.
  void ExpectCommittedOffsets(RdKafka::KafkaConsumer* consumer, const std::vector<RdKafka::TopicPartition*>& parts) {
    if (parts.empty()) return;
    std::vector<RdKafka::TopicPartition*> committed;
    for (auto* p : parts) committed.push_back(RdKafka::TopicPartition::create(p->topic(), p->partition()));
    RdKafka::ErrorCode e = consumer->committed(committed, 10'000);
    if (e) spdlog::warn("consumer: cannot read committed offsets ({}); offset gaps are checked from each partition's "
                        "first message", RdKafka::err2str(e));
    for (auto* p : committed) {
      int64_t next = -1;
      if (!e && p->err() == RdKafka::ERR_NO_ERROR && p->offset() >= 0) {
        next = p->offset();
        NoteCommitted(p->topic(), p->partition(), next);
      } else if (!e && o_.topics_start_empty) {
        next = 0;
      }
      expected_[{p->topic(), p->partition()}] = next;
    }
    RdKafka::TopicPartition::destroy(committed);
  }

  void event_cb(RdKafka::Event& event) override {
    if (event.type() == RdKafka::Event::EVENT_ERROR) {
      metrics_.kafka_errors.Increment();
      spdlog::warn("kafka: {} ({})", event.str(), RdKafka::err2str(event.err()));
    } else if (event.type() == RdKafka::Event::EVENT_LOG) {
      // librdkafka's own log (kafka.log_level, default 4: warnings; kafka.debug
      // adds its debug contexts): with an event_cb set it comes here, not to stderr.
      const int severity = static_cast<int>(event.severity());
      const auto level = severity <= RdKafka::Event::EVENT_SEVERITY_ERROR     ? spdlog::level::err
                         : severity <= RdKafka::Event::EVENT_SEVERITY_WARNING ? spdlog::level::warn
                                                                               : spdlog::level::info;
      spdlog::log(level, "librdkafka {}: {}", event.fac(), event.str());
    }
  }

  void dr_cb(RdKafka::Message& m) override {
    std::unique_ptr<DlqTicket> ticket(static_cast<DlqTicket*>(m.msg_opaque()));
    if (ticket) ticket->deliveries->state[ticket->index] = m.err() ? DlqDeliveries::kFailed : DlqDeliveries::kDelivered;
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
      bool done = Process(batch, out, stop) && DeliverDeadLetters(out, stop);
      if (done) {
        Status rejection;
        switch (WriteDurably(out, stop, &rejection)) {
          case Written::kYes:
            processor_.Settle(true);
            break;
          case Written::kStopped:
            done = false;
            break;
          case Written::kRejected:
            processor_.Settle(false);
            done = Salvage(batch, out, rejection, stop);  // settles what it writes
            break;
        }
      }
      if (!done) {
        processor_.Settle(false);
        spdlog::warn("consumer: stopping with an unwritten batch of {} messages; it will be consumed again",
                     batch.size());
        break;
      }
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
      metrics_.batches.Increment();
      metrics_.batch_seconds.Observe((Ms(clock_) - started) / 1000.0);
    }
    FlushAndCommit();
    spdlog::info("consumer: leaving group {}", o_.group_id);
    {
      std::lock_guard lock(client_mu_);
      closed_ = true;
    }
    consumer_->close();
    producer_->flush(1000);
    return Status::Ok();
  }

  ConsumerState State(int64_t max_lag) const {
    std::lock_guard lock(mu_);
    ConsumerState s;
    s.assigned = assigned_.size();
    for (auto& [tp, lag] : assigned_) s.max_lag = std::max(s.max_lag, lag);
    s.lost_messages = lost_messages_;
    s.lost = last_loss_;
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
          CheckOffset(m->topic_name(), m->partition(), m->offset());
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

  // Compares a message's offset with the one its partition expected and
  // counts what retention deleted in between (the rule: consumer/offset_gap.h).
  void CheckOffset(const std::string& topic, int32_t partition, int64_t offset) {
    auto it = expected_.try_emplace({topic, partition}, -1).first;
    const int64_t expected = it->second;
    it->second = offset + 1;
    if (expected < 0 || offset <= expected) return;  // unknown yet, in order, or redelivered
    // A gap: only now is the broker asked for the log start.
    int64_t low = -1, high = -1;
    RdKafka::ErrorCode e = consumer_->query_watermark_offsets(topic, partition, &low, &high, 5000);
    if (e) {
      low = high = -1;
      if (consumer_->get_watermark_offsets(topic, partition, &low, &high) != RdKafka::ERR_NO_ERROR) low = -1;
    }
    const int64_t lost = LostInGap(expected, offset, low);
    if (low < 0) {
      spdlog::warn("consumer: {}[{}] skipped offsets {}..{} and its log start is unknown ({}); not counted as lost",
                   topic, partition, expected, offset - 1, RdKafka::err2str(e));
      return;
    }
    if (lost == 0) {
      // Transaction markers, aborted or compacted messages: nothing lost.
      spdlog::debug("consumer: {}[{}] skipped offsets {}..{} at or above its log start {}", topic, partition, expected,
                    offset - 1, low);
      return;
    }
    RecordLoss(topic, partition, expected, lost, low);
  }

  void RecordLoss(const std::string& topic, int32_t partition, int64_t expected, int64_t lost, int64_t low) {
    // Also the /readyz line: "lost 14 messages of t[0] (offsets 4..17): ...".
    const std::string what = "lost " + std::to_string(lost) + " messages of " + topic + "[" +
                             std::to_string(partition) + "] (offsets " + std::to_string(expected) + ".." +
                             std::to_string(expected + lost - 1) + "): the broker deleted them (retention; log start now " +
                             std::to_string(low) + ") before this member consumed them";
    spdlog::error("consumer: {}; they were never indexed", what);
    metrics_.LostMessages(topic, partition).Increment(static_cast<double>(lost));
    std::lock_guard lock(mu_);
    lost_messages_ += static_cast<uint64_t>(lost);
    last_loss_ = what;
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

  // Turns messages into rows; while that fails (the observers read the
  // store), the partitions are paused and the batch is staged again (not
  // decoded again).
  bool Process(const std::vector<InMessage>& batch, ProcessedBatch& out, const std::atomic<bool>& stop) {
    uint32_t retries = 0;
    out.Clear();
    processor_.Add(batch, out);
    for (;;) {
      if (out.failed.ok()) return true;
      processor_.Settle(false);
      metrics_.store_write_failures.Increment();
      const int64_t delay = RetryPolicy().DelayMs(++retries, retry_rng_);
      spdlog::warn("consumer: batch processing failed: {}; partitions paused, retrying in {} ms", out.failed.ToString(),
                   delay);
      SetPaused(true);
      if (stop) return false;
      clock_.SleepFor(delay, &stop);  // a stop ends the nap; the loop tries once more, then returns
      processor_.Restage(out);
    }
  }

  // Produces the batch's dead letters and waits for every acknowledgement.
  // Only a dead letter whose delivery definitively failed (its report said
  // so, or produce() refused it) is produced again, after a backoff; one
  // still in flight when a flush times out is waited for, never produced a
  // second time. Partitions are paused meanwhile. Each produce() owns a
  // DlqTicket on the heap that its delivery report deletes; the state it
  // points at is shared, so a report after a stop writes into live memory.
  bool DeliverDeadLetters(const ProcessedBatch& out, const std::atomic<bool>& stop) {
    if (out.dead_letters.empty()) return true;
    const size_t n = out.dead_letters.size();
    auto deliveries = std::make_shared<DlqDeliveries>(n);
    uint32_t retries = 0;
    for (;;) {
      for (size_t i = 0; i < n; ++i) {
        const int state = deliveries->state[i];
        if (state != DlqDeliveries::kToSend && state != DlqDeliveries::kFailed) continue;
        deliveries->state[i] = DlqDeliveries::kInFlight;
        if (!ProduceDeadLetter(out.dead_letters[i], deliveries, i)) deliveries->state[i] = DlqDeliveries::kFailed;
      }
      producer_->flush(static_cast<int>(o_.dlq_flush_timeout_ms));  // serves the delivery reports
      size_t delivered = 0, failed = 0;
      for (const auto& st : deliveries->state) {
        delivered += st == DlqDeliveries::kDelivered;
        failed += st == DlqDeliveries::kFailed;
      }
      if (delivered == n) break;
      SetPaused(true);
      if (failed > 0) {
        metrics_.dlq_failures.Increment();
        const int64_t delay = RetryPolicy().DelayMs(++retries, retry_rng_);
        spdlog::warn("dlq: {} of {} dead letters failed; partitions paused, producing those again in {} ms", failed, n,
                     delay);
        if (stop) return false;
        clock_.SleepFor(delay, &stop);
      } else {
        metrics_.dlq_flush_timeouts.Increment();
        spdlog::warn("dlq: {} of {} dead letters still unacknowledged after {} ms; partitions paused, waiting for them "
                     "(they are not produced again)",
                     n - delivered, n, o_.dlq_flush_timeout_ms);
        if (stop) return false;
      }
    }
    for (const DeadLetter& d : out.dead_letters) {
      metrics_.DeadLettered(d.reason).Increment();
      spdlog::warn("dlq: {}[{}]@{} -> {}{}: {}", d.message.topic, d.message.partition, d.message.offset,
                   d.message.topic, o_.dlq_suffix, d.description);
    }
    SetPaused(false);
    return true;
  }

  // Hands one dead letter to the producer; false when it refused it.
  // A value over kDlqMaxValueBytes is cut to it, with its original size in
  // a header (counted and logged): the whole message stays in the source
  // topic at the offset the headers name, and a value no broker accepts
  // would otherwise be retried forever with every partition paused.
  // The error text is cut to kDlqMaxErrorBytes and the original headers are
  // copied only while they total kDlqMaxCopiedHeaderBytes (the rest are
  // named in logdex-headers-dropped), so that value and headers always fit
  // Kafka's default message.max.bytes.
  bool ProduceDeadLetter(const DeadLetter& d, const std::shared_ptr<DlqDeliveries>& deliveries, size_t index) {
    constexpr size_t kDlqMaxErrorBytes = 4096;
    constexpr size_t kDlqMaxCopiedHeaderBytes = 32 * 1024;
    RdKafka::Headers* h = RdKafka::Headers::create();
    h->add(std::string(kDlqErrorHeader), d.description.substr(0, kDlqMaxErrorBytes));
    h->add(std::string(kDlqTopicHeader), d.message.topic);
    h->add(std::string(kDlqPartitionHeader), std::to_string(d.message.partition));
    h->add(std::string(kDlqOffsetHeader), std::to_string(d.message.offset));
    size_t value_size = d.message.value.size();
    if (value_size > kDlqMaxValueBytes) {
      value_size = kDlqMaxValueBytes;
      h->add(std::string(kDlqTruncatedHeader), std::to_string(d.message.value.size()));
      if (deliveries->state[index] == DlqDeliveries::kInFlight && !deliveries->truncation_counted[index]) {
        deliveries->truncation_counted[index] = true;
        metrics_.dlq_truncated.Increment();
        spdlog::warn("dlq: the dead letter of {}[{}]@{} is {} bytes; its first {} go to {}{} (header {}), the whole "
                     "message stays in the source topic",
                     d.message.topic, d.message.partition, d.message.offset, d.message.value.size(), kDlqMaxValueBytes,
                     d.message.topic, o_.dlq_suffix, kDlqTruncatedHeader);
      }
    }
    size_t copied = 0, dropped = 0;
    for (const auto& [k, v] : d.message.headers) {
      if (copied + k.size() + v.size() > kDlqMaxCopiedHeaderBytes) {
        ++dropped;
        continue;
      }
      copied += k.size() + v.size();
      h->add(k, v);
    }
    if (dropped > 0) h->add("logdex-headers-dropped", std::to_string(dropped));
    auto ticket = std::make_unique<DlqTicket>(DlqTicket{deliveries, index});
    RdKafka::ErrorCode e = producer_->produce(
        d.message.topic + o_.dlq_suffix, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY,
        const_cast<char*>(d.message.value.data()), value_size,
        d.message.key.empty() ? nullptr : d.message.key.data(), d.message.key.size(), 0, h, ticket.get());
    if (e) {
      delete h;  // neither is taken over on failure
      spdlog::warn("dlq: cannot produce to {}{}: {}", d.message.topic, o_.dlq_suffix, RdKafka::err2str(e));
      return false;
    }
    ticket.release();  // the delivery report deletes it
    return true;
  }

  // The schedule of the store, staging and dead-letter retries: from 100 ms,
  // doubling up to retry_backoff_max, jittered.
  BackoffPolicy RetryPolicy() const { return BackoffPolicy{100, o_.retry_backoff_max_ms}; }

  enum class Written { kYes, kStopped, kRejected };

  // Writes the batch's rows, retrying with backoff while the store fails
  // transiently. A permanent error (PermanentStoreError) is not retried:
  // kRejected, with the error in `rejection`.
  Written WriteDurably(const ProcessedBatch& out, const std::atomic<bool>& stop, Status* rejection) {
    uint32_t retries = 0;
    for (;;) {
      const int64_t t0 = Ms(clock_);
      Status s = out.writes.empty() ? Status::Ok() : store_.Write(out.writes);
      metrics_.store_write_seconds.Observe((Ms(clock_) - t0) / 1000.0);
      if (s.ok()) break;
      metrics_.store_write_failures.Increment();
      if (PermanentStoreError(s)) {
        *rejection = s;
        return Written::kRejected;
      }
      const int64_t delay = RetryPolicy().DelayMs(++retries, retry_rng_);
      spdlog::warn("store: write of {} rows failed: {}; partitions paused, retrying in {} ms", out.writes.size(),
                   s.ToString(), delay);
      SetPaused(true);
      if (stop) return Written::kStopped;
      clock_.SleepFor(delay, &stop);
    }
    std::map<std::string, uint64_t> per_table;
    for (const auto& e : out.writes.entries()) ++per_table[e.table];
    for (const auto& [t, n] : per_table) metrics_.RowsWritten(t).Increment(static_cast<double>(n));
    SetPaused(false);
    return Written::kYes;
  }

  // The store refused `out` for good (`rejection`). Finds the messages whose
  // rows it cannot take by writing the batch message by message (only on
  // this path: one write per message), dead-letters those with reason
  // store_rejected and the store's error, and writes the rest. Messages
  // already dead-lettered by processing are skipped. On return `out` holds
  // the batch's totals for metrics and its offsets to commit; false on stop.
  // on_written is called for each message written (and again by the caller
  // for `out`, whose writes are then empty).
  bool Salvage(const std::vector<InMessage>& batch, ProcessedBatch& out, const Status& rejection,
               const std::atomic<bool>& stop) {
    metrics_.store_rejected_batches.Increment();
    spdlog::error("store: rejected a batch of {} rows for good ({}); writing its {} messages one by one, the ones it "
                  "rejects go to the DLQ",
                  out.writes.size(), rejection.ToString(), batch.size());
    std::set<std::tuple<std::string, int32_t, int64_t>> dead;
    for (const DeadLetter& d : out.dead_letters) dead.emplace(d.message.topic, d.message.partition, d.message.offset);
    ProcessedBatch rejected;
    uint64_t chunks = 0, records = 0;
    for (const InMessage& m : batch) {
      if (dead.count({m.topic, m.partition, m.offset})) continue;
      ProcessedBatch one;
      // Main rows may borrow the message's bytes until `one` is written: the
      // vector must outlive the write (a temporary would not, for an owned value).
      const std::vector<InMessage> single{m};
      if (!Process(single, one, stop) || !DeliverDeadLetters(one, stop)) return false;
      Status why;
      switch (WriteDurably(one, stop, &why)) {
        case Written::kYes:
          processor_.Settle(true);
          chunks += one.chunks;
          records += one.records;
          // Each message written here is a written batch of its own (live
          // tail sees it): `out` has no writes left to hand over.
          if (o_.on_written) o_.on_written(one);
          break;
        case Written::kStopped:
          return false;
        case Written::kRejected:
          processor_.Settle(false);
          rejected.dead_letters.push_back(DeadLetter{m, "store_rejected", "store_rejected: " + why.ToString()});
          break;
      }
    }
    if (!DeliverDeadLetters(rejected, stop)) return false;
    out.writes.Clear();
    out.chunks = chunks;
    out.records = records;
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

  // Commits the offsets after durable batches, with those of earlier commits
  // that failed: a refused commit (a rebalance being prepared, a coordinator
  // moving) is tried again with the next one and before a revoke, so that the
  // next owner of a partition does not write its batches a second time.
  void Commit(const std::map<TopicPartition, int64_t>& next_offsets) {
    for (const auto& [tp, next] : next_offsets) {
      int64_t& o = uncommitted_[tp];
      o = std::max(o, next);
    }
    rd_kafka_topic_partition_list_t* offsets = nullptr;
    {
      std::lock_guard lock(mu_);
      std::erase_if(uncommitted_, [&](const auto& kv) { return !assigned_.count(kv.first); });  // revoked: its new owner decides
      if (uncommitted_.empty()) return;
      offsets = rd_kafka_topic_partition_list_new(static_cast<int>(uncommitted_.size()));
      for (const auto& [tp, next] : uncommitted_) {
        rd_kafka_topic_partition_list_add(offsets, tp.topic.c_str(), tp.partition)->offset = next;
      }
    }
    ++commits_tried_;
    const int64_t t0 = Ms(clock_);
    const int count = offsets->cnt;
    rd_kafka_topic_partition_list_t* results = nullptr;
    rd_kafka_resp_err_t e = CommitWithin(offsets, &results);
    rd_kafka_topic_partition_list_destroy(offsets);
    metrics_.commit_seconds.Observe((Ms(clock_) - t0) / 1000.0);
    if (e) {
      metrics_.commit_failures.Increment();
      spdlog::warn("consumer: commit of {} partitions failed ({}); tried again with the next commit and before a "
                   "revoke, else their batches are replayed, idempotently",
                   count, rd_kafka_err2str(e));
    } else if (results != nullptr) {
      for (int i = 0; i < results->cnt; ++i) {
        const rd_kafka_topic_partition_t& p = results->elems[i];
        if (p.err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
        NoteCommitted(p.topic, p.partition, p.offset);
        auto it = uncommitted_.find({p.topic, p.partition});
        if (it != uncommitted_.end() && it->second <= p.offset) uncommitted_.erase(it);
      }
    }
    if (results != nullptr) rd_kafka_topic_partition_list_destroy(results);
  }

  // Commits `offsets` and waits at most commit_timeout_ms for the answer
  // (commitSync waits without a bound: through a broker outage it held the
  // loop and its error counts until the broker came back). The answer
  // comes on a queue of this call's own; one that comes later finds the
  // queue released and is dropped with it. `*results`: each partition's
  // outcome, for the caller to destroy. An abandoned commit may still land
  // after a later one and move an offset back: that replays batches, which
  // is idempotent, and loses nothing.
  rd_kafka_resp_err_t CommitWithin(const rd_kafka_topic_partition_list_t* offsets,
                                   rd_kafka_topic_partition_list_t** results) {
    rd_kafka_t* rk = consumer_->c_ptr();
    rd_kafka_queue_t* answer = rd_kafka_queue_new(rk);
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(rk, offsets, answer, nullptr, nullptr);
    if (!e) {
      rd_kafka_event_t* ev = rd_kafka_queue_poll(answer, static_cast<int>(std::max<int64_t>(1, o_.commit_timeout_ms)));
      if (ev == nullptr) {
        e = RD_KAFKA_RESP_ERR__TIMED_OUT;
      } else {
        e = rd_kafka_event_error(ev);
        if (const rd_kafka_topic_partition_list_t* done = rd_kafka_event_topic_partition_list(ev)) {
          *results = rd_kafka_topic_partition_list_copy(done);
        }
        rd_kafka_event_destroy(ev);
      }
    }
    rd_kafka_queue_destroy(answer);
    return e;
  }

  void NoteCommitted(const std::string& topic, int32_t partition, int64_t next) {
    std::lock_guard lock(committed_mu_);
    int64_t& at = committed_[{topic, partition}];
    at = std::max(at, next);
  }

 public:
  std::optional<int64_t> CommittedOffset(const std::string& topic, int32_t partition) const {
    std::lock_guard lock(committed_mu_);
    auto it = committed_.find({topic, partition});
    if (it == committed_.end()) return std::nullopt;
    return it->second;
  }

  Status RefreshCommitted(const std::vector<std::pair<std::string, int32_t>>& partitions, int timeout_ms) {
    std::vector<RdKafka::TopicPartition*> parts;
    {
      // This member's own partitions: the broker holds what it committed.
      std::lock_guard lock(mu_);
      for (const auto& [topic, partition] : partitions) {
        if (!assigned_.count({topic, partition})) parts.push_back(RdKafka::TopicPartition::create(topic, partition));
      }
    }
    if (parts.empty()) return Status::Ok();
    RdKafka::ErrorCode e = RdKafka::ERR__STATE;
    {
      // The client is thread-safe, but not once closed (Run's end): the
      // call is counted, and the client is not destroyed while it runs.
      std::unique_lock lock(client_mu_);
      if (!closed_ && consumer_) {
        ++refreshing_;
        lock.unlock();
        e = consumer_->committed(parts, timeout_ms);
        lock.lock();
        --refreshing_;
        refreshed_.notify_all();
      }
    }
    size_t read = 0;
    for (auto* p : parts) {
      if (e || p->err() != RdKafka::ERR_NO_ERROR || p->offset() < 0) continue;
      NoteCommitted(p->topic(), p->partition(), p->offset());
      ++read;
    }
    RdKafka::TopicPartition::destroy(parts);
    if (e) return Status(Errc::kUnavailable, "cannot read the group's committed offsets: " + RdKafka::err2str(e));
    spdlog::debug("consumer: read the committed offsets of {} partitions ({} with one)", partitions.size(), read);
    return Status::Ok();
  }

 private:
  // RefreshCommitted against the client's close and destruction.
  std::mutex client_mu_;
  std::condition_variable refreshed_;
  bool closed_ = false;  // under client_mu_
  int refreshing_ = 0;   // calls in the client, under client_mu_

  // The highest offset this member saw committed per partition (commits and
  // assignments), for CommittedOffset().
  mutable std::mutex committed_mu_;
  std::map<TopicPartition, int64_t> committed_;

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
    // Until a partition's first fetch the client knows no position: the
    // member then stands where its next message is expected (expected_: the
    // offset committed when it was assigned, as the broker answered), or at
    // the log start when that is unknown or past the log's end (a recreated
    // topic). Taking the log start always made a restarted, caught-up member
    // report its whole topic as lag, and /readyz 503, until a message came.
    // Until its watermarks are known too, a partition keeps its last lag.
    std::lock_guard lock(mu_);
    for (auto* p : parts) {
      int64_t low = 0, high = 0;
      if (consumer_->get_watermark_offsets(p->topic(), p->partition(), &low, &high) != RdKafka::ERR_NO_ERROR) continue;
      if (high < 0) continue;
      int64_t pos = p->offset();
      if (pos < 0) {
        auto expected = expected_.find({p->topic(), p->partition()});
        pos = expected != expected_.end() && expected->second >= 0 && expected->second <= high ? expected->second : low;
      }
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
  std::mt19937_64 retry_rng_{std::random_device{}()};  // retries' jitter (the Run thread's)
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
  std::unique_ptr<RdKafka::Producer> producer_;
  std::vector<std::unique_ptr<RdKafka::Topic>> dlq_topics_;  // handles held so their metadata is known early
  mutable std::mutex mu_;  // guards pending_ and assigned_
  std::vector<InMessage> pending_;
  std::map<TopicPartition, int64_t> assigned_;  // -> lag
  uint64_t lost_messages_ = 0;  // guarded by mu_, as is last_loss_
  std::string last_loss_;
  // Run thread only: per assigned partition, the offset its next message
  // should have (-1: unknown); dead-letter topics a regex matched, logged.
  std::map<TopicPartition, int64_t> expected_;
  std::set<std::string> excluded_topics_;
  bool paused_ = false;
  int64_t lag_updated_ms_ = INT64_MIN / 2;
  // With o_.flush: written, not yet durable (Run thread only).
  std::map<TopicPartition, int64_t> unflushed_offsets_;
  uint64_t unflushed_bytes_ = 0;
  uint64_t unflushed_messages_ = 0;
  int64_t last_flush_ms_ = 0;
  bool flush_failing_ = false;
  // Offsets of durable batches whose commit failed, and commits
  // made (Run thread only).
  std::map<TopicPartition, int64_t> uncommitted_;
  uint64_t commits_tried_ = 0;
};

GroupConsumer::GroupConsumer(GroupConsumerOptions options, TableStore& store, BatchProcessor& processor,
                             ConsumerMetrics& metrics, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(options), store, processor, metrics, clock)) {}
GroupConsumer::~GroupConsumer() = default;
Status GroupConsumer::Start() { return impl_->Start(); }
Status GroupConsumer::Run(const std::atomic<bool>& stop) { return impl_->Run(stop); }
ConsumerState GroupConsumer::State(int64_t max_lag) const { return impl_->State(max_lag); }
std::optional<int64_t> GroupConsumer::CommittedOffset(const std::string& topic, int32_t partition) const {
  return impl_->CommittedOffset(topic, partition);
}

Status GroupConsumer::RefreshCommitted(const std::vector<std::pair<std::string, int32_t>>& partitions, int timeout_ms) {
  return impl_->RefreshCommitted(partitions, timeout_ms);
}

}  // namespace logdex
