#include "common/token_bloom.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/tokens.h"

namespace logdex {
namespace {

constexpr uint8_t kVersion = 2;  // 1: the first token hash (filters written by it are read as "may hold anything")
constexpr size_t kHeader = 6;  // version · k · salt u32
constexpr unsigned kMaxHashes = 16;
constexpr uint64_t kSeed = 0x746f6b656e;  // "token"
constexpr uint64_t kK0 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kK1 = 0xff51afd7ed558ccdull;

// Lemire's multiply-shift instead of a division: the bit of 64-bit x in [0, bits).
uint64_t Reduce(uint64_t x, uint64_t bits) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * bits) >> 64);
}

// The token's hash remixed with the filter's salt (MurmurHash3's fmix64,
// a bijection): filters of chunks that share most tokens would otherwise
// set the same bits, and a token absent from all of them would be a false
// positive in nearly all or in none (measured: one absent token passed 90 %
// of 200 such filters whose mean rate was 9 %).
uint64_t Salted(uint64_t h, uint32_t salt) {
  uint64_t x = h ^ (uint64_t{salt} << 32 | salt);
  x ^= x >> 33;
  x *= kK1;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t Position(uint64_t g, unsigned j, uint64_t bits) {
  // Double hashing over the whole 64 bits: the step is an odd remix of g.
  const uint64_t step = (g * kK0) | 1;
  return Reduce(g + j * step, bits);
}

// The token hash, written by hand because a library hash (XXH3) costs a
// call and a length dispatch per token, and a chunk's build is mostly this:
// the folded message is in a buffer padded with 16 zero bytes, so a token
// of up to 16 bytes (nearly all of them) is two loads, two masks and two
// 64x64->128-bit multiplies, with no branch on its length. The exact
// definition is in token_bloom.h: it is part of the stored format.
constexpr size_t kPad = 16;
constexpr size_t kKeepScratch = 1 << 20;
constexpr size_t kKeepSlots = 1 << 16;  // 512 KiB of table

uint64_t LoadWord(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
  return w;
}

// The folded multiply of wyhash: both halves of the 128-bit product.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

// kKeep[r]: the masks of a group's first r bytes (r <= 16), low word then high.
constexpr std::array<std::array<uint64_t, 2>, 17> kKeep = [] {
  std::array<std::array<uint64_t, 2>, 17> t{};
  for (size_t r = 0; r <= 16; ++r) {
    t[r][0] = r >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * r)) - 1;
    t[r][1] = r >= 16 ? ~uint64_t{0} : r <= 8 ? 0 : (uint64_t{1} << (8 * (r - 8))) - 1;
  }
  return t;
}();

// The hash of the folded token at p, of `length` bytes; p[length, length +
// 16) must be readable (its bytes are masked off). Its last 16 bytes go
// through a whole 128-bit product, before one folded multiply mixes its
// halves with the length. A collision (two tokens, one hash) can only make
// a filter pass a chunk it could have ruled out.
inline uint64_t HashFolded(const unsigned char* p, size_t length) {
  uint64_t h = kSeed;
  size_t rest = length;
  for (; rest > 16; rest -= 16, p += 16) h = Mum(LoadWord(p) ^ kK0, LoadWord(p + 8) ^ h ^ kK1);
  const uint64_t a = LoadWord(p) & kKeep[rest][0];
  const uint64_t b = LoadWord(p + 8) & kKeep[rest][1];
  const unsigned __int128 r = static_cast<unsigned __int128>(a ^ kK0) * (b ^ h ^ kK1);
  return Mum(static_cast<uint64_t>(r) ^ kK0 ^ length, static_cast<uint64_t>(r >> 64) ^ kK1);
}

constexpr unsigned char FoldByte(unsigned char c) { return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c | 0x20) : c; }

// Folds p[0, 64) into out; returns the mask of token bytes, bit i for byte
// i (common/tokens.h).
#if defined(__SSE2__)
// 16 bytes at a time, by SSE2 (every x86-64 has it): a token byte is one
// >= 0x80 (its sign bit), a digit, a letter (c | 0x20 in 'a'..'z') or '_';
// upper case gets 0x20. Branch-free: a byte-at-a-time tokenizer pays a
// mispredicted branch at most token edges.
uint64_t FoldBlock64(const unsigned char* p, unsigned char* out) {
  uint64_t m = 0;
  for (int k = 0; k < 4; ++k) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)), _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
    const __m128i upper = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('A' - 1)), _mm_cmplt_epi8(c, _mm_set1_epi8('Z' + 1)));
    const __m128i lower = _mm_or_si128(c, _mm_set1_epi8(0x20));
    const __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(lower, _mm_set1_epi8('a' - 1)), _mm_cmplt_epi8(lower, _mm_set1_epi8('z' + 1)));
    const __m128i under = _mm_cmpeq_epi8(c, _mm_set1_epi8('_'));
    const __m128i token = _mm_or_si128(_mm_or_si128(digit, letter), _mm_or_si128(under, c));  // c: its sign bit
    m |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(token))) << (16 * k);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * k), _mm_or_si128(c, _mm_and_si128(upper, _mm_set1_epi8(0x20))));
  }
  return m;
}
#else
uint64_t FoldBlock64(const unsigned char* p, unsigned char* out) {
  uint64_t m = 0;
  for (size_t i = 0; i < 64; ++i) {
    m |= uint64_t{IsTokenByte(p[i])} << i;
    out[i] = FoldByte(p[i]);
  }
  return m;
}
#endif

}  // namespace

uint64_t TokenHash(std::string_view token) {
  unsigned char local[64 + kPad] = {};
  std::string heap;
  unsigned char* out = local;
  if (token.size() > 64) {
    heap.assign(token.size() + kPad, '\0');
    out = reinterpret_cast<unsigned char*>(heap.data());
  }
  for (size_t i = 0; i < token.size(); ++i) out[i] = FoldByte(static_cast<unsigned char>(token[i]));
  return HashFolded(out, token.size());
}

void TokenSet::AddMessage(std::string_view message) {
  const auto* p = reinterpret_cast<const unsigned char*>(message.data());
  const size_t n = message.size();
  const size_t blocks = (n + 63) / 64;
  if (folded_.size() < blocks * 64 + kPad) folded_.resize(blocks * 64 + kPad);
  if (masks_.size() < blocks) masks_.resize(blocks);
  // A token takes a byte and a separator: at most (n + 1) / 2 of them.
  if (pending_.size() < (n + 1) / 2) pending_.resize((n + 1) / 2);
  unsigned char* f = folded_.data();
  // Pass 1: the message folded into the buffer (zero-padded past its end)
  // and a mask of its token bytes. The last, partial block is copied out
  // first (zeros are not token bytes and fold to zeros).
  for (size_t k = 0; k < blocks; ++k) {
    const size_t base = 64 * k;
    if (n - base >= 64) {
      masks_[k] = FoldBlock64(p + base, f + base);
    } else {
      unsigned char last[64] = {};
      std::memcpy(last, p + base, n - base);
      masks_[k] = FoldBlock64(last, f + base);
    }
  }
  std::memset(f + 64 * blocks, 0, kPad);
  // Pass 2: the mask's edges (bits that differ from the bit before)
  // alternate between a token's start and its end. The message's hashes are
  // computed first (independent of each other, they overlap), their table
  // slots prefetched, and inserted during the next message's call: probes
  // that missed the cache were most of the build's time once tokenizing was
  // branch-free, and a prefetch needs time to land.
  bool in_token = false;
  size_t start = 0;
  uint64_t carry = 0;  // the previous block's last bit
  uint64_t* const hashes = pending_.data();
  size_t count = 0;
  for (size_t k = 0; k < blocks; ++k) {
    const size_t base = 64 * k;
    const uint64_t m = masks_[k];
    uint64_t edges = m ^ (m << 1 | carry);
    carry = m >> 63;
    while (edges) {
      const size_t at = base + static_cast<size_t>(std::countr_zero(edges));
      edges &= edges - 1;
      if (in_token) hashes[count++] = HashFolded(f + start, at - start);
      else start = at;
      in_token = !in_token;
    }
  }
  if (in_token) hashes[count++] = HashFolded(f + start, n - start);
  if (table_.empty()) Grow(1);
  // A hint only: a slot may move if the table grows first.
  const size_t mask = table_.size() - 1;
  for (size_t j = 0; j < count; ++j) __builtin_prefetch(&table_[hashes[j] & mask]);
  InsertAll(ready_.data(), ready_count_);
  pending_.swap(ready_);
  ready_count_ = count;
}

void TokenSet::InsertAll(const uint64_t* hashes, size_t count) {
  for (size_t j = 0; j < count; ++j) {
    // Grown by what is in it, not by the message's token count: a long
    // message repeating one token must not make a large table.
    if (2 * (size_ + 1) > table_.size()) Grow(size_ + 1);
    InsertOne(hashes[j]);
  }
}

void TokenSet::InsertOne(uint64_t h) {
  if (h == 0) {
    zero_ = true;
    return;
  }
  const size_t mask = table_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    if (table_[i] == h) return;
    if (table_[i] == 0) {
      table_[i] = h;
      ++size_;
      return;
    }
  }
}

void TokenSet::Grow(size_t wanted) {
  size_t slots = std::max<size_t>(1024, table_.size());
  while (2 * wanted > slots) slots *= 2;
  std::vector<uint64_t> old(slots, 0);
  old.swap(table_);
  size_ = 0;
  for (uint64_t h : old) {
    if (h != 0) InsertOne(h);
  }
}

std::vector<uint64_t> TokenSet::TakeDistinct() {
  InsertAll(ready_.data(), ready_count_);
  ready_count_ = 0;
  std::vector<uint64_t> out;
  out.reserve(size_ + zero_);
  for (uint64_t h : table_) {
    if (h != 0) out.push_back(h);
  }
  if (zero_) out.push_back(0);
  // Kept for the next chunk, which is often as large (regrowing from small
  // cost a rehash per doubling), but not far larger than this one needed
  // once past kKeepSlots: one chunk of many tokens must not make every
  // later one scan a huge table.
  size_t fit = 1024;
  while (fit < 2 * size_) fit *= 2;
  if (table_.size() > kKeepSlots && table_.size() > 4 * fit) {
    table_.assign(std::max(fit, kKeepSlots), 0);
    table_.shrink_to_fit();
  } else {
    std::fill(table_.begin(), table_.end(), 0);
  }
  size_ = 0;
  zero_ = false;
  // The scratch buffers follow the longest message seen (the hashes take 4
  // bytes per message byte, twice): past 1 MiB they are not kept for the
  // life of the process.
  if (folded_.capacity() > kKeepScratch || 8 * std::max(pending_.capacity(), ready_.capacity()) > kKeepScratch) {
    folded_ = {};
    masks_ = {};
    pending_ = {};
    ready_ = {};
  }
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
  for (int i = 0; i < 4; ++i) out[2 + i] = static_cast<char>(options.salt >> (8 * i));
  auto* array = reinterpret_cast<uint8_t*>(out.data() + kHeader);
  const uint64_t bits = bytes * 8;
  for (uint64_t h : hashes) {
    const uint64_t g = Salted(h, options.salt);
    for (unsigned j = 0; j < k; ++j) {
      const uint64_t p = Position(g, j, bits);
      array[p / 8] = static_cast<uint8_t>(array[p / 8] | (1u << (p % 8)));
    }
  }
  return out;
}

TokenBloomView::TokenBloomView(std::string_view encoded) {
  if (encoded.size() <= kHeader || static_cast<uint8_t>(encoded[0]) != kVersion) return;
  const unsigned k = static_cast<uint8_t>(encoded[1]);
  if (k < 1 || k > kMaxHashes) return;
  uint32_t salt = 0;
  for (int i = 0; i < 4; ++i) salt |= uint32_t{static_cast<uint8_t>(encoded[2 + i])} << (8 * i);
  array_ = encoded.substr(kHeader);
  bits_ = array_.size() * 8;
  k_ = k;
  salt_ = salt;
}

bool TokenBloomView::MayContain(uint64_t token_hash) const {
  if (!valid()) return true;
  const auto* array = reinterpret_cast<const uint8_t*>(array_.data());
  const uint64_t g = Salted(token_hash, salt_);
  for (unsigned j = 0; j < k_; ++j) {
    const uint64_t p = Position(g, j, bits_);
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
