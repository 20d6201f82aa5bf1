#include "parse/parsers.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <deque>
#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <utf8cpp/utf8.h>

#include "common/ascii.h"
#include "parse/timestamp.h"

namespace logdex::parse {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

size_t SkipSpaces(std::string_view s, size_t p) {
  while (p < s.size() && IsSpace(s[p])) ++p;
  return p;
}

size_t TokenEnd(std::string_view s, size_t p) {
  while (p < s.size() && !IsSpace(s[p])) ++p;
  return p;
}

// A level word inside a token: strips [], (), <>, and a trailing ':' or ','.
std::optional<Severity> LevelToken(std::string_view tok) {
  while (!tok.empty() && (tok.back() == ':' || tok.back() == ',' || tok.back() == ']' || tok.back() == ')' ||
                          tok.back() == '>')) {
    tok.remove_suffix(1);
  }
  while (!tok.empty() && (tok.front() == '[' || tok.front() == '(' || tok.front() == '<')) tok.remove_prefix(1);
  if (tok.size() < 3 || tok.size() > 11) return std::nullopt;  // single letters are too ambiguous here
  return LevelWord(tok);
}

// Whether a JSON text nests arrays/objects deeper than `limit`: one pass,
// brackets inside strings skipped. It runs before the parser so that a line
// built to exhaust the stack is refused in linear time and constant memory.
bool JsonNestingExceeds(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '{':
      case '[':
        if (++depth > limit) return true;
        break;
      case '}':
      case ']': --depth; break;
      default: break;
    }
  }
  return false;
}

// `s` with every invalid UTF-8 sequence replaced by U+FFFD, into `out`.
void ReplaceInvalidUtf8(std::string_view s, std::string* out) {
  out->clear();
  out->reserve(s.size() + 16);
  utf8::replace_invalid(s.begin(), s.end(), std::back_inserter(*out));
}

enum class Field { kOther, kLevel, kTime, kMessage, kHost, kApp };

Field ClassifyField(std::string_view k) {
  static constexpr std::pair<std::string_view, Field> kNames[] = {
      {"level", Field::kLevel},     {"severity", Field::kLevel},     {"lvl", Field::kLevel},
      {"loglevel", Field::kLevel},  {"log.level", Field::kLevel},    {"levelname", Field::kLevel},
      {"time", Field::kTime},       {"ts", Field::kTime},            {"@timestamp", Field::kTime},
      {"timestamp", Field::kTime},  {"t", Field::kTime},             {"msg", Field::kMessage},
      {"message", Field::kMessage}, {"@message", Field::kMessage},   {"host", Field::kHost},
      {"hostname", Field::kHost},   {"app", Field::kApp},            {"service", Field::kApp},
      {"application", Field::kApp},
  };
  // Most keys of a log object are none of these: reject on the length and
  // the first letter (both taken from the table; its names are lowercase).
  static constexpr size_t kLongest = [] {
    size_t n = 0;
    for (const auto& [name, f] : kNames) n = std::max(n, name.size());
    return n;
  }();
  static constexpr std::array<bool, 256> kFirst = [] {
    std::array<bool, 256> a{};
    for (const auto& [name, f] : kNames) a[static_cast<unsigned char>(name[0])] = true;
    return a;
  }();
  static_assert(
      [] {
        for (const auto& [name, f] : kNames) {
          for (char c : name) {
            if (c >= 'A' && c <= 'Z') return false;
          }
        }
        return true;
      }(),
      "ClassifyField's names are lowercase");
  if (k.empty() || k.size() > kLongest) return Field::kOther;
  const char first = AsciiLower(k[0]);
  if (!kFirst[static_cast<unsigned char>(first)]) return Field::kOther;
  for (const auto& [name, f] : kNames) {
    if (name.size() == k.size() && name[0] == first && EqualsNoCase(k, name)) return f;
  }
  return Field::kOther;
}

// A level given as a number: logdex/pino/bunyan codes 10..60, or syslog 0..7.
std::optional<Severity> NumericLevel(std::string_view v) {
  if (v.empty() || v.size() > 2) return std::nullopt;
  int n = 0;
  for (char c : v) {
    if (!IsDigit(c)) return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n <= 7) return SeverityFromSyslog(n);
  return SeverityFromCode(static_cast<uint32_t>(n));
}

}  // namespace

std::string_view FormatName(Format f) {
  switch (f) {
    case Format::kAuto: return "auto";
    case Format::kLog4j: return "log4j";
    case Format::kSyslog: return "syslog";
    case Format::kJson: return "json";
    case Format::kLogfmt: return "logfmt";
    case Format::kApache: return "apache";
    case Format::kLogcat: return "logcat";
    case Format::kRegex: return "regex";
  }
  return "unknown";
}

std::optional<Format> ParseFormatName(std::string_view name) {
  for (Format f : {Format::kAuto, Format::kLog4j, Format::kSyslog, Format::kJson, Format::kLogfmt, Format::kApache,
                   Format::kLogcat, Format::kRegex}) {
    if (name == FormatName(f)) return f;
  }
  return std::nullopt;
}

std::string_view SanitizeTagKey(std::string_view key, std::string* buffer) {
  if (key.empty()) return "_";
  if (key.find('=') == std::string_view::npos) return key;
  buffer->assign(key);
  for (char& c : *buffer) {
    if (c == '=') c = '_';
  }
  return *buffer;
}

std::optional<Severity> LevelWord(std::string_view w) {
  if (w.empty()) return std::nullopt;
  // Quick reject on the first letter: the spellings start with one of these.
  switch (AsciiLower(w[0])) {
    case 't': case 'v': case 'f': case 'd': case 'i': case 'n': case 'w':
    case 'e': case 's': case 'c': case 'a': case 'p': case '0': case '1':
    case '2': case '3': case '4': case '5': case '6': case '7':
      break;
    default:
      return std::nullopt;
  }
  if (auto s = ParseSeverity(w)) return s;
  // Apache's trace1..trace8.
  if (w.size() == 6 && EqualsNoCase(w.substr(0, 5), "trace") && w[5] >= '1' && w[5] <= '8') return Severity::kTrace;
  return std::nullopt;
}

struct LineParser::Impl {
  ParserOptions options;
  const Clock* clock = nullptr;
  TimeZone zone;
  std::optional<TimeFormat> time_format;
  std::unique_ptr<RE2> regex;
  // regex group index -> role
  struct Group {
    int index;
    Field field;
    std::string name;  // sanitized tag key for kOther
  };
  std::vector<Group> groups;
  std::vector<re2::StringPiece> submatch;

  Format chosen = Format::kAuto;  // auto: this input's format, once chosen
  int64_t last_ts_ms = 0;
  bool have_last_ts = false;
  std::optional<int64_t> fallback_ts_ms;  // StartInput's; else the clock

  // Buffers that ParsedLine views may point into; reused across lines.
  // (deques: growing one never moves the strings that views point into)
  std::deque<std::string> values;  // unescaped JSON/logfmt strings
  std::deque<std::string> keys;    // sanitized keys
  size_t values_used = 0, keys_used = 0;
  std::string repaired;    // a JSON line with its invalid UTF-8 replaced
  std::string json_error;  // why the last JSON line did not parse (ParsedLine::rejection)
  // Up to 3x kMaxJsonLineBytes: a line repaired to U+FFFD (3 bytes per bad byte).
  simdjson::dom::parser json_parser{3 * kMaxJsonLineBytes};
  bool json_ready = false;
  std::string json_padded;  // the line, then SIMDJSON_PADDING bytes

  TimeContext Ctx() const { return TimeContext{&zone, clock}; }

  std::string* NextValue() {
    if (values_used == values.size()) values.emplace_back();
    std::string* s = &values[values_used++];
    s->clear();
    return s;
  }
  std::string_view Key(std::string_view k) {
    if (!k.empty() && k.find('=') == std::string_view::npos) return k;
    if (keys_used == keys.size()) keys.emplace_back();
    return SanitizeTagKey(k, &keys[keys_used++]);
  }

  // A timestamp at the start of `s`: the user's format, else the common ones.
  std::optional<TimestampMatch> LeadingTs(std::string_view s) const {
    if (time_format) return time_format->Parse(s, Ctx());
    return ParseLeadingTimestamp(s, Ctx());
  }
  std::optional<int64_t> TsText(std::string_view s) const {
    if (time_format) {
      if (auto m = time_format->Parse(s, Ctx()); m && m->length == s.size()) return m->ts_ms;
      return std::nullopt;
    }
    return ParseTimestampText(s, Ctx());
  }

  void SetTs(ParsedLine* out, int64_t ts) {
    out->ts_ms = ts;
    out->has_ts = true;
  }
  void SetLevel(ParsedLine* out, Severity s) {
    out->severity = s;
    out->has_severity = true;
  }

  // ---- log4j and relatives -------------------------------------------
  bool ParseLog4j(std::string_view line, ParsedLine* out) {
    size_t after_ts = 0;
    if (auto m = LeadingTs(line)) {
      SetTs(out, m->ts_ms);
      after_ts = m->length;
    } else {
      // "LEVEL ts ..." or "prefix ts ..." (one token before the timestamp).
      size_t end = TokenEnd(line, 0);
      if (end == 0 || end >= line.size()) return false;
      size_t next = SkipSpaces(line, end);
      auto m2 = LeadingTs(line.substr(next));
      if (!m2) return false;
      SetTs(out, m2->ts_ms);
      after_ts = next + m2->length;
      if (auto lvl = LevelToken(line.substr(0, end))) SetLevel(out, *lvl);
    }
    if (!out->has_severity) {
      // The level is one of the next few tokens (pid, thread, "-" come first).
      size_t p = after_ts;
      for (int i = 0; i < 4 && p < line.size(); ++i) {
        p = SkipSpaces(line, p);
        size_t end = TokenEnd(line, p);
        if (end == p) break;
        if (auto lvl = LevelToken(line.substr(p, end - p))) {
          SetLevel(out, *lvl);
          break;
        }
        p = end;
      }
    }
    out->message = line;
    return true;
  }

  // ---- syslog ---------------------------------------------------------
  // <PRI> at the start: sets the severity, returns the bytes taken (0: none).
  size_t Pri(std::string_view line, ParsedLine* out) {
    if (line.size() < 3 || line[0] != '<') return 0;
    int pri = 0;
    size_t p = 1;
    while (p < line.size() && p <= 4 && IsDigit(line[p])) pri = pri * 10 + (line[p++] - '0');
    if (p == 1 || p >= line.size() || line[p] != '>' || pri > 191) return 0;
    SetLevel(out, *SeverityFromSyslog(pri & 7));
    return p + 1;
  }

  bool ParseSyslog(std::string_view line, ParsedLine* out) {
    size_t p = Pri(line, out);
    if (p > 0 && p + 1 < line.size() && IsDigit(line[p]) && line[p + 1] == ' ') {
      if (ParseRfc5424(line, p + 2, out)) return true;
      out->tags.clear();
      out->host = out->app = {};
      out->has_ts = false;
    }
    return ParseRfc3164(line, p, out);
  }

  // Reads a space-terminated header field; "-" is nil.
  static bool HeaderField(std::string_view line, size_t* p, std::string_view* field) {
    size_t end = TokenEnd(line, *p);
    if (end == *p) return false;
    *field = line.substr(*p, end - *p);
    if (*field == "-") *field = {};
    *p = end < line.size() ? end + 1 : end;
    return true;
  }

  bool ParseRfc5424(std::string_view line, size_t p, ParsedLine* out) {
    std::string_view ts, host, app, procid, msgid;
    if (!HeaderField(line, &p, &ts) || !HeaderField(line, &p, &host) || !HeaderField(line, &p, &app) ||
        !HeaderField(line, &p, &procid) || !HeaderField(line, &p, &msgid)) {
      return false;
    }
    if (!ts.empty()) {
      auto t = ParseTimestampText(ts, Ctx());
      if (!t) return false;
      SetTs(out, *t);
    }
    out->host = host;
    out->app = app;
    if (!msgid.empty()) out->tags.push_back({"msgid", msgid});
    // Structured data: [id k="v" ...][id2 ...] or "-".
    if (p < line.size() && line[p] == '[') {
      while (p < line.size() && line[p] == '[') {
        size_t q = TokenEnd(line, p + 1);  // skip the SD-ID
        for (;;) {
          q = SkipSpaces(line, q);
          if (q >= line.size()) return false;
          if (line[q] == ']') {
            ++q;
            break;
          }
          size_t eq = line.find('=', q);
          if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
          std::string_view key = line.substr(q, eq - q);
          std::string* value = NextValue();
          size_t v = eq + 2;
          while (v < line.size() && line[v] != '"') {
            if (line[v] == '\\' && v + 1 < line.size()) ++v;
            value->push_back(line[v++]);
          }
          if (v >= line.size()) return false;
          out->tags.push_back({Key(key), *value});
          q = v + 1;
        }
        p = q;
      }
    }
    out->message = line;
    return true;
  }

  bool ParseRfc3164(std::string_view line, size_t p, ParsedLine* out) {
    std::string_view rest = line.substr(p);
    if (rest.empty()) return false;
    // Only the classic "Mmm dd HH:mm:ss" or an RFC 3339 time ("...T..."):
    // other timestamps followed by "word tag:" are log4j lines.
    const bool classic = IsAlpha(rest[0]);
    const bool rfc3339 = rest.size() > 10 && IsDigit(rest[0]) && rest[4] == '-' && rest[10] == 'T';
    if (!classic && !rfc3339) return false;
    auto m = ParseLeadingTimestamp(rest, Ctx());
    if (!m) return false;
    size_t q = SkipSpaces(rest, m->length);
    size_t host_end = TokenEnd(rest, q);
    if (host_end == q || host_end >= rest.size()) return false;
    std::string_view host = rest.substr(q, host_end - q);
    if (host.back() == ':' || LevelWord(host)) return false;
    q = SkipSpaces(rest, host_end);
    // tag: up to '[' (pid) or ':' (at most 64 bytes; may hold spaces, as in
    // "syslogd 1.4.1: restart."), then ':' (after the [pid]).
    size_t t = q;
    while (t < rest.size() && t - q <= 64 && rest[t] != '[' && rest[t] != ':') ++t;
    if (t == q || t >= rest.size() || t - q > 64) return false;
    std::string_view app = rest.substr(q, t - q);
    while (!app.empty() && IsSpace(app.back())) app.remove_suffix(1);
    if (app.empty() || (rfc3339 && app.find(' ') != std::string_view::npos)) return false;
    if (rest[t] == '[') {
      size_t close = rest.find(']', t);
      if (close == std::string_view::npos) return false;
      t = close + 1;
    }
    if (t >= rest.size() || rest[t] != ':') return false;
    SetTs(out, m->ts_ms);
    out->host = host;
    out->app = app;
    out->message = line;
    return true;
  }

  // ---- Apache error log -----------------------------------------------
  bool ParseApache(std::string_view line, ParsedLine* out) {
    if (line.empty() || line[0] != '[') return false;
    size_t close = line.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view inner = line.substr(1, close - 1);
    auto m = LeadingTs(inner);
    if (!m || m->length != inner.size()) return false;
    size_t p = SkipSpaces(line, close + 1);
    if (p >= line.size() || line[p] != '[') return false;
    size_t close2 = line.find(']', p);
    if (close2 == std::string_view::npos) return false;
    std::string_view level = line.substr(p + 1, close2 - p - 1);
    if (size_t colon = level.rfind(':'); colon != std::string_view::npos) level.remove_prefix(colon + 1);
    auto lvl = LevelWord(level);
    if (!lvl) return false;
    SetTs(out, m->ts_ms);
    SetLevel(out, *lvl);
    out->message = line;
    return true;
  }

  // ---- Android logcat -------------------------------------------------
  static std::optional<Severity> LogcatLevel(char c) {
    switch (c) {
      case 'V': return Severity::kTrace;
      case 'D': return Severity::kDebug;
      case 'I': return Severity::kInfo;
      case 'W': return Severity::kWarn;
      case 'E': return Severity::kError;
      case 'F': case 'A': return Severity::kFatal;
      default: return std::nullopt;
    }
  }

  bool ParseLogcat(std::string_view line, ParsedLine* out) {
    // brief: "D/Tag( 1234): msg"
    if (line.size() > 2 && line[1] == '/' && LogcatLevel(line[0])) {
      size_t paren = line.find('(', 2);
      size_t colon = line.find("): ", 2);
      if (paren == std::string_view::npos || colon == std::string_view::npos || colon < paren) return false;
      SetLevel(out, *LogcatLevel(line[0]));
      std::string_view tag = line.substr(2, paren - 2);
      while (!tag.empty() && IsSpace(tag.back())) tag.remove_suffix(1);
      if (!tag.empty()) out->tags.push_back({"tag", tag});
      out->message = line;
      return true;
    }
    // threadtime: "[yyyy-]MM-dd HH:mm:ss.SSS  pid  tid L tag: msg"
    if (line.size() < 20 || !IsDigit(line[0])) return false;
    auto m = ParseLeadingTimestamp(line, Ctx());
    if (!m) return false;
    size_t p = m->length;
    for (int i = 0; i < 2; ++i) {  // pid, tid
      p = SkipSpaces(line, p);
      size_t end = p;
      while (end < line.size() && IsDigit(line[end])) ++end;
      if (end == p) return false;
      p = end;
    }
    p = SkipSpaces(line, p);
    if (p + 1 >= line.size() || !IsSpace(line[p + 1])) return false;
    auto lvl = LogcatLevel(line[p]);
    if (!lvl) return false;
    SetTs(out, m->ts_ms);
    SetLevel(out, *lvl);
    size_t tag_start = SkipSpaces(line, p + 1);
    size_t colon = line.find(':', tag_start);
    if (colon != std::string_view::npos) {
      std::string_view tag = line.substr(tag_start, colon - tag_start);
      while (!tag.empty() && IsSpace(tag.back())) tag.remove_suffix(1);
      if (!tag.empty()) out->tags.push_back({"tag", tag});
    }
    out->message = line;
    return true;
  }

  // ---- fields shared by JSON, logfmt and regex ------------------------
  // Applies one named field; returns false if it was not a special field.
  void ApplyField(std::string_view key, std::string_view value, bool numeric, ParsedLine* out) {
    switch (ClassifyField(key)) {
      case Field::kLevel:
        if (auto s = numeric ? NumericLevel(value) : LevelWord(value)) {
          SetLevel(out, *s);
          return;
        }
        break;
      case Field::kTime:
        if (!out->has_ts) {
          if (auto t = numeric ? ParseEpochNumber(value) : TsText(value)) {
            SetTs(out, *t);
            return;
          }
        }
        break;
      case Field::kMessage:
        if (out->message.empty()) {
          out->message = value;
          return;
        }
        break;
      case Field::kHost:
        if (out->host.empty() && !value.empty()) {
          out->host = value;
          return;
        }
        break;
      case Field::kApp:
        if (out->app.empty() && !value.empty()) {
          out->app = value;
          return;
        }
        break;
      case Field::kOther:
        break;
    }
    out->tags.push_back({Key(key), value});  // not understood: keep it as a tag
  }

  // ---- JSON -----------------------------------------------------------
  // simdjson's DOM parser, once per line (the DOM API: its kernels are chosen
  // at run time for this CPU; the On-Demand API would be built for the
  // baseline x86-64 kernel, several times slower). Keys and strings come
  // unescaped; numbers as their shortest round-trip text, nested objects and
  // arrays as compact JSON text. Guards first (a hostile line must not take
  // the process down): a line over kMaxJsonLineBytes is not parsed; nesting
  // deeper than kMaxJsonDepth is refused (the parser's max_depth, and a
  // linear pre-scan before the fallback below); invalid UTF-8 (simdjson
  // refuses it) is replaced by U+FFFD in a copy and the copy parsed (one bad
  // byte must not lose the line). A line whose numbers simdjson cannot hold
  // (integers past 64 bits, 1e999) is parsed by nlohmann::json instead, which
  // reads them as doubles, as before simdjson.

  // Doubles in fixed notation when that is short (1700000000.0 -> "1700000000",
  // not "1.7e+09": epoch parsing and people read it), else the shortest form.
  static void AppendNumber(std::string* to, simdjson::dom::element v) {
    char buf[64];
    std::to_chars_result r{buf, std::errc()};
    if (v.is_int64()) {
      r = std::to_chars(buf, buf + sizeof buf, int64_t(v));
    } else if (v.is_uint64()) {
      r = std::to_chars(buf, buf + sizeof buf, uint64_t(v));
    } else {
      const double d = double(v);
      r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
      if (r.ec != std::errc() || std::fabs(d) < 1e-6) r = std::to_chars(buf, buf + sizeof buf, d);
    }
    to->append(buf, r.ptr);
  }

  // Parses `line` (an object) and applies its fields to `out` in their
  // order; on an error nothing is applied (the DOM is built whole first).
  // Values are views into the parser's buffers and `values`, valid until the
  // next Parse().
  simdjson::error_code JsonFields(std::string_view line, ParsedLine* out) {
    json_padded.assign(line.data(), line.size());
    json_padded.append(simdjson::SIMDJSON_PADDING, '\0');
    simdjson::dom::element doc;
    if (auto e = json_parser.parse(json_padded.data(), line.size(), false).get(doc)) return e;
    simdjson::dom::object object;
    if (auto e = doc.get_object().get(object)) return e;
    for (auto [key, v] : object) {
      std::string_view value;
      bool numeric = false;
      switch (v.type()) {
        case simdjson::dom::element_type::STRING: value = std::string_view(v); break;
        case simdjson::dom::element_type::INT64:
        case simdjson::dom::element_type::UINT64:
        case simdjson::dom::element_type::DOUBLE: {
          std::string* text = NextValue();
          AppendNumber(text, v);
          value = *text;
          numeric = true;
          break;
        }
        case simdjson::dom::element_type::BOOL: value = bool(v) ? "true" : "false"; break;
        case simdjson::dom::element_type::NULL_VALUE: value = "null"; break;
        case simdjson::dom::element_type::OBJECT:
        case simdjson::dom::element_type::ARRAY: {
          std::string* text = NextValue();
          *text = simdjson::minify(v);
          value = *text;
          break;
        }
      }
      ApplyField(key, value, numeric, out);
    }
    return simdjson::SUCCESS;
  }

  // The fallback for numbers simdjson cannot hold (see above).
  bool JsonFieldsByNlohmann(std::string_view line, ParsedLine* out) {
    if (JsonNestingExceeds(line, kMaxJsonDepth)) {
      out->rejection = kJsonTooDeep;
      return false;
    }
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line.begin(), line.end());
    } catch (const nlohmann::json::exception& e) {
      json_error = std::string("not JSON: ") + e.what();
      if (json_error.size() > 512) json_error.resize(512);  // nlohmann quotes the token it last read
      out->rejection = json_error;
      return false;
    }
    if (!doc.is_object()) return false;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      std::string* k = NextValue();
      *k = it.key();
      std::string* v = NextValue();
      const auto& val = it.value();
      if (val.is_string()) *v = val.get_ref<const std::string&>();
      else *v = val.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      ApplyField(*k, *v, val.is_number(), out);
    }
    return true;
  }

  bool ParseJson(std::string_view line, ParsedLine* out) {
    size_t p = SkipSpaces(line, 0);
    if (p >= line.size() || line[p] != '{') return false;
    if (line.size() > kMaxJsonLineBytes) {
      out->rejection = kJsonTooLong;
      return false;
    }
    if (!json_ready) {
      // Allocated on the first JSON line (other formats never need it).
      // Nesting past kMaxJsonDepth is DEPTH_ERROR (kJsonTooDeep).
      if (json_parser.allocate(64 * 1024, kMaxJsonDepth) != simdjson::SUCCESS) {
        json_error = "not JSON: cannot allocate the JSON parser";
        out->rejection = json_error;
        return false;
      }
      json_ready = true;
    }
    simdjson::error_code err = JsonFields(line, out);
    if (err == simdjson::UTF8_ERROR) {
      ReplaceInvalidUtf8(line, &repaired);
      line = repaired;
      out->utf8_replaced = true;
      err = JsonFields(line, out);
    }
    if (err == simdjson::DEPTH_ERROR) {
      out->rejection = kJsonTooDeep;
      return false;
    }
    if (err == simdjson::NUMBER_OUT_OF_RANGE || err == simdjson::NUMBER_ERROR) {
      if (!JsonFieldsByNlohmann(line, out)) return false;
    } else if (err != simdjson::SUCCESS) {
      json_error = std::string("not JSON: ") + simdjson::error_message(err);
      out->rejection = json_error;
      return false;
    }
    if (out->message.empty()) out->message = line;
    return true;
  }

  // ---- logfmt ---------------------------------------------------------
  // strict: for auto-detection, require two pairs and a known field.
  bool ParseLogfmt(std::string_view line, ParsedLine* out, bool strict) {
    struct Pair {
      std::string_view key, value;
    };
    std::array<Pair, 64> pairs;
    size_t n = 0, known = 0, with_value = 0;
    size_t p = 0;
    std::vector<Pair> overflow;
    while (true) {
      p = SkipSpaces(line, p);
      if (p >= line.size()) break;
      size_t k = p;
      while (p < line.size() && line[p] != '=' && !IsSpace(line[p]) && line[p] != '"') ++p;
      if (p == k) return false;
      std::string_view key = line.substr(k, p - k), value;
      const bool has_value = p < line.size() && line[p] == '=';
      if (has_value) {
        ++p;
        if (p < line.size() && line[p] == '"') {
          std::string* v = NextValue();
          ++p;
          while (p < line.size() && line[p] != '"') {
            if (line[p] == '\\' && p + 1 < line.size()) {
              char e = line[++p];
              v->push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
              ++p;
              continue;
            }
            v->push_back(line[p++]);
          }
          if (p >= line.size()) return false;  // unterminated quote
          ++p;
          value = *v;
        } else {
          size_t v = p;
          p = TokenEnd(line, p);
          value = line.substr(v, p - v);
        }
      } else if (p < line.size() && !IsSpace(line[p])) {
        return false;
      }
      if (has_value) {
        ++with_value;
        if (ClassifyField(key) != Field::kOther) ++known;
      }
      if (n < pairs.size()) pairs[n++] = {key, value};
      else overflow.push_back({key, value});
    }
    if (n == 0) return false;
    // Detection wants real key=value pairs, one of them a known field, so that
    // prose ("the time is now") is not taken for logfmt.
    if (strict && (with_value < 2 || known == 0)) return false;
    for (size_t i = 0; i < n; ++i) ApplyField(pairs[i].key, pairs[i].value, false, out);
    for (const Pair& pr : overflow) ApplyField(pr.key, pr.value, false, out);
    if (out->message.empty()) out->message = line;
    return true;
  }

  // ---- user regex -----------------------------------------------------
  bool ParseRegex(std::string_view line, ParsedLine* out) {
    const int n = regex->NumberOfCapturingGroups() + 1;
    if (!regex->Match(re2::StringPiece(line.data(), line.size()), 0, line.size(), RE2::UNANCHORED, submatch.data(),
                      n)) {
      return false;
    }
    for (const Group& g : groups) {
      const re2::StringPiece& sp = submatch[g.index];
      if (sp.data() == nullptr) continue;  // the group did not take part
      std::string_view v(sp.data(), sp.size());
      switch (g.field) {
        case Field::kLevel:
          if (auto s = LevelWord(v)) SetLevel(out, *s);
          else if (auto s2 = NumericLevel(v)) SetLevel(out, *s2);
          break;
        case Field::kTime:
          if (auto t = TsText(v)) SetTs(out, *t);
          break;
        case Field::kMessage: out->message = v; break;
        case Field::kHost: out->host = v; break;
        case Field::kApp: out->app = v; break;
        case Field::kOther: out->tags.push_back({g.name, v}); break;
      }
    }
    if (out->message.data() == nullptr) out->message = line;
    return true;
  }

  static constexpr Format kAutoOrder[] = {Format::kJson,   Format::kSyslog, Format::kApache,
                                         Format::kLogcat, Format::kLog4j,  Format::kLogfmt};

  Format Detect(std::span<const std::string_view> sample) {
    if (options.format != Format::kAuto) return options.format;
    ParsedLine scratch;
    size_t best = 0;
    for (Format f : kAutoOrder) {
      size_t matched = 0;
      for (std::string_view line : sample) {
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        Reset(&scratch);
        if (TryFormat(f, line, &scratch, true)) ++matched;
      }
      if (matched > best) {
        best = matched;
        chosen = f;
      }
    }
    return chosen;
  }

  bool TryFormat(Format f, std::string_view line, ParsedLine* out, bool detecting) {
    bool ok = false;
    switch (f) {
      case Format::kLog4j: ok = ParseLog4j(line, out); break;
      case Format::kSyslog: ok = ParseSyslog(line, out); break;
      case Format::kJson: ok = ParseJson(line, out); break;
      case Format::kLogfmt: ok = ParseLogfmt(line, out, detecting); break;
      case Format::kApache: ok = ParseApache(line, out); break;
      case Format::kLogcat: ok = ParseLogcat(line, out); break;
      case Format::kRegex: ok = ParseRegex(line, out); break;
      case Format::kAuto: break;
    }
    if (!ok) {
      const std::string_view rejection = out->rejection;
      Reset(out);
      out->rejection = rejection;  // kept for the caller: why a format refused the line
    }
    return ok;
  }

  void Reset(ParsedLine* out) {
    out->has_ts = false;
    out->has_severity = false;
    out->severity = options.default_severity;
    out->parsed = false;
    out->message = {};
    out->tags.clear();
    out->app = {};
    out->host = {};
    out->rejection = {};
    out->utf8_replaced = false;
    values_used = 0;
    keys_used = 0;
  }

  void Parse(std::string_view line, ParsedLine* out) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Reset(out);
    bool ok = false;
    Format used = options.format;
    if (options.format != Format::kAuto) {
      ok = TryFormat(options.format, line, out, false);
    } else if (chosen != Format::kAuto) {
      ok = TryFormat(used = chosen, line, out, true);
    } else {
      for (Format f : kAutoOrder) {
        if (TryFormat(f, line, out, true)) {
          ok = true;
          used = chosen = f;
          break;
        }
      }
    }
    if (ok) {
      out->parsed = true;
      out->format = used;
      out->rejection = {};
    } else {
      out->message = line;
    }
    if (!out->has_severity) out->severity = options.default_severity;
    if (out->has_ts) {
      last_ts_ms = out->ts_ms;
      have_last_ts = true;
    } else {
      out->ts_ms = have_last_ts ? last_ts_ms : fallback_ts_ms ? *fallback_ts_ms : clock->NowMs();
    }
  }
};

LineParser::LineParser(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LineParser::~LineParser() = default;

const ParserOptions& LineParser::options() const { return impl_->options; }

void LineParser::Parse(std::string_view line, ParsedLine* out) { impl_->Parse(line, out); }

void LineParser::StartInput(int64_t fallback_ts_ms) {
  impl_->have_last_ts = false;
  impl_->chosen = Format::kAuto;  // each input chooses its own format
  impl_->fallback_ts_ms = fallback_ts_ms;
}

Format LineParser::Detect(std::span<const std::string_view> sample) { return impl_->Detect(sample); }

void LineParser::Resume(Format chosen) {
  // Only a choice auto can make (a regex needs its options).
  const bool choosable = std::find(std::begin(Impl::kAutoOrder), std::end(Impl::kAutoOrder), chosen) !=
                         std::end(Impl::kAutoOrder);
  if (impl_->options.format == Format::kAuto && (choosable || chosen == Format::kAuto)) impl_->chosen = chosen;
}

Format LineParser::detected() const {
  return impl_->options.format != Format::kAuto ? impl_->options.format : impl_->chosen;
}

Result<std::unique_ptr<LineParser>> LineParser::Create(const ParserOptions& options, const Clock& clock) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->clock = &clock;
  auto zone = TimeZone::Load(options.time_zone);
  if (!zone.ok()) return zone.error();
  impl->zone = *zone;
  if (!options.time_format.empty()) {
    auto tf = TimeFormat::Compile(options.time_format);
    if (!tf.ok()) return tf.error();
    impl->time_format = *tf;
  }
  if (options.format == Format::kRegex) {
    if (options.regex.empty()) return Error{Errc::kInvalidArgument, "format regex needs --regex"};
    RE2::Options ro;
    ro.set_log_errors(false);
    impl->regex = std::make_unique<RE2>(options.regex, ro);
    if (!impl->regex->ok()) {
      return Error{Errc::kInvalidArgument, "bad regex: " + impl->regex->error()};
    }
    for (const auto& [name, index] : impl->regex->NamedCapturingGroups()) {
      Field f = Field::kOther;
      if (name == "ts" || name == "time" || name == "timestamp") f = Field::kTime;
      else if (name == "level" || name == "severity") f = Field::kLevel;
      else if (name == "msg" || name == "message") f = Field::kMessage;
      else if (name == "host") f = Field::kHost;
      else if (name == "app") f = Field::kApp;
      std::string buffer;
      impl->groups.push_back({index, f, std::string(SanitizeTagKey(name, &buffer))});
    }
    if (impl->groups.empty()) {
      return Error{Errc::kInvalidArgument, "the regex has no named group; use (?P<name>...) for ts, level, msg, ..."};
    }
    impl->submatch.resize(impl->regex->NumberOfCapturingGroups() + 1);
  } else if (!options.regex.empty()) {
    return Error{Errc::kInvalidArgument, "--regex needs --format regex"};
  }
  return std::unique_ptr<LineParser>(new LineParser(std::move(impl)));
}

}  // namespace logdex::parse
