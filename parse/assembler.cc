#include "parse/assembler.h"

#include <algorithm>

namespace logdex::parse {
namespace {

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

// "a.b.FooException" / "a.b.FooError: msg" / "a.b.Throwable"
bool IsExceptionHeader(std::string_view line) {
  size_t end = 0;
  int dots = 0;
  while (end < line.size() && (IsIdentChar(line[end]) || line[end] == '.')) {
    if (line[end] == '.') ++dots;
    ++end;
  }
  if (dots == 0 || end == 0) return false;
  std::string_view name = line.substr(0, end);
  if (!(name.ends_with("Exception") || name.ends_with("Error") || name.ends_with("Throwable"))) return false;
  return end == line.size() || line[end] == ':';
}

}  // namespace

bool LooksLikeContinuation(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return true;
  if (line[0] == ' ' || line[0] == '\t') return true;
  if (line.starts_with("Caused by:") || line.starts_with("Suppressed:")) return true;
  return IsExceptionHeader(line);
}

RecordAssembler::RecordAssembler(LineParser& parser, RecordSink& sink, AssemblerOptions options)
    : parser_(parser), sink_(sink), options_(options) {}

void RecordAssembler::Start(const ParsedLine& p) {
  pending_ = true;
  parsed_first_ = p.parsed;
  first_line_ = last_line_ = lines_;
  ts_ms_ = p.ts_ms;
  severity_ = p.severity;
  message_.assign(p.message);
  app_.assign(p.app);
  host_.assign(p.host);
  tag_count_ = p.tags.size();
  if (tags_.size() < tag_count_) tags_.resize(tag_count_);
  for (size_t i = 0; i < tag_count_; ++i) {
    tags_[i].first.assign(p.tags[i].key);
    tags_[i].second.assign(p.tags[i].value);
  }
}

Status RecordAssembler::AddLine(std::string_view line) {
  if (!sampled_ && parser_.detected() == Format::kAuto) {
    held_.emplace_back(line);
    held_bytes_ += line.size();
    if (held_.size() < std::max<size_t>(1, options_.detect_lines) && held_bytes_ < (1u << 20)) {
      return Status::Ok();
    }
    return Release();
  }
  if (!released_.empty()) released_ = {};  // last_line() is about to point elsewhere
  return Process(line);
}

Status RecordAssembler::Release() {
  sampled_ = true;
  std::vector<std::string_view> sample(held_.begin(), held_.end());
  parser_.Detect(sample);
  released_ = std::move(held_);
  held_.clear();
  held_bytes_ = 0;
  for (const std::string& line : released_) {
    if (Status s = Process(line); !s.ok()) return s;
  }
  return Status::Ok();
}

Status RecordAssembler::Process(std::string_view line) {
  ++lines_;
  parser_.Parse(line, &parsed_);
  if (!parsed_.parsed) ++unparsed_;
  if (options_.multiline && pending_ && !parsed_.parsed && LooksLikeContinuation(parsed_.message)) {
    if (message_.size() + 1 + parsed_.message.size() <= options_.max_record_bytes) {
      message_.push_back('\n');
      message_.append(parsed_.message);
      last_line_ = lines_;
      ++joined_;
      return Status::Ok();
    }
    // Over the limit: the line starts a new record like the pending one.
    Status s = Flush();
    if (!s.ok()) return s;
    const int64_t ts = ts_ms_;
    const Severity sev = severity_;
    Start(parsed_);
    ts_ms_ = ts;
    severity_ = sev;
    return Status::Ok();
  }
  if (pending_) {
    Status s = Flush();
    if (!s.ok()) return s;
  }
  if (!options_.multiline) return Emit(parsed_);  // complete now: no copy to hold it
  Start(parsed_);
  return Status::Ok();
}

// A line that is a whole record (no joining): passed on by view, the views
// valid for the sink's call as the record contract says.
Status RecordAssembler::Emit(const ParsedLine& p) {
  RecordView r;
  r.ts_ms = p.ts_ms;
  r.severity = p.severity;
  r.message = p.message;
  r.tags = p.tags;
  r.app = p.app;
  r.host = p.host;
  r.parsed = p.parsed;
  r.first_line = lines_;
  r.lines = 1;
  ++records_;
  return sink_.OnRecord(r);
}

Status RecordAssembler::Flush() {
  if (!held_.empty()) {
    if (Status s = Release(); !s.ok()) return s;
  }
  if (!pending_) return Status::Ok();
  tag_views_.resize(tag_count_);
  for (size_t i = 0; i < tag_count_; ++i) tag_views_[i] = {tags_[i].first, tags_[i].second};
  RecordView r;
  r.ts_ms = ts_ms_;
  r.severity = severity_;
  r.message = message_;
  r.tags = tag_views_;
  r.app = app_;
  r.host = host_;
  r.parsed = parsed_first_;
  r.first_line = first_line_;
  r.lines = static_cast<uint32_t>(last_line_ - first_line_ + 1);
  pending_ = false;
  ++records_;
  return sink_.OnRecord(r);
}

}  // namespace logdex::parse
