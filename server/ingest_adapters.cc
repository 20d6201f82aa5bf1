#include "server/ingest_adapters.h"

#include <map>
#include <tuple>

#include "parse/assembler.h"
#include "parse/parsers.h"

namespace logdex {

struct ShipLineDecoder::Impl : public parse::RecordSink {
  std::string default_app, default_host;
  const Clock& clock;
  std::unique_ptr<parse::LineParser> json, text;
  // Per message: records by stream (app, host, severity), as `logdex ship`
  // groups them, so that every chunk made has one severity and the indexer
  // stores it as it is (a mixed one it would unpack, split by severity and
  // pack again).
  std::map<std::tuple<std::string, std::string, Severity>, proto::RecordBatch> streams;
  // Per message: the time a record whose own time ValidateChunk would refuse
  // takes (the Kafka message's), and how many did.
  int64_t restamp_ts = 0;
  uint64_t restamped = 0;
  const DecodeOptions bounds;  // the defaults BatchProcessor validates with

  Impl(std::string app, std::string host, const Clock& c)
      : default_app(std::move(app)), default_host(std::move(host)), clock(c) {}

  Status OnRecord(const parse::RecordView& r) override {
    const std::string app(r.app.empty() ? std::string_view(default_app) : r.app);
    const std::string host(r.host.empty() ? std::string_view(default_host) : r.host);
    if (app.empty() || host.empty()) {
      return Status(Errc::kInvalidArgument,
                    std::string("a record names no ") + (app.empty() ? "app" : "host") +
                        " and the server has no default (consumer.default_" + (app.empty() ? "app" : "host") + ")");
    }
    proto::LogRecord* out = streams[{app, host, r.severity}].add_records();
    const bool restamp = !TimestampAccepted(r.ts_ms, clock.NowMs(), bounds);
    out->set_ts_ms(restamp ? restamp_ts : r.ts_ms);
    out->set_severity(SeverityCode(r.severity));
    out->set_message(std::string(r.message));
    if (restamp) {  // first: among the tags the indexer indexes
      ++restamped;
      proto::Tag* tag = out->add_tags();
      tag->set_key(std::string(kRestampedTag));
      tag->set_value(std::to_string(r.ts_ms));
    }
    for (const parse::TagView& t : r.tags) {
      proto::Tag* tag = out->add_tags();
      tag->set_key(std::string(t.key));
      tag->set_value(std::string(t.value));
    }
    return Status::Ok();
  }
};

ShipLineDecoder::ShipLineDecoder(std::string default_app, std::string default_host, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(default_app), std::move(default_host), clock)) {
  parse::ParserOptions jo;
  jo.format = parse::Format::kJson;
  impl_->json = parse::LineParser::Create(jo, clock).value();
  parse::ParserOptions to;
  to.format = parse::Format::kAuto;
  impl_->text = parse::LineParser::Create(to, clock).value();
}

ShipLineDecoder::~ShipLineDecoder() = default;

Result<std::vector<proto::LogChunk>> ShipLineDecoder::Decode(const InMessage& m, InputFormat format) {
  Impl& d = *impl_;
  d.streams.clear();
  d.restamped = 0;
  const bool json = format == InputFormat::kJson;
  parse::LineParser& parser = json ? *d.json : *d.text;
  parse::AssemblerOptions ao;
  ao.multiline = !json;
  parse::RecordAssembler assembler(parser, d, ao);

  // A line without a time of its own (before any line that has one) takes
  // the Kafka message's timestamp, never the previous message's time or the
  // clock: a replay must derive the same rows.
  const int64_t fallback_ts = m.timestamp_ms > 0 ? m.timestamp_ms : 0;
  parser.StartInput(fallback_ts);
  if (fallback_ts == 0) {
    // Kafka gives every message a timestamp since v0.10; without one the
    // record's time is the clock's, so a replay would not write the same row.
    ++counters_.untimed_messages;
    parser.StartInput(d.clock.NowMs());
  }
  // The message's time, unless serve would refuse that too (a producer clock
  // far off): then the clock's (a replay may then write another row).
  d.restamp_ts = fallback_ts > 0 && TimestampAccepted(fallback_ts, d.clock.NowMs(), d.bounds) ? fallback_ts
                                                                                               : d.clock.NowMs();

  // Lines of the message; JSON lines are checked one by one, on the parse
  // the assembler made (an explicit format: it holds no line back).
  std::string_view rest = m.value;
  size_t line_no = 0;
  uint64_t utf8_lines = 0;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (line.empty() || line == "\r") continue;
    if (Status s = assembler.AddLine(line); !s.ok()) return s.error();
    if (json) {
      const parse::ParsedLine& parsed = assembler.last_line();
      if (!parsed.parsed && !parsed.rejection.empty()) {
        return Error{Errc::kInvalidArgument, "line " + std::to_string(line_no) + ": " + std::string(parsed.rejection)};
      }
      if (!parsed.parsed) return Error{Errc::kInvalidArgument, "line " + std::to_string(line_no) + " is not a JSON object"};
      if (parsed.utf8_replaced) ++utf8_lines;
      if (!parsed.has_ts) {
        return Error{Errc::kInvalidArgument, "line " + std::to_string(line_no) +
                                                 " has no timestamp (time, ts, @timestamp or timestamp)"};
      }
    }
  }
  if (Status s = assembler.Flush(); !s.ok()) return s.error();
  if (d.streams.empty()) return Error{Errc::kInvalidArgument, "the message holds no log line"};
  counters_.utf8_replaced_lines += utf8_lines;
  counters_.unparsed_lines += assembler.unparsed_lines();
  counters_.restamped_records += d.restamped;

  std::vector<proto::LogChunk> chunks;
  for (auto& [stream, batch] : d.streams) {
    PackOptions po;  // producer id and sequence are set by the BatchProcessor
    po.codec = kDefaultCodec;
    chunks.push_back(PackChunk(std::get<0>(stream), std::get<1>(stream), batch, po));  // one severity
  }
  return chunks;
}

}  // namespace logdex
