// libFuzzer target: the query side's parsers of untrusted input never crash,
// hang or read out of bounds, and keep their own invariants:
//   - WebSocket frames (http/websocket.h) as a client sends them (masked)
//     and as a server does: every frame parsed lies inside the input, and a
//     frame re-encoded parses back to itself;
//   - LogQL (http/logql.h): parses or fails with an error;
//   - text filters (indexer/text_filter.h): a filter compiles or fails with
//     kInvalidArgument; one that compiles matches a message, and its
//     negation matches exactly when it does not; and a message it matches
//     is never ruled out by the token filter of the message's own tokens
//     (TokenProbe: the token index may only skip what cannot match).
// The first byte picks the parser; the rest is its input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/token_bloom.h"
#include "indexer/text_filter.h"
#include "http/logql.h"
#include "http/websocket.h"

namespace {

void Frames(std::string_view in, bool masked) {
  while (!in.empty()) {
    logdex::websocket::Frame f;
    size_t consumed = 0;
    std::string error;
    logdex::websocket::CloseCode code;
    const auto r = logdex::websocket::ParseFrame(in, masked, 1 << 16, f, consumed, error, code);
    if (r != logdex::websocket::ParseResult::kFrame) return;
    if (consumed == 0 || consumed > in.size() || f.payload.size() > consumed) __builtin_trap();
    const uint8_t mask[4] = {1, 2, 3, 4};
    const std::string again =
        logdex::websocket::EncodeFrame(static_cast<logdex::websocket::Opcode>(f.opcode), f.payload, masked ? mask : nullptr);
    logdex::websocket::Frame g;
    size_t used = 0;
    if (f.fin && (logdex::websocket::ParseFrame(again, masked, 1 << 16, g, used, error, code) !=
                      logdex::websocket::ParseResult::kFrame ||
                  g.payload != f.payload || g.opcode != f.opcode || used != again.size())) {
      __builtin_trap();
    }
    in.remove_prefix(consumed);
  }
}

void Filter(std::string_view in) {
  if (in.empty()) return;
  const auto kind = static_cast<logdex::TextFilterKind>(static_cast<uint8_t>(in[0]) % 4);
  in.remove_prefix(1);
  const size_t split = in.find('\n');
  const std::string text(in.substr(0, split));
  const std::string_view message = split == std::string_view::npos ? std::string_view() : in.substr(split + 1);
  auto positive = logdex::TextMatcher::Compile({{kind, false, text}});
  auto negative = logdex::TextMatcher::Compile({{kind, true, text}});
  if (positive.ok() != negative.ok()) __builtin_trap();
  if (!positive.ok()) {
    if (positive.error().code != logdex::Errc::kInvalidArgument) __builtin_trap();
    return;
  }
  const bool matches = positive->Matches(message);
  if (matches == negative->Matches(message)) __builtin_trap();
  if (matches) {
    logdex::TokenBloomOptions o;
    o.max_bytes = 1 << 16;
    logdex::TokenBloomBuilder builder;
    builder.Start(o);
    builder.AddMessage(message);
    const auto filter = builder.Finish();
    if (!filter || !logdex::TokenProbe::For({{kind, false, text}}).MayMatch(logdex::TokenBloomView(*filter))) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: Frames(in, true); break;
    case 1: Frames(in, false); break;
    case 2: (void)logdex::logql::Parse(in); break;
    case 3: Filter(in); break;
  }
  return 0;
}
