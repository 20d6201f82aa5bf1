// `logdex ship --check FILE...`: reads each file as `logdex ship` would (the
// same tailer, parser, assembler and time rules) without Kafka, and prints how
// it was read: the format, line and record counts, the time range, severities,
// the records ship would re-stamp or that fall past the retention, and a few
// example lines of each kind of problem.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/chunk_codec.h"
#include "common/time_parse.h"
#include "parse/assembler.h"
#include "ship/chunker.h"
#include "ship/pipeline.h"
#include "ship/tailer.h"

namespace logdex::ship {

using parse::Format;
using parse::FormatName;
using parse::LineParser;
using parse::RecordAssembler;
using parse::RecordSink;
using parse::RecordView;

namespace {

constexpr size_t kExamples = 3;
constexpr size_t kExampleBytes = 160;

struct Example {
  uint64_t line = 0;
  std::string text;
};

// Tallies the records of one file, with the Chunker's time rules.
class CheckSink final : public RecordSink {
 public:
  CheckSink(const ChunkerOptions& chunker, const Clock& clock) : chunker_(chunker), clock_(clock) {}

  Status OnRecord(const RecordView& r) override {
    ++records;
    ++by_severity[SeverityIndex(r.severity)];
    min_ts = std::min(min_ts, r.ts_ms);
    max_ts = std::max(max_ts, r.ts_ms);
    if (!r.parsed) Keep(unparsed_examples, r);
    const int64_t now = clock_.NowMs();
    if (!TimestampAccepted(r.ts_ms, now, chunker_.time_bounds)) {
      ++restamped;
      Keep(restamped_examples, r);
    } else if (chunker_.retention_ms > 0 && r.ts_ms < now - chunker_.retention_ms) {
      ++past_retention;
      Keep(retention_examples, r);
    }
    return Status::Ok();
  }

  uint64_t records = 0, restamped = 0, past_retention = 0;
  uint64_t by_severity[6] = {};
  int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
  std::vector<Example> unparsed_examples, restamped_examples, retention_examples;

 private:
  static void Keep(std::vector<Example>& into, const RecordView& r) {
    if (into.size() >= kExamples) return;
    std::string_view first = r.message.substr(0, r.message.find('\n'));
    std::string text(first.substr(0, kExampleBytes));
    if (first.size() > kExampleBytes) text += "...";
    into.push_back({r.first_line, std::move(text)});
  }

  const ChunkerOptions& chunker_;
  const Clock& clock_;
};

void PrintExamples(const char* kind, const std::vector<Example>& examples) {
  for (const Example& e : examples) {
    std::printf("    %s, line %llu: %s\n", kind, static_cast<unsigned long long>(e.line), e.text.c_str());
  }
}

std::string Days(int64_t ms) {
  return ms % 86'400'000 == 0 ? std::to_string(ms / 86'400'000) + "d" : std::to_string(ms) + " ms";
}

// Reads and reports one file; false when it could not be read.
bool CheckFile(const std::string& path, const PipelineOptions& p, const Clock& clock) {
  auto parser = LineParser::Create(p.parser, clock);
  if (!parser.ok()) {
    std::fprintf(stderr, "logdex ship --check: %s\n", parser.error().ToString().c_str());
    return false;
  }
  CheckSink sink(p.chunker, clock);
  RecordAssembler assembler(**parser, sink, p.assembler);
  FileTailer tailer(path, TailerOptions{});
  while (!tailer.done()) {
    auto read = tailer.Read([&](std::string_view line) { return assembler.AddLine(line); }, 4 << 20);
    if (!read.ok()) {
      std::fprintf(stderr, "logdex ship --check: %s: %s\n", path.c_str(), read.error().ToString().c_str());
      return false;
    }
  }
  if (Status s = assembler.Flush(); !s.ok()) {
    std::fprintf(stderr, "logdex ship --check: %s: %s\n", path.c_str(), s.ToString().c_str());
    return false;
  }

  const Format given = p.parser.format;
  const Format used = (*parser)->detected();
  std::printf("%s\n", path.c_str());
  if (given != Format::kAuto) {
    std::printf("  format:      %s (given)\n", std::string(FormatName(used)).c_str());
  } else if (used != Format::kAuto) {
    std::printf("  format:      %s (detected from its first lines)\n", std::string(FormatName(used)).c_str());
  } else {
    std::printf("  format:      none (no line matched a format: every line is a record of plain text)\n");
  }
  const uint64_t unparsed = assembler.unparsed_lines(), joined = assembler.joined_lines();
  std::printf("  lines:       %llu\n", static_cast<unsigned long long>(assembler.lines()));
  std::printf("  records:     %llu (%llu continuation lines joined to the record before)\n",
              static_cast<unsigned long long>(sink.records), static_cast<unsigned long long>(joined));
  std::printf("  unparsed:    %llu lines kept whole as records of their own (the time of the record before)\n",
              static_cast<unsigned long long>(unparsed - std::min(unparsed, joined)));
  if (sink.records > 0) {
    std::printf("  time:        %s .. %s\n", FormatTimestamp(sink.min_ts).c_str(), FormatTimestamp(sink.max_ts).c_str());
  }
  std::printf("  severities: ");
  for (Severity s : kAllSeverities) {
    std::printf(" %s %llu", std::string(SeverityName(s)).c_str(),
                static_cast<unsigned long long>(sink.by_severity[SeverityIndex(s)]));
  }
  std::printf("\n");
  std::printf("  re-stamped:  %llu records (time before %s or over %s ahead: shipped with the time of shipping, "
              "tagged %s)\n",
              static_cast<unsigned long long>(sink.restamped), FormatTimestamp(p.chunker.time_bounds.min_ts_ms).c_str(),
              Days(p.chunker.time_bounds.max_future_ms).c_str(), std::string(kRestampedTag).c_str());
  if (p.chunker.retention_ms > 0) {
    std::printf("  retention:   %llu records older than %s (stored, but no query reaches them)\n",
                static_cast<unsigned long long>(sink.past_retention), Days(p.chunker.retention_ms).c_str());
  }
  if (!sink.unparsed_examples.empty() || !sink.restamped_examples.empty() || !sink.retention_examples.empty()) {
    std::printf("  examples:\n");
    PrintExamples("unparsed", sink.unparsed_examples);
    PrintExamples("re-stamped", sink.restamped_examples);
    PrintExamples("past retention", sink.retention_examples);
  }
  return true;
}

}  // namespace

int RunShipCheck(ShipCommandOptions o) {
  if (std::string error = ResolveLineOptions(o); !error.empty()) {
    std::fprintf(stderr, "logdex ship --check: %s\n", error.c_str());
    return 2;
  }
  if (o.pipeline.inputs.empty()) {
    std::fprintf(stderr, "logdex ship --check: no input: give files, or - for stdin\n");
    return 2;
  }
  bool all_read = true;
  for (const std::string& path : o.pipeline.inputs) {
    all_read = CheckFile(path, o.pipeline, SystemClock::Instance()) && all_read;
  }
  std::fflush(stdout);
  return all_read ? 0 : 1;
}

}  // namespace logdex::ship
