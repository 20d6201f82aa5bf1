#include "tests/ship/mock_kafka.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstdlib>
#include <memory>

namespace logdex::ship::testing {

MockKafka::MockKafka(int brokers) : brokers_(brokers) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk_) std::abort();
  mc_ = rd_kafka_mock_cluster_new(rk_, brokers);
  if (!mc_) std::abort();
  bootstraps_ = rd_kafka_mock_cluster_bootstraps(mc_);
}

MockKafka::~MockKafka() {
  rd_kafka_mock_cluster_destroy(mc_);
  rd_kafka_destroy(rk_);
}

void MockKafka::CreateTopic(const std::string& topic, int partitions) {
  if (rd_kafka_mock_topic_create(mc_, topic.c_str(), partitions, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) std::abort();
}

void MockKafka::SetAllDown(bool down) {
  for (int id = 1; id <= brokers_; ++id) {
    if (down) rd_kafka_mock_broker_set_down(mc_, id);
    else rd_kafka_mock_broker_set_up(mc_, id);
  }
}

std::vector<Consumed> MockKafka::ConsumeAll(const std::string& topic, int partitions, size_t expect, int timeout_ms) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  conf->set("bootstrap.servers", bootstraps_, err);
  conf->set("group.id", "logdex-ship-test", err);
  conf->set("enable.auto.commit", "false", err);
  conf->set("log_level", "0", err);
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!consumer) std::abort();
  std::vector<RdKafka::TopicPartition*> parts;
  for (int p = 0; p < partitions; ++p) {
    parts.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  }
  consumer->assign(parts);
  RdKafka::TopicPartition::destroy(parts);
  std::vector<Consumed> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out.size() < expect && std::chrono::steady_clock::now() < deadline) {
    std::unique_ptr<RdKafka::Message> m(consumer->consume(100));
    if (m->err() != RdKafka::ERR_NO_ERROR) continue;
    Consumed c{m->partition(), m->offset(), m->key() ? *m->key() : std::string(),
               std::string(static_cast<const char*>(m->payload()), m->len())};
    out.push_back(std::move(c));
  }
  consumer->close();
  return out;
}

}  // namespace logdex::ship::testing
