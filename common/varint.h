// Base-128 varints as protobuf writes them (7 bits a byte, low first), for the
// wire bytes logdex writes by hand (common/chunk_writer.cc, record_columns.cc,
// the main row's head in indexer/indexer.cc). protobuf's CodedOutputStream has
// the same as static functions; its header is heavy for three small inlined
// loops that run per record.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace logdex {

inline size_t VarintSize(uint64_t v) { return 1 + (std::bit_width(v | 1) - 1) / 7; }

// Writes v at p (VarintSize(v) bytes, at most 10); returns the byte after it.
inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

inline void AppendVarint(std::string& out, uint64_t v) {
  char buf[10];
  out.append(buf, PutVarint(buf, v));
}

// Reads a varint from the front of `in` and drops it; false (and `in` as it
// was) when `in` ends inside it, or it is longer than 10 bytes or than 64 bits.
inline bool GetVarint(std::string_view& in, uint64_t* v) {
  uint64_t out = 0;
  for (size_t i = 0; i < in.size() && i < 10; ++i) {
    const auto byte = static_cast<uint8_t>(in[i]);
    if (i == 9 && byte > 1) return false;
    out |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if (!(byte & 0x80)) {
      *v = out;
      in.remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

}  // namespace logdex
