// Test helpers around librdkafka: a producer and a plain reader of a topic,
// against EmbeddedKafka (librdkafka's mock cluster) or any broker.
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "consumer/kafka_clients.h"
#include "consumer/message.h"
#include "tests/test_util.h"

namespace logdex::testing {

class TestProducer : public RdKafka::DeliveryReportCb {
 public:
  explicit TestProducer(const std::string& bootstrap) {
    std::string err;
    // Messages up to 8 MB: the mock broker takes them, as a broker with a
    // raised message.max.bytes does (the DLQ must cope with such values).
    auto conf = KafkaConf({{"bootstrap.servers", bootstrap},
                           {"linger.ms", "1"},
                           {"log_level", "2"},
                           {"message.max.bytes", "8000000"}});
    conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(this), err);
    producer_.reset(RdKafka::Producer::create(conf.get(), err));
  }

  // A message the broker did not take fails the next Flush() (a test that
  // counts what it produced must know), and is said on stderr.
  void dr_cb(RdKafka::Message& m) override {
    if (!m.err()) return;
    if (failed_++ < 3) std::fprintf(stderr, "TestProducer: delivery to %s[%d] failed: %s\n", m.topic_name().c_str(),
                                    m.partition(), m.errstr().c_str());
  }

  // Produces and waits for the acknowledgement; true when delivered.
  bool Send(const std::string& topic, int32_t partition, const std::string& value, const std::string& key = "",
            const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    RdKafka::Headers* h = RdKafka::Headers::create();
    for (const auto& [k, v] : headers) h->add(k, v);
    RdKafka::ErrorCode e = producer_->produce(topic, partition, RdKafka::Producer::RK_MSG_COPY,
                                              const_cast<char*>(value.data()), value.size(),
                                              key.empty() ? nullptr : key.data(), key.size(), 0, h, nullptr);
    if (e) {
      delete h;
      return false;
    }
    return Flush();
  }

  // Queues without waiting (Flush() waits for all).
  bool Queue(const std::string& topic, int32_t partition, const std::string& value) {
    return producer_->produce(topic, partition, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(value.data()),
                              value.size(), nullptr, 0, 0, nullptr, nullptr) == RdKafka::ERR_NO_ERROR;
  }

  // Waits for every queued message; false when one was not delivered.
  bool Flush(int timeout_ms = 30'000) {
    const bool flushed = producer_->flush(timeout_ms) == RdKafka::ERR_NO_ERROR;
    const bool delivered = failed_ == 0;
    failed_ = 0;
    return flushed && delivered;
  }

 private:
  int failed_ = 0;  // since the last Flush(); dr_cb runs inside flush()
  std::unique_ptr<RdKafka::Producer> producer_;
};

// A consumed message's fields and bytes, copied.
inline InMessage CopyMessage(RdKafka::Message& m) {
  InMessage im;
  im.topic = m.topic_name();
  im.partition = m.partition();
  im.offset = m.offset();
  if (m.key()) im.key = *m.key();
  im.value.assign(static_cast<const char*>(m.payload()), m.len());
  if (RdKafka::Headers* h = m.headers()) {
    for (const auto& hd : h->get_all()) {
      im.headers.emplace_back(hd.key(), std::string(static_cast<const char*>(hd.value()), hd.value_size()));
    }
  }
  return im;
}

// Reads every message of a topic's partition 0..partitions-1 from the start, until `want`
// messages or the timeout.
inline std::vector<InMessage> ReadTopic(const std::string& bootstrap, const std::string& topic, int partitions,
                                        size_t want, int timeout_ms = 20'000) {
  auto c = ConsumerFromStart(bootstrap, "test-reader", topic, partitions);
  if (!c) return {};
  std::vector<InMessage> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
    std::unique_ptr<RdKafka::Message> m(c->consume(100));
    if (!m || m->err()) continue;
    out.push_back(CopyMessage(*m));
  }
  c->close();
  return out;
}

// Offsets `group` has committed, summed over partitions 0..partitions-1 of `topic`.
inline int64_t Committed(const std::string& bootstrap, const std::string& group, const std::string& topic,
                         int partitions) {
  std::string err;
  auto conf = KafkaConf({{"bootstrap.servers", bootstrap}, {"group.id", group}, {"log_level", "2"}});
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), err));
  std::vector<RdKafka::TopicPartition*> parts;
  for (int p = 0; p < partitions; ++p) parts.push_back(RdKafka::TopicPartition::create(topic, p));
  int64_t sum = 0;
  if (c->committed(parts, 5000) == RdKafka::ERR_NO_ERROR) {
    for (auto* p : parts) sum += std::max<int64_t>(0, p->offset());
  }
  RdKafka::TopicPartition::destroy(parts);
  c->close();
  return sum;
}

// The high watermarks of partitions 0..partitions-1 of `topic`, summed (the
// messages the topic holds, when none were deleted); -1 on failure.
inline int64_t HighWatermarks(const std::string& bootstrap, const std::string& topic, int partitions) {
  std::string err;
  auto conf = KafkaConf({{"bootstrap.servers", bootstrap}, {"group.id", "test-watermarks"}, {"log_level", "2"}});
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!c) return -1;
  int64_t sum = 0;
  for (int p = 0; p < partitions && sum >= 0; ++p) {
    int64_t low = -1, high = -1;
    if (c->query_watermark_offsets(topic, p, &low, &high, 10'000) != RdKafka::ERR_NO_ERROR) sum = -1;
    else sum += high;
  }
  c->close();
  return sum;
}

// The log-start offset (low watermark) of a partition, as the broker says
// now; -1 on failure.
inline int64_t LogStart(const std::string& bootstrap, const std::string& topic, int32_t partition) {
  std::string err;
  auto conf = KafkaConf({{"bootstrap.servers", bootstrap}, {"group.id", "test-watermarks"}, {"log_level", "2"}});
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!c) return -1;
  int64_t low = -1, high = -1;
  if (c->query_watermark_offsets(topic, partition, &low, &high, 10'000) != RdKafka::ERR_NO_ERROR) low = -1;
  c->close();
  return low;
}

}  // namespace logdex::testing
