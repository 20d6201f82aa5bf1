#include "http/record_json.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "common/severity.h"
#include "common/time_parse.h"

namespace logdex {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The first continuation byte's range after lead byte c (Unicode's table of
// well-formed UTF-8 byte sequences: no overlong forms, no surrogates, nothing
// past U+10FFFF); the later ones are 0x80..0xBF.
void FirstContinuation(unsigned char c, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
}

// Continuation bytes a lead byte needs; -1: not a lead byte.
int Needed(unsigned char c) {
  if (c >= 0xC2 && c <= 0xDF) return 1;
  if (c >= 0xE0 && c <= 0xEF) return 2;
  if (c >= 0xF0 && c <= 0xF4) return 3;
  return -1;
}

bool Plain(unsigned char c) { return c >= 0x20 && c != '"' && c != '\\' && c < 0x80; }

void AppendEscapedAscii(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\b': out += "\\b"; return;
    case '\f': out += "\\f"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    default:
      if (c < 0x20) {
        static constexpr char kHex[] = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
  }
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // A run of bytes written as they are.
    size_t j = i;
    while (j < n && Plain(p[j])) ++j;
    out.append(s.data() + i, j - i);
    i = j;
    if (i == n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      AppendEscapedAscii(out, c);
      ++i;
      continue;
    }
    const int need = Needed(c);
    if (need < 0) {  // not a lead byte: replaced, and the next byte read as a start
      out += kReplacement;
      ++i;
      continue;
    }
    unsigned char lo, hi;
    FirstContinuation(c, lo, hi);
    size_t k = 1;
    for (; k <= static_cast<size_t>(need) && i + k < n; ++k) {
      const unsigned char d = p[i + k];
      if (d < lo || d > hi) break;
      lo = 0x80;
      hi = 0xBF;
    }
    if (k == static_cast<size_t>(need) + 1) {
      out.append(s.data() + i, k);
    } else {
      // A sequence cut short (by a byte outside its range, or the end): one
      // U+FFFD for what was read of it; the byte that broke it is read again
      // as a start.
      out += kReplacement;
    }
    i += k;
  }
  out += '"';
}

void AppendRecordJson(std::string& out, const ResultRecord& r) {
  out += "{\"app\":";
  AppendJsonString(out, r.app);
  out += ",\"host\":";
  AppendJsonString(out, r.host);
  out += ",\"message\":";
  AppendJsonString(out, r.message);
  out += ",\"severity\":";
  AppendJsonString(out, SeverityName(r.severity));
  out += ",\"tags\":{";
  // By key (bytes, as std::map<std::string> orders them); of a key given
  // twice, the last value, as assigning into the object keeps.
  std::vector<size_t> order(r.tags.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r.tags[a].first < r.tags[b].first; });
  bool first = true;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i + 1 < order.size() && r.tags[order[i + 1]].first == r.tags[order[i]].first) continue;  // a later one wins
    if (!first) out += ',';
    first = false;
    AppendJsonString(out, r.tags[order[i]].first);
    out += ':';
    AppendJsonString(out, r.tags[order[i]].second);
  }
  out += "},\"time\":";
  AppendJsonString(out, FormatTimestamp(r.ts_ms));
  out += ",\"ts\":";
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, r.ts_ms).ptr;
  out.append(digits, end);
  out += '}';
}

}  // namespace logdex
