// Secrets in configuration: which client properties hold one, and error text
// with their values taken out. Used wherever a Kafka client's settings can
// reach a log line or an error (serve's consumer and DLQ producer, ship's
// producer). Pure functions, thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace logdex {

// True for librdkafka properties whose value is a secret (passwords, SASL
// and OAuth credentials, private keys, tokens), by name, case-insensitively.
bool IsSecretProperty(std::string_view name);

// `text` with the value of every secret property replaced by "[redacted]"
// (librdkafka's own errors may quote a rejected value).
std::string RedactSecrets(std::string text, const std::map<std::string, std::string>& properties);
std::string RedactSecrets(std::string text, const std::vector<std::pair<std::string, std::string>>& properties);

}  // namespace logdex
