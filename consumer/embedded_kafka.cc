#include "consumer/embedded_kafka.h"

// rdkafka.h must come before rdkafka_mock.h.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

namespace logdex {

struct EmbeddedKafka::Handle {
  rd_kafka_t* rk = nullptr;
  ~Handle() {
    if (rk) rd_kafka_destroy(rk);
  }
};

Result<std::unique_ptr<EmbeddedKafka>> EmbeddedKafka::Start(int brokers) {
  std::unique_ptr<EmbeddedKafka> k(new EmbeddedKafka());
  k->handle_ = std::make_unique<Handle>();
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);  // errors only: the mock is chatty
  k->handle_->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!k->handle_->rk) {
    rd_kafka_conf_destroy(conf);
    return Error{Errc::kInternal, std::string("embedded kafka: ") + err};
  }
  k->cluster_ = rd_kafka_mock_cluster_new(k->handle_->rk, brokers);
  if (!k->cluster_) return Error{Errc::kInternal, "embedded kafka: cannot create the mock cluster"};
  k->bootstrap_ = rd_kafka_mock_cluster_bootstraps(k->cluster_);
  return k;
}

EmbeddedKafka::~EmbeddedKafka() {
  if (cluster_) rd_kafka_mock_cluster_destroy(cluster_);
}

Status EmbeddedKafka::CreateTopic(const std::string& topic, int partitions) {
  rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1);
  if (err) return Status(Errc::kInternal, "create topic " + topic + ": " + rd_kafka_err2str(err));
  return Status::Ok();
}

Status EmbeddedKafka::SetBrokerDown(int id, bool down) {
  rd_kafka_resp_err_t err =
      down ? rd_kafka_mock_broker_set_down(cluster_, id) : rd_kafka_mock_broker_set_up(cluster_, id);
  if (err) return Status(Errc::kInternal, std::string("broker ") + std::to_string(id) + ": " + rd_kafka_err2str(err));
  return Status::Ok();
}

}  // namespace logdex
