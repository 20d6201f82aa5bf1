// The HBase a process test runs on: the project's Thrift2 test gateway
// (HBaseTestServer, over RocksDB in this process) by default, or, with
// HBASE_ENGINE_TEST_SH (not LOGDEX_*: serve inherits it and refuses LOGDEX_
// variables it does not know) naming scripts/engines/hbase.sh (ctest's
// `real_hbase/` variants, label real-engine), a real HBase 2.6 and its Thrift2
// gateway that the script starts in a folder of the test's and stops when this
// object goes. The same test body runs on both: the faults differ in kind only
// (the test gateway is stopped and started again in this process; the real
// gateway and HBase are SIGKILLed and started again).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tests/hbase/hbase_test_server.h"

namespace logdex::testing {

class TestHBase {
 public:
  struct Started {
    std::unique_ptr<TestHBase> hbase;
    std::string error;
    bool skip = false;  // the real engine cannot be had here (hbase.sh's exit 77/78)
  };

  static bool Real() { return std::getenv("HBASE_ENGINE_TEST_SH") != nullptr; }

  // `dir` is the test's own folder; the engine's data and logs go under it.
  static Started Start(const std::string& dir) {
    Started s;
    std::unique_ptr<TestHBase> h(new TestHBase);
    h->dir_ = dir + "/hbase";
    if (!Real()) {
      h->options_.dir = h->dir_;
      if (!h->StartFixture()) {
        s.error = "test gateway: " + h->error_;
        return s;
      }
      s.hbase = std::move(h);
      return s;
    }
    h->sh_ = std::getenv("HBASE_ENGINE_TEST_SH");
    const int rc = h->Script("start '" + h->dir_ + "' framed binary");
    if (rc != 0) {
      const char* require = std::getenv("LOGDEX_REQUIRE_ENGINES");
      s.skip = (rc == 77 || rc == 78) && !(require && std::string(require) == "1");
      s.error = "hbase.sh start exited " + std::to_string(rc) + ": " + h->ScriptLog();
      h->Script("stop '" + h->dir_ + "'");
      h->sh_.clear();  // nothing left to stop
      return s;
    }
    std::string address;
    std::getline(std::ifstream(h->dir_ + "/thrift"), address);
    h->port_ = std::atoi(address.substr(address.rfind(':') + 1).c_str());
    s.hbase = std::move(h);
    return s;
  }

  ~TestHBase() {
    if (!sh_.empty()) Script("stop '" + dir_ + "'");
  }
  TestHBase(const TestHBase&) = delete;
  TestHBase& operator=(const TestHBase&) = delete;

  bool real() const { return !sh_.empty(); }
  int port() const { return port_; }
  // The test gateway itself (its stats and faults); null on a real HBase.
  HBaseTestServer* fixture() const { return fixture_.get(); }

  // The `store:` section of a serve config that writes to this HBase.
  std::string StoreYaml(const std::string& ns) const {
    return "store:\n  backend: hbase\n  hbase:\n    host: 127.0.0.1\n    port: " + std::to_string(port_) +
           "\n    namespace: " + ns + "\n";
  }

  // The gateway dies (SIGKILL; the test gateway stops serving) and comes back
  // on the same port. HBase and its data are untouched.
  bool KillGateway() {
    if (!real()) {
      fixture_.reset();
      return true;
    }
    return Run("kill-thrift");
  }
  bool RestartGateway() { return real() ? Run("restart-thrift") : StartFixture(); }
  // HBase itself (master, region server, ZooKeeper) SIGKILLed and started again
  // on the same data and ports; the gateway stays up and reconnects. The test
  // gateway, which is its own store, is stopped and started again.
  bool RestartHBase() {
    if (!real()) {
      fixture_.reset();
      return StartFixture();
    }
    return Run("restart-hbase");
  }

  const std::string& error() const { return error_; }
  // What the engine said, for a failure message: the script's output, and the
  // last lines of HBase's and of the gateway's logs.
  std::string Logs() {
    if (!real()) return error_;
    std::string out = "== hbase.sh ==\n" + ScriptLog();
    for (const char* name : {"master.log", "thrift.log"}) {
      std::ifstream in(dir_ + "/logs/" + name);
      std::deque<std::string> tail;
      for (std::string line; std::getline(in, line);) {
        tail.push_back(std::move(line));
        if (tail.size() > 80) tail.pop_front();
      }
      out += std::string("== ") + name + " (last 80 lines) ==\n";
      for (const std::string& line : tail) out += line + "\n";
    }
    return out;
  }

 private:
  TestHBase() = default;

  bool StartFixture() {
    auto server = HBaseTestServer::Start(options_);
    if (!server.ok()) {
      error_ = server.error().ToString();
      return false;
    }
    fixture_ = std::move(*server);
    options_.port = port_ = fixture_->port();  // a restart keeps the port
    return true;
  }

  bool Run(const std::string& command) {
    const int rc = Script(command + " '" + dir_ + "'");
    if (rc != 0) error_ = "hbase.sh " + command + " exited " + std::to_string(rc) + ": " + ScriptLog();
    return rc == 0;
  }

  // Runs hbase.sh with `args` (quoted by the caller); its exit code. Output goes
  // to a log beside the engine's folder; the JVMs die with this process
  // (HBASE_ENGINE_OWNER_PID) if the test is killed.
  int Script(const std::string& args) {
    const std::string cmd = "HBASE_ENGINE_OWNER_PID=" + std::to_string(getpid()) + " '" + sh_ + "' " + args +
                            " >>'" + dir_ + ".script.log' 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }
  std::string ScriptLog(size_t tail = 4000) const {
    std::ostringstream out;
    out << std::ifstream(dir_ + ".script.log").rdbuf();
    std::string s = out.str();
    return s.size() > tail ? s.substr(s.size() - tail) : s;
  }

  HBaseTestServerOptions options_;
  std::unique_ptr<HBaseTestServer> fixture_;
  std::string sh_, dir_, error_;
  int port_ = 0;
};

}  // namespace logdex::testing
