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
// filter only says "may hold"; the records are always verified).
//
// Encoding (the `tok` row value): version u8 (2) · k u8 (hash functions,
// 1..16) · salt u32 LE · the bit array (8 × size bits, at least one byte).
// Bit i of the array is bit (i % 8) of byte i / 8. A token's bits in the
// filter are ((g + j · s) · bits) >> 64 (a 128-bit product) for j < k, with
// s = (g · K0) | 1 and g = fmix64(h ^ (salt · (2^32 + 1))), MurmurHash3's
// finalizer (g ^= g >> 33; g *= 0xff51afd7ed558ccd; g ^= g >> 33;
// g *= 0xc4ceb9fe1a85ec53; g ^= g >> 33). Each chunk's filter has its own
// salt, so that chunks sharing most tokens do not share false positives.
// h = TokenHash(token) is defined as follows (all
// arithmetic mod 2^64 unless said; K0 = 0x9e3779b97f4a7c15,
// K1 = 0xff51afd7ed558ccd, seed = 0x746f6b656e, "token"; mum(x, y) = the
// low 64 bits of the 128-bit product x · y xor its high 64 bits):
//   - fold the token's bytes: 'A'..'Z' become 'a'..'z', the rest stay;
//   - cut them into groups of 16 bytes, the last one of 1-16 bytes (of 0
//     bytes only for the empty token), zero-padded to 16; a group is two
//     little-endian words a (its bytes 0-7) and b (8-15);
//   - h = seed; for each group but the last, h = mum(a ^ K0, b ^ h ^ K1);
//   - for the last: with the 128-bit product P = (a ^ K0) · (b ^ h ^ K1),
//     h = mum(low64(P) ^ K0 ^ length, high64(P) ^ K1).
// Version 1 used another hash and no salt; its filters are read as "may
// hold anything" (their chunks are read), until the TTL removes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace logdex {

// The hash of a token, ASCII-folded to lower case: the filter's key.
uint64_t TokenHash(std::string_view token);

// The distinct token hashes of messages: each message is tokenized and
// hashed, and its hashes go into an open-addressing set during the next
// call (or TakeDistinct), once their slots had time to be prefetched (a
// filter's build is mostly this). Reuse one across chunks: TakeDistinct
// empties it and keeps its table up to 512 KiB, or what the last chunk
// needed, and its scratch buffers up to about 1 MiB.
class TokenSet {
 public:
  void AddMessage(std::string_view message);
  // Distinct, in no particular order; the set is left empty.
  std::vector<uint64_t> TakeDistinct();

 private:
  void InsertAll(const uint64_t* hashes, size_t count);
  void InsertOne(uint64_t h);
  void Grow(size_t wanted);  // to hold `wanted` at most half full

  std::vector<unsigned char> folded_;  // the message being tokenized, folded, zero-padded
  std::vector<uint64_t> masks_;        // its token bytes, a bit each
  std::vector<uint64_t> pending_;      // its token hashes
  std::vector<uint64_t> ready_;        // the previous message's, prefetched, not yet inserted
  size_t ready_count_ = 0;
  std::vector<uint64_t> table_;        // 0 = empty slot; size a power of two
  size_t size_ = 0;
  bool zero_ = false;  // the hash 0, which the table cannot hold
};

struct TokenBloomOptions {
  // Target bits per distinct token: 10 gives about 1 % false positives.
  double bits_per_token = 10;
  // The filter may use at most this many bytes (the caller's share of the
  // chunk's stored bytes); fewer bits per token raise the false-positive rate.
  size_t max_bytes = 0;
  // Below this many bits per token a filter would pass too much to be worth
  // its read (2 bits: about 40 %); none is built.
  double min_bits_per_token = 2;
  // Remixes the hashes of this filter (stored in it): give each chunk its
  // own, derived from its key so that a rebuild gives the same bytes.
  uint32_t salt = 0;
};

// A filter of `hashes` (distinct), or nullopt when max_bytes does not allow
// min_bits_per_token.
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

 private:
  std::string_view array_;
  uint64_t bits_ = 0;
  unsigned k_ = 0;
  uint32_t salt_ = 0;
};

// The tokens any record passing `contains` must hold: those the substring
// holds whole (a run at its start or end may be part of a longer token),
// appended as hashes to `out`.
void ContainedTokenHashes(std::string_view substring, std::vector<uint64_t>& out);

}  // namespace logdex
