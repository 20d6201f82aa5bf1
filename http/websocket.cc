#include "http/websocket.h"

#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace logdex::websocket {
namespace {

constexpr std::string_view kGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

int PollFor(int sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && (p.revents & events) == 0) return -1;  // POLLERR, POLLHUP or POLLNVAL alone
    return r;
  }
}

int MsSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

std::string AcceptKey(std::string_view client_key) {
  const std::string input = std::string(client_key) + std::string(kGuid);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(input.data(), input.size(), digest, &len, EVP_sha1(), nullptr) != 1) return {};
  unsigned char out[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(out, digest, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

bool ValidClientKey(std::string_view key) {
  // 16 bytes in base64: 22 characters and "==".
  if (key.size() != 24 || !key.ends_with("==")) return false;
  unsigned char out[18];
  return EVP_DecodeBlock(out, reinterpret_cast<const unsigned char*>(key.data()), 24) == 18;
}

std::string EncodeFrame(Opcode opcode, std::string_view payload, const uint8_t* mask) {
  std::string f;
  f.reserve(payload.size() + 14);
  f.push_back(static_cast<char>(0x80 | opcode));  // FIN: every frame here is a whole message
  const uint8_t mask_bit = mask != nullptr ? 0x80 : 0;
  const uint64_t n = payload.size();
  if (n < 126) {
    f.push_back(static_cast<char>(mask_bit | n));
  } else if (n <= 0xFFFF) {
    f.push_back(static_cast<char>(mask_bit | 126));
    f.push_back(static_cast<char>(n >> 8));
    f.push_back(static_cast<char>(n & 0xFF));
  } else {
    f.push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8) f.push_back(static_cast<char>((n >> shift) & 0xFF));
  }
  if (mask == nullptr) {
    f.append(payload);
    return f;
  }
  f.append(reinterpret_cast<const char*>(mask), 4);
  for (size_t i = 0; i < payload.size(); ++i) f.push_back(static_cast<char>(payload[i] ^ mask[i % 4]));
  return f;
}

ParseResult ParseFrame(std::string_view in, bool masked, size_t max_payload, Frame& out, size_t& consumed,
                       std::string& error, CloseCode& close_code) {
  if (in.size() < 2) return ParseResult::kNeedMore;
  const auto b0 = static_cast<uint8_t>(in[0]), b1 = static_cast<uint8_t>(in[1]);
  close_code = kProtocolError;
  if ((b0 & 0x70) != 0) {
    error = "a frame with reserved bits set (no extension was agreed)";
    return ParseResult::kError;
  }
  const uint8_t opcode = b0 & 0x0F;
  const bool control = (opcode & 0x08) != 0;
  if (opcode > kBinary && opcode != kClose && opcode != kPing && opcode != kPong) {
    error = "a frame with the reserved opcode " + std::to_string(opcode);
    return ParseResult::kError;
  }
  if (((b1 & 0x80) != 0) != masked) {
    error = masked ? "an unmasked frame from the client" : "a masked frame from the server";
    return ParseResult::kError;
  }
  size_t header = 2;
  uint64_t n = b1 & 0x7F;
  if (n == 126 || n == 127) {
    const size_t bytes = n == 126 ? 2 : 8;
    if (in.size() < 2 + bytes) return ParseResult::kNeedMore;
    n = 0;
    for (size_t i = 0; i < bytes; ++i) n = (n << 8) | static_cast<uint8_t>(in[2 + i]);
    header += bytes;
    if (n >> 63 != 0) {
      error = "a frame length with its top bit set";
      return ParseResult::kError;
    }
  }
  if (control && (n > 125 || (b0 & 0x80) == 0)) {
    error = "a control frame that is fragmented or over 125 bytes";
    return ParseResult::kError;
  }
  if (n > max_payload) {
    close_code = kTooBig;
    error = "a frame of " + std::to_string(n) + " bytes, over the " + std::to_string(max_payload) + " this server reads";
    return ParseResult::kError;
  }
  const size_t mask_bytes = masked ? 4 : 0;
  if (in.size() < header + mask_bytes + n) return ParseResult::kNeedMore;
  out.fin = (b0 & 0x80) != 0;
  out.opcode = opcode;
  out.payload.assign(in.substr(header + mask_bytes, n));
  if (masked) {
    const char* mask = in.data() + header;
    for (size_t i = 0; i < out.payload.size(); ++i) out.payload[i] = static_cast<char>(out.payload[i] ^ mask[i % 4]);
  }
  consumed = header + mask_bytes + n;
  return ParseResult::kFrame;
}

ServerConnection::ServerConnection(int sock, std::string already_read, int write_timeout_ms)
    : sock_(sock),
      write_timeout_ms_(write_timeout_ms),
      in_(std::move(already_read)),
      last_heard_(std::chrono::steady_clock::now()) {}

int64_t ServerConnection::MsSinceHeard() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last_heard_).count();
}

bool ServerConnection::SendRaw(std::string_view bytes) {
  if (!open()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!bytes.empty()) {
    const int left = write_timeout_ms_ - MsSince(t0);
    if (left <= 0 || PollFor(sock_, POLLOUT, left) <= 0) {
      End("the client did not read for " + std::to_string(write_timeout_ms_) + " ms");
      return false;
    }
    const ssize_t n = ::send(sock_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) {
      End("the connection broke");
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ServerConnection::Poll(int timeout_ms) {
  if (!open()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  size_t read = 0;
  for (;;) {
    // Handle every whole frame buffered.
    for (;;) {
      Frame f;
      size_t consumed = 0;
      std::string error;
      CloseCode code = kProtocolError;
      const ParseResult r = ParseFrame(in_, true, kMaxClientPayload, f, consumed, error, code);
      if (r == ParseResult::kNeedMore) break;
      if (r == ParseResult::kError) {
        Close(code, error, 0);
        ended_why_ = "the client sent " + error;
        return false;
      }
      in_.erase(0, consumed);
      if (f.opcode == kPing) {
        if (!SendRaw(EncodeFrame(kPong, f.payload))) return false;
      } else if (f.opcode == kClose) {
        // Echo a valid status code (RFC 6455 5.5.1); a 1-byte payload or a
        // code no endpoint may send (7.4) is a protocol error.
        const uint16_t code = f.payload.size() >= 2 ? static_cast<uint16_t>((static_cast<uint8_t>(f.payload[0]) << 8) |
                                                                            static_cast<uint8_t>(f.payload[1]))
                                                    : 0;
        const bool valid = f.payload.empty() ||
                           (f.payload.size() >= 2 && code >= 1000 && code < 5000 && code != 1004 && code != 1005 &&
                            code != 1006 && code != 1015 && !(code > 1015 && code < 3000));
        if (!valid) {
          Close(kProtocolError, "an invalid close frame", 0);
          ended_why_ = "the client sent an invalid close frame";
          return false;
        }
        if (!close_sent_) {
          close_sent_ = true;
          (void)SendRaw(EncodeFrame(kClose, std::string_view(f.payload).substr(0, f.payload.empty() ? 0 : 2)));
        }
        End("closed by the client");
        return false;
      }
      // Text, binary, continuation, pong: nothing to do (a tail reads nothing).
    }
    // A client that sends without pause must not keep the caller here: at
    // most kMaxReadPerPoll bytes per call, the rest at the next.
    if (read >= kMaxReadPerPoll) return true;
    const int left = std::max(0, timeout_ms - MsSince(t0));
    const int ready = PollFor(sock_, POLLIN, left);
    if (ready == 0) return true;
    if (ready < 0) {
      End("the connection broke");
      return false;
    }
    char buf[4096];
    const ssize_t n = ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) {
      End("the client went away");
      return false;
    }
    in_.append(buf, static_cast<size_t>(n));
    read += static_cast<size_t>(n);
    last_heard_ = std::chrono::steady_clock::now();
    timeout_ms = 0;  // handle what came, then return without waiting again
  }
}

void ServerConnection::Close(CloseCode code, std::string_view reason, int linger_ms) {
  if (close_sent_) return;
  close_sent_ = true;
  std::string payload{static_cast<char>(code >> 8), static_cast<char>(code & 0xFF)};
  // A control frame holds 125 bytes: 2 of code, 123 of reason (cut on a
  // UTF-8 character boundary).
  size_t cut = std::min<size_t>(reason.size(), 123);
  while (cut > 0 && cut < reason.size() && (static_cast<uint8_t>(reason[cut]) & 0xC0) == 0x80) --cut;
  payload.append(reason.substr(0, cut));
  if (!SendRaw(EncodeFrame(kClose, payload))) return;
  End("closed by the server: " + std::string(reason));
  // Wait for the client's close frame, dropping anything else.
  const auto t0 = std::chrono::steady_clock::now();
  while (MsSince(t0) < linger_ms) {
    if (PollFor(sock_, POLLIN, linger_ms - MsSince(t0)) <= 0) return;
    char buf[4096];
    const ssize_t n = ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    if (n > 0) in_.append(buf, static_cast<size_t>(n));
    Frame f;
    size_t consumed = 0;
    std::string error;
    CloseCode c = kProtocolError;
    ParseResult r;
    while ((r = ParseFrame(in_, true, kMaxClientPayload, f, consumed, error, c)) == ParseResult::kFrame) {
      if (f.opcode == kClose) return;
      in_.erase(0, consumed);
    }
    if (r == ParseResult::kError) return;
  }
}

}  // namespace logdex::websocket
