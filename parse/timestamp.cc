#include "parse/timestamp.h"

#include <absl/time/civil_time.h>
#include <absl/time/time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/ascii.h"
#include "common/civil.h"

namespace logdex::parse {
namespace {

constexpr int64_t kDaySeconds = 86400;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A small cursor over the text; every reader returns false without moving
// past the end.
struct Cursor {
  std::string_view s;
  size_t p = 0;

  bool AtEnd() const { return p >= s.size(); }
  char Peek() const { return p < s.size() ? s[p] : '\0'; }
  bool Char(char c) {
    if (p < s.size() && s[p] == c) return ++p, true;
    return false;
  }
  // Exactly n digits.
  bool Digits(int n, int* out) {
    if (p + n > s.size()) return false;
    int v = 0;
    for (int i = 0; i < n; ++i) {
      char c = s[p + i];
      if (!IsDigit(c)) return false;
      v = v * 10 + (c - '0');
    }
    p += n;
    *out = v;
    return true;
  }
  // min..max digits.
  bool DigitsRange(int min, int max, int* out, int* count = nullptr) {
    int v = 0, n = 0;
    while (n < max && p + n < s.size() && IsDigit(s[p + n])) v = v * 10 + (s[p + n++] - '0');
    if (n < min) return false;
    p += n;
    *out = v;
    if (count) *count = n;
    return true;
  }
  // A fraction of a second after '.' or ',' (already consumed): 1-9 digits
  // kept, more ignored.
  bool Fraction(int64_t* nanos) {
    int64_t v = 0;
    int n = 0;
    while (p < s.size() && IsDigit(s[p])) {
      if (n < 9) v = v * 10 + (s[p] - '0'), ++n;
      ++p;
    }
    if (n == 0) return false;
    for (int i = n; i < 9; ++i) v *= 10;
    *nanos = v;
    return true;
  }
  bool Spaces(int min = 1) {
    size_t q = p;
    while (q < s.size() && (s[q] == ' ' || s[q] == '\t')) ++q;
    if (q - p < static_cast<size_t>(min)) return false;
    p = q;
    return true;
  }
};

constexpr std::string_view kMonths[12] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::string_view kMonthsLong[12] = {"january", "february", "march",     "april",   "may",      "june",
                                              "july",    "august",   "september", "october", "november", "december"};
constexpr std::string_view kDays[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};

// `word`, in any case, at s[p].
bool WordAt(std::string_view s, size_t p, std::string_view word) {
  return p <= s.size() && StartsWithNoCase(s.substr(p), word);
}

// A three-letter month name (case-insensitive), or the full name when `long_ok`.
bool MonthName(Cursor& c, int* month, bool long_ok) {
  for (int i = 0; i < 12; ++i) {
    if (long_ok && WordAt(c.s, c.p, kMonthsLong[i])) {
      c.p += kMonthsLong[i].size();
      *month = i + 1;
      return true;
    }
  }
  for (int i = 0; i < 12; ++i) {
    if (WordAt(c.s, c.p, kMonths[i])) {
      c.p += 3;
      *month = i + 1;
      return true;
    }
  }
  return false;
}

bool DayName(Cursor& c) {
  for (std::string_view d : kDays) {
    if (WordAt(c.s, c.p, d)) {
      c.p += 3;
      // a long name: skip the rest of the letters
      while (!c.AtEnd() && ((c.Peek() >= 'a' && c.Peek() <= 'z') || (c.Peek() >= 'A' && c.Peek() <= 'Z'))) ++c.p;
      return true;
    }
  }
  return false;
}

// HH:mm:ss[.fff|,fff]
bool ClockTime(Cursor& c, CivilTime* t, bool seconds_required = true) {
  if (!c.Digits(2, &t->hour) || !c.Char(':') || !c.Digits(2, &t->minute)) return false;
  if (c.Char(':')) {
    if (!c.Digits(2, &t->second)) return false;
  } else if (seconds_required) {
    return false;
  }
  size_t save = c.p;
  if (c.Char('.') || c.Char(',')) {
    if (!c.Fraction(&t->nanos)) c.p = save;
  }
  return true;
}

// Z | +hh:mm | +hhmm | +hh
bool Offset(Cursor& c, CivilTime* t) {
  if (c.Char('Z') || c.Char('z')) {
    t->has_offset = true;
    t->offset_s = 0;
    return true;
  }
  size_t save = c.p;
  int sign = 0;
  if (c.Char('+')) sign = 1;
  else if (c.Char('-')) sign = -1;
  else return false;
  int hh = 0, mm = 0;
  if (!c.Digits(2, &hh)) return c.p = save, false;
  if (c.Char(':')) {
    if (!c.Digits(2, &mm)) return c.p = save, false;
  } else {
    size_t q = c.p;
    if (!c.Digits(2, &mm)) c.p = q, mm = 0;
  }
  if (hh > 23 || mm > 59) return c.p = save, false;
  t->has_offset = true;
  t->offset_s = sign * (hh * 3600 + mm * 60);
  return true;
}

bool ValidCivil(const CivilTime& t) {
  return t.month >= 1 && t.month <= 12 && t.day >= 1 && t.day <= 31 && t.hour >= 0 && t.hour <= 24 &&
         t.minute >= 0 && t.minute <= 59 && t.second >= 0 && t.second <= 60;
}

// The formats that start with a digit.
bool NumericTimestamp(Cursor& c, CivilTime* t) {
  const size_t start = c.p;
  int a = 0;
  // yyyy-MM-dd[T ]HH:mm[:ss[.f]][offset]  or  yyyy/MM/dd HH:mm:ss
  if (c.Digits(4, &a) && (c.Peek() == '-' || c.Peek() == '/')) {
    char sep = c.Peek();
    ++c.p;
    t->year = a;
    if (!c.Digits(2, &t->month) || !c.Char(sep) || !c.Digits(2, &t->day)) return false;
    if (!(c.Char('T') || c.Char(' '))) return false;
    if (!ClockTime(c, t, /*seconds_required=*/false)) return false;
    size_t q = c.p;
    if (c.Peek() == ' ') ++c.p;  // "2017-05-16 00:00:00 +0200"
    if (!Offset(c, t)) c.p = q;
    return true;
  }
  c.p = start;
  // yyMMdd HHmmss (HDFS)
  int ymd = 0, hms = 0;
  if (c.Digits(6, &ymd) && c.Char(' ') && c.Digits(6, &hms) && (c.AtEnd() || c.Peek() == ' ')) {
    t->year = 2000 + ymd / 10000;
    t->month = ymd / 100 % 100;
    t->day = ymd % 100;
    t->hour = hms / 10000;
    t->minute = hms / 100 % 100;
    t->second = hms % 100;
    return true;
  }
  c.p = start;
  int b = 0;
  if (!c.Digits(2, &a)) return false;
  // yy/MM/dd HH:mm:ss (Spark)
  if (c.Char('/')) {
    if (c.Digits(2, &b) && c.Char('/')) {
      int d = 0;
      if (!c.Digits(2, &d) || !c.Char(' ')) return false;
      t->year = 2000 + a;
      t->month = b;
      t->day = d;
      return ClockTime(c, t);
    }
    // dd/Mon/yyyy:HH:mm:ss -zzzz (Common Log Format)
    if (!MonthName(c, &t->month, false) || !c.Char('/') || !c.Digits(4, &t->year) || !c.Char(':')) return false;
    t->day = a;
    if (!ClockTime(c, t)) return false;
    size_t q = c.p;
    if (!(c.Char(' ') && Offset(c, t))) c.p = q;
    return true;
  }
  // MM-dd HH:mm:ss.SSS (logcat threadtime; no year)
  if (c.Char('-') && c.Digits(2, &b) && c.Char(' ')) {
    t->month = a;
    t->day = b;
    return ClockTime(c, t);
  }
  return false;
}

// The formats that start with a letter: syslog "Mmm dd HH:mm:ss" and ctime
// "Www Mmm dd HH:mm:ss[.f] yyyy".
bool AlphaTimestamp(Cursor& c, CivilTime* t) {
  const size_t start = c.p;
  bool had_day = false;
  if (DayName(c)) {
    had_day = true;
    if (!c.Spaces()) return false;
  }
  if (!MonthName(c, &t->month, false)) return false;
  if (!c.Spaces()) return false;
  if (!c.DigitsRange(1, 2, &t->day)) return false;
  if (!c.Spaces()) return false;
  if (!ClockTime(c, t)) return false;
  // a year after the time (ctime); required when a day name came first
  size_t q = c.p;
  int year = 0;
  if (c.Char(' ') && c.Digits(4, &year) && (c.AtEnd() || !IsDigit(c.Peek()))) {
    t->year = year;
  } else {
    c.p = q;
    if (had_day) return c.p = start, false;
  }
  return true;
}

bool AnyTimestamp(Cursor& c, CivilTime* t) {
  char first = c.Peek();
  if (IsDigit(first)) return NumericTimestamp(c, t);
  if ((first >= 'A' && first <= 'Z') || (first >= 'a' && first <= 'z')) return AlphaTimestamp(c, t);
  return false;
}

std::string ZoneInfoDir() {
  const char* dir = std::getenv("TZDIR");
  return dir && *dir ? dir : "/usr/share/zoneinfo";
}

}  // namespace

// The zone of an IANA name: Abseil's (cctz) reader of the system's TZif files.
struct TimeZone::Zone {
  absl::TimeZone tz;
};

TimeZone::TimeZone() = default;

Result<TimeZone> TimeZone::Load(std::string_view name) {
  TimeZone tz;
  tz.name_ = std::string(name);
  std::string_view n = name;
  if (n.empty() || n == "UTC" || n == "Z" || n == "GMT" || n == "utc") return tz;
  if (n.starts_with("UTC") || n.starts_with("GMT")) n.remove_prefix(3);
  if (!n.empty() && (n[0] == '+' || n[0] == '-')) {
    Cursor c{n};
    CivilTime t;
    int hh = 0;
    if (Offset(c, &t) && c.AtEnd()) {
      tz.fixed_ = t.offset_s;
      return tz;
    }
    // "+1", "-5"
    c.p = 1;
    if (c.DigitsRange(1, 2, &hh) && c.AtEnd() && hh <= 23) {
      tz.fixed_ = (n[0] == '-' ? -1 : 1) * hh * 3600;
      return tz;
    }
    return Error{Errc::kInvalidArgument, "bad UTC offset in time zone '" + std::string(name) + "'"};
  }
  if (name.find("..") != std::string_view::npos || name.front() == '/') {
    return Error{Errc::kInvalidArgument, "bad time zone name '" + std::string(name) + "'"};
  }
  absl::TimeZone zone;
  if (!absl::LoadTimeZone(std::string(name), &zone)) {
    return Error{Errc::kNotFound,
                 "unknown time zone '" + std::string(name) + "' (not found in " + ZoneInfoDir() + ")"};
  }
  tz.zone_ = std::make_shared<const Zone>(Zone{zone});
  return tz;
}

int32_t TimeZone::OffsetAt(int64_t utc_s) const {
  if (!zone_) return fixed_;
  return zone_->tz.At(absl::FromUnixSeconds(utc_s)).offset;
}

int64_t TimeZone::LocalToUtc(int64_t local_s) const {
  if (!zone_) return local_s - fixed_;
  // In a gap or an overlap, `pre` takes the offset in force before the
  // change: the earlier offset wins.
  const absl::TimeZone::TimeInfo at = zone_->tz.At(absl::CivilSecond(1970, 1, 1, 0, 0, 0) + local_s);
  return absl::ToUnixSeconds(at.pre);
}

std::optional<int64_t> CivilToUtcMs(CivilTime t, const TimeContext& ctx) {
  if (t.has_ampm) {
    if (t.hour < 1 || t.hour > 12) return std::nullopt;
    t.hour = t.hour % 12 + (t.pm ? 12 : 0);
  }
  if (!ValidCivil(t)) return std::nullopt;
  auto to_ms = [&](int year) -> int64_t {
    const int64_t local_s = DaysFromCivil(year, t.month, t.day) * kDaySeconds + t.hour * 3600 + t.minute * 60 +
                            t.second;
    const int64_t utc_s = t.has_offset ? local_s - t.offset_s : ctx.zone->LocalToUtc(local_s);
    return utc_s * 1000 + t.nanos / 1'000'000;
  };
  if (t.year >= 0) return to_ms(t.year);
  const int64_t now_ms = ctx.clock->NowMs();
  // The current year in the zone.
  const int64_t now_s = now_ms / 1000;
  const int64_t local_days = (now_s + ctx.zone->OffsetAt(now_s)) / kDaySeconds;
  const int year = static_cast<int>(CivilFromDays(local_days).year);
  int64_t ms = to_ms(year);
  if (ms > now_ms + kDaySeconds * 1000) ms = to_ms(year - 1);
  return ms;
}

std::optional<TimestampMatch> ParseLeadingTimestamp(std::string_view text, const TimeContext& ctx) {
  Cursor c{text};
  CivilTime t;
  const bool bracket = c.Char('[');
  if (!AnyTimestamp(c, &t)) return std::nullopt;
  if (bracket && !c.Char(']')) return std::nullopt;
  // A timestamp ends at a word boundary.
  if (!c.AtEnd()) {
    char n = c.Peek();
    if (IsDigit(n) || (n >= 'A' && n <= 'Z') || (n >= 'a' && n <= 'z')) return std::nullopt;
  }
  auto ms = CivilToUtcMs(t, ctx);
  if (!ms) return std::nullopt;
  return TimestampMatch{*ms, c.p};
}

std::optional<int64_t> ParseEpochNumber(std::string_view text) {
  if (text.empty() || text.size() > 32) return std::nullopt;
  size_t i = 0;
  // Unsigned: 19 digits may pass INT64_MAX (found by text_lines_fuzz).
  uint64_t whole = 0;
  int digits = 0;
  while (i < text.size() && IsDigit(text[i])) {
    if (digits < 19) whole = whole * 10 + static_cast<uint64_t>(text[i] - '0');
    ++digits, ++i;
  }
  if (digits == 0 || digits > 19) return std::nullopt;
  int64_t frac_ns = 0;
  if (i < text.size() && text[i] == '.') {
    Cursor c{text, i + 1};
    if (!c.Fraction(&frac_ns)) return std::nullopt;
    i = c.p;
  }
  if (i != text.size()) return std::nullopt;
  // Magnitude: < 1e11 seconds (until year 5138), < 1e14 ms, < 1e17 us, else ns.
  if (whole < 100'000'000'000ULL) return static_cast<int64_t>(whole * 1000) + frac_ns / 1'000'000;
  if (whole < 100'000'000'000'000ULL) return static_cast<int64_t>(whole);
  if (whole < 100'000'000'000'000'000ULL) return static_cast<int64_t>(whole / 1000);
  return static_cast<int64_t>(whole / 1'000'000);
}

std::optional<int64_t> ParseTimestampText(std::string_view text, const TimeContext& ctx) {
  if (auto m = ParseLeadingTimestamp(text, ctx); m && m->length == text.size()) return m->ts_ms;
  return ParseEpochNumber(text);
}

Result<TimeFormat> TimeFormat::Compile(std::string_view format) {
  constexpr std::string_view kKnown = "YymdeHIMSpfbhBaAzZsTFDnt% ";
  if (format.empty()) return Error{Errc::kInvalidArgument, "empty time format"};
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') continue;
    if (i + 1 >= format.size()) return Error{Errc::kInvalidArgument, "time format ends with a lone '%'"};
    if (kKnown.find(format[i + 1]) == std::string_view::npos) {
      return Error{Errc::kInvalidArgument,
                   std::string("time format specifier %") + format[i + 1] + " is not supported"};
    }
    ++i;
  }
  TimeFormat f;
  f.format_ = std::string(format);
  return f;
}

std::optional<TimestampMatch> TimeFormat::Parse(std::string_view text, const TimeContext& ctx) const {
  Cursor c{text};
  CivilTime t;
  std::optional<int64_t> epoch_s;
  int count = 0;
  // Expands composite specifiers by recursion on a literal sub-format.
  auto run = [&](auto&& self, std::string_view f) -> bool {
    for (size_t i = 0; i < f.size(); ++i) {
      char ch = f[i];
      if (ch == ' ') {
        c.Spaces(0);
        continue;
      }
      if (ch != '%') {
        if (!c.Char(ch)) return false;
        continue;
      }
      char spec = f[++i];
      switch (spec) {
        case 'Y': if (!c.Digits(4, &t.year)) return false; break;
        case 'y': {
          int yy = 0;
          if (!c.Digits(2, &yy)) return false;
          t.year = yy < 69 ? 2000 + yy : 1900 + yy;
          break;
        }
        case 'm': if (!c.DigitsRange(1, 2, &t.month)) return false; break;
        case 'd': if (!c.DigitsRange(1, 2, &t.day)) return false; break;
        case 'e': c.Spaces(0); if (!c.DigitsRange(1, 2, &t.day)) return false; break;
        case 'H': if (!c.DigitsRange(1, 2, &t.hour)) return false; break;
        case 'I': if (!c.DigitsRange(1, 2, &t.hour)) return false; t.has_ampm = true; break;
        case 'M': if (!c.DigitsRange(1, 2, &t.minute)) return false; break;
        case 'S': if (!c.DigitsRange(1, 2, &t.second)) return false; break;
        case 'f': if (!c.Fraction(&t.nanos)) return false; break;
        case 'p': {
          if (WordAt(c.s, c.p, "am")) t.pm = false;
          else if (WordAt(c.s, c.p, "pm")) t.pm = true;
          else return false;
          c.p += 2;
          t.has_ampm = true;
          break;
        }
        case 'b': case 'h': if (!MonthName(c, &t.month, false)) return false; break;
        case 'B': if (!MonthName(c, &t.month, true)) return false; break;
        case 'a': case 'A': if (!DayName(c)) return false; break;
        case 'z': if (!Offset(c, &t)) return false; break;
        case 'Z': {
          size_t q = c.p;
          while (!c.AtEnd() && ((c.Peek() >= 'A' && c.Peek() <= 'Z') || (c.Peek() >= 'a' && c.Peek() <= 'z'))) ++c.p;
          std::string_view z = c.s.substr(q, c.p - q);
          if (z.empty()) return false;
          if (z == "UTC" || z == "GMT" || z == "Z") t.has_offset = true, t.offset_s = 0;
          break;
        }
        case 's': {
          size_t q = c.p;
          int64_t v = 0;
          while (!c.AtEnd() && IsDigit(c.Peek()) && c.p - q < 12) v = v * 10 + (c.s[c.p++] - '0');
          if (c.p == q) return false;
          epoch_s = v;
          break;
        }
        case 'T': if (!self(self, "%H:%M:%S")) return false; break;
        case 'F': if (!self(self, "%Y-%m-%d")) return false; break;
        case 'D': if (!self(self, "%m/%d/%y")) return false; break;
        case 'n': case 't': c.Spaces(0); break;
        case '%': if (!c.Char('%')) return false; break;
        default: return false;
      }
      ++count;
    }
    return true;
  };
  if (!run(run, format_)) return std::nullopt;
  if (epoch_s) return TimestampMatch{*epoch_s * 1000 + t.nanos / 1'000'000, c.p};
  auto ms = CivilToUtcMs(t, ctx);
  if (!ms) return std::nullopt;
  return TimestampMatch{*ms, c.p};
}

}  // namespace logdex::parse
