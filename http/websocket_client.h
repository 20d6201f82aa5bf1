// A minimal WebSocket client over a blocking TCP socket to 127.0.0.1, for
// `logdex bench tail` and the tests of /loki/api/v1/tail: it sends the
// handshake and masked frames, and reads the server's frames with the
// server's own parser (http/websocket.h). Not a general client (no TLS,
// no redirects, no fragmented messages). The browser test
// (tests/ui/ui_test.mjs) dials the same endpoint with Chromium's WebSocket,
// a client logdex did not write.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

#include "http/websocket.h"

namespace logdex::websocket {

class LoopbackClient {
 public:
  static constexpr const char* kKey = "dGhlIHNhbXBsZSBub25jZQ==";  // RFC 6455's example key

  explicit LoopbackClient(int port) : port_(port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~LoopbackClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackClient(const LoopbackClient&) = delete;
  LoopbackClient& operator=(const LoopbackClient&) = delete;

  bool connected() const { return connected_; }

  // Sends a GET of `target` with `headers` (each "Name: value\r\n") and
  // returns the answer's head (up to its blank line), or "" after 20 s.
  std::string Request(const std::string& target, const std::string& headers) {
    Send("GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port_) + "\r\n" + headers + "\r\n");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    size_t at;
    while ((at = in_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(end)) return "";
    }
    std::string head = in_.substr(0, at + 4);
    in_.erase(0, at + 4);
    return head;
  }

  std::string Upgrade(const std::string& target) {
    return Request(target, std::string("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n") +
                               "Sec-WebSocket-Key: " + kKey + "\r\n");
  }

  // The rest of an answer with a body of `length` bytes.
  std::string Body(size_t length) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (in_.size() < length && Fill(end)) {
    }
    std::string b = in_.substr(0, length);
    in_.erase(0, b.size());
    return b;
  }

  bool SendFrame(Opcode op, const std::string& payload) {
    const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    return Send(EncodeFrame(op, payload, mask));
  }
  bool Send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }

  // The server's next frame within `timeout_ms`; nullopt on timeout, EOF or
  // a frame that breaks the RFC.
  std::optional<Frame> Next(int timeout_ms = 20'000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      Frame f;
      size_t consumed = 0;
      std::string error;
      CloseCode code;
      const auto r = ParseFrame(in_, false, 64 << 20, f, consumed, error, code);
      if (r == ParseResult::kFrame) {
        in_.erase(0, consumed);
        return f;
      }
      if (r == ParseResult::kError || !Fill(end)) return std::nullopt;
    }
  }

  // True when the server closed the TCP connection within `timeout_ms`.
  bool Eof(int timeout_ms = 20'000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    in_.clear();
    while (Fill(end)) in_.clear();
    return eof_;
  }

 private:
  bool Fill(std::chrono::steady_clock::time_point end) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }

  const int port_;
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string in_;
};

}  // namespace logdex::websocket
