// The WebSocket server side (http/websocket.h): the handshake's accept
// key (RFC 6455's own example), frames in each length form, the client
// frames the RFC forbids, and a connection over a socket pair answering
// pings and closes and closing on what it must refuse.
#include "http/websocket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <string>
#include <thread>


namespace logdex::websocket {
namespace {

const uint8_t kMask[4] = {0xA1, 0xB2, 0xC3, 0xD4};

struct Parsed {
  ParseResult result;
  Frame frame;
  size_t consumed = 0;
  std::string error;
  CloseCode code = kNormal;
};

Parsed Parse(std::string_view in, bool masked, size_t max = 1 << 20) {
  Parsed p;
  p.result = ParseFrame(in, masked, max, p.frame, p.consumed, p.error, p.code);
  return p;
}

TEST(WebSocket, TheAcceptKeyIsTheRfcsExample) {
  // RFC 6455 section 1.3.
  EXPECT_EQ(AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  EXPECT_TRUE(ValidClientKey("dGhlIHNhbXBsZSBub25jZQ=="));
  EXPECT_FALSE(ValidClientKey(""));
  EXPECT_FALSE(ValidClientKey("dGhlIHNhbXBsZSBub25jZQ"));    // no padding: not 24 characters
  EXPECT_FALSE(ValidClientKey("dGhlIHNhbXBsZSBub25j*Q=="));  // not base64
  EXPECT_FALSE(ValidClientKey("dGhlIHNhbXBsZSBub25jZXM="));  // 17 bytes
}

TEST(WebSocket, FramesOfEachLengthFormRoundTripMaskedAndNot) {
  for (size_t n : {0ul, 1ul, 125ul, 126ul, 65535ul, 65536ul, 200'000ul}) {
    std::string payload(n, '\0');
    for (size_t i = 0; i < n; ++i) payload[i] = static_cast<char>(i * 31 + 7);
    for (bool masked : {false, true}) {
      const std::string f = EncodeFrame(kText, payload, masked ? kMask : nullptr);
      const size_t header = (n < 126 ? 2 : n <= 65535 ? 4 : 10) + (masked ? 4 : 0);
      ASSERT_EQ(f.size(), header + n);
      EXPECT_EQ(static_cast<uint8_t>(f[0]), 0x81);
      Parsed p = Parse(f + "next", masked);
      ASSERT_EQ(p.result, ParseResult::kFrame) << n << " " << p.error;
      EXPECT_EQ(p.consumed, f.size());
      EXPECT_TRUE(p.frame.fin);
      EXPECT_EQ(p.frame.opcode, kText);
      EXPECT_EQ(p.frame.payload, payload);
      // Any prefix is incomplete, never an error.
      for (size_t cut : {size_t{0}, size_t{1}, header - 1, f.size() - 1}) {
        if (cut < f.size()) {
          EXPECT_EQ(Parse(f.substr(0, cut), masked).result, ParseResult::kNeedMore) << cut;
        }
      }
    }
  }
}

TEST(WebSocket, ClientFramesTheRfcForbidsAreErrorsWithTheirCloseCode) {
  // Unmasked from a client.
  Parsed p = Parse(EncodeFrame(kText, "x"), true);
  EXPECT_EQ(p.result, ParseResult::kError);
  EXPECT_EQ(p.code, kProtocolError);
  EXPECT_NE(p.error.find("unmasked"), std::string::npos) << p.error;
  // Reserved bits (no extension agreed) and a reserved opcode.
  std::string rsv = EncodeFrame(kText, "x", kMask);
  rsv[0] = static_cast<char>(rsv[0] | 0x40);
  EXPECT_EQ(Parse(rsv, true).result, ParseResult::kError);
  std::string op = EncodeFrame(kText, "x", kMask);
  op[0] = static_cast<char>(0x83);
  EXPECT_EQ(Parse(op, true).result, ParseResult::kError);
  // A ping over 125 bytes, and a fragmented one.
  EXPECT_EQ(Parse(EncodeFrame(kPing, std::string(126, 'p'), kMask), true).result, ParseResult::kError);
  std::string frag = EncodeFrame(kPing, "p", kMask);
  frag[0] = static_cast<char>(frag[0] & 0x7F);
  EXPECT_EQ(Parse(frag, true).result, ParseResult::kError);
  // Over the size read: 1009, known from the header alone.
  Parsed big = Parse(EncodeFrame(kBinary, std::string(2000, 'b'), kMask).substr(0, 8), true, 1000);
  EXPECT_EQ(big.result, ParseResult::kError);
  EXPECT_EQ(big.code, kTooBig);
}

// A connection over a socket pair: the test is the client.
class WebSocketPair : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  void ClientSends(Opcode op, std::string_view payload) {
    const std::string f = EncodeFrame(op, payload, kMask);
    ASSERT_EQ(::write(fds_[1], f.data(), f.size()), static_cast<ssize_t>(f.size()));
  }
  // The server's next frame.
  std::optional<Frame> ClientReads() {
    char buf[4096];
    for (int i = 0; i < 100; ++i) {
      Parsed p = Parse(in_, false);
      if (p.result == ParseResult::kFrame) {
        in_.erase(0, p.consumed);
        return p.frame;
      }
      if (p.result == ParseResult::kError) return std::nullopt;
      pollfd readable{fds_[1], POLLIN, 0};
      if (::poll(&readable, 1, 20'000) <= 0) return std::nullopt;  // a regression fails, never hangs
      const ssize_t n = ::read(fds_[1], buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      in_.append(buf, static_cast<size_t>(n));
    }
    return std::nullopt;
  }
  int fds_[2] = {-1, -1};
  std::string in_;
};

TEST_F(WebSocketPair, PingsAreAnsweredMessagesDroppedAndAClientsCloseIsEchoed) {
  // A ping that came with the request's head is answered too.
  ServerConnection ws(fds_[0], EncodeFrame(kPing, "early", kMask), 5000);
  EXPECT_TRUE(ws.Poll(0));
  auto pong = ClientReads();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->opcode, kPong);
  EXPECT_EQ(pong->payload, "early");

  ClientSends(kText, "a message the tail does not read");
  ClientSends(kPing, "p2");
  EXPECT_TRUE(ws.Poll(5000));
  pong = ClientReads();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->payload, "p2");

  ASSERT_TRUE(ws.SendText("{\"streams\":[]}"));
  auto text = ClientReads();
  ASSERT_TRUE(text);
  EXPECT_EQ(text->opcode, kText);
  EXPECT_EQ(text->payload, "{\"streams\":[]}");

  ClientSends(kClose, std::string("\x03\xe8", 2) + "bye");
  EXPECT_FALSE(ws.Poll(5000));
  EXPECT_EQ(ws.ended_why(), "closed by the client");
  auto echo = ClientReads();
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->opcode, kClose);
  EXPECT_EQ(echo->payload, std::string("\x03\xe8", 2));
  EXPECT_FALSE(ws.SendText("after the close"));
}

TEST_F(WebSocketPair, AForbiddenOrOversizedClientFrameClosesWithItsCode) {
  ServerConnection ws(fds_[0], "", 5000);
  const std::string unmasked = EncodeFrame(kText, "x");
  ASSERT_EQ(::write(fds_[1], unmasked.data(), unmasked.size()), static_cast<ssize_t>(unmasked.size()));
  EXPECT_FALSE(ws.Poll(5000));
  EXPECT_NE(ws.ended_why().find("unmasked"), std::string::npos) << ws.ended_why();
  auto close = ClientReads();
  ASSERT_TRUE(close);
  EXPECT_EQ(close->opcode, kClose);
  ASSERT_GE(close->payload.size(), 2u);
  EXPECT_EQ((static_cast<uint8_t>(close->payload[0]) << 8) | static_cast<uint8_t>(close->payload[1]), kProtocolError);

  ServerConnection ws2(fds_[0], EncodeFrame(kBinary, std::string(ServerConnection::kMaxClientPayload + 1, 'b'), kMask),
                       5000);
  EXPECT_FALSE(ws2.Poll(0));
  close = ClientReads();
  ASSERT_TRUE(close);
  EXPECT_EQ((static_cast<uint8_t>(close->payload[0]) << 8) | static_cast<uint8_t>(close->payload[1]), kTooBig);
}

TEST_F(WebSocketPair, TheServersCloseCarriesItsCodeAndAReasonCutToAFrameOnACharacterBoundary) {
  ServerConnection ws(fds_[0], "", 5000);
  std::string reason(122, 'r');
  reason += "\xc3\xa9 and more";  // a 2-byte character across byte 123
  ClientSends(kClose, "\x03\xe8");    // the client's answer, waiting already: no linger
  ws.Close(kTryAgainLater, reason);
  EXPECT_FALSE(ws.open());
  auto close = ClientReads();
  ASSERT_TRUE(close);
  EXPECT_EQ(close->opcode, kClose);
  EXPECT_EQ((static_cast<uint8_t>(close->payload[0]) << 8) | static_cast<uint8_t>(close->payload[1]), kTryAgainLater);
  EXPECT_EQ(close->payload.substr(2), std::string(122, 'r'));
  ws.Close(kNormal, "again");  // once only
  ::shutdown(fds_[0], SHUT_WR);
  EXPECT_FALSE(ClientReads());
}

TEST_F(WebSocketPair, AnInvalidCloseFrameIsAProtocolError) {
  ServerConnection ws(fds_[0], EncodeFrame(kClose, "x", kMask), 5000);  // a 1-byte close payload
  EXPECT_FALSE(ws.Poll(0));
  auto close = ClientReads();
  ASSERT_TRUE(close);
  EXPECT_EQ((static_cast<uint8_t>(close->payload[0]) << 8) | static_cast<uint8_t>(close->payload[1]), kProtocolError);
  ServerConnection ws2(fds_[0], EncodeFrame(kClose, std::string("\x03\xed", 2), kMask), 5000);  // 1005: never sent
  EXPECT_FALSE(ws2.Poll(0));
}

// A client that sends without pause does not keep the server in Poll():
// each call returns after at most kMaxReadPerPoll bytes.
TEST_F(WebSocketPair, AClientSendingWithoutPauseCannotHoldPoll) {
  ServerConnection ws(fds_[0], "", 5000);
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    const std::string frame = EncodeFrame(kText, std::string(100, 'f'), kMask);
    std::string burst;
    for (int i = 0; i < 100; ++i) burst += frame;
    while (!stop) {
      pollfd p{fds_[1], POLLOUT, 0};
      if (::poll(&p, 1, 100) > 0 && ::send(fds_[1], burst.data(), burst.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
          errno != EAGAIN) {
        return;
      }
    }
  });
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(ws.Poll(0));  // each returns, with the flood still going
  stop = true;
  flood.join();
}

}  // namespace
}  // namespace logdex::websocket
