#include "http/logql.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "common/time_parse.h"

namespace logdex::logql {

std::string_view MatchOpName(MatchOp op) {
  switch (op) {
    case MatchOp::kEq: return "=";
    case MatchOp::kNeq: return "!=";
    case MatchOp::kRe: return "=~";
    case MatchOp::kNre: return "!~";
  }
  return "?";
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Expr> Top() {
    Skip();
    Result<Expr> e = ParseExpr();
    if (!e.ok()) return e;
    Skip();
    if (i_ != s_.size()) return Fail("unexpected '" + std::string(s_.substr(i_, 20)) + "' after the query");
    return e;
  }

 private:
  Error Fail(const std::string& what) const {
    return Error{Errc::kInvalidArgument, "parse error at column " + std::to_string(i_ + 1) + ": " + what};
  }

  void Skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool At(std::string_view t) const { return s_.substr(i_, t.size()) == t; }
  bool Eat(std::string_view t) {
    Skip();
    if (!At(t)) return false;
    i_ += t.size();
    return true;
  }
  std::string_view PeekIdent() {
    Skip();
    size_t j = i_;
    if (j < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) {
      ++j;
      while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) ++j;
    }
    return s_.substr(i_, j - i_);
  }
  std::optional<std::string> Ident() {
    std::string_view id = PeekIdent();
    if (id.empty()) return std::nullopt;
    i_ += id.size();
    return std::string(id);
  }

  // "..." with Go's escapes, or `raw`.
  Result<std::string> String() {
    Skip();
    if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '`')) return Fail("expected a quoted string");
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      char c = s_[i_++];
      if (c == '\\' && quote == '"') {
        if (i_ >= s_.size()) break;
        const char e = s_[i_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '\'': out += '\''; break;
          default: return Fail(std::string("unsupported escape \\") + e + " in a string");
        }
        continue;
      }
      out += c;
    }
    if (i_ >= s_.size()) return Fail("unterminated string");
    ++i_;  // the closing quote
    return out;
  }

  Result<Expr> ParseExpr() {
    Skip();
    if (At("{")) {
      auto log = ParseLog();
      if (!log.ok()) return log.error();
      return Expr(std::move(*log));
    }
    const std::string_view id = PeekIdent();
    if (id == "sum") return ParseSum();
    if (id == "count_over_time" || id == "rate") {
      auto m = ParseRange();
      if (!m.ok()) return m.error();
      return Expr(std::move(*m));
    }
    if (id == "vector" || id.empty()) {
      auto v = ParseSum0();
      if (!v.ok()) return v.error();
      return Expr(ScalarQuery{*v});
    }
    return Fail("'" + std::string(id) +
                "' is not supported (logdex takes a stream selector {...} with line filters, count_over_time, "
                "rate, sum and sum by, and vector())");
  }

  // Scalar arithmetic: sum0 = term (+|- term)*, term = factor (*|/ factor)*.
  Result<double> ParseSum0() {
    auto a = ParseTerm();
    if (!a.ok()) return a;
    double v = *a;
    for (;;) {
      if (Eat("+")) {
        auto b = ParseTerm();
        if (!b.ok()) return b;
        v += *b;
      } else if (Eat("-")) {
        auto b = ParseTerm();
        if (!b.ok()) return b;
        v -= *b;
      } else {
        return v;
      }
    }
  }
  Result<double> ParseTerm() {
    auto a = ParseFactor();
    if (!a.ok()) return a;
    double v = *a;
    for (;;) {
      if (Eat("*")) {
        auto b = ParseFactor();
        if (!b.ok()) return b;
        v *= *b;
      } else if (Eat("/")) {
        auto b = ParseFactor();
        if (!b.ok()) return b;
        v /= *b;
      } else {
        return v;
      }
    }
  }
  Result<double> ParseFactor() {
    Skip();
    // Parentheses and vector() recurse: bounded, so a hostile query cannot
    // overflow the stack of the thread that parses it.
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(++depth) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth) return Fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (Eat("(")) {
      auto v = ParseSum0();
      if (!v.ok()) return v;
      if (!Eat(")")) return Fail("expected ')'");
      return v;
    }
    if (PeekIdent() == "vector") {
      Ident();
      if (!Eat("(")) return Fail("expected '(' after vector");
      auto v = ParseSum0();
      if (!v.ok()) return v;
      if (!Eat(")")) return Fail("expected ')' after vector's argument");
      return v;
    }
    Skip();
    const bool negative = Eat("-");
    Skip();
    double v = 0;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec != std::errc() || p == s_.data() + i_) return Fail("expected a number, vector(...) or a selector {...}");
    i_ = static_cast<size_t>(p - s_.data());
    return negative ? -v : v;
  }

  // sum [by (l, ...)] ( range ) [by (l, ...)]
  Result<Expr> ParseSum() {
    Ident();  // sum
    MetricQuery m;
    bool by_given = false;
    auto by = [&]() -> Status {
      if (!Eat("(")) return Status(Fail("expected '(' after by"));
      for (;;) {
        auto l = Ident();
        if (!l) return Status(Fail("expected a label name in by (...)"));
        m.by.push_back(*l);
        if (Eat(")")) return Status::Ok();
        if (!Eat(",")) return Status(Fail("expected ',' or ')' in by (...)"));
      }
    };
    if (PeekIdent() == "by") {
      Ident();
      if (Status s = by(); !s.ok()) return s.error();
      by_given = true;
    } else if (PeekIdent() == "without") {
      return Fail("sum without (...) is not supported (sum by (...) is)");
    }
    if (!Eat("(")) return Fail("expected '(' after sum");
    const std::string_view inner = PeekIdent();
    if (inner != "count_over_time" && inner != "rate") {
      return Fail("sum takes count_over_time(...) or rate(...) here");
    }
    auto range = ParseRange();
    if (!range.ok()) return range.error();
    if (!Eat(")")) return Fail("expected ')' to close sum(");
    if (PeekIdent() == "by") {
      if (by_given) return Fail("by given twice");
      Ident();
      if (Status s = by(); !s.ok()) return s.error();
    }
    range->sum = true;
    range->by = std::move(m.by);
    return Expr(std::move(*range));
  }

  // count_over_time(LOG [range]) or rate(LOG [range])
  Result<MetricQuery> ParseRange() {
    MetricQuery m;
    const std::string fn = *Ident();
    m.func = fn == "rate" ? RangeFunc::kRate : RangeFunc::kCountOverTime;
    if (!Eat("(")) return Fail("expected '(' after " + fn);
    Skip();
    if (!At("{")) return Fail(fn + " takes a log query with a range: " + fn + "({app=\"x\"}[5m])");
    auto log = ParseLog();
    if (!log.ok()) return log.error();
    m.log = std::move(*log);
    if (!Eat("[")) return Fail("expected a range [5m] after the log query in " + fn);
    Skip();
    const size_t close = s_.find(']', i_);
    if (close == std::string_view::npos) return Fail("expected ']'");
    auto range = ParseDuration(s_.substr(i_, close - i_));
    if (!range.ok()) return Fail(range.error().message);
    m.range_ms = *range;
    i_ = close + 1;
    Skip();
    if (At("offset")) return Fail("offset is not supported");
    if (!Eat(")")) return Fail("expected ')' to close " + fn + "(");
    return m;
  }

  Result<LogQuery> ParseLog() {
    LogQuery q;
    if (!Eat("{")) return Fail("expected '{'");
    if (!Eat("}")) {
      for (;;) {
        auto label = Ident();
        if (!label) return Fail("expected a label name");
        Matcher m;
        m.label = *label;
        Skip();
        if (Eat("=~")) m.op = MatchOp::kRe;
        else if (Eat("!~")) m.op = MatchOp::kNre;
        else if (Eat("!=")) m.op = MatchOp::kNeq;
        else if (Eat("=")) m.op = MatchOp::kEq;
        else return Fail("expected =, !=, =~ or !~ after " + m.label);
        auto v = String();
        if (!v.ok()) return v.error();
        m.value = std::move(*v);
        q.matchers.push_back(std::move(m));
        if (Eat("}")) break;
        if (!Eat(",")) return Fail("expected ',' or '}'");
        if (Eat("}")) break;  // a trailing comma
      }
    }
    if (q.matchers.empty()) return Fail("a stream selector needs at least one matcher, like {app=\"x\"}");
    // Stages.
    for (;;) {
      Skip();
      LineFilter f;
      if (Eat("|=")) f.op = FilterOp::kContains;
      else if (Eat("!=")) f.op = FilterOp::kNotContains;
      else if (Eat("|~")) f.op = FilterOp::kRegex;
      else if (Eat("!~")) f.op = FilterOp::kNotRegex;
      else if (Eat("|")) {
        const std::string_view stage = PeekIdent();
        if (stage == "drop") {
          Ident();
          // drop a, b="v", ...: nothing of logdex's makes such labels.
          for (;;) {
            if (!Ident()) return Fail("expected a label name after drop");
            Skip();
            if (Eat("=")) {
              auto v = String();
              if (!v.ok()) return v.error();
            }
            if (!Eat(",")) break;
          }
          continue;
        }
        return Fail("the pipeline stage '| " + std::string(stage.empty() ? s_.substr(i_, 10) : stage) +
                    "' is not supported (logdex takes the line filters |=, !=, |~, !~ and | drop)");
      } else {
        return q;
      }
      auto text = String();
      if (!text.ok()) return text.error();
      f.text = std::move(*text);
      q.filters.push_back(std::move(f));
    }
  }

  static constexpr int kMaxDepth = 32;
  std::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Expr> Parse(std::string_view text) { return Parser(text).Top(); }

}  // namespace logdex::logql
