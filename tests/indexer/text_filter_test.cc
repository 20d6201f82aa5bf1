// The token rule (common/tokens.h) and the text filters
// (indexer/text_filter.h) on the cases their definitions name: what
// separates tokens, case, UTF-8, phrases across punctuation, RE2 syntax,
// negation, and the errors a bad filter gets.
#include "indexer/text_filter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/tokens.h"

namespace logdex {
namespace {

std::vector<std::string> Tokens(std::string_view text) {
  std::vector<std::string> out;
  ForEachToken(text, [&](std::string_view t) {
    out.emplace_back(t);
    return true;
  });
  return out;
}

bool Passes(TextFilterKind kind, const std::string& text, std::string_view message, bool negate = false) {
  auto m = TextMatcher::Compile({TextFilter{kind, negate, text}});
  EXPECT_TRUE(m.ok()) << text;
  return m.ok() && m->Matches(message);
}

TEST(Tokens, AreRunsOfLettersDigitsUnderscoresAndNonAsciiBytes) {
  EXPECT_EQ(Tokens("2026-11-29 10:00:01,123 ERROR [main] o.a.Foo: user_id=42 failed (timeout)"),
            (std::vector<std::string>{"2026", "11", "29", "10", "00", "01", "123", "ERROR", "main", "o", "a", "Foo",
                                      "user_id", "42", "failed", "timeout"}));
  EXPECT_EQ(Tokens("blk_-1608999687919862906"), (std::vector<std::string>{"blk_", "1608999687919862906"}));
  EXPECT_EQ(Tokens("Größe überschritten: Ω"), (std::vector<std::string>{"Größe", "überschritten", "Ω"}));
  EXPECT_TRUE(Tokens("").empty());
  EXPECT_TRUE(Tokens(" -- :: ").empty());
}

TEST(TextFilters, WordsAreWholeTokensCaseSensitiveInAnyOrder) {
  const std::string m = "ERROR Connection refused by db-7 (retry 3)";
  EXPECT_TRUE(Passes(TextFilterKind::kWord, "refused", m));
  EXPECT_TRUE(Passes(TextFilterKind::kWord, "db 7", m));          // both tokens, anywhere
  EXPECT_TRUE(Passes(TextFilterKind::kWord, "retry ERROR", m));   // any order
  EXPECT_FALSE(Passes(TextFilterKind::kWord, "refuse", m));       // a prefix is not the word
  EXPECT_FALSE(Passes(TextFilterKind::kWord, "error", m));        // case matters
  EXPECT_FALSE(Passes(TextFilterKind::kWord, "refused nowhere", m));
  EXPECT_TRUE(Passes(TextFilterKind::kWord, "refuse", m, true));  // negated
}

TEST(TextFilters, PhrasesAreConsecutiveTokensWhateverSeparatesThem) {
  const std::string m = "user=alice action: login-failed; reason=bad password";
  EXPECT_TRUE(Passes(TextFilterKind::kPhrase, "login failed", m));
  EXPECT_TRUE(Passes(TextFilterKind::kPhrase, "action login", m));
  EXPECT_TRUE(Passes(TextFilterKind::kPhrase, "failed reason bad", m));
  EXPECT_FALSE(Passes(TextFilterKind::kPhrase, "failed login", m));  // order
  EXPECT_FALSE(Passes(TextFilterKind::kPhrase, "alice login", m));   // "action" between
  EXPECT_FALSE(Passes(TextFilterKind::kPhrase, "bad password now", m));
  EXPECT_TRUE(Passes(TextFilterKind::kPhrase, "a a b", "a a a b"));  // a partial match restarts
}

// The word and phrase filters against their definitions, written the plain
// way (cut the message into tokens, compare), on random messages over an
// alphabet dense in token edges: letters of both cases, digits, '_', bytes
// >= 0x80, separators; words and phrases taken from the message, cut from
// its tokens, or random.
TEST(TextFilters, WordsAndPhrasesMatchTheirDefinitionOnRandomMessages) {
  const std::string alphabet = std::string("aAbB_0 .-=:\t") + "\xc3\xa9\x80";
  std::mt19937 rng(5);
  auto random_text = [&](size_t max) {
    std::string t;
    for (size_t i = 0, n = rng() % (max + 1); i < n; ++i) t += alphabet[rng() % alphabet.size()];
    return t;
  };
  auto words_of = [](const std::vector<std::string>& message_tokens, const std::vector<std::string>& want) {
    for (const std::string& w : want) {
      if (std::find(message_tokens.begin(), message_tokens.end(), w) == message_tokens.end()) return false;
    }
    return true;
  };
  auto phrase_of = [](const std::vector<std::string>& message_tokens, const std::vector<std::string>& want) {
    if (want.size() > message_tokens.size()) return false;
    for (size_t i = 0; i + want.size() <= message_tokens.size(); ++i) {
      if (std::equal(want.begin(), want.end(), message_tokens.begin() + static_cast<std::ptrdiff_t>(i))) return true;
    }
    return false;
  };
  int word_hits = 0, phrase_hits = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string message = random_text(40);
    const std::vector<std::string> tokens = Tokens(message);
    std::string text;
    if (!tokens.empty() && rng() % 3 != 0) {  // from the message: a run of its tokens, maybe cut short
      const size_t from = rng() % tokens.size();
      const size_t count = 1 + rng() % std::min<size_t>(3, tokens.size() - from);
      for (size_t k = 0; k < count; ++k) text += (k ? " " : "") + tokens[from + k];
      if (rng() % 4 == 0) text.pop_back();
    } else {
      text = random_text(8);
    }
    const std::vector<std::string> want = Tokens(text);
    if (want.empty()) continue;  // refused by Compile: checked elsewhere
    const bool word = words_of(tokens, want), phrase = phrase_of(tokens, want);
    word_hits += word;
    phrase_hits += phrase;
    ASSERT_EQ(Passes(TextFilterKind::kWord, text, message), word) << "word [" << text << "] in [" << message << "]";
    ASSERT_EQ(Passes(TextFilterKind::kPhrase, text, message), phrase) << "phrase [" << text << "] in [" << message << "]";
  }
  EXPECT_GT(word_hits, 2000);  // both verdicts are well represented
  EXPECT_GT(phrase_hits, 2000);
}

TEST(TextFilters, RegexesAreRe2AndContainsIsASubstring) {
  const std::string m = "GET /api/v1/users/1234 200 17ms";
  EXPECT_TRUE(Passes(TextFilterKind::kRegex, R"(/users/\d+ [45]\d\d|200)", m));
  EXPECT_TRUE(Passes(TextFilterKind::kRegex, R"(^GET )", m));
  EXPECT_FALSE(Passes(TextFilterKind::kRegex, R"(^200)", m));
  EXPECT_TRUE(Passes(TextFilterKind::kContains, "users/12", m));
  EXPECT_TRUE(Passes(TextFilterKind::kContains, "POST", m, true));
  // All filters must pass.
  auto both = TextMatcher::Compile({{TextFilterKind::kWord, false, "GET"}, {TextFilterKind::kRegex, true, "5\\d\\d"}});
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE(both->Matches(m));
  EXPECT_FALSE(both->Matches("GET / 503 1ms"));
  EXPECT_TRUE(TextMatcher().Matches("anything"));
}

TEST(TextFilters, ABadFilterIsAnErrorNamingItsParameter) {
  struct Case {
    TextFilter f;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{TextFilterKind::kWord, false, ""}, "word: empty"},
           {{TextFilterKind::kPhrase, true, " -- "}, "not_phrase: ' -- ' has no token"},
           {{TextFilterKind::kRegex, false, "a(b"}, "regex: 'a(b' is not an RE2 regular expression: missing )"},
           {{TextFilterKind::kRegex, false, R"((a)\1)"}, "regex: '(a)\\1' is not an RE2 regular expression"},
           {{TextFilterKind::kContains, true, ""}, "not_contains: empty"},
       }) {
    auto m = TextMatcher::Compile({c.f});
    ASSERT_FALSE(m.ok()) << c.f.text;
    EXPECT_EQ(m.error().code, Errc::kInvalidArgument);
    EXPECT_EQ(m.error().message.rfind(c.says, 0), 0u) << m.error().message;
  }
}

}  // namespace
}  // namespace logdex
