#include "common/token_bloom.h"

#include <algorithm>
#include <cmath>

#include "common/tokens.h"

namespace logdex {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kHeader = 2;
constexpr unsigned kMaxHashes = 16;
constexpr uint64_t kSeed = 0x746f6b656e;  // "token"

// Lemire's multiply-shift instead of a division: the bit of 64-bit x in [0, bits).
uint64_t Reduce(uint64_t x, uint64_t bits) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * bits) >> 64);
}

uint64_t Position(uint64_t h, unsigned j, uint64_t bits) {
  // Double hashing over the whole 64 bits: the step is an odd remix of h.
  const uint64_t step = (h * 0x9e3779b97f4a7c15ull) | 1;
  return Reduce(h + j * step, bits);
}

// The token hash is computed while tokenizing, a byte at a time (FNV-1a
// over the ASCII-folded bytes, then a 64-bit finalizer for the filter's
// positions): a message is read once, and no token is copied to fold it.
// Written by hand because a library hash (XXH3) needs the folded bytes in
// memory, and copying them took more time than the hash.
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull ^ kSeed;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

constexpr unsigned char Fold(unsigned char c) { return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c - 'A' + 'a') : c; }

uint64_t Finish(uint64_t h, size_t length) {
  h ^= length;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace

uint64_t TokenHash(std::string_view token) {
  uint64_t h = kFnvOffset;
  for (char c : token) h = (h ^ Fold(static_cast<unsigned char>(c))) * kFnvPrime;
  return Finish(h, token.size());
}

void TokenSet::AddMessage(std::string_view message) {
  const auto* p = reinterpret_cast<const unsigned char*>(message.data());
  const size_t n = message.size();
  size_t i = 0;
  while (i < n) {
    while (i < n && !IsTokenByte(p[i])) ++i;
    const size_t start = i;
    uint64_t h = kFnvOffset;
    while (i < n && IsTokenByte(p[i])) h = (h ^ Fold(p[i++])) * kFnvPrime;
    if (i > start) hashes_.push_back(Finish(h, i - start));
  }
}

std::vector<uint64_t> TokenSet::TakeDistinct() {
  // An open-addressing set over a power-of-two table: linear time, where a
  // sort of the hashes took most of a filter's build.
  size_t capacity = 16;
  while (capacity < 2 * hashes_.size()) capacity *= 2;
  std::vector<uint64_t> table(capacity, 0);
  bool zero = false;
  std::vector<uint64_t> out;
  for (uint64_t h : hashes_) {
    if (h == 0) {
      zero = true;
      continue;
    }
    for (size_t i = (h * 0x9e3779b97f4a7c15ull) >> 32 & (capacity - 1);; i = (i + 1) & (capacity - 1)) {
      if (table[i] == h) break;
      if (table[i] == 0) {
        table[i] = h;
        out.push_back(h);
        break;
      }
    }
  }
  if (zero) out.push_back(0);
  hashes_.clear();
  return out;
}

std::optional<std::string> BuildTokenBloom(const std::vector<uint64_t>& hashes, const TokenBloomOptions& options) {
  const double n = static_cast<double>(std::max<size_t>(hashes.size(), 1));
  const size_t wanted = static_cast<size_t>(std::ceil(n * options.bits_per_token / 8));
  const size_t bytes = std::max<size_t>(1, std::min(wanted, options.max_bytes > kHeader ? options.max_bytes - kHeader : 0));
  const double bits_per_token = static_cast<double>(bytes * 8) / n;
  if (options.max_bytes <= kHeader || bits_per_token < options.min_bits_per_token) return std::nullopt;
  const unsigned k = static_cast<unsigned>(std::clamp(std::lround(bits_per_token * std::log(2.0)), 1l, long{kMaxHashes}));
  std::string out(kHeader + bytes, '\0');
  out[0] = static_cast<char>(kVersion);
  out[1] = static_cast<char>(k);
  auto* array = reinterpret_cast<uint8_t*>(out.data() + kHeader);
  const uint64_t bits = bytes * 8;
  for (uint64_t h : hashes) {
    for (unsigned j = 0; j < k; ++j) {
      const uint64_t p = Position(h, j, bits);
      array[p / 8] = static_cast<uint8_t>(array[p / 8] | (1u << (p % 8)));
    }
  }
  return out;
}

TokenBloomView::TokenBloomView(std::string_view encoded) {
  if (encoded.size() <= kHeader || static_cast<uint8_t>(encoded[0]) != kVersion) return;
  const unsigned k = static_cast<uint8_t>(encoded[1]);
  if (k < 1 || k > kMaxHashes) return;
  array_ = encoded.substr(kHeader);
  bits_ = array_.size() * 8;
  k_ = k;
}

bool TokenBloomView::MayContain(uint64_t token_hash) const {
  if (!valid()) return true;
  const auto* array = reinterpret_cast<const uint8_t*>(array_.data());
  for (unsigned j = 0; j < k_; ++j) {
    const uint64_t p = Position(token_hash, j, bits_);
    if (!(array[p / 8] & (1u << (p % 8)))) return false;
  }
  return true;
}

void ContainedTokenHashes(std::string_view s, std::vector<uint64_t>& out) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    while (i < n && !IsTokenByte(static_cast<unsigned char>(s[i]))) ++i;
    const size_t start = i;
    while (i < n && IsTokenByte(static_cast<unsigned char>(s[i]))) ++i;
    // A run touching either end may continue outside the substring.
    if (i > start && start > 0 && i < n) out.push_back(TokenHash(s.substr(start, i - start)));
  }
}

}  // namespace logdex
