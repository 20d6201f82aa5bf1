#include "common/secrets.h"

#include "common/ascii.h"

namespace logdex {

bool IsSecretProperty(std::string_view name) {
  const std::string n = AsciiLower(name);
  for (const char* word : {"password", "secret", "sasl.oauthbearer", "sasl.jaas", "ssl.key.pem", "ssl_key", "token",
                           "credential"}) {
    if (n.find(word) != std::string::npos) return true;
  }
  return false;
}

namespace {

template <class Properties>
std::string Redact(std::string text, const Properties& properties) {
  for (const auto& [name, value] : properties) {
    if (value.empty() || !IsSecretProperty(name)) continue;
    for (size_t at = text.find(value); at != std::string::npos; at = text.find(value, at + 10)) {
      text.replace(at, value.size(), "[redacted]");  // 10 characters: the search goes on after it
    }
  }
  return text;
}

}  // namespace

std::string RedactSecrets(std::string text, const std::map<std::string, std::string>& properties) {
  return Redact(std::move(text), properties);
}

std::string RedactSecrets(std::string text, const std::vector<std::pair<std::string, std::string>>& properties) {
  return Redact(std::move(text), properties);
}

}  // namespace logdex
