// A Kafka message as the consumer hands it to batch processing: owned copies
// of everything, so processing does not depend on librdkafka.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace logdex {

struct InMessage {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t timestamp_ms = 0;  // Kafka message timestamp (producer create time)

  // The first header with this name, or nullptr.
  const std::string* Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

}  // namespace logdex
