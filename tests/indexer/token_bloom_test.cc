// The token filter (common/token_bloom.h) and what queries probe it with:
// no false negatives whatever the size, a false-positive rate near the
// theory's, the byte cap, the hash of a token the same whether taken from a
// message or alone, the tokens a substring holds whole, and RE2's literals
// (indexer/text_filter.h, RegexTokenProbe).
#include "common/token_bloom.h"

#include <gtest/gtest.h>

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

// The hash is part of the stored format (common/token_bloom.h): a change
// must come with a new version byte, or old filters would rule chunks out.
TEST(TokenBloom, TheTokenHashIsPinnedByTheFormat) {
  EXPECT_EQ(TokenHash("error"), 0x7fb1d73207abc5c2ull);
  EXPECT_EQ(TokenHash("zqx7rare42_and_more"), 0x9cc3735ceae79cf4ull);
  const std::string filter = Filter(Hashes({"error"}));
  EXPECT_EQ(static_cast<uint8_t>(filter[0]), 1u) << "the version byte";
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

TEST(TokenBloom, KeepsWithinItsByteCapOrIsNotBuilt) {
  std::vector<uint64_t> in(1'000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = TokenHash("t" + std::to_string(i));
  TokenBloomOptions o;
  o.max_bytes = 502;  // 500 bytes of bits: 4 per token
  auto f = BuildTokenBloom(in, o);
  ASSERT_TRUE(f.has_value());
  EXPECT_LE(f->size(), 502u);
  EXPECT_EQ(TokenBloomView(*f).bits(), 4'000u);
  o.max_bytes = 200;  // 1.6 bits per token: below the minimum of 2
  EXPECT_FALSE(BuildTokenBloom(in, o).has_value());
  o.max_bytes = 1 << 20;  // uncapped: 10 bits per token
  EXPECT_EQ(BuildTokenBloom(in, o)->size(), 2u + 1'250u);
  EXPECT_TRUE(BuildTokenBloom({}, o).has_value()) << "a chunk without tokens: a filter that rules out every word";
  EXPECT_FALSE(TokenBloomView(*BuildTokenBloom({}, o)).MayContain(TokenHash("x")));
}

TEST(TokenBloom, AValueOfAnotherVersionOrShapeMayHoldAnything) {
  for (std::string bad : {std::string(), std::string("\x01"), std::string("\x02\x03xxxx"), std::string("\x01\x00xxxx", 6),
                          std::string("\x01\x11xxxx")}) {
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
