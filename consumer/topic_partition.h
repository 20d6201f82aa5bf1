// A Kafka partition by name: the key of the consumer's offsets, lags and
// assignments (librdkafka's own RdKafka::TopicPartition is a heap object
// with offsets and errors; this is a plain value, ordered for maps and sets).
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace logdex {

struct TopicPartition {
  std::string topic;
  int32_t partition = 0;

  auto operator<=>(const TopicPartition&) const = default;
  bool operator==(const TopicPartition&) const = default;
};

}  // namespace logdex
