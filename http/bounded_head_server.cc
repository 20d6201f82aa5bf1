#include "http/bounded_head_server.h"

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

namespace logdex {
namespace {

using SteadyClock = std::chrono::steady_clock;

int Ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

int MsUntil(SteadyClock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - SteadyClock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

// poll() for `events` on one socket: > 0 ready, 0 timed out, < 0 error.
int PollFor(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && (p.revents & events) == 0 && (p.revents & (POLLERR | POLLNVAL)) != 0) return -1;
    return r;
  }
}

std::string PeerOf(int sock) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown";
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown";
  }
  return addr.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

void IpAndPort(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int r = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
    ip = host;
  }
  if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

// The socket under httplib's request parser. Reads through a 4 KiB buffer, as
// httplib's own SocketStream does (its head parser reads one byte per call);
// between BeginRequest() and the blank line that ends the head, every byte
// handed out is counted against the limits.
class HeadBoundedStream final : public httplib::Stream {
 public:
  HeadBoundedStream(int sock, const RequestHeadLimits& limits, int read_timeout_ms, int write_timeout_ms,
                    const BoundedHeadServer::RefusalHook& on_refused)
      : sock_(sock),
        limits_(limits),
        read_timeout_ms_(read_timeout_ms),
        write_timeout_ms_(write_timeout_ms),
        on_refused_(on_refused) {}

  void BeginRequest() {
    in_head_ = true;
    head_bytes_ = 0;
    last_ = {0, 0};
    head_deadline_ = SteadyClock::now() + std::chrono::milliseconds(limits_.timeout_ms);
    response_started_ = false;
    closing_ = false;
  }
  bool HasBuffered() const { return off_ < len_; }
  bool refused() const { return refusal_.has_value(); }
  // The request's head was read to its blank line. When httplib answers
  // before that (a 400 for a bad request line or an over-long header line),
  // the rest of the head is unread and the connection must end.
  bool head_complete() const { return !in_head_; }
  // The answer to the request said "Connection: close" (a refused request
  // whose body was left unread): httplib 0.11.4 would read on, taking that
  // body for the next request.
  bool closing() const { return closing_; }

  bool is_readable() const override { return HasBuffered() || PollFor(sock_, POLLIN, read_timeout_ms_) > 0; }
  bool is_writable() const override { return !refused() && PollFor(sock_, POLLOUT, write_timeout_ms_) > 0; }

  // A handler took the connection over: httplib's answer is dropped.
  BoundedHeadServer::Takeover takeover;
  // The bytes read past the head, for the takeover.
  std::string TakeBuffered() {
    std::string out(buf_.data() + off_, len_ - off_);
    off_ = len_ = 0;
    return out;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (refused()) return -1;
    if (size == 0) return 0;
    if (!HasBuffered()) {
      if (!WaitReadable()) return -1;
      if (!in_head_ && size >= buf_.size()) return Recv(ptr, size);  // a body: straight to the caller
      const ssize_t n = Recv(buf_.data(), buf_.size());
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - off_);
    if (in_head_ && !CountHead(n)) return -1;
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (takeover) return static_cast<ssize_t>(size);
    if (!is_writable()) return -1;
    // httplib writes the status line and headers in one call; a 1xx interim
    // answer (100 Continue) comes before the real one.
    const std::string_view out(ptr, size);
    if (!response_started_ && !out.starts_with("HTTP/1.1 1")) {
      response_started_ = true;
      closing_ = out.substr(0, out.find("\r\n\r\n")).find("\r\nConnection: close\r") != std::string_view::npos;
    }
    for (;;) {
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { IpAndPort(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { IpAndPort(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  // Waits for bytes, for the read timeout and at most until the request's
  // deadline: its head and any body it carries (no endpoint takes one, but
  // httplib reads a POST's) are read within timeout_ms of the first byte.
  bool WaitReadable() {
    const int left = MsUntil(head_deadline_);
    if (left == 0) return Refuse(HeadRefusal::kTimeout);
    const int r = PollFor(sock_, POLLIN, std::min(read_timeout_ms_, left));
    if (r > 0) return true;
    if (r == 0 && MsUntil(head_deadline_) == 0) return Refuse(HeadRefusal::kTimeout);
    return false;
  }

  ssize_t Recv(char* ptr, size_t size) {
    for (;;) {
      const ssize_t n = ::recv(sock_, ptr, size, 0);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  // Counts the next `n` buffered bytes as head; shortens `n` to the head's end
  // when the blank line is among them. False: over the limit (refused).
  bool CountHead(size_t& n) {
    for (size_t i = 0; i < n; ++i) {
      if (++head_bytes_ > limits_.max_bytes) return Refuse(HeadRefusal::kTooLarge);
      const char c = buf_[off_ + i];
      // The head ends at CRLF CRLF: the only blank line httplib 0.11 (built
      // without CPPHTTPLIB_ALLOW_LF_AS_LINE_TERMINATOR, as Debian's is) ends
      // its header block on; it skips a bare-LF line and reads on.
      if (c == '\n' && last_[1] == '\r' && last_[0] == '\n') {
        in_head_ = false;
        n = i + 1;
        return true;
      }
      last_ = {last_[1], c};
    }
    return true;
  }

  // Answers the refusal itself (httplib's own answer, if it tries one, fails:
  // writes are refused from here on) and tells the hook.
  bool Refuse(HeadRefusal why) {
    refusal_ = why;
    const bool large = why == HeadRefusal::kTooLarge;
    const std::string body =
        large ? "{\"error\":\"request line and headers over " + std::to_string(limits_.max_bytes) + " bytes\"}\n"
              : std::string("{\"error\":\"") + (in_head_ ? "request line and headers" : "request body") +
                    " not complete within " + std::to_string(limits_.timeout_ms) + " ms\"}\n";
    const std::string response = std::string(large ? "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                                                    : "HTTP/1.1 408 Request Timeout\r\n") +
                                 "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body;
    if (PollFor(sock_, POLLOUT, write_timeout_ms_) > 0) {
      (void)::send(sock_, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (on_refused_) on_refused_(why, PeerOf(sock_));
    return false;
  }

  const int sock_;
  const RequestHeadLimits& limits_;
  const int read_timeout_ms_;
  const int write_timeout_ms_;
  const BoundedHeadServer::RefusalHook& on_refused_;
  std::array<char, 4096> buf_{};
  size_t off_ = 0;
  size_t len_ = 0;
  bool in_head_ = false;
  size_t head_bytes_ = 0;
  std::array<char, 2> last_{};
  SteadyClock::time_point head_deadline_{};
  std::optional<HeadRefusal> refusal_;
  bool response_started_ = false;
  bool closing_ = false;
};

// The stream of the request the current thread serves (null between requests).
thread_local HeadBoundedStream* current_stream = nullptr;

}  // namespace

bool BoundedHeadServer::TakeOver(Takeover run) {
  if (current_stream == nullptr) return false;
  current_stream->takeover = std::move(run);
  return true;
}

BoundedHeadServer::BoundedHeadServer(RequestHeadLimits limits, RefusalHook on_refused)
    : limits_(limits), on_refused_(std::move(on_refused)) {}

// httplib 0.11.4's loop, with the bounded stream: up to keep_alive_max_count_
// requests, each after at most keep_alive_timeout_sec_ idle; the wait checks
// every 100 ms whether the server stopped. Unlike 0.11.4's, it also ends the
// connection after an answer that says "Connection: close".
bool BoundedHeadServer::process_and_close_socket(socket_t sock) {
  HeadBoundedStream strm(sock, limits_, Ms(read_timeout_sec_, read_timeout_usec_),
                         Ms(write_timeout_sec_, write_timeout_usec_), on_refused_);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (!strm.HasBuffered()) {
      const auto until = SteadyClock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      int r = 0;
      while (r == 0 && svr_sock_ != INVALID_SOCKET) {
        const int wait = std::min(100, MsUntil(until));
        r = PollFor(sock, POLLIN, wait);
        if (r == 0 && wait < 100) break;
      }
      if (r <= 0) break;
    }
    strm.BeginRequest();
    bool connection_closed = false;
    current_stream = &strm;
    ok = process_request(strm, left == 1, connection_closed, nullptr);
    current_stream = nullptr;
    if (strm.takeover) {
      Takeover run = std::move(strm.takeover);
      try {
        run(sock, strm.TakeBuffered());
      } catch (const std::exception& e) {  // a worker thread must not end on an exception
        spdlog::warn("http: a taken-over connection failed: {}", e.what());
      } catch (...) {
        spdlog::warn("http: a taken-over connection failed");
      }
      break;
    }
    if (!ok || connection_closed || strm.refused() || strm.closing() || !strm.head_complete()) break;
  }
  if (strm.refused()) {
    // A lingering close: closing with unread input would send a reset, which
    // can destroy the 431/408 before the client reads it. Stop sending, then
    // read and drop what the client still sends, 1 s or 64 KiB at most.
    ::shutdown(sock, SHUT_WR);
    const auto until = SteadyClock::now() + std::chrono::seconds(1);
    char sink[4096];
    for (size_t drained = 0; drained < 64 * 1024 && PollFor(sock, POLLIN, MsUntil(until)) > 0;) {
      const ssize_t n = ::recv(sock, sink, sizeof sink, 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace logdex
