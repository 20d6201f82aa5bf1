#include "server/ingest_adapters.h"

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "common/chunk_writer.h"
#include "parse/assembler.h"
#include "parse/parsers.h"

namespace logdex {

struct ShipLineDecoder::Impl : public parse::RecordSink {
  std::string default_app, default_host;
  const Clock& clock;
  std::unique_ptr<parse::LineParser> json, text;
  // Per message: a ChunkWriter per stream (app, host, severity), as `logdex
  // ship` groups records, so that every chunk made has one severity and the
  // indexer stores it as it is. Records go from the parser's views straight
  // into the writer's wire bytes (no LogRecord objects). The map's order
  // numbers the chunks (LineChunkIds), as it did when the decoder built
  // RecordBatches: a message replayed after an upgrade keeps its chunk ids.
  using StreamKey = std::tuple<std::string, std::string, Severity>;
  std::map<StreamKey, size_t> streams;  // -> writers[i]
  std::vector<ChunkWriter> writers;     // kept across messages: buffers keep their capacity
  // The stream of the last record: the next one is most often in it too.
  std::string last_app, last_host;
  Severity last_severity = Severity::kInfo;
  size_t last_writer = SIZE_MAX;
  // Per message: the time a record whose own time ValidateChunk would refuse
  // takes (the Kafka message's), and how many did.
  int64_t restamp_ts = 0;
  uint64_t restamped = 0;
  std::string restamp_value;
  const DecodeOptions bounds;  // the defaults BatchProcessor validates with

  Impl(std::string app, std::string host, const Clock& c)
      : default_app(std::move(app)), default_host(std::move(host)), clock(c) {}

  void StartMessage() {
    // Writers kept for the next message: a message of many streams does
    // not hold their buffers for good.
    constexpr size_t kKeptWriters = 256;
    if (writers.size() > kKeptWriters) writers.resize(kKeptWriters);
    streams.clear();
    last_writer = SIZE_MAX;
    restamped = 0;
  }

  Result<size_t> WriterFor(std::string_view app, std::string_view host, Severity severity) {
    if (last_writer != SIZE_MAX && severity == last_severity && app == last_app && host == last_host) {
      return last_writer;
    }
    auto [it, added] = streams.try_emplace(StreamKey{std::string(app), std::string(host), severity}, streams.size());
    if (added) {
      if (streams.size() > kMaxChunksPerLineMessage) {
        streams.erase(it);  // it has no writer
        return Error{Errc::kInvalidArgument, "the message names more than " +
                                                 std::to_string(kMaxChunksPerLineMessage) +
                                                 " streams (app, host, severity)"};
      }
      if (writers.size() < streams.size()) writers.emplace_back();
    }
    last_app.assign(app);
    last_host.assign(host);
    last_severity = severity;
    last_writer = it->second;
    return last_writer;
  }

  Status OnRecord(const parse::RecordView& r) override {
    const std::string_view app = r.app.empty() ? std::string_view(default_app) : r.app;
    const std::string_view host = r.host.empty() ? std::string_view(default_host) : r.host;
    if (app.empty() || host.empty()) {
      return Status(Errc::kInvalidArgument,
                    std::string("a record names no ") + (app.empty() ? "app" : "host") +
                        " and the server has no default (consumer.default_" + (app.empty() ? "app" : "host") + ")");
    }
    auto w = WriterFor(app, host, r.severity);
    if (!w.ok()) return w.error();
    ChunkWriter& writer = writers[*w];
    if (TimestampAccepted(r.ts_ms, clock.NowMs(), bounds)) {
      writer.Add(r.ts_ms, SeverityCode(r.severity), r.message, r.tags);
      return Status::Ok();
    }
    // First: among the tags the indexer indexes.
    ++restamped;
    restamp_value = std::to_string(r.ts_ms);
    const TagView lead[] = {{kRestampedTag, restamp_value}};
    writer.Add(restamp_ts, SeverityCode(r.severity), r.message, lead, r.tags);
    return Status::Ok();
  }

  // The serialized chunks of the message, numbered in stream order.
  std::vector<std::string> Finish(const InMessage& m) {
    std::vector<std::string> chunks;
    chunks.reserve(streams.size());
    uint32_t nth = 0;
    for (const auto& [stream, w] : streams) {
      const ChunkIds ids = LineChunkIds(m, nth++);
      PackOptions po;
      po.codec = kDefaultCodec;
      po.producer_id = ids.producer_id;
      po.sequence = ids.sequence;
      writers[w].Finish(std::get<0>(stream), std::get<1>(stream), po, &chunks.emplace_back(), &scratch);
    }
    return chunks;
  }

  // A message given up on: its records leave no trace in the next one's chunks.
  void Discard() {
    for (const auto& [stream, w] : streams) writers[w].Discard();
    streams.clear();
    last_writer = SIZE_MAX;
  }

  std::string scratch;  // compressed payloads on the way
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

Result<std::vector<std::string>> ShipLineDecoder::Decode(const InMessage& m, InputFormat format) {
  Impl& d = *impl_;
  d.StartMessage();
  Status read = Read(m, format);
  if (!read.ok()) {
    d.Discard();
    return read.error();
  }
  return d.Finish(m);
}

Status ShipLineDecoder::Read(const InMessage& m, InputFormat format) {
  Impl& d = *impl_;
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
  // the assembler made (an explicit format: it holds no line back). Without
  // joining, the assembler hands a JSON line's record to this decoder from
  // AddLine, before the checks: a bad line's own reason comes first (its
  // record may have failed in OnRecord for another one, such as naming no
  // app), and the message is discarded whole either way.
  std::string_view rest = m.value;
  size_t line_no = 0;
  uint64_t utf8_lines = 0;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const Status added = assembler.AddLine(line);
    if (json) {
      const parse::ParsedLine& parsed = assembler.last_line();
      if (!parsed.parsed && !parsed.rejection.empty()) {
        return Status(Errc::kInvalidArgument, "line " + std::to_string(line_no) + ": " + std::string(parsed.rejection));
      }
      if (!parsed.parsed) {
        return Status(Errc::kInvalidArgument, "line " + std::to_string(line_no) + " is not a JSON object");
      }
      if (parsed.utf8_replaced) ++utf8_lines;
      if (!parsed.has_ts) {
        return Status(Errc::kInvalidArgument,
                      "line " + std::to_string(line_no) + " has no timestamp (time, ts, @timestamp or timestamp)");
      }
    }
    if (!added.ok()) return added;
  }
  if (Status s = assembler.Flush(); !s.ok()) return s;
  if (d.streams.empty()) return Status(Errc::kInvalidArgument, "the message holds no log line");
  counters_.utf8_replaced_lines += utf8_lines;
  counters_.unparsed_lines += assembler.unparsed_lines();
  counters_.restamped_records += d.restamped;

  return Status::Ok();
}

}  // namespace logdex
