// librdkafka's in-process mock cluster for ship tests, and a consumer that
// reads a topic back from the beginning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct rd_kafka_s;
struct rd_kafka_mock_cluster_s;

namespace logdex::ship::testing {

struct Consumed {
  int32_t partition;
  int64_t offset;
  std::string key;
  std::string value;
};

class MockKafka {
 public:
  explicit MockKafka(int brokers = 1);
  ~MockKafka();
  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;

  std::string bootstraps() const { return bootstraps_; }
  void CreateTopic(const std::string& topic, int partitions);
  // Takes every broker down or brings them back.
  void SetAllDown(bool down);
  // Reads the topic from the beginning until `expect` messages arrived or
  // `timeout_ms` passed; messages of each partition in offset order.
  std::vector<Consumed> ConsumeAll(const std::string& topic, int partitions, size_t expect, int timeout_ms);

 private:
  rd_kafka_s* rk_ = nullptr;
  rd_kafka_mock_cluster_s* mc_ = nullptr;
  int brokers_;
  std::string bootstraps_;
};

}  // namespace logdex::ship::testing
