// Big-endian fixed-width integer encoding, so that byte order equals numeric
// order in row keys.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace logdex {

inline void PutBigEndian64(char* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

inline uint64_t GetBigEndian64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

inline void AppendBigEndian64(std::string& out, uint64_t v) {
  char buf[8];
  PutBigEndian64(buf, v);
  out.append(buf, 8);
}

}  // namespace logdex
