#include "common/time_parse.h"

#include <cstdio>
#include <limits>

#include "common/civil.h"

namespace logdex {
namespace {

constexpr int64_t kMsPerDay = 86'400'000;

Error Bad(std::string why) { return Error{Errc::kInvalidArgument, std::move(why)}; }

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int DaysInMonth(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at `pos`; false when they are not all digits.
bool Digits(std::string_view s, size_t pos, size_t n, int64_t& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (!IsDigit(s[i])) return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

Result<int64_t> ParseRfc3339(std::string_view s) {
  const std::string shown = "'" + std::string(s) + "'";
  auto bad = [&](const std::string& why) {
    return Bad(shown + " is not a time: " + why +
               " (want RFC 3339 like 2026-11-29T10:00:00Z or 2026-11-29T11:00:00+01:00, or milliseconds since the "
               "epoch)");
  };
  int64_t year, month, day, hour, minute, second;
  if (!Digits(s, 0, 4, year) || s.size() < 5 || s[4] != '-' || !Digits(s, 5, 2, month) || s.size() < 8 ||
      s[7] != '-' || !Digits(s, 8, 2, day)) {
    return bad("the date must be YYYY-MM-DD");
  }
  if (s.size() < 11 || (s[10] != 'T' && s[10] != 't')) return bad("a 'T' and the time of day must follow the date");
  if (!Digits(s, 11, 2, hour) || s.size() < 14 || s[13] != ':' || !Digits(s, 14, 2, minute) || s.size() < 17 ||
      s[16] != ':' || !Digits(s, 17, 2, second)) {
    return bad("the time of day must be HH:MM:SS");
  }
  if (month < 1 || month > 12) return bad("month " + std::to_string(month) + " is out of range");
  if (day < 1 || day > DaysInMonth(year, month)) return bad("day " + std::to_string(day) + " is not in that month");
  if (hour > 23 || minute > 59 || second > 59) return bad("the time of day is out of range");
  size_t pos = 19;
  int64_t ms = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    const size_t start = pos;
    int scale = 100;
    while (pos < s.size() && IsDigit(s[pos])) {
      ms += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad("a '.' must be followed by digits");
    if (pos - start > 9) return bad("more than 9 fraction digits");
  }
  if (pos >= s.size()) return bad("the time zone is missing (add Z for UTC)");
  int64_t offset_min = 0;
  if (s[pos] == 'Z' || s[pos] == 'z') {
    ++pos;
  } else if (s[pos] == '+' || s[pos] == '-') {
    int64_t oh, om;
    if (!Digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' || !Digits(s, pos + 4, 2, om)) {
      return bad("the offset must be +HH:MM or -HH:MM");
    }
    if (oh > 23 || om > 59) return bad("the offset is out of range");
    offset_min = (oh * 60 + om) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad("the time zone must be Z, +HH:MM or -HH:MM");
  }
  if (pos != s.size()) return bad("unexpected text after the time zone");
  const int64_t days = DaysFromCivil(year, month, day);
  return days * kMsPerDay + ((hour * 60 + minute - offset_min) * 60 + second) * 1000 + ms;
}

}  // namespace

Result<int64_t> ParseDuration(std::string_view text) {
  const std::string shown = "'" + std::string(text) + "'";
  auto bad = [&](const std::string& why) {
    return Bad(shown + " is not a duration: " + why + " (want e.g. 90s, 15m, 72h, 7d or 1h30m; units ms s m h d)");
  };
  if (text.empty()) return bad("it is empty");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!IsDigit(text[pos])) return bad("expected a number at position " + std::to_string(pos + 1));
    int64_t n = 0;
    while (pos < text.size() && IsDigit(text[pos])) {
      if (n > (kMax - 9) / 10) return bad("it is too large");
      n = n * 10 + (text[pos++] - '0');
    }
    int64_t unit_ms;
    if (text.substr(pos, 2) == "ms") {
      unit_ms = 1;
      pos += 2;
    } else if (pos < text.size() && text[pos] == 's') {
      unit_ms = 1000;
      ++pos;
    } else if (pos < text.size() && text[pos] == 'm') {
      unit_ms = 60'000;
      ++pos;
    } else if (pos < text.size() && text[pos] == 'h') {
      unit_ms = 3'600'000;
      ++pos;
    } else if (pos < text.size() && text[pos] == 'd') {
      unit_ms = kMsPerDay;
      ++pos;
    } else {
      return bad(pos < text.size() ? "unknown unit at position " + std::to_string(pos + 1) : "the unit is missing");
    }
    if (n > (kMax - total) / unit_ms) return bad("it is too large");
    total += n * unit_ms;
  }
  if (total <= 0) return bad("it must be more than zero");
  return total;
}

Result<int64_t> ParseTimestamp(std::string_view text) {
  if (text.empty()) return Bad("the time is empty");
  bool all_digits = true;
  for (char c : text) all_digits = all_digits && IsDigit(c);
  if (!all_digits) return ParseRfc3339(text);
  if (text.size() > 15) {
    return Bad("'" + std::string(text) + "' is out of range for milliseconds since the epoch");
  }
  int64_t ms = 0;
  for (char c : text) ms = ms * 10 + (c - '0');
  return ms;
}

std::string FormatTimestamp(int64_t ms) {
  int64_t days = ms / kMsPerDay, rem = ms % kMsPerDay;
  if (rem < 0) {
    rem += kMsPerDay;
    --days;
  }
  const CivilDate c = CivilFromDays(days);
  const int64_t y = c.year, m = c.month, d = c.day;
  char buf[128];  // room for any int64 year, to keep -Wformat-truncation quiet
  std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%03lldZ", static_cast<long long>(y),
                static_cast<long long>(m), static_cast<long long>(d), static_cast<long long>(rem / 3'600'000),
                static_cast<long long>(rem / 60'000 % 60), static_cast<long long>(rem / 1000 % 60),
                static_cast<long long>(rem % 1000));
  return buf;
}

}  // namespace logdex
