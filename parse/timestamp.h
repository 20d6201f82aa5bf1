// Timestamps in log lines: time zones, a scanner for the common leading
// timestamp formats, and a strptime-style TimeFormat with %f.
//
// All results are milliseconds since the Unix epoch, UTC. A timestamp with
// its own offset (ISO 8601 "Z"/"+02:00", RFC 5424, "-0700") uses that offset;
// others are read in the configured TimeZone (default UTC). Formats without a
// year (syslog RFC 3164, logcat) take the current year in that zone, or the
// previous year when that would put the line more than a day in the future
// (a December line read in January).
//
// Everything here is pure given its inputs (the clock is read only for year
// inference) and safe for concurrent use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace logdex::parse {

// A time zone: UTC, a fixed offset, or an IANA zone read from the system's
// TZif files (/usr/share/zoneinfo, or $TZDIR) by Abseil's cctz.
class TimeZone {
 public:
  // UTC.
  TimeZone();
  // "UTC", "Z", "+02:00", "-0530", "UTC+1", or an IANA name ("Europe/Berlin").
  static Result<TimeZone> Load(std::string_view name);

  // Offset from UTC, in seconds, in force at `utc_s` (seconds since the epoch).
  int32_t OffsetAt(int64_t utc_s) const;
  // UTC seconds of a local wall time given as seconds since the epoch "as if
  // UTC". In a gap or overlap (DST changes) the earlier offset wins.
  int64_t LocalToUtc(int64_t local_s) const;
  const std::string& name() const { return name_; }

 private:
  struct Zone;
  std::string name_ = "UTC";
  int32_t fixed_ = 0;
  std::shared_ptr<const Zone> zone_;  // null for UTC and fixed offsets
};


// What a timestamp parser needs besides the text.
struct TimeContext {
  const TimeZone* zone = nullptr;  // never null when used
  const Clock* clock = nullptr;    // for year inference; never null when used
};

// Broken-down time as read from a line. year < 0 means "not in the line".
struct CivilTime {
  int year = -1;
  int month = 1, day = 1, hour = 0, minute = 0, second = 0;
  int64_t nanos = 0;
  bool has_offset = false;  // the text carried its own UTC offset
  int32_t offset_s = 0;
  bool pm = false, has_ampm = false;
};

// Converts to ms since the epoch (UTC), inferring the year when absent.
// nullopt when a field is out of range.
std::optional<int64_t> CivilToUtcMs(CivilTime t, const TimeContext& ctx);

struct TimestampMatch {
  int64_t ts_ms;
  size_t length;  // bytes of the text the timestamp took
};

// Recognizes a timestamp at the start of `text` in one of the common formats:
//   2017-05-16 00:00:00.008  2017-05-16T00:00:00,008Z  2017-05-16T00:00:00+02:00
//   2017/05/16 00:00:00      17/06/09 20:10:40 (yy/MM/dd)  081109 203615 (yyMMdd HHmmss)
//   03-17 16:13:38.811 (MM-dd, logcat)  Jun 14 15:16:01 / Jun  4 ... (syslog)
//   Sun Dec 04 04:47:44 2005 / Sun Dec 04 04:47:44.123456 2005 (ctime, Apache)
//   10/Oct/2000:13:55:36 -0700 (Common Log Format)
// A timestamp in square brackets ("[...]") is recognized too, brackets included.
std::optional<TimestampMatch> ParseLeadingTimestamp(std::string_view text, const TimeContext& ctx);

// A timestamp given as a number: seconds, milliseconds, microseconds or
// nanoseconds since the epoch, told apart by magnitude; fractions allowed.
std::optional<int64_t> ParseEpochNumber(std::string_view text);

// Any timestamp text (a JSON or logfmt field, a regex group): the leading
// formats above covering the whole text, or an epoch number.
std::optional<int64_t> ParseTimestampText(std::string_view text, const TimeContext& ctx);

// A strptime-style format. Specifiers: %Y %y %m %d %e %H %I %M %S %p %f
// (fraction of a second, 1-9 digits) %b/%h (month name) %B %a/%A (day name,
// skipped) %j is not supported; %z (+hhmm, +hh:mm, Z) %Z (a zone name, skipped
// unless "UTC"/"GMT"/"Z") %s (epoch seconds) %T (=%H:%M:%S) %F (=%Y-%m-%d)
// %D (=%m/%d/%y) %n/%t/space (any run of whitespace) %% (a literal %).
// Any other character matches itself.
class TimeFormat {
 public:
  static Result<TimeFormat> Compile(std::string_view format);
  // Matches a prefix of `text`; nullopt when it does not match.
  std::optional<TimestampMatch> Parse(std::string_view text, const TimeContext& ctx) const;
  const std::string& format() const { return format_; }

 private:
  std::string format_;
};

}  // namespace logdex::parse
