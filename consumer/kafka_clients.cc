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

bool IsSecretProperty(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* word : {"password", "secret", "sasl.oauthbearer", "sasl.jaas", "ssl.key.pem", "ssl_key",
                           "token", "credential"}) {
    if (n.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string RedactSecrets(std::string text, const std::map<std::string, std::string>& properties) {
  for (const auto& [k, v] : properties) {
    if (v.empty() || !IsSecretProperty(k)) continue;
    for (size_t at = text.find(v); at != std::string::npos; at = text.find(v, at + 10)) {
      text.replace(at, v.size(), "[redacted]");  // 10 characters: the search goes on after it
    }
  }
  return text;
}

}  // namespace logdex
