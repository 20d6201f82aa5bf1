// The Kafka a process test runs on: librdkafka's mock cluster in this process
// (EmbeddedKafka) by default, or, with KAFKA_ENGINE_TEST_SH (not LOGDEX_*:
// serve inherits it and refuses LOGDEX_ variables it does not know) naming
// scripts/engines/kafka.sh (ctest's `real_kafka/` variants of these tests,
// label real-engine), a real Apache Kafka broker that the script starts in a
// folder of the test's and stops when this object goes. The same test body
// runs on both: only bootstrap() and CreateTopic() differ.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "consumer/embedded_kafka.h"

namespace logdex::testing {

class TestKafka {
 public:
  // The result of Start(): a cluster, or why none (`skip`: the real broker's
  // jars cannot be fetched, as kafka.sh's exit 77 says; a skip, not a pass).
  struct Started {
    std::unique_ptr<TestKafka> kafka;
    std::string error;
    bool skip = false;
  };

  static bool Real() { return std::getenv("KAFKA_ENGINE_TEST_SH") != nullptr; }

  // `dir` is the test's own folder (the real broker's data and log go there).
  static Started Start(const std::string& dir) {
    Started s;
    std::unique_ptr<TestKafka> k(new TestKafka);
    if (!Real()) {
      auto mock = EmbeddedKafka::Start(1);
      if (!mock.ok()) {
        s.error = "mock cluster: " + mock.error().ToString();
        return s;
      }
      k->mock_ = std::move(*mock);
      k->bootstrap_ = k->mock_->bootstrap();
      s.kafka = std::move(k);
      return s;
    }
    k->sh_ = std::getenv("KAFKA_ENGINE_TEST_SH");
    k->dir_ = dir + "/kafka";
    const int rc = k->Script("start '" + k->dir_ + "'");
    if (rc != 0) {
      const char* require = std::getenv("LOGDEX_REQUIRE_ENGINES");
      s.skip = rc == 77 && !(require && std::string(require) == "1");
      s.error = "kafka.sh start exited " + std::to_string(rc) + ": " + k->ScriptLog();
      k->dir_.clear();  // nothing to stop
      return s;
    }
    std::getline(std::ifstream(k->dir_ + "/bootstrap"), k->bootstrap_);
    s.kafka = std::move(k);
    return s;
  }

  ~TestKafka() {
    if (!dir_.empty()) Script("stop '" + dir_ + "'");
  }
  TestKafka(const TestKafka&) = delete;
  TestKafka& operator=(const TestKafka&) = delete;

  const std::string& bootstrap() const { return bootstrap_; }
  bool real() const { return mock_ == nullptr; }

  // A topic with replication factor 1; false (and the reason in error()) on
  // failure. `configs` ("retention.bytes=1048576 segment.bytes=1048576") are
  // the real broker's topic settings; the mock cluster has fixed ones (it
  // keeps ~5 MiB per partition).
  bool CreateTopic(const std::string& topic, int partitions, const std::string& configs = "") {
    if (mock_) {
      Status st = mock_->CreateTopic(topic, partitions);
      if (!st.ok()) error_ = st.ToString();
      return st.ok();
    }
    const int rc = Script("create-topic '" + dir_ + "' '" + topic + "' " + std::to_string(partitions) + " " + configs);
    if (rc != 0) error_ = "kafka.sh create-topic exited " + std::to_string(rc) + ": " + ScriptLog();
    return rc == 0;
  }
  const std::string& error() const { return error_; }

 private:
  TestKafka() = default;

  // Runs kafka.sh with `args` (quoted by the caller); its exit code. Output goes
  // to a log beside the broker's folder; the broker dies with this process
  // (KAFKA_ENGINE_OWNER_PID) if the test is killed.
  int Script(const std::string& args) {
    const std::string cmd = "KAFKA_ENGINE_OWNER_PID=" + std::to_string(getpid()) + " '" + sh_ + "' " + args +
                            " >>'" + dir_ + ".script.log' 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }
  std::string ScriptLog() const {
    std::ostringstream out;
    out << std::ifstream(dir_ + ".script.log").rdbuf();
    std::string s = out.str();
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

  std::unique_ptr<EmbeddedKafka> mock_;
  std::string sh_, dir_, bootstrap_, error_;
};

}  // namespace logdex::testing
