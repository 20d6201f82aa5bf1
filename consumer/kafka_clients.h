// Small librdkafka client helpers for the benchmarks and tests that talk to
// a cluster directly (serve's own clients are configured in group_consumer.cc,
// with their error handling).
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <map>
#include <memory>
#include <string>

#include "common/secrets.h"  // RedactSecrets, for the clients' errors

namespace logdex {

// A global client configuration holding `properties`; null when librdkafka
// refuses one (then `error` says which and why).
std::unique_ptr<RdKafka::Conf> KafkaConf(const std::map<std::string, std::string>& properties,
                                         std::string* error = nullptr);

// A consumer (group `group`, no subscription) assigned partitions
// 0..partitions-1 of `topic` from their first offset; null on failure.
std::unique_ptr<RdKafka::KafkaConsumer> ConsumerFromStart(const std::string& bootstrap, const std::string& group,
                                                         const std::string& topic, int partitions);

}  // namespace logdex
