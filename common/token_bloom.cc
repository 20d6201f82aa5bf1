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

// The token hash is computed while tokenizing, a byte at a time: the
// ASCII-folded bytes are packed into a 64-bit word, and each full word is
// mixed in with one multiply (a byte costs a shift and an or, not a
// multiply as in FNV-1a); the length and MurmurHash3's 64-bit finalizer
// end it. A message is read once and no token is copied to fold it.
// Written by hand because a library hash (XXH3) needs the folded bytes in
// memory, and copying them cost more than hashing.
constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;

constexpr unsigned char Fold(unsigned char c) { return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c - 'A' + 'a') : c; }

struct TokenHasher {
  uint64_t h = kSeed;
  uint64_t word = 0;
  size_t length = 0;

  void Add(unsigned char c) {
    word = word << 8 | Fold(c);
    if (++length % 8 == 0) {
      h = (h ^ word) * kMul;
      word = 0;
    }
  }
  uint64_t Finish() const {
    uint64_t x = (h ^ word) * kMul ^ length;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }
};

}  // namespace

uint64_t TokenHash(std::string_view token) {
  TokenHasher hasher;
  for (char c : token) hasher.Add(static_cast<unsigned char>(c));
  return hasher.Finish();
}

void TokenSet::AddMessage(std::string_view message) {
  const auto* p = reinterpret_cast<const unsigned char*>(message.data());
  const size_t n = message.size();
  size_t i = 0;
  while (i < n) {
    while (i < n && !IsTokenByte(p[i])) ++i;
    if (i == n) break;
    TokenHasher hasher;
    while (i < n && IsTokenByte(p[i])) hasher.Add(p[i++]);
    Insert(hasher.Finish());
  }
}

void TokenSet::Insert(uint64_t h) {
  if (h == 0) {
    zero_ = true;
    return;
  }
  if (2 * (size_ + 1) > table_.size()) Grow();
  const size_t mask = table_.size() - 1;
  for (size_t i = (h * 0x9e3779b97f4a7c15ull) >> 32 & mask;; i = (i + 1) & mask) {
    if (table_[i] == h) return;
    if (table_[i] == 0) {
      table_[i] = h;
      ++size_;
      return;
    }
  }
}

void TokenSet::Grow() {
  std::vector<uint64_t> old(std::max<size_t>(1024, table_.size() * 2), 0);
  old.swap(table_);
  size_ = 0;
  for (uint64_t h : old) {
    if (h != 0) Insert(h);
  }
}

std::vector<uint64_t> TokenSet::TakeDistinct() {
  std::vector<uint64_t> out;
  out.reserve(size_ + zero_);
  for (uint64_t& h : table_) {
    if (h != 0) out.push_back(h);
    h = 0;
  }
  if (zero_) out.push_back(0);
  size_ = 0;
  zero_ = false;
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
  ForEachToken(s, [&](std::string_view t) {
    // A run touching either end may continue outside the substring.
    if (t.data() > s.data() && t.data() + t.size() < s.data() + s.size()) out.push_back(TokenHash(t));
    return true;
  });
}

}  // namespace logdex
