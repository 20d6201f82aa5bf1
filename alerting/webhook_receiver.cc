#include "alerting/webhook_receiver.h"

#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/ascii.h"
#include "common/clock.h"

namespace logdex::alerting {

std::string ReceivedRequest::Header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsNoCase(k, name)) return v;
  }
  return "";
}

struct WebhookReceiver::Impl {
  httplib::Server server;
  std::thread thread;
  int port = -1;
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  int status = 200;
  size_t refused = 0;
  std::vector<ReceivedRequest> requests;
};

WebhookReceiver::WebhookReceiver() : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.server.Post(R"(/.*)", [&m](const httplib::Request& req, httplib::Response& res) {
    int status;
    {
      std::lock_guard lock(m.mu);
      status = m.status;
      if (status >= 200 && status < 300) {
        ReceivedRequest r{req.path, {req.headers.begin(), req.headers.end()}, req.body, SystemClock::Instance().NowMs()};
        m.requests.push_back(std::move(r));
      } else {
        ++m.refused;
      }
    }
    m.cv.notify_all();
    res.status = status;
    res.set_content(status < 300 ? "ok" : "unavailable", "text/plain");
  });
  m.port = m.server.bind_to_any_port("127.0.0.1");
  m.thread = std::thread([&m] { m.server.listen_after_bind(); });
  // The socket listens once bound: a request sent now waits in its backlog.
  // Wait (bounded) for the accept loop anyway, so that stop() in the
  // destructor always finds it running.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(m.port < 0 ? 0 : 30);
  while (!m.server.is_running() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

WebhookReceiver::~WebhookReceiver() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int WebhookReceiver::port() const { return impl_->port; }

std::string WebhookReceiver::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(impl_->port) + path;
}

void WebhookReceiver::set_status(int status) {
  std::lock_guard lock(impl_->mu);
  impl_->status = status;
}

std::vector<ReceivedRequest> WebhookReceiver::requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->requests;
}

std::vector<std::string> WebhookReceiver::bodies() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const ReceivedRequest& r : impl_->requests) out.push_back(r.body);
  return out;
}

size_t WebhookReceiver::refused() const {
  std::lock_guard lock(impl_->mu);
  return impl_->refused;
}

bool WebhookReceiver::WaitFor(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->requests.size() >= n; });
}

}  // namespace logdex::alerting
