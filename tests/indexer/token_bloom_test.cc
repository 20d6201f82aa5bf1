// The token filter (common/token_bloom.h) and what queries probe it with:
// no false negatives whatever the size, a false-positive rate near the
// theory's, the byte cap, the hash of a token the same whether taken from a
// message or alone, the tokens a substring holds whole, and RE2's literals
// (indexer/text_filter.h, RegexTokenProbe).
#include "common/token_bloom.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(TokenBloom, AMessagesTokensHashAsEachTokenAloneFoldedToAsciiLowerCase) {
  const std::string message = "GET /api/v1?user=Alice_01 -> 200 OK (ÉTÉ naïve) x";
  TokenSet set;
  set.AddMessage(message);
  std::vector<uint64_t> want;
  ForEachToken(message, [&](std::string_view t) { return want.push_back(TokenHash(t)), true; });
  std::vector<uint64_t> got = set.TakeDistinct();
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(TokenHash("Alice_01"), TokenHash("alice_01"));
  EXPECT_EQ(TokenHash("OK"), TokenHash("ok"));
  EXPECT_NE(TokenHash("ÉTÉ"), TokenHash("été")) << "only ASCII folds";
  EXPECT_NE(TokenHash("ab"), TokenHash("abc"));
  EXPECT_NE(TokenHash(""), TokenHash("a"));
}

// The tokenizer reads 64 bytes at a time (SSE2) and hashes from a padded
// copy: tokens across block edges, at a message's end, of 16 and 17 bytes,
// any byte, and messages of random lengths (the first 300 rounds: every
// length below 200 for one of their messages) must give what the
// byte-at-a-time rule (ForEachToken) and TokenHash give.
TEST(TokenBloom, TheBlockTokenizerAgreesWithTheByteRuleOnRandomMessages) {
  std::mt19937_64 rng(17);
  const std::string alphabet = "aZ9_ -.:/=\x7f@[`{";
  TokenSet set;
  for (int round = 0; round < 3'000; ++round) {
    std::vector<std::string> messages(1 + rng() % 4);
    for (std::string& m : messages) {
      const size_t length = round < 300 ? static_cast<size_t>(round % 200) : rng() % 400;
      for (size_t i = 0; i < length; ++i) {
        const uint64_t r = rng();
        // Runs of one class make long tokens and long gaps; any byte, 0 and >= 0x80 included, now and then.
        m += r % 7 == 0 ? static_cast<char>(r >> 8) : alphabet[(r >> 8) % alphabet.size()];
        if (r % 5 == 0) m += std::string((r >> 16) % 40, (r >> 24) % 2 ? 'q' : ' ');
      }
    }
    std::vector<uint64_t> want;
    for (const std::string& m : messages) {
      set.AddMessage(m);
      ForEachToken(m, [&](std::string_view t) { return want.push_back(TokenHash(t)), true; });
    }
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    std::vector<uint64_t> got = set.TakeDistinct();
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got, want) << "round " << round;
  }
}

// Every byte value, at every position of a full 64-byte block (where the
// SSE2 compares decide) and of the block after it: a token byte or not as
// common/tokens.h says, folded or not as TokenHash folds.
TEST(TokenBloom, EveryByteValueIsClassifiedAsTheTokenRuleSays) {
  TokenSet set;
  for (int c = 0; c < 256; ++c) {
    for (size_t at : {0u, 1u, 15u, 16u, 31u, 47u, 62u, 63u, 64u, 100u}) {
      std::string m(130, 'y');
      m[at] = static_cast<char>(c);
      m[at + 1] = 'Q';
      m[at + 3] = ' ';
      set.AddMessage(m);
      std::vector<uint64_t> want;
      ForEachToken(m, [&](std::string_view t) { return want.push_back(TokenHash(t)), true; });
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      std::vector<uint64_t> got = set.TakeDistinct();
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, want) << "byte " << c << " at " << at;
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
  EXPECT_EQ(static_cast<uint8_t>(filter[0]), 2u) << "the version byte";
}

// A reused set grows past its first table, empties, and keeps answering
// exactly for the next (smaller) chunk.
TEST(TokenBloom, AReusedTokenSetGrowsAndEmpties) {
  TokenSet set;
  std::string big;
  for (int i = 0; i < 50'000; ++i) big += "t" + std::to_string(i) + " T" + std::to_string(i) + " ";
  set.AddMessage(big);
  std::vector<uint64_t> got = set.TakeDistinct();
  EXPECT_EQ(got.size(), 50'000u) << "t<i> and T<i> fold to one token";
  std::sort(got.begin(), got.end());
  EXPECT_TRUE(std::binary_search(got.begin(), got.end(), TokenHash("t49999")));
  for (int round = 0; round < 3; ++round) {
    set.AddMessage("alpha beta alpha");
    std::vector<uint64_t> small = set.TakeDistinct();
    std::sort(small.begin(), small.end());
    std::vector<uint64_t> want = Hashes({"alpha", "beta"});
    std::sort(want.begin(), want.end());
    EXPECT_EQ(small, want) << "round " << round;
  }
  EXPECT_TRUE(set.TakeDistinct().empty());
}

TEST(TokenBloom, HasNoFalseNegativesAndAboutTheTheorysFalsePositives) {
  std::mt19937_64 rng(7);
  for (size_t n : {1u, 7u, 100u, 5'000u, 50'000u}) {
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
      const double b = static_cast<double>(v.bits()) / static_cast<double>(n), k = v.hashes();
      const double theory = std::pow(1 - std::exp(-k / b), k);
      EXPECT_LT(rate, theory * 1.3 + 0.002) << n << " tokens at " << bits << " bits, k " << k;
      EXPECT_GT(rate, theory * 0.7 - 0.002) << n << " tokens at " << bits << " bits, k " << k;
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
    o.bits_per_token = 5;  // about 9 % false positives
    o.max_bytes = 1 << 20;
    o.salt = static_cast<uint32_t>(rng());
    filters.push_back(*BuildTokenBloom(hashes, o));
  }
  int worst = 0;
  double mean = 0;
  for (int t = 0; t < 1'000; ++t) {
    const uint64_t absent = TokenHash("absent" + std::to_string(t));
    int passed = 0;
    for (const std::string& f : filters) passed += TokenBloomView(f).MayContain(absent);
    worst = std::max(worst, passed);
    mean += passed / 1'000.0;
  }
  // Independent: about Binomial(200, 0.09) per token, whose largest of 1,000
  // draws stays near 35; shared positions put some tokens near 200.
  EXPECT_NEAR(mean, 0.09 * kFilters, 0.03 * kFilters);
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
  EXPECT_LT(passed, 60) << "about 1 % at 10 bits per token";
  o.salt = 0x01020305;
  EXPECT_NE(*BuildTokenBloom(in, o), f) << "another salt, other bits";
}

// One long message repeating one token: the table grows by distinct tokens,
// not by the message's count, and answers exactly.
TEST(TokenBloom, ALongMessageOfOneTokenMakesOneEntry) {
  TokenSet set;
  std::string m;
  for (int i = 0; i < 300'000; ++i) m += "a ";
  set.AddMessage(m);
  EXPECT_EQ(set.TakeDistinct(), Hashes({"a"}));
  set.AddMessage("b");
  EXPECT_EQ(set.TakeDistinct(), Hashes({"b"}));
}

// A message over 1 MiB: its scratch buffers are released after the chunk,
// and the set goes on answering exactly.
TEST(TokenBloom, ScratchBuffersOfAHugeMessageAreReleasedAndTheSetGoesOn) {
  TokenSet set;
  std::string huge;
  for (int i = 0; i < 200'000; ++i) huge += "tok" + std::to_string(i % 1'000) + " ";
  ASSERT_GT(huge.size(), size_t{1} << 20);
  set.AddMessage("before");
  set.AddMessage(huge);
  std::vector<uint64_t> got = set.TakeDistinct();
  EXPECT_EQ(got.size(), 1'001u);
  set.AddMessage("");
  set.AddMessage("a b");
  got = set.TakeDistinct();
  std::sort(got.begin(), got.end());
  std::vector<uint64_t> want = Hashes({"a", "b"});
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST(TokenBloom, KeepsWithinItsByteCapOrIsNotBuilt) {
  std::vector<uint64_t> in(1'000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = TokenHash("t" + std::to_string(i));
  TokenBloomOptions o;
  o.max_bytes = 506;  // a 6-byte header and 500 bytes of bits: 4 per token
  auto f = BuildTokenBloom(in, o);
  ASSERT_TRUE(f.has_value());
  EXPECT_LE(f->size(), 506u);
  EXPECT_EQ(TokenBloomView(*f).bits(), 4'000u);
  o.max_bytes = 200;  // 1.6 bits per token: below the minimum of 2
  EXPECT_FALSE(BuildTokenBloom(in, o).has_value());
  o.max_bytes = 1 << 20;  // uncapped: 10 bits per token
  EXPECT_EQ(BuildTokenBloom(in, o)->size(), 6u + 1'250u);
  EXPECT_TRUE(BuildTokenBloom({}, o).has_value()) << "a chunk without tokens: a filter that rules out every word";
  EXPECT_FALSE(TokenBloomView(*BuildTokenBloom({}, o)).MayContain(TokenHash("x")));
}

TEST(TokenBloom, AValueOfAnotherVersionOrShapeMayHoldAnything) {
  // Version 1 (an earlier hash), a later version, no bits, k = 0, k = 17.
  for (std::string bad : {std::string(), std::string("\x01\x03xxxxxxxx"), std::string("\x03\x03xxxxxxxx"), std::string("\x02\x03salt"),
                          std::string("\x02\x00xxxxxxxx", 10), std::string("\x02\x11xxxxxxxx")}) {
    const TokenBloomView v(bad);
    EXPECT_FALSE(v.valid());
    EXPECT_TRUE(v.MayContain(TokenHash("anything")));
  }
}

TEST(TokenBloom, ASubstringHoldsTheTokensNotTouchingItsEnds) {
  auto contained = [](std::string_view s) {
    std::vector<uint64_t> out;
    ContainedTokenHashes(s, out);
    return out;
  };
  EXPECT_EQ(contained("t 123 "), Hashes({"123"}));
  EXPECT_EQ(contained(" 123 "), Hashes({"123"}));
  EXPECT_EQ(contained("123"), Hashes({}));  // may be inside "41234"
  EXPECT_EQ(contained("a b c"), Hashes({"b"}));
  EXPECT_EQ(contained("user=alice, id=7;"), Hashes({"alice", "id", "7"}));
  EXPECT_EQ(contained(""), Hashes({}));
}

TEST(RegexTokenProbe, RulesOutOnlyWhatNoBranchCanMatch) {
  const std::string with = Filter(Hashes({"request", "42", "done", "alpha"}));
  const std::string without = Filter(Hashes({"request", "43", "done", "alpha"}));
  auto may = [](const std::string& pattern, const std::string& filter) {
    auto p = RegexTokenProbe::Make(pattern);
    EXPECT_NE(p, nullptr) << pattern;
    return p == nullptr || p->MayMatch(TokenBloomView(filter));
  };
  EXPECT_TRUE(may("request 42 d[o]ne", with));
  EXPECT_FALSE(may("request 42 d[o]ne", without));
  EXPECT_FALSE(may("[rR]EQUEST 42 ", without)) << "RE2's literals are lower case; the filter folds case";
  EXPECT_TRUE(may("(request 42 |bravo 9 done)", with));
  EXPECT_FALSE(may("(request 42 |bravo 9 done)", without));
  EXPECT_TRUE(may("(request 42 |alpha done)", without)) << "one branch may match";
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
  const std::vector<std::string> pieces = {"Error", "error", "ERROR", "disk", "FULL", "42", "_id", "x7", "caf\u00E9",
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
    TokenSet tokens;
    tokens.AddMessage(message);
    TokenBloomOptions o;
    o.max_bytes = 1 << 16;
    const auto filter = BuildTokenBloom(tokens.TakeDistinct(), o);
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
