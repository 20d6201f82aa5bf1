// A local HTTP receiver for sink tests: a cpp-httplib server on 127.0.0.1,
// port 0 (the OS picks), that records every POST and answers with a
// configurable status (200 by default; set 503 to simulate an outage).
// Thread-safe: the server runs its own threads; accessors lock.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace logdex::alerting::testing {

struct ReceivedRequest {
  std::string path;
  httplib::Headers headers;
  std::string body;
  int64_t received_ms = 0;  // SystemClock time of arrival (latency measurements)

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class WebhookReceiver {
 public:
  WebhookReceiver() {
    server_.Post(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      int status;
      {
        std::unique_lock lock(mu_);
        status = status_;
        if (status >= 200 && status < 300) {
          requests_.push_back(ReceivedRequest{req.path, req.headers, req.body, SystemClock::Instance().NowMs()});
        } else {
          ++refused_;
        }
      }
      cv_.notify_all();
      res.status = status;
      res.set_content(status < 300 ? "ok" : "unavailable", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 1000 && !server_.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~WebhookReceiver() {
    server_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Status for the following requests; non-2xx requests are counted, not recorded.
  void set_status(int status) {
    std::lock_guard lock(mu_);
    status_ = status;
  }
  std::vector<ReceivedRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }
  // Waits (real time, bounded) until at least n requests were recorded.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 200;
  size_t refused_ = 0;
  std::vector<ReceivedRequest> requests_;
};

}  // namespace logdex::alerting::testing
