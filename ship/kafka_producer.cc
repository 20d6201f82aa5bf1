#include "ship/kafka_producer.h"

#include "common/secrets.h"

#include <librdkafka/rdkafkacpp.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace logdex::ship {
namespace {

bool Retriable(RdKafka::ErrorCode e) {
  switch (e) {
    case RdKafka::ERR__MSG_TIMED_OUT:
    case RdKafka::ERR__TIMED_OUT:
    case RdKafka::ERR__TIMED_OUT_QUEUE:
    case RdKafka::ERR__TRANSPORT:
    case RdKafka::ERR__ALL_BROKERS_DOWN:
    case RdKafka::ERR__PURGE_QUEUE:
    case RdKafka::ERR__PURGE_INFLIGHT:
    case RdKafka::ERR_REQUEST_TIMED_OUT:
    case RdKafka::ERR_NOT_ENOUGH_REPLICAS:
    case RdKafka::ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RdKafka::ERR_LEADER_NOT_AVAILABLE:
    case RdKafka::ERR_NOT_LEADER_FOR_PARTITION:
    case RdKafka::ERR_NETWORK_EXCEPTION:
      return true;
    default:
      return false;
  }
}

}  // namespace

struct KafkaChunkProducer::Impl : public RdKafka::DeliveryReportCb, public RdKafka::EventCb {
  ProducerOptions options;
  const Clock* clock = nullptr;
  std::unique_ptr<RdKafka::Producer> producer;
  std::unique_ptr<RdKafka::Topic> topic;
  Backlog backlog{0, 0};
  std::map<uint64_t, std::unique_ptr<OutgoingChunk>> in_flight;
  bool available = true;
  std::string unavailable_reason;  // why, while !available
  bool finishing = false;
  // A chunk that was never delivered stays unresolved: checkpoints never move
  // past it, so a restart reads its lines again (dropped chunks are counted
  // and logged, and do resolve).
  uint64_t lowest_failed = UINT64_MAX;
  bool fatal = false;
  std::string fatal_reason;
  int64_t last_progress_ns = 0;
  std::optional<int64_t> last_drop_log_ns;  // none yet
  uint64_t drops_since_log = 0;
  bool record_order = false;
  bool librdkafka_debug = false;  // the user set librdkafka's `debug`: show its log lines
  std::vector<uint64_t> order;
  DeliveryReport report;

  // Metrics, declared in one place.
  prometheus::Counter* delivered_chunks = nullptr;
  prometheus::Counter* delivered_records = nullptr;
  prometheus::Counter* delivered_bytes = nullptr;
  prometheus::Counter* dropped_chunks = nullptr;
  prometheus::Counter* dropped_records = nullptr;
  prometheus::Counter* retries = nullptr;
  prometheus::Counter* failures = nullptr;
  prometheus::Gauge* backlog_chunks = nullptr;
  prometheus::Gauge* backlog_bytes = nullptr;
  prometheus::Gauge* in_flight_chunks = nullptr;
  prometheus::Gauge* kafka_available = nullptr;

  void RegisterMetrics(prometheus::Registry& r) {
    auto counter = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
    };
    auto gauge = [&](const char* name, const char* help) {
      return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
    };
    delivered_chunks = counter("logdex_ship_delivered_chunks_total", "Chunks acknowledged by Kafka");
    delivered_records = counter("logdex_ship_delivered_records_total", "Records in chunks acknowledged by Kafka");
    delivered_bytes = counter("logdex_ship_delivered_bytes_total", "Message value bytes acknowledged by Kafka");
    dropped_chunks = counter("logdex_ship_backlog_dropped_chunks_total",
                             "Oldest chunks dropped because the backlog was over its bound while Kafka was down");
    dropped_records = counter("logdex_ship_backlog_dropped_records_total", "Records in dropped chunks");
    retries = counter("logdex_ship_delivery_retries_total",
                      "Chunks put back in the backlog after a retriable delivery error");
    failures = counter("logdex_ship_delivery_failures_total", "Chunks given up after a permanent delivery error");
    backlog_chunks = gauge("logdex_ship_backlog_chunks", "Chunks waiting in the backlog");
    backlog_bytes = gauge("logdex_ship_backlog_bytes", "Bytes waiting in the backlog");
    in_flight_chunks = gauge("logdex_ship_in_flight_chunks", "Chunks handed to librdkafka, not yet acknowledged");
    kafka_available = gauge("logdex_ship_kafka_available", "1 while Kafka accepts chunks, 0 while it is unavailable");
    kafka_available->Set(1);
  }

  int64_t Now() const { return clock->MonotonicNs(); }

  void UpdateGauges() {
    backlog_chunks->Set(static_cast<double>(backlog.size()));
    backlog_bytes->Set(static_cast<double>(backlog.bytes()));
    in_flight_chunks->Set(static_cast<double>(in_flight.size()));
    kafka_available->Set(available ? 1 : 0);
  }

  void SetAvailable(bool on, const std::string& why) {
    if (on == available) return;
    available = on;
    unavailable_reason = on ? "" : why;
    if (on) {
      spdlog::info("ship: Kafka is available again; delivering a backlog of {} chunks newest first",
                   backlog.size());
    } else {
      spdlog::warn("ship: Kafka is unavailable ({}); chunks wait in a backlog bounded to {} bytes / {} chunks", why,
                   options.backlog_max_bytes, options.backlog_max_chunks);
    }
  }

  void Drop(std::vector<OutgoingChunk>& dropped) {
    if (dropped.empty()) return;
    for (const OutgoingChunk& c : dropped) {
      ++report.dropped_chunks;
      report.dropped_records += c.records;
      dropped_chunks->Increment();
      dropped_records->Increment(c.records);
      ++drops_since_log;
    }
    const int64_t now = Now();
    if (!last_drop_log_ns || now - *last_drop_log_ns >= 1'000'000'000) {
      spdlog::warn("ship: backlog over its bound: dropped the {} oldest chunks (total dropped: {} chunks, {} records)",
                   drops_since_log, report.dropped_chunks, report.dropped_records);
      drops_since_log = 0;
      last_drop_log_ns = now;
    }
  }

  void ToBacklog(OutgoingChunk c) {
    auto dropped = backlog.Push(std::move(c));
    Drop(dropped);
  }

  // " (Kafka unavailable: why)" while Kafka counts as down, else empty: the
  // end of a failure message for chunks given up at the deadline.
  std::string UnavailableSuffix() const {
    return available ? std::string() : " (Kafka unavailable: " + unavailable_reason + ")";
  }

  void Fail(const OutgoingChunk& c, const std::string& why) {
    lowest_failed = std::min(lowest_failed, c.sequence);
    ++report.failed_chunks;
    report.failed_records += c.records;
    failures->Increment();
    spdlog::error("ship: chunk {} ({} records, stream {}) not delivered: {}", c.sequence, c.records, c.key, why);
  }

  // Why deliveries stall, when the brokers can say: a broker that answers
  // but has no such topic (auto-creation off) holds chunks until their
  // timeout, which looks like an outage. One metadata request, once per
  // stall (its 2 s is spent while nothing is delivered anyway).
  std::string DiagnoseStall() {
    RdKafka::Metadata* md = nullptr;
    const RdKafka::ErrorCode err = producer->metadata(false, topic.get(), &md, 2000);
    std::unique_ptr<RdKafka::Metadata> owned(md);
    if (err != RdKafka::ERR_NO_ERROR) return "; the brokers do not answer (" + RdKafka::err2str(err) + ")";
    for (const RdKafka::TopicMetadata* t : *md->topics()) {
      if (t->topic() != options.topic) continue;
      if (t->err() == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART) {
        return "; the brokers answer, but topic '" + options.topic +
               "' does not exist and they do not create it: create it (with its .dlq topic) or pass --topic";
      }
      if (t->err() != RdKafka::ERR_NO_ERROR) return "; topic '" + options.topic + "': " + RdKafka::err2str(t->err());
    }
    return "";
  }

  // Hands a chunk to librdkafka; false (chunk returned in `c`) when its queue is full.
  bool Produce(std::unique_ptr<OutgoingChunk>& c) {
    if (in_flight.empty()) last_progress_ns = Now();
    OutgoingChunk* p = c.get();
    RdKafka::ErrorCode err =
        producer->produce(topic.get(), RdKafka::Topic::PARTITION_UA, 0 /* no copy: we keep the bytes */,
                          p->value.data(), p->value.size(), p->key.data(), p->key.size(), p);
    if (err == RdKafka::ERR__QUEUE_FULL) return false;
    if (err != RdKafka::ERR_NO_ERROR) {
      Fail(*p, "produce: " + RdKafka::err2str(err));
      c.reset();
      return true;
    }
    in_flight.emplace(p->sequence, std::move(c));
    return true;
  }

  // Moves backlog chunks (newest first) into the in-flight window.
  void Pump() {
    if (available && !in_flight.empty() && Now() - last_progress_ns > options.unavailable_after_ms * 1'000'000) {
      SetAvailable(false, "no delivery progress for " + std::to_string(options.unavailable_after_ms) + " ms" +
                              DiagnoseStall());
    }
    const size_t window = available ? options.max_in_flight : 1;
    while (!fatal && !backlog.empty() && in_flight.size() < window) {
      auto c = std::make_unique<OutgoingChunk>(*backlog.PopNewest());
      if (!Produce(c)) {
        ToBacklog(std::move(*c));
        break;
      }
    }
    UpdateGauges();
  }

  void dr_cb(RdKafka::Message& m) override {
    auto* p = static_cast<OutgoingChunk*>(m.msg_opaque());
    auto it = in_flight.find(p->sequence);
    LOGDEX_CHECK(it != in_flight.end() && it->second.get() == p);
    std::unique_ptr<OutgoingChunk> c = std::move(it->second);
    in_flight.erase(it);
    last_progress_ns = Now();
    if (m.err() == RdKafka::ERR_NO_ERROR) {
      ++report.delivered_chunks;
      report.delivered_records += c->records;
      delivered_chunks->Increment();
      delivered_records->Increment(c->records);
      delivered_bytes->Increment(static_cast<double>(c->value.size()));
      if (record_order) order.push_back(c->sequence);
      SetAvailable(true, "");
      return;
    }
    if (Retriable(m.err()) && !finishing && !fatal) {
      retries->Increment();
      spdlog::debug("ship: chunk {} delivery failed ({}); back to the backlog", c->sequence, m.errstr());
      ToBacklog(std::move(*c));
      return;
    }
    const bool purged = m.err() == RdKafka::ERR__PURGE_QUEUE || m.err() == RdKafka::ERR__PURGE_INFLIGHT;
    if (purged && finishing) {  // Finish() gave up on it: say why, not "Purged in queue"
      Fail(*c, std::string(m.err() == RdKafka::ERR__PURGE_INFLIGHT ? "still in flight" : "still queued") +
                   " when delivery was given up" + UnavailableSuffix());
      return;
    }
    Fail(*c, m.errstr());
  }

  void event_cb(RdKafka::Event& e) override {
    switch (e.type()) {
      case RdKafka::Event::EVENT_ERROR:
        if (e.fatal()) {
          std::string reason;
          producer->fatal_error(reason);
          fatal = true;
          fatal_reason = reason.empty() ? e.str() : reason;
          spdlog::error("ship: fatal Kafka producer error: {}", fatal_reason);
        } else if (e.err() == RdKafka::ERR__ALL_BROKERS_DOWN) {
          SetAvailable(false, "all brokers are down");
        } else {
          spdlog::debug("ship: Kafka: {}", e.str());
        }
        break;
      case RdKafka::Event::EVENT_LOG:
        if (e.severity() <= RdKafka::Event::EVENT_SEVERITY_ERROR) {
          spdlog::debug("ship: librdkafka {}: {}", e.fac(), e.str());
        } else if (librdkafka_debug) {
          spdlog::info("ship: librdkafka {}: {}", e.fac(), e.str());  // asked for with --kafka debug=...
        }
        break;
      default:
        break;
    }
  }
};

Result<std::unique_ptr<KafkaChunkProducer>> KafkaChunkProducer::Create(const ProducerOptions& options,
                                                                       prometheus::Registry& registry,
                                                                       const Clock& clock) {
  if (options.brokers.empty()) return Error{Errc::kInvalidArgument, "no Kafka brokers given"};
  if (options.topic.empty()) return Error{Errc::kInvalidArgument, "no Kafka topic given"};
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.max_in_flight == 0) impl->options.max_in_flight = 1;
  impl->clock = &clock;
  impl->backlog = Backlog(options.backlog_max_bytes, options.backlog_max_chunks);
  impl->RegisterMetrics(registry);

  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", options.brokers},
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"linger.ms", "5"},
      {"compression.type", "none"},  // chunks are snappy already
      {"client.id", "logdex-ship"},
  };
  settings.insert(settings.end(), options.kafka.begin(), options.kafka.end());
  for (const auto& [k, v] : options.kafka) impl->librdkafka_debug |= k == "debug" && !v.empty();
  for (const auto& [k, v] : settings) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
      return Error{Errc::kInvalidArgument, "Kafka setting " + k + "=" + (IsSecretProperty(k) ? "[redacted]" : v) +
                                               ": " + RedactSecrets(err, settings)};
    }
  }
  if (conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(impl.get()), err) != RdKafka::Conf::CONF_OK ||
      conf->set("event_cb", static_cast<RdKafka::EventCb*>(impl.get()), err) != RdKafka::Conf::CONF_OK) {
    return Error{Errc::kInternal, "librdkafka callbacks: " + err};
  }
  impl->producer.reset(RdKafka::Producer::create(conf.get(), err));
  if (!impl->producer) {
    return Error{Errc::kInvalidArgument, "cannot create the Kafka producer: " + RedactSecrets(err, settings)};
  }
  // The topic handle is made now, before the first broker connection is up, so
  // that the connection's first metadata request covers it. A topic first
  // named at the first produce() can miss that request and wait for
  // librdkafka's 1 s scan of unknown topics: every first chunk 1 s late.
  impl->topic.reset(RdKafka::Topic::create(impl->producer.get(), options.topic, nullptr, err));
  if (!impl->topic) return Error{Errc::kInvalidArgument, "Kafka topic " + options.topic + ": " + err};
  impl->last_progress_ns = clock.MonotonicNs();
  return std::unique_ptr<KafkaChunkProducer>(new KafkaChunkProducer(std::move(impl)));
}

KafkaChunkProducer::KafkaChunkProducer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KafkaChunkProducer::~KafkaChunkProducer() {
  if (!impl_->producer) return;
  // Anything still queued is abandoned (Finish() is where callers wait):
  // purge, serve the purged messages' reports while the chunks they point
  // into are alive, then destroy the producer before the rest of Impl.
  impl_->finishing = true;
  impl_->producer->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
  for (int i = 0; i < 100 && !impl_->in_flight.empty(); ++i) impl_->producer->poll(10);
  impl_->topic.reset();
  impl_->producer.reset();
}

Status KafkaChunkProducer::Send(OutgoingChunk chunk) {
  Impl& m = *impl_;
  if (m.fatal) {
    m.Fail(chunk, "producer is in a fatal state: " + m.fatal_reason);
    return Error{Errc::kUnavailable, "Kafka producer failed: " + m.fatal_reason};
  }
  m.producer->poll(0);
  m.Pump();
  if (m.backlog.empty() && m.available) {
    // Backpressure while Kafka is healthy: wait for room in the window.
    while (m.in_flight.size() >= m.options.max_in_flight && m.available && !m.fatal) {
      m.producer->poll(10);
      m.Pump();
    }
    if (m.available && m.backlog.empty() && !m.fatal) {
      auto c = std::make_unique<OutgoingChunk>(std::move(chunk));
      if (m.Produce(c)) {
        m.UpdateGauges();
        return Status::Ok();
      }
      chunk = std::move(*c);
    }
  }
  m.ToBacklog(std::move(chunk));
  m.Pump();
  return Status::Ok();
}

void KafkaChunkProducer::Poll(int timeout_ms) {
  impl_->producer->poll(timeout_ms);
  impl_->Pump();
}

uint64_t KafkaChunkProducer::LowestUnresolved() const {
  uint64_t low = std::min(impl_->backlog.lowest_sequence(), impl_->lowest_failed);
  if (!impl_->in_flight.empty()) low = std::min(low, impl_->in_flight.begin()->first);
  return low;
}

DeliveryReport KafkaChunkProducer::Finish(int64_t timeout_ms) {
  Impl& m = *impl_;
  const int64_t deadline = m.Now() + timeout_ms * 1'000'000;
  while ((!m.backlog.empty() || !m.in_flight.empty()) && !m.fatal && m.Now() < deadline) {
    m.producer->poll(50);
    m.Pump();
  }
  m.finishing = true;
  if (!m.in_flight.empty()) {
    m.producer->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
    for (int i = 0; i < 100 && !m.in_flight.empty(); ++i) m.producer->poll(10);
  }
  const std::string why = m.UnavailableSuffix();
  for (const auto& [seq, c] : m.in_flight) m.Fail(*c, "still in flight at the delivery deadline" + why);
  m.in_flight.clear();
  for (const OutgoingChunk& c : m.backlog.TakeAll()) m.Fail(c, "still in the backlog at the delivery deadline" + why);
  m.UpdateGauges();
  return m.report;
}

bool KafkaChunkProducer::available() const { return impl_->available; }
size_t KafkaChunkProducer::backlog_size() const { return impl_->backlog.size(); }
size_t KafkaChunkProducer::in_flight() const { return impl_->in_flight.size(); }
void KafkaChunkProducer::set_record_delivery_order(bool on) { impl_->record_order = on; }
const std::vector<uint64_t>& KafkaChunkProducer::delivery_order() const { return impl_->order; }
const DeliveryReport& KafkaChunkProducer::report() const { return impl_->report; }

}  // namespace logdex::ship
