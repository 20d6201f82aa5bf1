// EmbeddedKafka: librdkafka's mock cluster in this process. It speaks the
// real Kafka protocol on loopback, so clients in other processes (kcat,
// `logdex ship`) can produce into it. For `serve --embedded-kafka`, the demo
// and tests. Limits (ENVIRONMENT.md): it keeps ~5 MiB per partition, and
// rejects offset commits during a rebalance.
//
// Thread-safety: the mock cluster runs its own threads; the methods here may
// be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

struct rd_kafka_mock_cluster_s;

namespace logdex {

class EmbeddedKafka {
 public:
  // Starts a cluster of `brokers` brokers on loopback.
  static Result<std::unique_ptr<EmbeddedKafka>> Start(int brokers = 1);
  ~EmbeddedKafka();

  // "127.0.0.1:PORT,..."
  const std::string& bootstrap() const { return bootstrap_; }

  // Creates a topic (replication factor 1).
  Status CreateTopic(const std::string& topic, int partitions);

  // Fault injection for tests: takes broker `id` (1-based) down or up.
  Status SetBrokerDown(int id, bool down);

  // The underlying mock cluster, for other rd_kafka_mock_* calls in tests.
  rd_kafka_mock_cluster_s* cluster() const { return cluster_; }

 private:
  EmbeddedKafka() = default;
  struct Handle;
  std::unique_ptr<Handle> handle_;
  rd_kafka_mock_cluster_s* cluster_ = nullptr;
  std::string bootstrap_;
};

}  // namespace logdex
