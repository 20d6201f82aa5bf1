// The token rule of full-text search, defined once: the `word` and `phrase`
// filters (indexer/text_filter.h) and the token filters of merged chunks
// (common/token_bloom.h) use it. token_bloom.cc also writes this rule as
// SSE2 compares (FoldBlock64) and as AVX-512BW compares (FoldAvx512, used
// on CPUs that have it), each checked against this table for every byte
// value by tests/indexer/token_bloom_test.cc (the AVX-512 one on CPUs that
// can run it): change them together.
//
// A token is a maximal run of token bytes: ASCII letters, digits and '_',
// and every byte >= 0x80 (so a UTF-8 letter of any script stays inside its
// word; so do non-ASCII punctuation and spaces, which are rare in logs).
// Everything else separates tokens. Tokens are compared byte for byte: case
// matters ("Error" is not "ERROR"), as in `contains`. The token filters
// leave out runs of 1-4 ASCII digits (IsIndexedToken, token_bloom.h; the
// SSE2 and AVX-512 code also masks digits); the text filters match them as
// any token.
#pragma once

#include <array>
#include <string_view>

namespace logdex {

constexpr bool IsTokenByteSlow(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

// A table: one load per byte instead of a chain of compares (tokenizing is
// on the compactor's and the text filters' hot path).
inline constexpr std::array<bool, 256> kTokenBytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = IsTokenByteSlow(static_cast<unsigned char>(c));
  return t;
}();

constexpr bool IsTokenByte(unsigned char c) { return kTokenBytes[c]; }

// Calls f(token) for each token of `text`, in order; stops early when f
// returns false. Returns false when stopped.
template <class F>
bool ForEachToken(std::string_view text, F&& f) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    while (i < n && !IsTokenByte(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < n && IsTokenByte(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start && !f(text.substr(start, i - start))) return false;
  }
  return true;
}

}  // namespace logdex
