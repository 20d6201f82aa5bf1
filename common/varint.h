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

}  // namespace logdex
