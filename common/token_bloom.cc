#include "common/token_bloom.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LOGDEX_TOKENIZER_AVX512 1
#endif

#include "common/tokens.h"

namespace logdex {
namespace {

constexpr uint8_t kVersion = 3;  // register-blocked; short numbers not indexed
constexpr uint8_t kVersionClassic = 2;  // read only (token_bloom.h); 1: the first token hash, read as "may hold anything"
constexpr size_t kHeader = 6;  // version · k · salt u32
constexpr unsigned kMaxHashesClassic = 16;
constexpr unsigned kHashes = 4;     // bits a token sets in its word (the best k from 4 to 20 bits per token)
constexpr unsigned kMaxHashes = 10;  // of 6 bits each of g
constexpr uint64_t kSeed = 0x746f6b656e;  // "token"
constexpr uint64_t kK0 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kK1 = 0xff51afd7ed558ccdull;

// Lemire's multiply-shift instead of a division: the bit of 64-bit x in [0, bits).
uint64_t Reduce(uint64_t x, uint64_t bits) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * bits) >> 64);
}

// Version 2's positions (read only): the token's hash remixed with the
// filter's salt by MurmurHash3's fmix64, then double hashing.
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
// i (common/tokens.h), and sets `digits` to the mask of its ASCII digits.
#if defined(__SSE2__)
// 16 bytes at a time, by SSE2 (every x86-64 has it): a token byte is one
// >= 0x80 (its sign bit), a digit, a letter (c | 0x20 in 'a'..'z') or '_';
// upper case gets 0x20. Branch-free: a byte-at-a-time tokenizer pays a
// mispredicted branch at most token edges.
uint64_t FoldBlock64(const unsigned char* p, unsigned char* out, uint64_t& digits) {
  uint64_t m = 0, d = 0;
  for (int k = 0; k < 4; ++k) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)), _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
    const __m128i upper = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('A' - 1)), _mm_cmplt_epi8(c, _mm_set1_epi8('Z' + 1)));
    const __m128i lower = _mm_or_si128(c, _mm_set1_epi8(0x20));
    const __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(lower, _mm_set1_epi8('a' - 1)), _mm_cmplt_epi8(lower, _mm_set1_epi8('z' + 1)));
    const __m128i under = _mm_cmpeq_epi8(c, _mm_set1_epi8('_'));
    const __m128i token = _mm_or_si128(_mm_or_si128(digit, letter), _mm_or_si128(under, c));  // c: its sign bit
    m |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(token))) << (16 * k);
    d |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(digit))) << (16 * k);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * k), _mm_or_si128(c, _mm_and_si128(upper, _mm_set1_epi8(0x20))));
  }
  digits = d;
  return m;
}
#else
uint64_t FoldBlock64(const unsigned char* p, unsigned char* out, uint64_t& digits) {
  uint64_t m = 0, d = 0;
  for (size_t i = 0; i < 64; ++i) {
    m |= uint64_t{IsTokenByte(p[i])} << i;
    d |= uint64_t{p[i] >= '0' && p[i] <= '9'} << i;
    out[i] = FoldByte(p[i]);
  }
  digits = d;
  return m;
}
#endif

#if defined(LOGDEX_TOKENIZER_AVX512)
// The same by AVX-512BW, for CPUs that have it (chosen at run time): one
// 64-byte step, its compares giving the masks directly. Unsigned compares
// of c - lo against the range's width test lo <= c < lo + width.
__attribute__((target("avx512bw"))) inline uint64_t FoldAvx512(__m512i c, unsigned char* out, uint64_t& digits) {
  const __m512i lower = _mm512_or_si512(c, _mm512_set1_epi8(0x20));
  const __mmask64 digit = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(c, _mm512_set1_epi8('0')), _mm512_set1_epi8(10));
  const __mmask64 upper = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(c, _mm512_set1_epi8('A')), _mm512_set1_epi8(26));
  const __mmask64 letter = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(lower, _mm512_set1_epi8('a')), _mm512_set1_epi8(26));
  const __mmask64 under = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('_'));
  const __mmask64 high = _mm512_movepi8_mask(c);  // bytes >= 0x80
  _mm512_storeu_si512(out, _mm512_mask_blend_epi8(upper, c, lower));
  digits = digit;
  return digit | letter | under | high;
}

__attribute__((target("avx512bw"))) inline uint64_t FoldBlock64Avx512(const unsigned char* p, unsigned char* out,
                                                                     uint64_t& digits) {
  return FoldAvx512(_mm512_loadu_si512(p), out, digits);
}

// A message's last, partial block of `size` bytes (< 64), loaded under a
// mask: the bytes past it read as zeros, without a copy (the copy, and the
// 64-byte load of what it had just stored, cost about 4 % of a build).
__attribute__((target("avx512bw,bmi2"))) inline uint64_t FoldTailAvx512(const unsigned char* p, size_t size,
                                                                      unsigned char* out, uint64_t& digits) {
  return FoldAvx512(_mm512_maskz_loadu_epi8(_bzhi_u64(~uint64_t{0}, static_cast<unsigned>(size)), p), out, digits);
}
#endif

// A message's last, partial block, copied out first (zeros are not token
// bytes and fold to zeros).
inline uint64_t FoldTail(const unsigned char* p, size_t size, unsigned char* out, uint64_t& digits) {
  unsigned char last[64] = {};
  std::memcpy(last, p, size);
  return FoldBlock64(last, out, digits);
}

using FoldFunction = uint64_t (*)(const unsigned char*, unsigned char*, uint64_t&);
using FoldTailFunction = uint64_t (*)(const unsigned char*, size_t, unsigned char*, uint64_t&);

// Calls f(hash) for each indexed token of `message` (IsIndexedToken), in
// order, tokenizing 64 bytes at a time (whole blocks by Fold, the last
// partial one by Tail) into the scratch buffers. Always inlined, so that a
// caller compiled for a wider instruction set
// (ForEachIndexedHashAvx512) compiles all of it so.
template <FoldFunction Fold, FoldTailFunction Tail, class F>
inline __attribute__((always_inline)) void ForEachIndexedHash(std::string_view message,
                                                              std::vector<unsigned char>& folded,
                                                              std::vector<uint64_t>& masks,
                                                              std::vector<uint64_t>& digits, F&& f) {
  const auto* p = reinterpret_cast<const unsigned char*>(message.data());
  const size_t n = message.size();
  const size_t blocks = (n + 63) / 64;
  if (folded.size() < blocks * 64 + kPad) folded.resize(blocks * 64 + kPad);
  if (masks.size() < blocks + 1) {
    masks.resize(blocks + 1);
    digits.resize(blocks + 1);
  }
  unsigned char* out = folded.data();
  // Pass 1: the message folded into the buffer (zero-padded past its end)
  // and the masks of its token bytes and digits.
  for (size_t k = 0; k < blocks; ++k) {
    const size_t base = 64 * k;
    if (n - base >= 64) {
      masks[k] = Fold(p + base, out + base, digits[k]);
    } else {
      masks[k] = Tail(p + base, n - base, out + base, digits[k]);
    }
  }
  std::memset(out + 64 * blocks, 0, kPad);
  digits[blocks] = 0;
  // Pass 2: each token from its start (a token byte after one that is
  // not), its length from the run of token bytes there. Short numbers (runs
  // of 1-4 digits, not indexed) are taken out of the starts by bit
  // operations first: a branch per token on them mispredicts (this, and
  // reading starts instead of every edge, took a build from about 204 to
  // 160 ns per Loghub line in a microbenchmark; the AVX-512 fold to 136).
  const uint64_t* const d = digits.data();
  masks[blocks] = 0;
  const uint64_t* const mk = masks.data();
  // x shifted right by j (1..4), the next block's low bits coming in.
  auto shr = [](uint64_t x, uint64_t next, unsigned j) { return x >> j | next << (64 - j); };
  uint64_t carry = 0;  // the previous block's last bit
  for (size_t k = 0; k < blocks; ++k) {
    const uint64_t m = mk[k];
    uint64_t starts = m & ~(m << 1 | carry);
    carry = m >> 63;
    // Where 1 to 4 digits start, followed by a byte that is not a token's.
    const uint64_t dk = d[k], dn = d[k + 1], gap = ~m, gap_next = ~mk[k + 1];
    const uint64_t short_numbers =
        dk & (shr(gap, gap_next, 1) |
              (shr(dk, dn, 1) & (shr(gap, gap_next, 2) |
                                 (shr(dk, dn, 2) & (shr(gap, gap_next, 3) | (shr(dk, dn, 3) & shr(gap, gap_next, 4)))))));
    starts &= ~short_numbers;
    while (starts) {
      const unsigned b = static_cast<unsigned>(std::countr_zero(starts));
      starts &= starts - 1;
      size_t length = static_cast<size_t>(std::countr_zero(~(m >> b)));
      if (b + length == 64) {  // the token goes on into the next blocks
        size_t j = k + 1;
        for (; j < blocks && mk[j] == ~uint64_t{0}; ++j) length += 64;
        if (j < blocks) length += static_cast<size_t>(std::countr_one(mk[j]));
      }
      f(HashFolded(out + 64 * k + b, length));
    }
  }
}

// Version 3's word and bits of a token (token_bloom.h).
inline uint64_t Mixed(uint64_t h, uint64_t salt) { return (h ^ salt) * kK0; }
// 1 << i by a table: a shift by a register's count is 3 micro-ops on
// Intel cores without BMI2 (not in the baseline x86-64), a load is one.
constexpr std::array<uint64_t, 64> kBit = [] {
  std::array<uint64_t, 64> t{};
  for (size_t i = 0; i < 64; ++i) t[i] = uint64_t{1} << i;
  return t;
}();
inline uint64_t BitsOf(uint64_t g, unsigned k) {
  uint64_t mask = 0;
  for (unsigned j = 0; j < k; ++j) mask |= kBit[(g >> (6 * j)) & 63];
  return mask;
}
// The build's token: its bits, k known (unrolled), set in its word.
inline void SetToken(uint64_t* words, uint64_t count, uint64_t salt, uint64_t h) {
  static_assert(kHashes == 4);
  const uint64_t g = Mixed(h, salt);
  words[Reduce(g, count)] |= (kBit[g & 63] | kBit[(g >> 6) & 63]) | (kBit[(g >> 12) & 63] | kBit[(g >> 18) & 63]);
}

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

bool IsIndexedToken(std::string_view token) {
  return token.empty() || token.size() > 4 || !std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
}

namespace {

bool HasAvx512() {
#if defined(LOGDEX_TOKENIZER_AVX512)
  // What ForEachIndexedHashAvx512 is compiled for, every part.
  static const bool has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("bmi") &&
                          __builtin_cpu_supports("bmi2");
  return has;
#else
  return false;
#endif
}

#if defined(LOGDEX_TOKENIZER_AVX512)
// The tokenizer compiled, with what it inlines (f included), for
// AVX-512BW, BMI1 and BMI2 (shifts by a register's count in one micro-op).
template <class F>
__attribute__((target("avx512bw,bmi,bmi2"))) void ForEachIndexedHashAvx512(std::string_view message,
                                                                         std::vector<unsigned char>& folded,
                                                                         std::vector<uint64_t>& masks,
                                                                         std::vector<uint64_t>& digits, F&& f) {
  ForEachIndexedHash<FoldBlock64Avx512, FoldTailAvx512>(message, folded, masks, digits, f);
}
#endif

// ForEachIndexedHash by the AVX-512 tokenizer when `avx512` (the caller
// checked HasAvx512), else by the portable one.
template <class F>
void Tokenize(bool avx512, std::string_view message, std::vector<unsigned char>& folded,
              std::vector<uint64_t>& masks, std::vector<uint64_t>& digits, F&& f) {
#if defined(LOGDEX_TOKENIZER_AVX512)
  if (avx512) {
    ForEachIndexedHashAvx512(message, folded, masks, digits, f);
    return;
  }
#endif
  (void)avx512;
  ForEachIndexedHash<FoldBlock64, FoldTail>(message, folded, masks, digits, f);
}

}  // namespace

bool TokenizerAvailable(Tokenizer tokenizer) { return tokenizer == Tokenizer::kPortable || HasAvx512(); }

void IndexedTokenHashes(std::string_view message, std::vector<uint64_t>& out) {
  IndexedTokenHashes(message, out, Tokenizer::kAvx512);
}

void IndexedTokenHashes(std::string_view message, std::vector<uint64_t>& out, Tokenizer tokenizer) {
  std::vector<unsigned char> folded;
  std::vector<uint64_t> masks, digits;
  Tokenize(tokenizer == Tokenizer::kAvx512 && HasAvx512(), message, folded, masks, digits,
           [&](uint64_t h) { out.push_back(h); });
}

TokenBloomBuilder::TokenBloomBuilder() : TokenBloomBuilder(Tokenizer::kAvx512) {}

TokenBloomBuilder::TokenBloomBuilder(Tokenizer tokenizer) : avx512_(tokenizer == Tokenizer::kAvx512 && HasAvx512()) {}

void TokenBloomBuilder::Start(const TokenBloomOptions& options) {
  options_ = options;
  salt_ = uint64_t{options.salt} << 32 | options.salt;
  // The largest W the cap allows, with at most 4 significant bits, so that
  // it can be halved down to what the tokens need.
  size_t w = options.max_bytes >= kHeader + 8 ? (options.max_bytes - kHeader) / 8 : 0;
  if (w >= 16) {
    const int shift = std::bit_width(w) - 4;
    w = w >> shift << shift;
  }
  words_.assign(w, 0);
}

void TokenBloomBuilder::AddHash(uint64_t token_hash) {
  if (!words_.empty()) SetToken(words_.data(), words_.size(), salt_, token_hash);
}

void TokenBloomBuilder::AddMessage(std::string_view message) {
  if (words_.empty()) return;
  uint64_t* const words = words_.data();
  const uint64_t count = words_.size(), salt = salt_;
  Tokenize(avx512_, message, folded_, masks_, digits_, [&](uint64_t h) { SetToken(words, count, salt, h); });
}

std::optional<std::string> TokenBloomBuilder::Finish() {
  // The scratch buffers follow the longest message seen: past 1 MiB they
  // are not kept for the life of the process.
  if (folded_.capacity() > kKeepScratch) {
    folded_ = {};
    masks_ = {};
    digits_ = {};
  }
  // Finished: nothing more goes in until the next Start.
  auto done = [this](std::optional<std::string> filter) {
    words_.clear();
    if (words_.capacity() > kKeepScratch / 8) words_.shrink_to_fit();
    return filter;
  };
  if (words_.empty()) return std::nullopt;
  uint64_t set = 0;
  for (uint64_t w : words_) set += static_cast<uint64_t>(std::popcount(w));
  // The distinct tokens, estimated from the share of bits set. A word
  // holds Poisson(n / W) tokens, each of which leaves a given bit clear with
  // probability q = (63/64)^k, so a bit is clear with probability
  // exp(-(n / W) (1 - q)).
  const double w = static_cast<double>(words_.size());
  const double fill = static_cast<double>(set) / (64 * w);
  const double tokens = fill >= 1 ? HUGE_VAL : -w * std::log1p(-fill) / (1 - std::pow(63.0 / 64, kHashes));
  if (64 * w < options_.min_bits_per_token * tokens) return done(std::nullopt);
  size_t count = words_.size();
  while (count % 2 == 0 && 64.0 * static_cast<double>(count / 2) >= options_.bits_per_token * tokens) {
    for (size_t i = 0; i < count / 2; ++i) words_[i] = words_[2 * i] | words_[2 * i + 1];
    count /= 2;
  }
  std::string out(kHeader + 8 * count, '\0');
  out[0] = static_cast<char>(kVersion);
  out[1] = static_cast<char>(kHashes);
  for (int i = 0; i < 4; ++i) out[2 + i] = static_cast<char>(options_.salt >> (8 * i));
  for (size_t i = 0; i < count; ++i) {
    for (int b = 0; b < 8; ++b) out[kHeader + 8 * i + static_cast<size_t>(b)] = static_cast<char>(words_[i] >> (8 * b));
  }
  return done(std::move(out));
}

std::optional<std::string> BuildTokenBloom(const std::vector<uint64_t>& hashes, const TokenBloomOptions& options) {
  TokenBloomBuilder builder;
  builder.Start(options);
  for (uint64_t h : hashes) builder.AddHash(h);
  return builder.Finish();
}

TokenBloomView::TokenBloomView(std::string_view encoded) {
  if (encoded.size() <= kHeader) return;
  const unsigned version = static_cast<uint8_t>(encoded[0]);
  const unsigned k = static_cast<uint8_t>(encoded[1]);
  if (version == kVersion) {
    if (k < 1 || k > kMaxHashes || (encoded.size() - kHeader) % 8 != 0) return;
  } else if (version == kVersionClassic) {
    if (k < 1 || k > kMaxHashesClassic) return;
  } else {
    return;
  }
  uint32_t salt = 0;
  for (int i = 0; i < 4; ++i) salt |= uint32_t{static_cast<uint8_t>(encoded[2 + i])} << (8 * i);
  array_ = encoded.substr(kHeader);
  bits_ = array_.size() * 8;
  k_ = k;
  version_ = version;
  salt_ = salt;
}

bool TokenBloomView::MayContain(uint64_t token_hash) const {
  if (!valid()) return true;
  const auto* array = reinterpret_cast<const uint8_t*>(array_.data());
  if (version_ == kVersion) {
    const uint64_t g = Mixed(token_hash, uint64_t{salt_} << 32 | salt_);
    const uint64_t word = LoadWord(array + 8 * Reduce(g, bits_ / 64));
    const uint64_t want = BitsOf(g, k_);
    return (word & want) == want;
  }
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
    if (t.data() > s.data() && t.data() + t.size() < s.data() + s.size() && IsIndexedToken(t)) out.push_back(TokenHash(t));
    return true;
  });
}

}  // namespace logdex
