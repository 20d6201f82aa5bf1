#include "common/base64url.h"

#include <cstdint>

namespace logdex {

std::string EncodeBase64Url(std::string_view bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(abc[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(abc[(acc << (6 - bits)) & 63]);
  return out;
}

std::optional<std::string> DecodeBase64Url(std::string_view text) {
  std::string raw;
  raw.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = c >= 'A' && c <= 'Z'   ? c - 'A'
                  : c >= 'a' && c <= 'z' ? c - 'a' + 26
                  : c >= '0' && c <= '9' ? c - '0' + 52
                  : c == '-'             ? 62
                  : c == '_'             ? 63
                                         : -1;
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      raw.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return raw;
}

}  // namespace logdex
