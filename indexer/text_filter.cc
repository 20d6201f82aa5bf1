#include "indexer/text_filter.h"

#include <re2/filtered_re2.h>
#include <re2/re2.h>

#include <algorithm>

#include "common/token_bloom.h"
#include "common/tokens.h"

namespace logdex {

struct TextMatcher::Compiled {
  TextFilter filter;
  std::vector<std::string> tokens;  // word, phrase
  std::unique_ptr<RE2> re;          // regex
};

namespace {

// Where `token` (a whole token: token bytes only) first occurs at or after
// `from` as a token of the message, or npos. Found by substring search,
// then checked for a token edge on each side: a run of token bytes bounded
// by separators is exactly one of the message's tokens, so the message need
// not be cut into tokens (the filters are checked on every record a query
// reads, and the search is the library's vectorized one).
// An occurrence inside a longer token resumes the search past that token's
// end (the next token starts there), so a message is read about once
// whatever it repeats ("aaaa...", searched for "aaa", is not quadratic).
size_t FindToken(std::string_view message, std::string_view token, size_t from) {
  const auto token_byte = [&](size_t i) { return IsTokenByte(static_cast<unsigned char>(message[i])); };
  for (size_t at = message.find(token, from); at != std::string_view::npos;) {
    size_t end = at + token.size();
    if ((at == 0 || !token_byte(at - 1)) && (end == message.size() || !token_byte(end))) return at;
    while (end < message.size() && token_byte(end)) ++end;
    at = message.find(token, end);
  }
  return std::string_view::npos;
}

bool HasWords(std::string_view message, const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    if (FindToken(message, w, 0) == std::string_view::npos) return false;
  }
  return true;
}

bool HasPhrase(std::string_view message, const std::vector<std::string>& phrase) {
  // At each place the first token occurs, the next tokens of the message
  // against the rest of the phrase.
  for (size_t at = FindToken(message, phrase.front(), 0); at != std::string_view::npos;
       at = FindToken(message, phrase.front(), at + 1)) {
    size_t k = 1;
    ForEachToken(message.substr(at + phrase.front().size()), [&](std::string_view t) {
      if (k == phrase.size() || t != phrase[k]) return false;
      ++k;
      return true;
    });
    if (k == phrase.size()) return true;
  }
  return false;
}

}  // namespace

std::string TextFilterParam(const TextFilter& f) {
  const char* name = "contains";
  switch (f.kind) {
    case TextFilterKind::kContains: name = "contains"; break;
    case TextFilterKind::kWord: name = "word"; break;
    case TextFilterKind::kPhrase: name = "phrase"; break;
    case TextFilterKind::kRegex: name = "regex"; break;
  }
  return (f.negate ? "not_" : "") + std::string(name);
}

Result<TextMatcher> TextMatcher::Compile(const std::vector<TextFilter>& filters) {
  if (filters.size() > kMaxFilters) {
    return Error{Errc::kInvalidArgument, "text filters: " + std::to_string(filters.size()) + " given, at most " +
                                             std::to_string(kMaxFilters) + " in one query"};
  }
  TextMatcher m;
  for (const TextFilter& f : filters) {
    const std::string param = TextFilterParam(f);
    if (f.text.empty()) return Error{Errc::kInvalidArgument, param + ": empty; leave it out to match any"};
    auto c = std::make_shared<Compiled>();
    c->filter = f;
    switch (f.kind) {
      case TextFilterKind::kContains:
        break;
      case TextFilterKind::kWord:
      case TextFilterKind::kPhrase:
        ForEachToken(f.text, [&](std::string_view t) {
          c->tokens.emplace_back(t);
          return true;
        });
        if (c->tokens.empty()) {
          return Error{Errc::kInvalidArgument, param + ": '" + f.text +
                                                   "' has no token (a token is a run of letters, digits, '_' or "
                                                   "non-ASCII bytes)"};
        }
        break;
      case TextFilterKind::kRegex: {
        RE2::Options o;
        o.set_log_errors(false);
        o.set_max_mem(8 << 20);
        c->re = std::make_unique<RE2>(f.text, o);
        if (!c->re->ok()) {
          return Error{Errc::kInvalidArgument, param + ": '" + f.text + "' is not an RE2 regular expression: " +
                                                   c->re->error()};
        }
        break;
      }
    }
    m.compiled_.push_back(std::move(c));
  }
  return m;
}

bool TextMatcher::Matches(std::string_view message) const {
  for (const auto& c : compiled_) {
    bool hit = false;
    switch (c->filter.kind) {
      case TextFilterKind::kContains: hit = message.find(c->filter.text) != std::string_view::npos; break;
      case TextFilterKind::kWord: hit = HasWords(message, c->tokens); break;
      case TextFilterKind::kPhrase: hit = HasPhrase(message, c->tokens); break;
      case TextFilterKind::kRegex: hit = RE2::PartialMatch(message, *c->re); break;
    }
    if (hit == c->filter.negate) return false;
  }
  return true;
}

struct RegexTokenProbe::State {
  re2::FilteredRE2 prefilter{3};  // literals shorter than 3 bytes are not worth a check
  // Per literal (FilteredRE2's atom index): its whole tokens' hashes; empty
  // when it has none, or bytes >= 0x80 (RE2 lower-cases those by Unicode
  // rules, the token hash by ASCII ones): such a literal may always be there.
  std::vector<std::vector<uint64_t>> atom_tokens;
};

RegexTokenProbe::RegexTokenProbe() : state_(std::make_unique<State>()) {}
RegexTokenProbe::~RegexTokenProbe() = default;

namespace {

// Whether the pattern may make RE2's prefilter give a literal whose bytes
// are not the message's up to ASCII case: case folding ((?i) or (?i:...)),
// where non-ASCII runes match ASCII letters (U+212A KELVIN SIGN matches
// 'k'); and any non-ASCII rune, written or as \x{...}, because the
// prefilter lower-cases literals by Unicode rules even without (?i)
// (U+017F LATIN SMALL LETTER LONG S becomes 's').
bool MayFoldToAscii(const std::string& pattern) {
  if (pattern.find("\\x{") != std::string::npos) return true;
  if (std::any_of(pattern.begin(), pattern.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    return true;
  }
  for (size_t at = pattern.find("(?"); at != std::string::npos; at = pattern.find("(?", at + 2)) {
    for (size_t i = at + 2; i < pattern.size() && pattern[i] != ')' && pattern[i] != ':'; ++i) {
      if (pattern[i] == 'i') return true;
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<RegexTokenProbe> RegexTokenProbe::Make(const std::string& pattern) {
  if (MayFoldToAscii(pattern)) return nullptr;
  std::unique_ptr<RegexTokenProbe> probe(new RegexTokenProbe());
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(8 << 20);
  int id = 0;
  if (probe->state_->prefilter.Add(pattern, o, &id) != RE2::NoError) return nullptr;
  std::vector<std::string> atoms;
  probe->state_->prefilter.Compile(&atoms);
  bool useful = false;
  for (const std::string& atom : atoms) {
    std::vector<uint64_t> hashes;
    const bool ascii = std::all_of(atom.begin(), atom.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (ascii) ContainedTokenHashes(atom, hashes);
    useful = useful || !hashes.empty();
    probe->state_->atom_tokens.push_back(std::move(hashes));
  }
  if (!useful) return nullptr;
  return probe;
}

bool RegexTokenProbe::MayMatch(const TokenBloomView& filter) const {
  std::vector<int> present;
  for (size_t i = 0; i < state_->atom_tokens.size(); ++i) {
    const auto& tokens = state_->atom_tokens[i];
    if (std::all_of(tokens.begin(), tokens.end(), [&](uint64_t h) { return filter.MayContain(h); })) {
      present.push_back(static_cast<int>(i));
    }
  }
  std::vector<int> regexps;
  state_->prefilter.AllPotentials(present, &regexps);
  return !regexps.empty();
}

TokenProbe::TokenProbe() = default;
TokenProbe::TokenProbe(TokenProbe&&) noexcept = default;
TokenProbe& TokenProbe::operator=(TokenProbe&&) noexcept = default;
TokenProbe::~TokenProbe() = default;

TokenProbe TokenProbe::For(const std::vector<TextFilter>& filters, std::string_view contains) {
  TokenProbe p;
  ContainedTokenHashes(contains, p.tokens_);
  for (const TextFilter& f : filters) {
    if (f.negate) continue;
    switch (f.kind) {
      case TextFilterKind::kContains: ContainedTokenHashes(f.text, p.tokens_); break;
      case TextFilterKind::kWord:
      case TextFilterKind::kPhrase:
        ForEachToken(f.text, [&](std::string_view t) {
          if (IsIndexedToken(t)) p.tokens_.push_back(TokenHash(t));
          return true;
        });
        break;
      case TextFilterKind::kRegex:
        if (auto probe = RegexTokenProbe::Make(f.text)) p.regexes_.push_back(std::move(probe));
        break;
    }
  }
  std::sort(p.tokens_.begin(), p.tokens_.end());
  p.tokens_.erase(std::unique(p.tokens_.begin(), p.tokens_.end()), p.tokens_.end());
  return p;
}

bool TokenProbe::MayMatch(const TokenBloomView& filter) const {
  return std::all_of(tokens_.begin(), tokens_.end(), [&](uint64_t h) { return filter.MayContain(h); }) &&
         std::all_of(regexes_.begin(), regexes_.end(), [&](const auto& r) { return r->MayMatch(filter); });
}

}  // namespace logdex
