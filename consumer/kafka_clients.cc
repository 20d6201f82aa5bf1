#include "consumer/kafka_clients.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace logdex {

std::unique_ptr<RdKafka::Conf> KafkaConf(const std::map<std::string, std::string>& properties, std::string* error) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  for (const auto& [k, v] : properties) {
    if (conf->set(k, v, err) != RdKafka::Conf::CONF_OK) {
      if (error) *error = k + ": " + err;
      return nullptr;
    }
  }
  return conf;
}

std::unique_ptr<RdKafka::KafkaConsumer> ConsumerFromStart(const std::string& bootstrap, const std::string& group,
                                                         const std::string& topic, int partitions) {
  auto conf = KafkaConf({{"bootstrap.servers", bootstrap}, {"group.id", group}, {"log_level", "2"}});
  if (!conf) return nullptr;
  std::string err;
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!c) return nullptr;
  std::vector<RdKafka::TopicPartition*> parts;
  for (int p = 0; p < partitions; ++p) {
    parts.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  }
  c->assign(parts);
  RdKafka::TopicPartition::destroy(parts);
  return c;
}

}  // namespace logdex
