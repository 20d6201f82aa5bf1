// The token index of a stored chunk: a bloom filter of its messages' tokens
// (common/tokens.h), kept in the `tok` table under the chunk's main key, so
// that a query with `word`, `phrase`, `contains` or `regex` filters can
// discard a chunk before it reads its main row (indexer/query.h).
//
// Why a per-chunk bloom filter, built by the compactor only: `logdex bench
// query`'s token_index_model measured, on 10^7 Loghub lines, a 1 % bloom
// filter per chunk ingest makes (about 50 records) at 13.9 % of the SST
// bytes, over the 5 % goal; merged chunks (thousands of records) share most
// tokens between records and cost a few percent. A chunk ingest stored as it
// came has no token row and is read, as before.
//
// Tokens are folded to ASCII lower case before hashing, so one filter
// serves case-sensitive word filters and RE2's case-folded literals (a
// filter only says "may hold"; the records are always verified). Tokens of
// one to four ASCII digits are not indexed (IsIndexedToken): in a Loghub
// line they are 41 % of the tokens (times, dates, ports, addresses'
// octets, counts) and a merged chunk of thousands of lines holds most of
// their 11,110 values anyway, so a filter could rarely rule a chunk out for
// one; a query probes a filter with its other tokens only.
//
// Encoding (the `tok` row value), version 3: version u8 (3) · k u8 (the
// bits a token sets in its word; 4 as written, 1..10 read) · salt u32 LE ·
// W words, u64 LE each (W >= 1). A token
// of hash h (TokenHash) has g = (h ^ (salt · (2^32 + 1))) · K0 (mod 2^64),
// its word w = (g · W) >> 64 (a 128-bit product) and, for j < k, bit
// (g >> 6j) & 63 of that word set. One word per token (a "register-blocked"
// bloom filter): a build sets one word per token it reads, with no set of
// distinct tokens before it (the earlier build's set and its probes were
// half of its CPU), and a probe reads one word. Its false positives are
// a little above a classic filter's at the same size (1.8 % at 10 bits per
// token, k = 4, against 0.8 %; at 4 bits, 17 % against 15 %).
//
// The size: the build starts at the largest W its byte cap allows, with at
// most 4 significant bits (W = m · 2^j with 8 <= m < 16 once the cap allows
// 16 words: less than 1/8 of the cap unused), and halves W (word i of the
// half holds words 2i and 2i + 1: the same tokens map there, as
// (g · W/2) >> 64 = ((g · W) >> 64) >> 1) while W is even and the count of
// distinct tokens estimated from the set bits leaves at least
// `bits_per_token` bits per token: about 10 to 20 bits per token when the
// cap does not bind (the count is an estimate, within a few percent), more
// for a chunk of few tokens, whose W stops at m's odd part (1 to 15 words;
// an empty chunk's all clear, which rules every token out). A salt per chunk: chunks of one stream share most
// tokens, and with shared positions an absent token would be a false
// positive in nearly all of them or in none (measured with version 2: one
// absent token passed 90 % of 200 such filters whose mean rate was 9 %).
//
// h = TokenHash(token) is defined as follows (all arithmetic mod 2^64
// unless said; K0 = 0x9e3779b97f4a7c15, K1 = 0xff51afd7ed558ccd,
// seed = 0x746f6b656e, "token"; mum(x, y) = the low 64 bits of the 128-bit
// product x · y xor its high 64 bits):
//   - fold the token's bytes: 'A'..'Z' become 'a'..'z', the rest stay;
//   - cut them into groups of 16 bytes, the last one of 1-16 bytes (of 0
//     bytes only for the empty token), zero-padded to 16; a group is two
//     little-endian words a (its bytes 0-7) and b (8-15);
//   - h = seed; for each group but the last, h = mum(a ^ K0, b ^ h ^ K1);
//   - for the last: with the 128-bit product P = (a ^ K0) · (b ^ h ^ K1),
//     h = mum(low64(P) ^ K0 ^ length, high64(P) ^ K1).
// Version 2 (written until 2026-12-06) is still read: the same hash, every
// token indexed, a classic filter: k u8 (1..16), salt u32 LE, then a bit
// array (bit i is bit i % 8 of byte i / 8; B bits); a token's bits are
// ((G + j · S) · B) >> 64 for j < k, with S = (G · K0) | 1 and
// G = fmix64(h ^ (salt · (2^32 + 1))), MurmurHash3's finalizer
// (G ^= G >> 33; G *= K1; G ^= G >> 33; G *= 0xc4ceb9fe1a85ec53;
// G ^= G >> 33). Version 1 used another hash; its filters and those of
// later versions are read as "may hold anything" (their chunks are read),
// until the TTL removes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace logdex {

// The hash of a token, ASCII-folded to lower case: the filter's key.
uint64_t TokenHash(std::string_view token);

// Whether a token is in the filters (version 3): all but runs of 1-4
// ASCII digits. Queries probe only these.
bool IsIndexedToken(std::string_view token);

// The hashes of a message's indexed tokens, in order, repeats included
// (what a build reads, for tests), by the tokenizer builds use.
void IndexedTokenHashes(std::string_view message, std::vector<uint64_t>& out);

// The tokenizers: the portable one (SSE2 on x86-64), and one for x86-64
// CPUs with AVX-512BW, BMI1 and BMI2, which builds use when the CPU has them
// (chosen at run time; about 15 % less CPU per line). Both give the same
// hashes: tests run each one the CPU has.
enum class Tokenizer { kPortable, kAvx512 };
bool TokenizerAvailable(Tokenizer tokenizer);
// By the tokenizer named (the portable one when it is not available).
void IndexedTokenHashes(std::string_view message, std::vector<uint64_t>& out, Tokenizer tokenizer);

struct TokenBloomOptions {
  // Bits per distinct token at least, when max_bytes allows: 10 gives about
  // 1.8 % false positives (a filter halves while it keeps this many, by
  // estimate, so it ends with about 10 to 20).
  double bits_per_token = 10;
  // The filter may use at most this many bytes (the caller's share of the
  // chunk's stored bytes); fewer bits per token raise the false-positive rate.
  size_t max_bytes = 0;
  // Below this many bits per token (estimated) a filter would pass too much
  // to be worth its read (2 bits: about 57 % with k = 4); none is built.
  double min_bits_per_token = 2;
  // Remixes the hashes of this filter (stored in it): give each chunk its
  // own, derived from its key so that a rebuild gives the same bytes.
  uint32_t salt = 0;
};

// Builds a chunk's filter from its messages, a message at a time. Reuse one
// across chunks: Start begins the next; the scratch buffers stay allocated
// (up to about 1 MiB; a longer message's are released at Finish).
class TokenBloomBuilder {
 public:
  // By the fastest tokenizer the CPU has, or by the one named (for tests;
  // the portable one when the one named is not available).
  TokenBloomBuilder();
  explicit TokenBloomBuilder(Tokenizer tokenizer);
  void Start(const TokenBloomOptions& options);
  void AddMessage(std::string_view message);
  void AddHash(uint64_t token_hash);  // a token's TokenHash, indexed or not
  // The encoded filter, or nullopt when max_bytes does not allow
  // min_bits_per_token for the tokens added (estimated from the bits set).
  std::optional<std::string> Finish();

 private:
  std::vector<uint64_t> words_;
  uint64_t salt_ = 0;  // salt · (2^32 + 1)
  TokenBloomOptions options_;
  std::vector<unsigned char> folded_;  // the message being tokenized, folded, zero-padded
  std::vector<uint64_t> masks_;        // its token bytes, a bit each, a word per 64 bytes
  std::vector<uint64_t> digits_;       // its ASCII digits, likewise
  bool avx512_ = false;                // the AVX-512 tokenizer
};

// A filter of `hashes` (repeats allowed), or nullopt when max_bytes does not
// allow min_bits_per_token.
std::optional<std::string> BuildTokenBloom(const std::vector<uint64_t>& hashes, const TokenBloomOptions& options);

// A decoded filter's view; invalid (valid() false) for a value of another
// version or shape: such a chunk must be read, never skipped.
class TokenBloomView {
 public:
  explicit TokenBloomView(std::string_view encoded);
  bool valid() const { return bits_ != 0; }
  bool MayContain(uint64_t token_hash) const;
  uint64_t bits() const { return bits_; }
  unsigned hashes() const { return k_; }
  unsigned version() const { return version_; }

 private:
  std::string_view array_;
  uint64_t bits_ = 0;
  unsigned k_ = 0;
  unsigned version_ = 0;
  uint32_t salt_ = 0;
};

// The indexed tokens any record passing `contains` must hold: those the
// substring holds whole (a run at its start or end may be part of a longer
// token), appended as hashes to `out`.
void ContainedTokenHashes(std::string_view substring, std::vector<uint64_t>& out);

}  // namespace logdex
