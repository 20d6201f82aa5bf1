// Durations and timestamps as people type them, shared by the HTTP query API
// (http/http_server.cc), the `logdex query` CLI (server/query_command.cc),
// serve's config (server/config.cc) and the alerting config (alerting/config.cc),
// so that all of them accept exactly the same spellings.
//
// All times are milliseconds since the Unix epoch, UTC; all durations are
// milliseconds. Pure functions: safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace logdex {

// A positive duration: one or more <integer><unit> parts, units ms, s, m, h,
// d (e.g. "90s", "15m", "72h", "7d", "1h30m", "500ms"). Case-sensitive; no
// spaces, signs or fractions. Errors: kInvalidArgument saying what is wrong.
Result<int64_t> ParseDuration(std::string_view text);

// A point in time, either
// - RFC 3339: YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM), 'T' and 'Z'
//   in either case; fractions beyond milliseconds are truncated; or
// - an integer: milliseconds since the epoch (digits only).
// Errors: kInvalidArgument saying what is wrong.
Result<int64_t> ParseTimestamp(std::string_view text);

// RFC 3339 in UTC with milliseconds: "2026-11-29T10:00:00.000Z".
std::string FormatTimestamp(int64_t ms);

}  // namespace logdex
