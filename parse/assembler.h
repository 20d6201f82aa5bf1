// RecordAssembler: parses lines with a LineParser and joins continuation
// lines into the record before them (multi-line records).
//
// A line continues the previous record when multi-line joining is on, there
// is a previous record, the line did not parse as a record of its own, and
// it is one of:
//   - empty, or starting with a space or a tab (stack frames "\tat ...",
//     "    ... 12 more", indented text);
//   - "Caused by:" or "Suppressed:" (Java exception chains);
//   - a Java exception header: a dotted class name ending in Exception,
//     Error or Throwable, alone or followed by ": ..."
//     ("java.lang.IllegalStateException: boom" right after a log line).
// Any other unparsed line is a record of its own (raw text, default
// severity). Joined lines are separated by '\n'; the record keeps the first
// line's timestamp, severity, tags, app and host. A record stops growing at
// max_record_bytes: the next continuation line then starts a new record with
// the same timestamp and severity (nothing is dropped).
//
// Since a record is complete only when the next record starts, the last one
// waits in the assembler until Flush() (end of input, or an idle tail).
// Without joining (multiline off) every line is a whole record: it goes to
// the sink from AddLine, by view, and nothing waits.
//
// Format detection (a parser with Format::kAuto whose input has no format
// yet): the first `detect_lines` lines (or 1 MiB of them) are held, given to
// LineParser::Detect(), then parsed with the format it chose; Flush() decides
// with fewer. Held lines count as pending (has_pending()).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "parse/parsers.h"
#include "parse/record.h"

namespace logdex::parse {

struct AssemblerOptions {
  // Join continuation lines (see above). Default: on, except for JSON lines.
  bool multiline = true;
  // A record's message stops growing at this size. Default 1 MiB.
  size_t max_record_bytes = 1 << 20;
  // Auto format: lines sampled before the format is chosen. Default 32.
  size_t detect_lines = 32;
};

// True if `line` looks like a continuation (the rules above, without the
// "did not parse" condition).
bool LooksLikeContinuation(std::string_view line);

class RecordAssembler {
 public:
  // `parser` and `sink` must outlive the assembler.
  RecordAssembler(LineParser& parser, RecordSink& sink, AssemblerOptions options);

  // Parses `line` (no newline) and passes every record it completes to the sink.
  Status AddLine(std::string_view line);
  // Passes the pending record, if any, to the sink.
  Status Flush();
  bool has_pending() const { return pending_ || !held_.empty(); }
  // Holding an auto-format input's first lines, not yet parsed.
  bool sampling() const { return !held_.empty(); }
  // The sample was taken (or the format is explicit, or resumed): the
  // parser's detected() is this input's format from here on.
  bool sampled() const { return sampled_ || parser_.detected() != Format::kAuto; }
  // A restart from a checkpoint: the input's format was chosen before (see
  // LineParser::Resume), so no lines are held to sample. Before any line.
  void Resume() { sampled_ = true; }
  // The number (1-based, in AddLine order) of the oldest line not yet in a
  // record given to the sink: the pending record's first line, or the first
  // held line; 0 when it holds none. Every line before it is in the sink.
  uint64_t first_held_line() const {
    if (pending_) return first_line_;
    return held_.empty() ? 0 : lines_ + 1;
  }

  // The parse of the last line processed (not of a held one): valid until the
  // next AddLine/Flush. serve's JSON input checks it instead of parsing twice.
  const ParsedLine& last_line() const { return parsed_; }

  uint64_t lines() const { return lines_; }
  uint64_t records() const { return records_; }
  uint64_t joined_lines() const { return joined_; }
  uint64_t unparsed_lines() const { return unparsed_; }

 private:
  void Start(const ParsedLine& p);
  Status Emit(const ParsedLine& p);
  Status Process(std::string_view line);
  // Detects the format from the held lines, then parses them.
  Status Release();

  LineParser& parser_;
  RecordSink& sink_;
  AssemblerOptions options_;
  ParsedLine parsed_;

  // The pending record, owned (buffers reused between records).
  bool pending_ = false;
  int64_t ts_ms_ = 0;
  Severity severity_ = Severity::kInfo;
  std::string message_, app_, host_;
  std::vector<std::pair<std::string, std::string>> tags_;
  size_t tag_count_ = 0;
  std::vector<TagView> tag_views_;
  bool parsed_first_ = true;
  uint64_t first_line_ = 0;
  uint64_t last_line_ = 0;

  uint64_t lines_ = 0, records_ = 0, joined_ = 0, unparsed_ = 0;

  // Format detection: lines held until the sample is complete.
  bool sampled_ = false;
  std::vector<std::string> held_;
  size_t held_bytes_ = 0;
  std::vector<std::string> released_;  // the sample just parsed: last_line()'s views point into it
};

}  // namespace logdex::parse
