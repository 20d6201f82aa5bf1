// Small librdkafka client helpers for the benchmarks and tests that talk to
// a cluster directly (serve's own clients are configured in group_consumer.cc,
// with their error handling).
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <map>
#include <memory>
#include <string>

namespace logdex {

// A global client configuration holding `properties`; null when librdkafka
// refuses one (then `error` says which and why).
std::unique_ptr<RdKafka::Conf> KafkaConf(const std::map<std::string, std::string>& properties,
                                         std::string* error = nullptr);

// A consumer (group `group`, no subscription) assigned partitions
// 0..partitions-1 of `topic` from their first offset; null on failure.
std::unique_ptr<RdKafka::KafkaConsumer> ConsumerFromStart(const std::string& bootstrap, const std::string& group,
                                                         const std::string& topic, int partitions);

// True for librdkafka properties whose value is a secret (passwords, SASL
// and OAuth credentials, private keys): their values never appear in logs
// or error text.
bool IsSecretProperty(const std::string& name);

// `text` with the value of every secret property of `properties` replaced
// by "[redacted]" (librdkafka's own errors may quote a rejected value).
std::string RedactSecrets(std::string text, const std::map<std::string, std::string>& properties);

}  // namespace logdex
