// Text filters on a record's message, for queries (Query::text) and live
// tail: all must pass.
//
//   contains  the text is a substring of the message (byte for byte)
//   word      every token of the text (common/tokens.h) is a token of the
//             message, anywhere
//   phrase    the tokens of the text are consecutive tokens of the message
//             (whatever separates them: "connection refused" matches
//             "connection: refused" and "connection  refused")
//   regex     an RE2 pattern matches somewhere in the message (RE2 syntax:
//             no backreferences; linear time on any input)
// each with its negation (the record passes when the positive would not).
// Every filter is verified on the decompressed record: an index may only
// ever make a query faster, never change its answer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace logdex {

enum class TextFilterKind { kContains, kWord, kPhrase, kRegex };

struct TextFilter {
  TextFilterKind kind = TextFilterKind::kContains;
  bool negate = false;
  std::string text;

  bool operator==(const TextFilter&) const = default;
};

// The query API's parameter of a filter: contains, word, phrase, regex and
// not_contains, not_word, not_phrase, not_regex.
std::string TextFilterParam(const TextFilter& f);

// Filters compiled once (regexes, token lists) and checked per message.
class TextMatcher {
 public:
  TextMatcher() = default;
  static constexpr size_t kMaxFilters = 16;

  // Errors (kInvalidArgument, naming the parameter): an empty text, a word
  // or phrase without a token, a regex RE2 does not accept (or one over
  // 8 MiB compiled); more than kMaxFilters filters.
  static Result<TextMatcher> Compile(const std::vector<TextFilter>& filters);

  bool empty() const { return compiled_.empty(); }
  bool Matches(std::string_view message) const;

 private:
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> compiled_;
};

class TokenBloomView;

// What a token filter (common/token_bloom.h) can tell about a regex: RE2's
// prefilter (FilteredRE2: an AND/OR tree of literals any match holds,
// lower-cased) with each literal's whole tokens. A chunk whose filter lacks
// a token of every literal some branch needs cannot match.
class RegexTokenProbe {
 public:
  ~RegexTokenProbe();
  // Null when the pattern gives nothing to check (no literal with a whole
  // token), folds case ((?i)), holds a non-ASCII rune (RE2's prefilter
  // lower-cases literals by Unicode rules, where U+017F and U+212A become
  // ASCII letters), or does not compile.
  static std::unique_ptr<RegexTokenProbe> Make(const std::string& pattern);
  // False only when no message with the filter's tokens can match.
  bool MayMatch(const TokenBloomView& filter) const;

 private:
  RegexTokenProbe();
  struct State;
  std::unique_ptr<State> state_;
};

// What a chunk's token filter must hold for any of its records to pass a
// query's text filters (and `contains`): the indexed tokens (not short
// numbers: IsIndexedToken) of positive words and phrases, those a
// `contains` text holds whole, and each regex's literals
// (RegexTokenProbe); negations need nothing.
class TokenProbe {
 public:
  TokenProbe();
  TokenProbe(TokenProbe&&) noexcept;
  TokenProbe& operator=(TokenProbe&&) noexcept;
  ~TokenProbe();
  static TokenProbe For(const std::vector<TextFilter>& filters, std::string_view contains = {});
  // Nothing to check: every chunk may match.
  bool empty() const { return tokens_.empty() && regexes_.empty(); }
  // False only when no record of a chunk with this filter can pass.
  bool MayMatch(const TokenBloomView& filter) const;

 private:
  std::vector<uint64_t> tokens_;  // sorted, distinct
  std::vector<std::unique_ptr<RegexTokenProbe>> regexes_;
};

}  // namespace logdex
