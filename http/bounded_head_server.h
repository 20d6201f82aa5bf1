// An httplib::Server whose request heads (request line, header lines and the
// blank line) are bounded in size and in time.
//
// Why by hand: cpp-httplib 0.11.4, the version Debian 12 ships, reads the
// request line and the header lines without any limit (its getline grows a
// std::string per byte until a newline; the number of header lines is not
// capped), so one client streaming an endless line or endless headers grows
// the server's memory until it stops. Upstream bounds them only since 2025;
// no other HTTP server library in Debian 12 fits the rest of the server's use
// of httplib. The server keeps httplib's parsing, routing and responses and
// only replaces the per-connection loop (Server::process_and_close_socket, a
// virtual of 0.11.4) and the socket stream under it, which counts the bytes
// and time of each request's head:
//   - past `max_bytes` the client gets 431 and the connection closes;
//   - a request still incomplete `timeout_ms` after its first byte gets 408
//     (its head, and a body httplib reads: a slow client holds a worker
//     thread this long at most);
// either way nothing more of the connection is read, and the hook is told
// (serve counts and logs it). Bodies are not counted here: the pre-routing
// check and set_payload_max_length bound them.
// Also unlike 0.11.4's loop: one stream (and its read buffer) serves every
// request of a keep-alive connection, so pipelined requests are not lost; and
// an answer with "Connection: close" (a refused request whose body was not
// read) ends the connection instead of the body being read as a request.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <string>

namespace logdex {

struct RequestHeadLimits {
  // Request line + header lines + blank line, bytes. Default 64 KiB (nginx's
  // default allows 4 x 8 KiB header lines).
  size_t max_bytes = 64 * 1024;
  // From the request's first byte to the end of its head (and of a body
  // httplib reads), ms. Default 10 s.
  int timeout_ms = 10'000;
};

enum class HeadRefusal {
  kTooLarge,  // answered 431
  kTimeout,   // answered 408
};

class BoundedHeadServer final : public httplib::Server {
 public:
  // Called on a worker thread for each refused head, with the peer address.
  using RefusalHook = std::function<void(HeadRefusal, const std::string& peer)>;

  BoundedHeadServer(RequestHeadLimits limits, RefusalHook on_refused);

  // Called by a handler (on its worker thread) to take the connection over
  // once the handler returns, for a protocol upgrade (a WebSocket): httplib's
  // answer is then not written; `run` gets the socket and the bytes already
  // read past the request's head, writes its own answer, and runs on the
  // worker thread until it returns; then the connection closes. False when
  // the calling thread is not serving a BoundedHeadServer request.
  using Takeover = std::function<void(int sock, std::string already_read)>;
  static bool TakeOver(Takeover run);

 private:
  bool process_and_close_socket(socket_t sock) override;

  const RequestHeadLimits limits_;
  const RefusalHook on_refused_;
};

}  // namespace logdex
