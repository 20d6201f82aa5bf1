// Line parsers: turn one log line into a ParsedLine (timestamp, severity,
// message, tags, and the app/host a line names itself, as syslog does).
//
// One parser for both sides: `logdex ship` parses files with it, and serve's
// JSON-lines and plain-text Kafka input (server/ingest_adapters.h) with the
// same LineParser (Format::kJson for JSON, Format::kAuto for text); then
// RecordAssembler (assembler.h) joins continuation lines into records.
//
// Formats (ParserOptions::format):
//   log4j   log4j/logback and relatives: a leading timestamp in a common
//           format (see timestamp.h; optionally after one leading token, as in
//           OpenStack's "file ts pid LEVEL"), then the level among the next
//           few tokens ("INFO", "[WARN]", "ERROR:"); HDFS, Spark, Python
//           logging, "LEVEL timestamp ..." too.
//   syslog  RFC 5424 (<PRI>1 ts host app procid msgid [sd] msg) and RFC 3164
//           ([<PRI>]Mmm dd HH:mm:ss host tag[pid]: msg, or an RFC 3339 time).
//           PRI gives the severity; host and app come from the header;
//           structured-data params and the msgid become tags.
//   json    one JSON object per line: level/severity/lvl/loglevel/levelname,
//           time/ts/@timestamp/timestamp, msg/message, host/hostname,
//           app/service/application; every other field becomes a tag
//           (objects and arrays as compact JSON text). Guards: a line
//           nesting deeper than kMaxJsonDepth or longer than
//           kMaxJsonLineBytes is not parsed (it stays whole, unparsed, with
//           `rejection` set); invalid UTF-8 is replaced by U+FFFD and the
//           line parsed (`utf8_replaced` set).
//   logfmt  key=value pairs with the same field names as JSON.
//   apache  Apache httpd error log: [ctime] [level] or [module:level] ...
//   logcat  Android logcat threadtime (MM-dd HH:mm:ss.SSS pid tid L tag: msg)
//           and brief (L/tag( pid): msg).
//   regex   a user RE2 regex with (?P<name>...) groups: ts, level, msg, host,
//           app; any other group becomes a tag. RE2 runs in linear time.
//   auto    one format per input, not per line: Detect() (RecordAssembler
//           calls it with an input's first lines) picks the format that
//           parses most of them (ties: json, syslog, apache, logcat, log4j,
//           logfmt) and keeps it until StartInput(); without a Detect(), the
//           first line that parses in one of them decides. A later line that
//           does not match the chosen format is unparsed (kept whole), so a
//           log4j line that happens to hold "k=v" is never read as logfmt.
//
// The message: for text formats (log4j, syslog, apache, logcat) it is the
// whole line as written (the parsed fields are metadata; nothing is lost);
// for json, logfmt and regex it is the msg field/group, or the whole line
// when there is none.
//
// Unparsed lines: a line that does not match keeps its text as the message,
// severity = ParserOptions::default_severity, timestamp = the last parsed
// one (or, before any, StartInput's fallback, else the clock's now),
// parsed = false. Nothing is dropped.
//
// Tag keys: a tag id is hash("key=value"), so a key must not contain '='.
// Rule: every '=' in a key becomes '_', and an empty key becomes "_".
// Values are kept as they are.
//
// A LineParser is not thread-safe (it reuses buffers); use one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "common/severity.h"
#include "common/tag_view.h"

namespace logdex::parse {

enum class Format { kAuto, kLog4j, kSyslog, kJson, kLogfmt, kApache, kLogcat, kRegex };

// "auto", "log4j", "syslog", "json", "logfmt", "apache", "logcat", "regex".
std::string_view FormatName(Format f);
std::optional<Format> ParseFormatName(std::string_view name);

using TagView = logdex::TagView;

// One parsed line. The views point into the line or into the parser's own
// buffers: valid until the parser's next Parse() call.
struct ParsedLine {
  int64_t ts_ms = 0;        // ms since the epoch, UTC; always set
  bool has_ts = false;      // the timestamp came from the line itself
  Severity severity = Severity::kInfo;
  bool has_severity = false;  // the severity came from the line itself
  bool parsed = false;      // the line matched a format's header
  Format format = Format::kAuto;  // the format that matched (when parsed)
  std::string_view message;
  std::vector<TagView> tags;  // keys never contain '='
  std::string_view app;       // empty: the line names no app
  std::string_view host;      // empty: the line names no host
  // Invalid UTF-8 in a JSON line was replaced by U+FFFD (the line is kept).
  bool utf8_replaced = false;
  // When not parsed: why a format that looked like the line's refused it
  // (kJsonTooDeep, kJsonTooLong, or the JSON parser's error), else empty.
  // Valid until the parser's next Parse() call.
  std::string_view rejection;
};

// JSON lines nesting objects/arrays deeper than this are not parsed as JSON
// (they stay whole, as unparsed text): the guard against stack exhaustion.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::string_view kJsonTooDeep = "JSON nested deeper than 64 levels";
// Likewise JSON lines longer than this (a parsed document costs ~10x its text).
inline constexpr size_t kMaxJsonLineBytes = 1 << 20;
inline constexpr std::string_view kJsonTooLong = "JSON line longer than 1 MiB";

struct ParserOptions {
  Format format = Format::kAuto;
  // RE2 pattern with (?P<name>...) groups; required for Format::kRegex.
  std::string regex;
  // strptime-style format with %f (timestamp.h); empty = the common formats.
  std::string time_format;
  // Zone for timestamps without an offset: "UTC" (default), "+02:00", or an
  // IANA name.
  std::string time_zone = "UTC";
  // Severity of lines that carry none, and of unparsed lines.
  Severity default_severity = Severity::kInfo;
};

// Replaces '=' in a tag key by '_' (and "" by "_"); returns `key` itself when
// it is already clean, else a view of `*buffer`.
std::string_view SanitizeTagKey(std::string_view key, std::string* buffer);

// The severity of a level word: the severity table's spellings plus Apache's
// trace1..trace8 and "warning"/"information"/"critical" forms; nullopt else.
std::optional<Severity> LevelWord(std::string_view word);

class LineParser {
 public:
  // Fails on a bad regex (or one with no named group), a bad time format or
  // an unknown time zone. `clock` must outlive the parser.
  static Result<std::unique_ptr<LineParser>> Create(const ParserOptions& options, const Clock& clock);
  ~LineParser();

  // Parses one line (without its newline; a trailing '\r' is ignored).
  // Never fails; see "Unparsed lines" above.
  void Parse(std::string_view line, ParsedLine* out);

  // Starts a new input whose lines without a timestamp, before the first
  // line that has one, take `fallback_ts_ms` instead of the clock's now;
  // forgets the previous input's last timestamp and (auto) the format it
  // matched last. serve calls it per Kafka
  // message with the message's timestamp, so that a replay parses the same
  // times as the first pass.
  void StartInput(int64_t fallback_ts_ms);

  // Format::kAuto: chooses this input's format from `sample` (its first
  // lines; see "auto" above) and keeps it. Returns the choice, kAuto when no
  // sampled line parses (the input stays undecided). An explicit format is
  // returned as it is.
  Format Detect(std::span<const std::string_view> sample);
  // The explicit format, or auto's choice for this input (kAuto: undecided).
  Format detected() const;
  // Format::kAuto: the input goes on with `chosen`, the choice it had made
  // before (a restart from a checkpoint), instead of choosing again from
  // other lines. kAuto: it had chosen none yet.
  void Resume(Format chosen);

  const ParserOptions& options() const;

 private:
  struct Impl;
  explicit LineParser(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex::parse
