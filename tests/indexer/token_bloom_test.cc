// The token filter (common/token_bloom.h) and what queries probe it with:
// no false negatives whatever the size, a false-positive rate near the
// theory's, the byte cap, the hash of a token the same whether taken from a
// message or alone, short numbers left out on both sides, version 2 still
// read, the tokens a substring holds whole, and RE2's literals
// (indexer/text_filter.h, RegexTokenProbe).
#include "common/token_bloom.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/tokens.h"
#include "indexer/text_filter.h"

namespace logdex {
namespace {

std::vector<uint64_t> Hashes(std::initializer_list<std::string_view> tokens) {
  std::vector<uint64_t> out;
  for (std::string_view t : tokens) out.push_back(TokenHash(t));
  return out;
}

std::string Filter(const std::vector<uint64_t>& hashes, size_t max_bytes = 1 << 20) {
  TokenBloomOptions o;
  o.max_bytes = max_bytes;
  auto f = BuildTokenBloom(hashes, o);
  EXPECT_TRUE(f.has_value());
  return f.value_or("");
}

// What the byte-at-a-time rule (ForEachToken, IsIndexedToken) and TokenHash
// give for a message: its indexed tokens' hashes, in order.
std::vector<uint64_t> ByTheByteRule(std::string_view message) {
  std::vector<uint64_t> want;
  ForEachToken(message, [&](std::string_view t) {
    if (IsIndexedToken(t)) want.push_back(TokenHash(t));
    return true;
  });
  return want;
}

std::vector<uint64_t> ByTheBlockTokenizer(std::string_view message, Tokenizer tokenizer) {
  std::vector<uint64_t> got;
  IndexedTokenHashes(message, got, tokenizer);
  return got;
}

std::vector<uint64_t> ByTheBlockTokenizer(std::string_view message) {
  std::vector<uint64_t> got;
  IndexedTokenHashes(message, got);
  return got;
}

// The tokenizers this CPU can run: the tests of the block tokenizer run
// each (the AVX-512 one is used by builds when the CPU has it). Which ran
// is printed, so that a log shows whether the AVX-512 one was tested.
std::vector<Tokenizer> Tokenizers() {
  std::vector<Tokenizer> out = {Tokenizer::kPortable};
  if (TokenizerAvailable(Tokenizer::kAvx512)) out.push_back(Tokenizer::kAvx512);
  static bool told = false;
  if (!told) {
    std::printf("tokenizers tested on this CPU: portable%s\n", out.size() > 1 ? ", AVX-512" : " (not all of AVX-512BW, BMI1, BMI2)");
    told = true;
  }
  return out;
}

const char* Name(Tokenizer t) { return t == Tokenizer::kPortable ? "portable" : "AVX-512"; }

// Messages of random bytes shaped to stress the block tokenizer: runs of
// one class make long tokens and long gaps; any byte, 0 and >= 0x80
// included, now and then; in the first 300 rounds, one message of each
// round is made of `round % 200` steps (a byte, sometimes a run after it).
std::vector<std::string> RandomMessages(std::mt19937_64& rng, int round) {
  const std::string alphabet = "aZ9_ -.:/=\x7f@[`{05 ";
  std::vector<std::string> messages(1 + rng() % 4);
  for (std::string& m : messages) {
    const size_t length = round < 300 ? static_cast<size_t>(round % 200) : rng() % 400;
    for (size_t i = 0; i < length; ++i) {
      const uint64_t r = rng();
      m += r % 7 == 0 ? static_cast<char>(r >> 8) : alphabet[(r >> 8) % alphabet.size()];
      if (r % 5 == 0) m += std::string((r >> 16) % 40, (r >> 24) % 2 ? 'q' : ' ');
    }
  }
  return messages;
}

// The false-positive rate of a version 3 filter of n distinct tokens in
// `words` words, k bits each: a word holds Poisson(n / words) tokens, and a
// probe passes when its k bits are among those they set.
double BlockedTheory(double n, double words, unsigned k) {
  const double lambda = n / words;
  double rate = 0, p = std::exp(-lambda);
  for (int l = 0; l < 10 * lambda + 60; ++l) {
    rate += p * std::pow(1 - std::pow(1 - 1.0 / 64, k * l), k);
    p *= lambda / (l + 1);
  }
  return rate;
}

TEST(TokenBloom, AMessagesTokensHashAsEachTokenAloneFoldedToAsciiLowerCase) {
  const std::string message = "GET /api/v1?user=Alice_01 -> 200 OK (ÉTÉ naïve) x";
  const std::vector<uint64_t> got = ByTheBlockTokenizer(message);
  EXPECT_EQ(got, Hashes({"get", "api", "v1", "user", "alice_01", "ok", "ÉtÉ", "naïve", "x"})) << "200 is a short number";
  EXPECT_EQ(TokenHash("Alice_01"), TokenHash("alice_01"));
  EXPECT_EQ(TokenHash("OK"), TokenHash("ok"));
  EXPECT_NE(TokenHash("ÉTÉ"), TokenHash("été")) << "only ASCII folds";
  EXPECT_NE(TokenHash("ab"), TokenHash("abc"));
  EXPECT_NE(TokenHash(""), TokenHash("a"));
}

// The tokenizer reads 64 bytes at a time (SSE2 or AVX-512) and hashes from
// a padded copy: tokens across block edges, at a message's end, of 16 and
// 17 bytes, any byte, and messages of random lengths must give what the
// byte-at-a-time rule (ForEachToken) and TokenHash give, by each tokenizer.
TEST(TokenBloom, TheBlockTokenizerAgreesWithTheByteRuleOnRandomMessages) {
  for (Tokenizer t : Tokenizers()) {
    std::mt19937_64 rng(17);
    for (int round = 0; round < 3'000; ++round) {
      for (const std::string& m : RandomMessages(rng, round)) {
        ASSERT_EQ(ByTheBlockTokenizer(m, t), ByTheByteRule(m)) << Name(t) << ", round " << round;
      }
    }
  }
}

// A builder's filter of random messages is byte for byte the filter of
// their tokens' hashes by the byte rule, whichever tokenizer builds it
// (builds use the AVX-512 one on a CPU that has it).
TEST(TokenBloom, ABuildersFilterOfRandomMessagesIsTheFilterOfTheirTokens) {
  for (Tokenizer t : Tokenizers()) {
    std::mt19937_64 rng(23);
    TokenBloomBuilder builder(t);
    int built = 0;
    for (int round = 0; round < 600; ++round) {
      TokenBloomOptions o;
      // Roomy filters mostly (a missing or extra token changes their bytes),
      // a crowded one now and then.
      o.max_bytes = 6 + 8 * (round % 8 == 0 ? 1 + rng() % 8 : 64 + rng() % 64);
      o.salt = static_cast<uint32_t>(rng());
      std::vector<uint64_t> hashes;
      builder.Start(o);
      for (const std::string& m : RandomMessages(rng, round)) {
        builder.AddMessage(m);
        const std::vector<uint64_t> want = ByTheByteRule(m);
        hashes.insert(hashes.end(), want.begin(), want.end());
      }
      const std::optional<std::string> got = builder.Finish();
      ASSERT_EQ(got, BuildTokenBloom(hashes, o)) << Name(t) << ", round " << round;
      built += got.has_value();
    }
    EXPECT_GE(built, 500) << Name(t) << ": rounds that built a filter, of 600";
  }
}

// A run of 1-4 digits is not indexed, wherever it stands against the
// 64-byte blocks; 5 digits, or digits inside a longer token, are.
TEST(TokenBloom, ShortNumbersAreLeftOutWhereverTheyStand) {
  for (Tokenizer t : Tokenizers()) {
    for (size_t at = 0; at < 140; ++at) {
      for (size_t digits = 1; digits <= 6; ++digits) {
        const std::string number = std::string("123456").substr(0, digits);
        const std::string m = std::string(at, ' ') + number + " z";
        const std::vector<uint64_t> want = digits <= 4 ? Hashes({"z"}) : Hashes({number, "z"});
        ASSERT_EQ(ByTheBlockTokenizer(m, t), want) << Name(t) << ": " << number << " at " << at;
        const std::string inside = std::string(at, '-') + "v" + number + " " + number + "x";
        ASSERT_EQ(ByTheBlockTokenizer(inside, t), Hashes({"v" + number, number + "x"}))
            << Name(t) << ": " << number << " at " << at;
        // At the message's end, and followed by a byte >= 0x80 (a token byte).
        ASSERT_EQ(ByTheBlockTokenizer(std::string(at, ' ') + number, t), digits <= 4 ? Hashes({}) : Hashes({number}))
            << Name(t) << ": " << number << " ending the message at " << at;
        ASSERT_EQ(ByTheBlockTokenizer(std::string(at, ' ') + number + "\xc3\xa9", t), Hashes({number + "\xc3\xa9"}))
            << Name(t) << ": " << number << " before UTF-8 at " << at;
      }
    }
  }
  EXPECT_FALSE(IsIndexedToken("0"));
  EXPECT_FALSE(IsIndexedToken("2026"));
  EXPECT_TRUE(IsIndexedToken("20261"));
  EXPECT_TRUE(IsIndexedToken("x1"));
  EXPECT_TRUE(IsIndexedToken("\xd9\xa3"));  // ARABIC-INDIC DIGIT THREE: not ASCII
}

// Every byte value, at positions across a full 64-byte block (where the
// SSE2 compares decide) and the block after it: a token byte or not as
// common/tokens.h says, folded or not as TokenHash folds, a digit or not
// (alone, a digit is a short number, left out).
TEST(TokenBloom, EveryByteValueIsClassifiedAsTheTokenRuleSays) {
  for (Tokenizer t : Tokenizers()) {
    for (int c = 0; c < 256; ++c) {
      for (size_t at : {0u, 1u, 15u, 16u, 31u, 47u, 62u, 63u, 64u, 100u}) {
        std::string m(130, 'y');
        m[at] = static_cast<char>(c);
        m[at + 1] = 'Q';
        m[at + 3] = ' ';
        ASSERT_EQ(ByTheBlockTokenizer(m, t), ByTheByteRule(m)) << Name(t) << ": byte " << c << " at " << at;
        // The byte alone between spaces: a digit is then a short number, left out.
        if (at > 0) m[at - 1] = ' ';
        m[at + 1] = ' ';
        ASSERT_EQ(ByTheBlockTokenizer(m, t), ByTheByteRule(m)) << Name(t) << ": byte " << c << " alone at " << at;
      }
    }
  }
}

// The hash is part of the stored format (common/token_bloom.h): a change
// must come with a new version byte, or old filters would rule chunks out.
// The values were computed by a separate script (Python's integers) from
// the definition written in token_bloom.h, not by this code.
TEST(TokenBloom, TheTokenHashIsPinnedByTheFormat) {
  EXPECT_EQ(TokenHash("error"), 0x5eb57c853a6a2754ull);
  EXPECT_EQ(TokenHash("ERROR"), 0x5eb57c853a6a2754ull);
  EXPECT_EQ(TokenHash(""), 0x849a887057099269ull);
  EXPECT_EQ(TokenHash("0123456789abcdef"), 0x692aa7fc97564723ull) << "one whole group";
  EXPECT_EQ(TokenHash("0123456789abcdefX"), 0xfb66c1da5acbef97ull) << "a group and one byte";
  EXPECT_EQ(TokenHash("zqx7rare42_and_more"), 0xc0344a99bebeb753ull);
  const std::string filter = Filter(Hashes({"error"}));
  EXPECT_EQ(static_cast<uint8_t>(filter[0]), 3u) << "the version byte";
}

// Version 3's encoding, built here from the definition in token_bloom.h
// (not by the library's code) and compared byte for byte: a change to the
// word, the bits or the byte order would make every stored filter rule
// chunks out wrongly.
TEST(TokenBloom, TheVersion3EncodingIsPinnedByTheFormat) {
  const uint32_t salt = 0x11223344;
  const uint64_t salt64 = uint64_t{salt} << 32 | salt;
  constexpr size_t kWords = 15;  // odd: not halved
  std::vector<uint64_t> words(kWords, 0);
  for (std::string_view token : {"alpha", "Beta", "r42x", "zqx7rare42"}) {
    const uint64_t g = (TokenHash(token) ^ salt64) * 0x9e3779b97f4a7c15ull;
    const auto w = static_cast<size_t>((static_cast<unsigned __int128>(g) * kWords) >> 64);
    for (int j = 0; j < 4; ++j) words[w] |= uint64_t{1} << ((g >> (6 * j)) & 63);
  }
  std::string want = {'\x03', '\x04', '\x44', '\x33', '\x22', '\x11'};
  for (uint64_t w : words) {
    for (int b = 0; b < 8; ++b) want += static_cast<char>(w >> (8 * b));
  }
  TokenBloomOptions o;
  o.max_bytes = 6 + 8 * kWords;
  o.salt = salt;
  EXPECT_EQ(BuildTokenBloom(Hashes({"alpha", "Beta", "r42x", "zqx7rare42"}), o), want);
  TokenBloomBuilder builder;
  builder.Start(o);
  builder.AddMessage("alpha Beta 42 r42x, zqx7rare42");
  EXPECT_EQ(builder.Finish(), want) << "42 left out";
  const TokenBloomView v(want);
  EXPECT_EQ(v.version(), 3u);
  EXPECT_EQ(v.hashes(), 4u);
  EXPECT_EQ(v.bits(), 64u * kWords);
  for (std::string_view token : {"ALPHA", "beta", "r42x", "zqx7rare42"}) EXPECT_TRUE(v.MayContain(TokenHash(token))) << token;
  EXPECT_FALSE(v.MayContain(TokenHash("gamma"))) << "16 bits of 960 set";
}

// A reused builder starts each filter empty: after a large one, a small
// filter is byte for byte what a fresh build makes, and a message gives the
// same filter as its tokens' hashes.
TEST(TokenBloom, AReusedBuilderStartsEachFilterEmpty) {
  TokenBloomBuilder builder;
  TokenBloomOptions o;
  o.max_bytes = 1 << 20;
  o.salt = 99;
  std::string big;
  for (int i = 0; i < 50'000; ++i) big += "t" + std::to_string(i) + " T" + std::to_string(i) + " ";
  builder.Start(o);
  builder.AddMessage(big);
  const auto large = builder.Finish();
  ASSERT_TRUE(large.has_value());
  const TokenBloomView v(*large);
  for (int i = 0; i < 50'000; i += 7) ASSERT_TRUE(v.MayContain(TokenHash("T" + std::to_string(i))));
  EXPECT_GE(v.bits(), 9'800u * 50) << "t<i> and T<i> fold to one token: 50,000, at 10 bits at least (estimated)";
  EXPECT_LT(v.bits(), 21u * 50'000);
  for (int round = 0; round < 3; ++round) {
    builder.Start(o);
    builder.AddMessage("alpha beta alpha");
    EXPECT_EQ(builder.Finish(), BuildTokenBloom(Hashes({"alpha", "beta"}), o)) << "round " << round;
  }
  builder.Start(o);
  builder.AddMessage(big);
  EXPECT_EQ(builder.Finish(), BuildTokenBloom(ByTheByteRule(big), o));
}

TEST(TokenBloom, HasNoFalseNegativesAndAboutTheTheorysFalsePositives) {
  std::mt19937_64 rng(7);
  // 50,400 at 10 bits: 983,040 bits; halved, 491,520 would be under 10 per
  // token, which an estimate 3 % low (the first one written) allowed.
  for (size_t n : {1u, 7u, 100u, 5'000u, 50'400u}) {
    for (double bits : {2.0, 4.0, 10.0}) {
      std::vector<uint64_t> in(n);
      for (uint64_t& h : in) h = rng();
      TokenBloomOptions o;
      o.bits_per_token = bits;
      o.max_bytes = 1 << 24;
      o.min_bits_per_token = 1;
      auto f = BuildTokenBloom(in, o);
      ASSERT_TRUE(f.has_value());
      const TokenBloomView v(*f);
      ASSERT_TRUE(v.valid());
      for (uint64_t h : in) ASSERT_TRUE(v.MayContain(h)) << n << " tokens at " << bits << " bits";
      if (n < 5'000) continue;
      uint64_t hits = 0;
      const int probes = 200'000;
      for (int i = 0; i < probes; ++i) hits += v.MayContain(rng());
      const double rate = static_cast<double>(hits) / probes;
      EXPECT_GE(static_cast<double>(v.bits()), bits * static_cast<double>(n) * 0.98) << n << " tokens at " << bits << " bits";
      EXPECT_LT(static_cast<double>(v.bits()), 2 * bits * static_cast<double>(n) * 1.02) << "halved while it kept enough";
      const double theory = BlockedTheory(static_cast<double>(n), static_cast<double>(v.bits() / 64), v.hashes());
      EXPECT_LT(rate, theory * 1.3 + 0.002) << n << " tokens at " << bits << " bits, " << v.bits() << " in the filter";
      EXPECT_GT(rate, theory * 0.7 - 0.002) << n << " tokens at " << bits << " bits, " << v.bits() << " in the filter";
    }
  }
}

// Chunks of one stream share most of their tokens. With one set of bit
// positions for all, their filters would be near copies, and an absent token
// would pass nearly all of them or none: a query for an unlucky word would
// read every chunk. Each filter's salt makes its false positives its own.
TEST(TokenBloom, FiltersOfSimilarChunksDoNotShareFalsePositives) {
  std::mt19937_64 rng(11);
  std::vector<std::string> vocabulary;
  for (int i = 0; i < 5'000; ++i) vocabulary.push_back("w" + std::to_string(rng() % 1'000'000));
  constexpr int kFilters = 200;
  std::vector<std::string> filters;
  for (int f = 0; f < kFilters; ++f) {
    std::vector<uint64_t> hashes;
    for (const std::string& w : vocabulary) hashes.push_back(TokenHash(w));  // the shared template words
    for (int i = 0; i < 100; ++i) hashes.push_back(rng());                  // this chunk's own
    std::sort(hashes.begin(), hashes.end());
    hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
    TokenBloomOptions o;
    o.bits_per_token = 5;  // 5 to 10 bits: 2-10 % false positives
    o.max_bytes = 1 << 20;
    o.salt = static_cast<uint32_t>(rng());
    filters.push_back(*BuildTokenBloom(hashes, o));
  }
  const TokenBloomView first(filters[0]);
  const double rate = BlockedTheory(5'100, static_cast<double>(first.bits() / 64), first.hashes());
  int worst = 0;
  double mean = 0;
  for (int t = 0; t < 1'000; ++t) {
    const uint64_t absent = TokenHash("absent" + std::to_string(t));
    int passed = 0;
    for (const std::string& f : filters) passed += TokenBloomView(f).MayContain(absent);
    worst = std::max(worst, passed);
    mean += passed / 1'000.0;
  }
  // Independent: about Binomial(200, rate) per token (rate 6.8 %: 480 words
  // for 5,100 tokens), whose largest of 1,000 draws stays near 27; shared
  // positions put some tokens near 200.
  EXPECT_NEAR(mean, rate * kFilters, 0.3 * rate * kFilters);
  EXPECT_LT(worst, 60) << "an absent token passed " << worst << " of " << kFilters << " filters";
}

// The salt is stored (u32, little-endian, after version and k) and read
// back: a filter is probed with the positions it was built with.
TEST(TokenBloom, TheSaltIsStoredAndProbedWith) {
  std::vector<uint64_t> in;
  for (int i = 0; i < 2'000; ++i) in.push_back(TokenHash("s" + std::to_string(i)));
  TokenBloomOptions o;
  o.max_bytes = 1 << 20;
  o.salt = 0x01020304;
  const std::string f = *BuildTokenBloom(in, o);
  EXPECT_EQ(f.substr(2, 4), std::string("\x04\x03\x02\x01"));
  const TokenBloomView v(f);
  for (uint64_t h : in) ASSERT_TRUE(v.MayContain(h));
  int passed = 0;
  for (int i = 0; i < 2'000; ++i) passed += v.MayContain(TokenHash("absent" + std::to_string(i)));
  EXPECT_LT(passed, 60) << "under 2 % at 10 bits per token or more";
  o.salt = 0x01020305;
  EXPECT_NE(*BuildTokenBloom(in, o), f) << "another salt, other bits";
}

// One long message repeating one token: the filter is sized by distinct
// tokens, not by the message's count.
TEST(TokenBloom, ALongMessageOfOneTokenMakesASmallFilter) {
  TokenBloomBuilder builder;
  TokenBloomOptions o;
  o.max_bytes = 1 << 20;
  std::string m;
  for (int i = 0; i < 300'000; ++i) m += "a ";
  builder.Start(o);
  builder.AddMessage(m);
  const auto f = builder.Finish();
  ASSERT_TRUE(f.has_value());
  EXPECT_LT(f->size(), 6u + 8 * 16) << "halved down to fewer than 16 words";
  EXPECT_TRUE(TokenBloomView(*f).MayContain(TokenHash("a")));
}

// A message over 1 MiB: its scratch buffers are released after the chunk,
// and the builder goes on.
TEST(TokenBloom, ScratchBuffersOfAHugeMessageAreReleasedAndTheBuilderGoesOn) {
  TokenBloomBuilder builder;
  TokenBloomOptions o;
  o.max_bytes = 1 << 16;
  std::string huge;
  for (int i = 0; i < 200'000; ++i) huge += "tok" + std::to_string(i % 1'000) + " ";
  ASSERT_GT(huge.size(), size_t{1} << 20);
  builder.Start(o);
  builder.AddMessage("before");
  builder.AddMessage(huge);
  const auto f = builder.Finish();
  ASSERT_TRUE(f.has_value());
  const TokenBloomView v(*f);
  EXPECT_TRUE(v.MayContain(TokenHash("before")));
  for (int i = 0; i < 1'000; ++i) ASSERT_TRUE(v.MayContain(TokenHash("tok" + std::to_string(i))));
  builder.Start(o);
  builder.AddMessage("");
  builder.AddMessage("a b");
  EXPECT_EQ(builder.Finish(), BuildTokenBloom(Hashes({"a", "b"}), o));
}

TEST(TokenBloom, KeepsWithinItsByteCapOrIsNotBuilt) {
  std::vector<uint64_t> in(1'000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = TokenHash("t" + std::to_string(i));
  TokenBloomOptions o;
  o.max_bytes = 506;  // a 6-byte header and 62 words, of which 60 (4 significant bits): 3.84 bits per token
  auto f = BuildTokenBloom(in, o);
  ASSERT_TRUE(f.has_value());
  EXPECT_LE(f->size(), 506u);
  EXPECT_EQ(TokenBloomView(*f).bits(), 3'840u);
  o.max_bytes = 200;  // 24 words: 1.5 bits per token, below the minimum of 2
  EXPECT_FALSE(BuildTokenBloom(in, o).has_value());
  o.max_bytes = 13;  // no whole word
  EXPECT_FALSE(BuildTokenBloom(in, o).has_value());
  o.max_bytes = 1 << 20;  // uncapped: halved down to 10-20 bits per token (from 122,880 words to 240)
  EXPECT_EQ(BuildTokenBloom(in, o)->size(), 6u + 8 * 240);
  EXPECT_TRUE(BuildTokenBloom({}, o).has_value()) << "a chunk without tokens: a filter that rules out every word";
  EXPECT_FALSE(TokenBloomView(*BuildTokenBloom({}, o)).MayContain(TokenHash("x")));
}

TEST(TokenBloom, AValueOfAnotherVersionOrShapeMayHoldAnything) {
  // Version 1 (an earlier hash), a later version, no bits, k = 0, k past
  // the version's, version 3 without whole words.
  for (std::string bad : {std::string(), std::string("\x01\x03xxxxxxxx"), std::string("\x04\x04saltxxxxxxxx"),
                          std::string("\x02\x03salt"), std::string("\x03\x04salt"), std::string("\x02\x00xxxxxxxx", 10),
                          std::string("\x03\x00saltxxxxxxxx", 14), std::string("\x02\x11xxxxxxxx"),
                          std::string("\x03\x0bsaltxxxxxxxx"), std::string("\x03\x04saltxxxxxxxxx")}) {
    const TokenBloomView v(bad);
    EXPECT_FALSE(v.valid());
    EXPECT_TRUE(v.MayContain(TokenHash("anything")));
  }
}

// Version 2 (every token, a classic filter), written before version 3, is
// still read. This one is built from the definition in token_bloom.h, not
// by the library's code.
TEST(TokenBloom, AVersion2FilterIsStillRead) {
  auto fmix = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  };
  const uint32_t salt = 0x0a0b0c0d;
  const unsigned k = 3;
  const uint64_t bits = 8 * 512;
  std::string f = {'\x02', static_cast<char>(k), '\x0d', '\x0c', '\x0b', '\x0a'};
  f.resize(6 + bits / 8);
  for (std::string_view token : {"alpha", "Beta", "42"}) {
    const uint64_t g = fmix(TokenHash(token) ^ (uint64_t{salt} << 32 | salt));
    const uint64_t step = (g * 0x9e3779b97f4a7c15ull) | 1;
    for (unsigned j = 0; j < k; ++j) {
      const auto p = static_cast<uint64_t>((static_cast<unsigned __int128>(g + j * step) * bits) >> 64);
      f[6 + p / 8] = static_cast<char>(f[6 + p / 8] | (1 << (p % 8)));
    }
  }
  const TokenBloomView v(f);
  ASSERT_TRUE(v.valid());
  EXPECT_EQ(v.version(), 2u);
  EXPECT_TRUE(v.MayContain(TokenHash("alpha")));
  EXPECT_TRUE(v.MayContain(TokenHash("beta")));
  int passed = 0;
  for (int i = 0; i < 1'000; ++i) passed += v.MayContain(TokenHash("absent" + std::to_string(i)));
  EXPECT_LT(passed, 5) << "3 tokens in 4,096 bits";
  auto probe = [&](std::string_view words) { return TokenProbe::For({{TextFilterKind::kWord, false, std::string(words)}}).MayMatch(v); };
  EXPECT_TRUE(probe("42 alpha"));
  EXPECT_TRUE(probe("7 beta")) << "short numbers are not probed, in any version";
  EXPECT_FALSE(probe("alpha gamma"));
}

TEST(TokenBloom, ASubstringHoldsTheTokensNotTouchingItsEnds) {
  auto contained = [](std::string_view s) {
    std::vector<uint64_t> out;
    ContainedTokenHashes(s, out);
    return out;
  };
  EXPECT_EQ(contained("t 12345 "), Hashes({"12345"}));
  EXPECT_EQ(contained(" 12345 "), Hashes({"12345"}));
  EXPECT_EQ(contained("12345"), Hashes({}));  // may be inside "4123456"
  EXPECT_EQ(contained("t 123 "), Hashes({})) << "a short number is not indexed";
  EXPECT_EQ(contained("a b c"), Hashes({"b"}));
  EXPECT_EQ(contained("user=alice, id=7;"), Hashes({"alice", "id"}));
  EXPECT_EQ(contained(""), Hashes({}));
}

TEST(RegexTokenProbe, RulesOutOnlyWhatNoBranchCanMatch) {
  const std::string with = Filter(Hashes({"request", "r42x", "done", "alpha"}));
  const std::string without = Filter(Hashes({"request", "r43x", "done", "alpha"}));
  auto may = [](const std::string& pattern, const std::string& filter) {
    auto p = RegexTokenProbe::Make(pattern);
    EXPECT_NE(p, nullptr) << pattern;
    return p == nullptr || p->MayMatch(TokenBloomView(filter));
  };
  EXPECT_TRUE(may("request r42x d[o]ne", with));
  EXPECT_FALSE(may("request r42x d[o]ne", without));
  EXPECT_FALSE(may("[rR]EQUEST R42X ", without)) << "RE2's literals are lower case; the filter folds case";
  EXPECT_TRUE(may("(request r42x |bravo n9 done)", with));
  EXPECT_FALSE(may("(request r42x |bravo n9 done)", without));
  EXPECT_TRUE(may("(request r42x |alpha done)", without)) << "one branch may match";
  EXPECT_EQ(RegexTokenProbe::Make("request 42 d[o]ne"), nullptr) << "42 is not indexed";
  // Nothing to check: no literal, literals without a whole token, or short ones.
  EXPECT_EQ(RegexTokenProbe::Make("[0-9]{5} "), nullptr);
  EXPECT_EQ(RegexTokenProbe::Make("zqx7rare[0-9]+ ze[t]a"), nullptr);
  EXPECT_EQ(RegexTokenProbe::Make("a b"), nullptr);
  EXPECT_EQ(RegexTokenProbe::Make("(unclosed"), nullptr);
  // Case folding by Unicode rules: "(?i)worker" matches "wor\u212Aer"
  // (KELVIN SIGN), whose token is not "worker" in any ASCII case.
  EXPECT_EQ(RegexTokenProbe::Make("(?i)a worker b"), nullptr);
  EXPECT_EQ(RegexTokenProbe::Make("x (?Ui:a worker b)"), nullptr);
  EXPECT_NE(RegexTokenProbe::Make("(?s)a worker b"), nullptr);
  // A literal with non-ASCII bytes (RE2 folds them by Unicode rules, the
  // filter by ASCII ones) is never checked.
  EXPECT_EQ(RegexTokenProbe::Make("q Été y z"), nullptr);
}

// The soundness property the query engine relies on, on random messages and
// filters cut from them: whenever a filter passes a message, the token
// filter of that message's own tokens does not rule it out.
TEST(TokenProbe, NeverRulesOutAMessageItsFiltersPass) {
  std::mt19937_64 rng(41);
  const std::vector<std::string> pieces = {"Error", "error", "ERROR", "disk", "FULL", "42", "2026", "123456", "_id", "x7", "caf\u00E9",
                                           "\u00C9t\u00E9", "user", "s\u017Fam", "wor\u212Aer", "a", "b"};
  const std::vector<std::string> gaps = {" ", ": ", "=", ", ", "/", "-", "  ", "\t", "(", ")"};
  uint64_t passing = 0;
  for (int n = 0; n < 20'000; ++n) {
    std::string message;
    for (int i = 0, k = 1 + static_cast<int>(rng() % 8); i < k; ++i) {
      if (i) message += gaps[rng() % gaps.size()];
      message += pieces[rng() % pieces.size()];
    }
    // A filter text: a random substring of the message, or of another.
    const size_t from = rng() % message.size(), len = 1 + rng() % (message.size() - from);
    std::string text = message.substr(from, len);
    if (rng() % 4 == 0) text = pieces[rng() % pieces.size()];
    const auto kind = static_cast<TextFilterKind>(rng() % 4);
    if (kind == TextFilterKind::kRegex) {
      // Escape the regex metacharacters the cut may hold; fold a letter into a class sometimes.
      std::string re;
      for (char c : text) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) re += '\\';
        re += c;
      }
      if (rng() % 3 == 0) re = "(?i)" + re;
      text = re;
    }
    auto matcher = TextMatcher::Compile({{kind, false, text}});
    if (!matcher.ok() || !matcher->Matches(message)) continue;
    ++passing;
    TokenBloomOptions o;
    o.max_bytes = 1 << 16;
    TokenBloomBuilder builder;
    builder.Start(o);
    builder.AddMessage(message);
    const auto filter = builder.Finish();
    ASSERT_TRUE(filter.has_value());
    const std::vector<TextFilter> filters = {{kind, false, text}};
    ASSERT_TRUE(TokenProbe::For(filters).MayMatch(TokenBloomView(*filter)))
        << TextFilterParam(filters[0]) << "=" << text << " on '" << message << "'";
    if (kind == TextFilterKind::kContains) {
      ASSERT_TRUE(TokenProbe::For({}, text).MayMatch(TokenBloomView(*filter))) << "contains=" << text;
    }
  }
  EXPECT_GT(passing, 5'000u) << "most cut filters pass their message";
}

}  // namespace
}  // namespace logdex
