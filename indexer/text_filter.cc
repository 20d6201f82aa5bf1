#include "indexer/text_filter.h"

#include <re2/re2.h>

#include <algorithm>

#include "common/tokens.h"

namespace logdex {

struct TextMatcher::Compiled {
  TextFilter filter;
  std::vector<std::string> tokens;  // word, phrase
  std::unique_ptr<RE2> re;          // regex
};

namespace {

bool HasWords(std::string_view message, const std::vector<std::string>& words) {
  // Few words per filter: one pass over the message per word is cheaper than
  // a set of the message's tokens.
  for (const std::string& w : words) {
    const bool found = !ForEachToken(message, [&](std::string_view t) { return t != w; });
    if (!found) return false;
  }
  return true;
}

bool HasPhrase(std::string_view message, const std::vector<std::string>& phrase) {
  // The message's tokens against the phrase, restarting where a partial
  // match fails (a phrase is short: the naive restart is enough).
  std::vector<std::string_view> tokens;
  ForEachToken(message, [&](std::string_view t) {
    tokens.push_back(t);
    return true;
  });
  if (tokens.size() < phrase.size()) return false;
  for (size_t i = 0; i + phrase.size() <= tokens.size(); ++i) {
    if (std::equal(phrase.begin(), phrase.end(), tokens.begin() + static_cast<std::ptrdiff_t>(i))) return true;
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

}  // namespace logdex
