// Runs the real Alertmanager (Debian's prometheus-alertmanager) on loopback
// for an integration test: a free port, a temporary storage dir and a config
// whose only receiver is a webhook URL; group_wait 0s, group_interval 100ms.
// The process is killed (SIGTERM, then SIGKILL) and reaped on destruction.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "common/net.h"
#include "tests/test_util.h"

namespace logdex::alerting::testing {

inline constexpr const char* kAlertmanagerBinary = "/usr/bin/prometheus-alertmanager";

inline bool AlertmanagerInstalled() { return ::access(kAlertmanagerBinary, X_OK) == 0; }

class AlertmanagerProcess {
 public:
  // Starts Alertmanager sending every alert to `webhook_url`; check ready().
  explicit AlertmanagerProcess(const std::string& webhook_url) {
    const std::string config = dir_.path() + "/alertmanager.yml";
    std::ofstream(config) << "route:\n"
                             "  receiver: hook\n"
                             "  group_by: ['...']\n"
                             "  group_wait: 0s\n"
                             "  group_interval: 100ms\n"
                             "  repeat_interval: 1h\n"
                             "receivers:\n"
                             "  - name: hook\n"
                             "    webhook_configs:\n"
                             "      - url: '" << webhook_url << "'\n"
                             "        send_resolved: false\n";
    for (int attempt = 0; attempt < 3 && !ready_; ++attempt) {
      port_ = FreeLoopbackPort();
      const std::string addr = "127.0.0.1:" + std::to_string(port_);
      std::vector<std::string> args = {kAlertmanagerBinary,
                                       "--config.file=" + config,
                                       "--storage.path=" + dir_.path() + "/data",
                                       "--web.listen-address=" + addr,
                                       "--cluster.listen-address=",
                                       "--web.external-url=http://" + addr,
                                       "--log.level=warn"};
      const std::string log = dir_.path() + "/alertmanager.log";
      // Everything the child needs is prepared before fork(): between fork
      // and exec it only calls async-signal-safe functions.
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      pid_ = ::fork();
      if (pid_ == 0) {
        if (log_fd >= 0) {
          ::dup2(log_fd, 1);
          ::dup2(log_fd, 2);
        }
        ::execv(argv[0], argv.data());
        ::_exit(127);
      }
      if (log_fd >= 0) ::close(log_fd);
      // Bounded polling of the readiness endpoint (a real process: real time).
      httplib::Client client("127.0.0.1", port_);
      client.set_connection_timeout(0, 200'000);
      for (int i = 0; i < 150 && !ready_; ++i) {
        if (auto res = client.Get("/-/ready"); res && res->status == 200) ready_ = true;
        int status = 0;
        if (!ready_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited (port taken?)
          pid_ = -1;
          break;
        }
        if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!ready_) Kill();
    }
  }
  ~AlertmanagerProcess() { Kill(); }

  bool ready() const { return ready_; }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream f(dir_.path() + "/alertmanager.log");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

 private:
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
};

}  // namespace logdex::alerting::testing
