// Names and defaults that producers and consumers must agree on.
#pragma once

#include <string_view>

namespace logdex {

// The Kafka topic `logdex ship` produces to and `logdex serve` consumes by default.
inline constexpr std::string_view kDefaultTopic = "logdex.chunks";
// Dead-letter topic = source topic + this suffix (configurable in serve).
inline constexpr std::string_view kDeadLetterSuffix = ".dlq";

// Kafka message header naming the value's format: "chunk" (LogChunk protobuf,
// the default when absent), "json" (JSON lines) or "text" (plain lines).
inline constexpr std::string_view kFormatHeader = "logdex-format";

// Dead-letter headers.
inline constexpr std::string_view kDlqErrorHeader = "logdex-error";
inline constexpr std::string_view kDlqTopicHeader = "logdex-source-topic";
inline constexpr std::string_view kDlqPartitionHeader = "logdex-source-partition";
inline constexpr std::string_view kDlqOffsetHeader = "logdex-source-offset";
// On a dead letter whose value was cut to kDlqMaxValueBytes: the original
// size (the whole message stays in the source topic at the offset above).
inline constexpr std::string_view kDlqTruncatedHeader = "logdex-truncated-from";
// Largest dead-letter value produced whole: Kafka's default message.max.bytes
// (1,000,000, producer and broker) less room for the headers (the error text
// and the copied headers are bounded too: see GroupConsumer). A larger value
// could never be produced and would stall the partition behind it.
inline constexpr size_t kDlqMaxValueBytes = 900 * 1000;

}  // namespace logdex
