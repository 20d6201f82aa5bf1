// The server side of a WebSocket (RFC 6455), for Loki's live tail
// (/loki/api/v1/tail, which Grafana's Loki data source dials).
//
// Why by hand: cpp-httplib 0.11.4 (Debian 12's) has no WebSocket support,
// and the WebSocket libraries in Debian 12 (websocketpp, libwebsockets,
// Boost.Beast) each bring their own listener and event loop, where the tail
// must share the HTTP server's port, auth, limits and worker threads. What a
// tail needs of the protocol is small: the handshake's accept key; server
// frames, unmasked text, ping and close; and reading the client's frames
// (masked, as the RFC requires) to answer pings and closes. Messages the
// client sends are read and dropped, as Loki drops them. HttpServer takes
// the connection over after the 101 answer (BoundedHeadServer::TakeOver).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace logdex::websocket {

enum Opcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

// Close codes used here (RFC 6455 7.4.1).
enum CloseCode : uint16_t {
  kNormal = 1000,
  kGoingAway = 1001,      // the server is stopping
  kProtocolError = 1002,  // a frame that breaks the RFC
  kTooBig = 1009,         // a frame over the size this server reads
  kTryAgainLater = 1013,  // the client did not keep up
};

// Sec-WebSocket-Accept for a client's Sec-WebSocket-Key: base64(SHA-1(key +
// the RFC's GUID)).
std::string AcceptKey(std::string_view client_key);

// Whether `key` is a valid Sec-WebSocket-Key: base64 of 16 bytes.
bool ValidClientKey(std::string_view key);

// One frame, with `mask` (4 bytes) when not null: a client's frames are
// masked, a server's are not.
std::string EncodeFrame(Opcode opcode, std::string_view payload, const uint8_t* mask = nullptr);

struct Frame {
  bool fin = true;
  uint8_t opcode = 0;
  std::string payload;  // unmasked
};

enum class ParseResult { kFrame, kNeedMore, kError };

// Parses the first frame of `in`. kFrame: `out` and `consumed` are set.
// kError: `error` says why and `close_code` what to close with (a frame
// whose mask bit is not `masked`, reserved bits or opcodes, a control frame
// over 125 bytes or fragmented, or a payload over `max_payload`).
ParseResult ParseFrame(std::string_view in, bool masked, size_t max_payload, Frame& out, size_t& consumed,
                       std::string& error, CloseCode& close_code);

// The server's end of one connection, on a blocking socket it does not own.
class ServerConnection {
 public:
  // Client frames over this many payload bytes close the connection (1009).
  static constexpr size_t kMaxClientPayload = 64 * 1024;
  // Bytes one Poll() reads at most: a client that sends without pause
  // cannot keep the caller in Poll().
  static constexpr size_t kMaxReadPerPoll = 256 * 1024;

  // `already_read`: bytes read from the socket after the request's head.
  ServerConnection(int sock, std::string already_read, int write_timeout_ms);

  // Writes `bytes` within the write timeout. False: the peer is gone or did
  // not read for that long (the connection is then over).
  bool SendRaw(std::string_view bytes);
  bool SendText(std::string_view text) { return SendRaw(EncodeFrame(kText, text)); }
  bool SendPing() { return SendRaw(EncodeFrame(kPing, {})); }

  // Reads what the client sent, waiting up to `timeout_ms` for the first
  // bytes: answers pings, drops messages, notes a close (and answers it).
  // False once the connection is over; `ended_why()` says why.
  bool Poll(int timeout_ms);

  // Sends a close frame (reason cut to the 123 bytes a frame holds) and waits
  // up to `linger_ms` for the client's close. Once only.
  void Close(CloseCode code, std::string_view reason, int linger_ms = 1000);

  bool open() const { return ended_why_.empty(); }
  // Since the client last sent a byte (a pong answers a ping), ms.
  int64_t MsSinceHeard() const;
  const std::string& ended_why() const { return ended_why_; }

 private:
  void End(std::string why) {
    if (ended_why_.empty()) ended_why_ = std::move(why);
  }

  const int sock_;
  const int write_timeout_ms_;
  std::string in_;
  std::chrono::steady_clock::time_point last_heard_;
  bool close_sent_ = false;
  std::string ended_why_;
};

}  // namespace logdex::websocket
