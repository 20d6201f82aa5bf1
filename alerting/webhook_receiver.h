// A local webhook receiver: an HTTP server on 127.0.0.1 (a port the OS
// picks) that records every POST and answers with a status the caller sets
// (200 by default; 503 to play an outage). `logdex demo` shows the alerts it
// sends through one; the sink, dispatcher and process tests receive with one.
// Thread-safe: the server runs its own threads; the accessors lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace logdex::alerting {

struct ReceivedRequest {
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int64_t received_ms = 0;  // SystemClock time of arrival (latency measurements)

  // The first header of that name (in any case), or "".
  std::string Header(const std::string& name) const;
};

class WebhookReceiver {
 public:
  WebhookReceiver();  // listening when it returns
  ~WebhookReceiver();
  WebhookReceiver(const WebhookReceiver&) = delete;
  WebhookReceiver& operator=(const WebhookReceiver&) = delete;

  int port() const;  // -1 when no loopback port could be bound
  std::string url(const std::string& path = "/hook") const;
  // Status for the following requests; non-2xx ones are counted, not recorded.
  void set_status(int status);
  std::vector<ReceivedRequest> requests() const;
  std::vector<std::string> bodies() const;
  size_t refused() const;
  // Waits (real time, up to `timeout`) until at least n requests were recorded.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex::alerting
