// `logdex bench ship`: the shipper's parse + assemble + chunk + compress path
// on a Loghub sample replicated to >= 1 GiB (scale 1) in a scratch file, with
// no Kafka. Baselines on the same bytes, same run: a `cat`-style read of the
// file, and raw snappy compression of it in 64 KiB blocks. For JSON lines
// (a generated sample of typical log objects of about 200-250 bytes), also simdjson's
// own DOM parse of every line of the same file (the limit a JSON parser on
// simdjson could reach) and zstd at ship's level over the very payloads ship
// compressed: their sum per line is the floor of ship's JSON path.
// "Per core": the ship path runs on one thread; lines/s is per second of that
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID), wall time is reported too.
//
// Then `ship_first_delivery`: how long a new shipper's first chunk takes from
// send to its acknowledgement by an in-process Kafka cluster (a fresh `logdex
// ship` run pays this once). The chunk is sent 20 ms after the producer is
// made, as the first ERROR chunk is at the earliest (its linger). Baselines in
// the same run: the same producer's one-chunk round trip once warm, and a
// plain librdkafka producer of the same settings that names its topic at
// that first produce().
#include <fcntl.h>
#include <librdkafka/rdkafkacpp.h>
#include <prometheus/registry.h>
#include <simdjson.h>
#include <snappy.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/result.h"
#include "common/zstd_codec.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "consumer/batch_processor.h"
#include "consumer/embedded_kafka.h"
#include "consumer/kafka_clients.h"
#include "parse/assembler.h"
#include "parse/parsers.h"
#include "ship/chunker.h"
#include "ship/kafka_producer.h"
#include "ship/tailer.h"
#include "store/rocksdb_store.h"

namespace logdex {
namespace {

using nlohmann::json;

double CpuSeconds() { return static_cast<double>(ThreadCpuNs()) / 1e9; }
double WallSeconds() { return SystemClock::Instance().MonotonicNs() / 1e9; }
double R2(double v) { return static_cast<double>(static_cast<int64_t>(v * 100 + 0.5)) / 100; }

// Counts chunks and bytes; keeps their bytes only when asked (`keep`: the
// JSON run's, compressed, for ZstdPayloadLimit; moving one costs no copy).
class NullSink final : public ship::ChunkSink {
 public:
  Status Send(ship::OutgoingChunk c) override {
    ++chunks;
    bytes += c.value.size();
    records += c.records;
    if (keep) kept.push_back(std::move(c.value));
    return Status::Ok();
  }
  void Poll(int) override {}
  uint64_t LowestUnresolved() const override { return UINT64_MAX; }
  ship::DeliveryReport Finish(int64_t) override { return {}; }
  uint64_t chunks = 0, bytes = 0, records = 0;
  bool keep = false;             // keep the chunks' bytes in `kept`
  std::vector<std::string> kept;
};

// Writes copies of `sample` until `target` bytes; returns the line count.
uint64_t Replicate(const std::string& sample, const std::string& out, uint64_t target) {
  std::ifstream in(sample, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  uint64_t lines_per_copy = 0;
  for (char c : text) lines_per_copy += c == '\n';
  std::string block;
  while (block.size() < (8u << 20)) block += text;
  const uint64_t copies_per_block = block.size() / text.size();
  std::FILE* f = std::fopen(out.c_str(), "wb");
  LOGDEX_CHECK(f != nullptr);
  uint64_t written = 0, lines = 0;
  while (written < target) {
    LOGDEX_CHECK(std::fwrite(block.data(), 1, block.size(), f) == block.size());
    written += block.size();
    lines += copies_per_block * lines_per_copy;
  }
  LOGDEX_CHECK(std::fclose(f) == 0);
  return lines;
}

// 2000 JSON log lines (bench::JsonLogLine) of one app, 37 ms apart.
std::string JsonSample(int64_t now_ms) {
  static const char* const kLevels[] = {"info", "info", "info", "debug", "warn", "error"};
  std::string out;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int i = 0; i < 2000; ++i) {
    const uint64_t r = next();
    const uint64_t r2 = next();
    out += bench::JsonLogLine(now_ms - 3'600'000 + i * 37, kLevels[r % 6], "checkout",
                              "web-" + std::to_string((r >> 30) % 12), r, r2);
    out += '\n';
  }
  return out;
}

// simdjson's DOM parse of every line of `file`, read as ship reads it (the
// tailer), each line copied into one padded buffer: lines/s per core.
double SimdjsonLimit(const std::string& file, uint64_t lines) {
  simdjson::dom::parser parser;
  std::string padded;
  uint64_t parsed = 0;
  ship::FileTailer tailer(file, ship::TailerOptions{});
  const double c0 = CpuSeconds();
  while (!tailer.done()) {
    auto r = tailer.Read(
        [&](std::string_view line) {
          padded.assign(line);
          padded.resize(line.size() + simdjson::SIMDJSON_PADDING);
          simdjson::dom::element doc;
          if (parser.parse(padded.data(), line.size(), false).get(doc) == simdjson::SUCCESS) ++parsed;
          return Status::Ok();
        },
        4 << 20);
    LOGDEX_CHECK(r.ok());
  }
  const double cpu = CpuSeconds() - c0;
  LOGDEX_CHECK(parsed == lines);
  return lines / cpu;
}

// zstd at ship's level over exactly the payloads ship compressed (each taken
// out of its chunk and decompressed off the clock, then compressed on it):
// the compression the ship path must do whatever its parser costs. Checked
// to give the same bytes as ship's. Lines/s per core of `lines`.
double ZstdPayloadLimit(const std::vector<std::string>& chunks, uint64_t lines) {
  std::string payload, out;
  uint64_t shipped = 0, compressed = 0;
  double cpu = 0;
  for (const std::string& bytes : chunks) {
    auto c = DecodeChunkView(bytes, DecodeOptions{});
    LOGDEX_CHECK(c.ok());
    LOGDEX_CHECK(c->header.codec() == proto::CODEC_ZSTD);
    LOGDEX_CHECK(ZstdDecompress(c->payload, c->header.uncompressed_size(), &payload));
    shipped += c->payload.size();
    const double c0 = CpuSeconds();
    compressed += ZstdCompress(payload, kDefaultZstdLevel, &out);
    cpu += CpuSeconds() - c0;
  }
  LOGDEX_CHECK(compressed == shipped);
  return lines / cpu;
}

json BenchOne(const std::string& sample_name, parse::Format format, const std::string& file, uint64_t lines) {
  const uint64_t bytes = std::filesystem::file_size(file);
  // Baseline 1: cat (read the file in 1 MiB blocks), after a warm-up read.
  std::string buf(1 << 20, '\0');
  auto cat = [&] {
    int fd = ::open(file.c_str(), O_RDONLY);
    LOGDEX_CHECK(fd >= 0);
    uint64_t n = 0;
    for (ssize_t r; (r = ::read(fd, buf.data(), buf.size())) > 0;) n += static_cast<uint64_t>(r);
    ::close(fd);
    return n;
  };
  cat();
  double c0 = CpuSeconds(), w0 = WallSeconds();
  LOGDEX_CHECK(cat() == bytes);
  const double cat_cpu = CpuSeconds() - c0, cat_wall = WallSeconds() - w0;

  // Baseline 2: snappy on the same bytes, 64 KiB blocks (read included).
  std::string compressed;
  uint64_t snappy_out = 0;
  c0 = CpuSeconds();
  w0 = WallSeconds();
  {
    int fd = ::open(file.c_str(), O_RDONLY);
    LOGDEX_CHECK(fd >= 0);
    for (ssize_t r; (r = ::read(fd, buf.data(), buf.size())) > 0;) {
      for (ssize_t off = 0; off < r; off += 64 * 1024) {
        size_t n = std::min<size_t>(64 * 1024, static_cast<size_t>(r - off));
        snappy::Compress(buf.data() + off, n, &compressed);
        snappy_out += compressed.size();
      }
    }
    ::close(fd);
  }
  const double snappy_cpu = CpuSeconds() - c0, snappy_wall = WallSeconds() - w0;

  // The ship path: tailer -> parser -> assembler -> chunker (snappy, crc32c).
  ManualClock clock(SystemClock::Instance().NowMs());  // linger never fires: size thresholds only
  parse::ParserOptions po;
  po.format = format;
  auto parser = parse::LineParser::Create(po, clock);
  LOGDEX_CHECK(parser.ok());
  auto seq = ship::SequenceAllocator::InMemory(1);
  NullSink sink;
  sink.keep = format == parse::Format::kJson;  // for ZstdPayloadLimit
  ship::ChunkerOptions co;
  co.app = "bench";
  co.host = "h1";
  ship::Chunker chunker(co, *seq, sink, clock);
  parse::AssemblerOptions ao;
  ao.multiline = format != parse::Format::kJson;  // as `logdex ship --format json`
  parse::RecordAssembler assembler(**parser, chunker, ao);
  ship::FileTailer tailer(file, ship::TailerOptions{});
  c0 = CpuSeconds();
  w0 = WallSeconds();
  while (!tailer.done()) {
    auto r = tailer.Read([&](std::string_view line) { return assembler.AddLine(line); }, 4 << 20);
    LOGDEX_CHECK(r.ok());
  }
  LOGDEX_CHECK(assembler.Flush().ok());
  LOGDEX_CHECK(chunker.FlushAll().ok());
  const double ship_cpu = CpuSeconds() - c0, ship_wall = WallSeconds() - w0;
  LOGDEX_CHECK(assembler.lines() == lines);
  LOGDEX_CHECK(sink.records == lines);

  const double mb = bytes / 1e6;
  json limit;
  if (format == parse::Format::kJson) {
    // The path's floor: simdjson's parse of each line plus zstd of what ship
    // compressed, each at its own rate (per line, their times add up).
    const double simd = SimdjsonLimit(file, lines);
    const double zstd = ZstdPayloadLimit(sink.kept, lines);
    const double both = 1 / (1 / simd + 1 / zstd);
    limit = {{"baseline_simdjson_parse_lines_per_s_per_core", R2(simd)},
             {"ratio_ship_to_simdjson_parse", R2((lines / ship_cpu) / simd)},
             {"baseline_zstd_payloads_lines_per_s_per_core", R2(zstd)},
             {"baseline_parse_and_zstd_lines_per_s_per_core", R2(both)},
             {"ratio_ship_to_parse_and_zstd", R2((lines / ship_cpu) / both)}};
  }
  json result = {{"benchmark", "ship_parse_chunk"},
          {"sample", sample_name},
          {"format", std::string(parse::FormatName(format))},
          {"input_bytes", bytes},
          {"lines", lines},
          {"unparsed_lines", assembler.unparsed_lines()},
          {"chunks", sink.chunks},
          {"compression_ratio", R2(static_cast<double>(chunker.stats().uncompressed_bytes) / sink.bytes)},
          {"lines_per_s_per_core", R2(lines / ship_cpu)},
          {"mb_per_s_per_core", R2(mb / ship_cpu)},
          {"wall_s", R2(ship_wall)},
          {"baseline_cat_mb_per_s", R2(mb / cat_cpu)},
          {"baseline_cat_wall_s", R2(cat_wall)},
          {"baseline_snappy_mb_per_s", R2(mb / snappy_cpu)},
          {"baseline_snappy_wall_s", R2(snappy_wall)},
          {"baseline_snappy_ratio", R2(static_cast<double>(bytes) / snappy_out)},
          {"ratio_ship_to_cat", R2(cat_cpu / ship_cpu)},
          {"ratio_ship_to_snappy", R2(snappy_cpu / ship_cpu)},
          {"note", "MB = 10^6 input bytes; rates per second of one thread's CPU time; ratios are throughput "
                   "ratios (ship / baseline) on the same file in the same run"}};
  if (!limit.is_null()) result.update(limit);
  return result;
}

// serve's line input on the JSON lines of `file` (its first `max_lines`):
// BatchProcessor::Add over messages marked `logdex-format: json`, that is the
// line decoder (parse, stream grouping, chunk encoding) and the indexer's
// staging of every row into a batch; no store write (the batch is dropped:
// `bench consume` measures writes). Messages of one line (rsyslog omkafka's
// shape) and of 1000 lines (a batching shipper's). Lines/s per core, next to
// ship's own path over the same lines.
json BenchLineInput(const BenchOptions& o, const std::string& file, uint64_t max_lines, double ship_lines_per_s) {
  std::vector<std::string> lines;
  {
    std::ifstream in(file, std::ios::binary);
    for (std::string line; lines.size() < max_lines && std::getline(in, line);) lines.push_back(std::move(line));
  }
  std::string dir = o.dir.empty() ? std::filesystem::temp_directory_path().string() : o.dir;
  dir += "/logdex-bench-line-input-XXXXXX";
  LOGDEX_CHECK(mkdtemp(dir.data()) != nullptr);
  ManualClock clock(SystemClock::Instance().NowMs());
  json out = {{"benchmark", "serve_line_input"}, {"format", "json"}, {"lines", lines.size()}};
  for (const size_t per_message : {size_t{1}, size_t{1000}}) {
    RocksDbOptions ro;
    ro.path = dir + "/store-" + std::to_string(per_message);
    ro.clock = &clock;
    auto store = RocksDbStore::Open(ro);
    LOGDEX_CHECK(store.ok());
    LOGDEX_CHECK(CreateTables(**store, TableLayout{}).ok());
    IndexerOptions io;
    io.decode.clock = &clock;
    Indexer indexer(**store, io);
    bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
    std::unique_ptr<LineDecoder> decoder = o.make_line_decoder(clock);
    BatchProcessorOptions bo;
    bo.decode = io.decode;
    BatchProcessor processor(indexer, bo, decoder.get());
    std::vector<InMessage> messages;
    for (size_t i = 0; i < lines.size(); i += per_message) {
      InMessage& m = messages.emplace_back();
      m.topic = "lines";
      m.offset = static_cast<int64_t>(messages.size());
      m.timestamp_ms = clock.NowMs();
      m.headers.emplace_back("logdex-format", "json");
      std::string value;
      for (size_t j = i; j < std::min(lines.size(), i + per_message); ++j) (value += lines[j]) += '\n';
      m.value = std::move(value);
    }
    ProcessedBatch batch;
    uint64_t records = 0;
    const double c0 = CpuSeconds();
    for (size_t i = 0; i < messages.size(); i += 1000) {  // consumer batches of 1000 messages
      processor.Add(std::span(messages).subspan(i, std::min<size_t>(1000, messages.size() - i)), batch);
      LOGDEX_CHECK(batch.dead_letters.empty());
      records += batch.records;
      batch.Clear();
      processor.Settle(false);
    }
    const double cpu = CpuSeconds() - c0;
    LOGDEX_CHECK(records == lines.size());
    const std::string key = "lines_per_message_" + std::to_string(per_message);
    out[key + "_lines_per_s_per_core"] = R2(lines.size() / cpu);
    out[key + "_ratio_to_ship"] = R2(lines.size() / cpu / ship_lines_per_s);
  }
  std::filesystem::remove_all(dir);
  out["baseline_ship_lines_per_s_per_core"] = R2(ship_lines_per_s);
  out["note"] = "rates per second of one thread's CPU time: BatchProcessor::Add (decode, chunk, stage rows), no store "
                "write; ship = `logdex ship`'s parse+chunk path over the whole file, same run";
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

ship::OutgoingChunk OneChunk(uint64_t seq) {
  ship::OutgoingChunk c;
  c.key = "bench/h1/ERROR";
  c.value = "first delivery " + std::to_string(seq);
  c.sequence = seq;
  c.records = 1;
  c.severity = Severity::kError;
  return c;
}

// Polls `p` until it has no chunk in flight; the milliseconds that took.
double WaitDelivered(ship::KafkaChunkProducer& p, double t0_ms) {
  for (int i = 0; i < 60'000 && p.in_flight() > 0; ++i) p.Poll(1);
  LOGDEX_CHECK(p.in_flight() == 0);
  return SystemClock::Instance().MonotonicNs() / 1e6 - t0_ms;
}

class CountDelivered final : public RdKafka::DeliveryReportCb {
 public:
  void dr_cb(RdKafka::Message& m) override { ok += m.err() == RdKafka::ERR_NO_ERROR; }
  int ok = 0;
};

json BenchFirstDelivery(int rounds) {
  constexpr auto kFirstChunkAfter = std::chrono::milliseconds(20);
  auto kafka = EmbeddedKafka::Start(1);
  LOGDEX_CHECK(kafka.ok());
  const std::string topic = "bench.first";
  LOGDEX_CHECK((*kafka)->CreateTopic(topic, 8).ok());
  const Clock& clock = SystemClock::Instance();
  auto now_ms = [&] { return clock.MonotonicNs() / 1e6; };
  ship::ProducerOptions po;
  po.brokers = (*kafka)->bootstrap();
  po.topic = topic;
  po.kafka = {{"log_level", "3"}};
  std::vector<double> cold, warm, naive;
  uint64_t seq = 0;
  for (int r = 0; r < rounds; ++r) {
    // The shipper's producer, new each round: create, send, acknowledged.
    prometheus::Registry registry;
    auto p = ship::KafkaChunkProducer::Create(po, registry, clock);
    LOGDEX_CHECK(p.ok());
    std::this_thread::sleep_for(kFirstChunkAfter);
    const double t0 = now_ms();
    LOGDEX_CHECK((*p)->Send(OneChunk(++seq)).ok());
    cold.push_back(WaitDelivered(**p, t0));
    // The same producer once warm: one chunk's round trip.
    const double t1 = now_ms();
    LOGDEX_CHECK((*p)->Send(OneChunk(++seq)).ok());
    warm.push_back(WaitDelivered(**p, t1));
    LOGDEX_CHECK((*p)->Finish(10'000).delivered_chunks == 2);

    // Baseline: librdkafka with the shipper's settings, topic named at produce().
    CountDelivered dr;
    std::string err;
    auto conf = KafkaConf({{"bootstrap.servers", po.brokers}, {"enable.idempotence", "true"}, {"acks", "all"},
                           {"linger.ms", "5"}, {"compression.type", "none"}, {"log_level", "3"}},
                          &err);
    LOGDEX_CHECK(conf && conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(&dr), err) == RdKafka::Conf::CONF_OK);
    std::unique_ptr<RdKafka::Producer> raw(RdKafka::Producer::create(conf.get(), err));
    LOGDEX_CHECK(raw != nullptr);
    std::this_thread::sleep_for(kFirstChunkAfter);
    const double t2 = now_ms();
    std::string value = "first delivery baseline";
    LOGDEX_CHECK(raw->produce(topic, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, value.data(),
                              value.size(), nullptr, 0, 0, nullptr) == RdKafka::ERR_NO_ERROR);
    for (int i = 0; i < 60'000 && dr.ok == 0; ++i) raw->poll(1);
    LOGDEX_CHECK(dr.ok == 1);
    naive.push_back(now_ms() - t2);
  }
  auto round_list = [](const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(R2(x));
    return a;
  };
  return {{"benchmark", "ship_first_delivery"},
          {"rounds", rounds},
          {"first_chunk_ms_median", R2(Median(cold))},
          {"first_chunk_ms_max", R2(Max(cold))},
          {"first_chunk_ms", round_list(cold)},
          {"baseline_warm_chunk_ms_median", R2(Median(warm))},
          {"baseline_topic_at_first_produce_ms_median", R2(Median(naive))},
          {"baseline_topic_at_first_produce_ms", round_list(naive)},
          {"ratio_first_to_warm", R2(Median(cold) / Median(warm))},
          {"ratio_first_to_topic_at_first_produce", R2(Median(cold) / Median(naive))},
          {"note", "wall ms from sending the first chunk, 20 ms after the producer was made, to its "
                   "acknowledgement by an in-process mock Kafka cluster; warm = the same producer's next one-chunk "
                   "round trip"}};
}

}  // namespace

int RunShipBench(const BenchOptions& o) {
  std::string dir = o.dir;
  bool made = false;
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "logdex-bench-ship-XXXXXX").string();
    LOGDEX_CHECK(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    made = true;
  }
  const uint64_t target = static_cast<uint64_t>((1ull << 30) * o.scale);
  int rc = 0;
  for (const auto& [name, format] : {std::pair<std::string, parse::Format>{"HDFS", parse::Format::kAuto},
                                     std::pair<std::string, parse::Format>{"Spark", parse::Format::kAuto}}) {
    const std::string sample = (std::filesystem::path(o.data_dir) / (name + "_2k.log")).string();
    if (!std::filesystem::exists(sample)) {
      std::printf("%s\n", json{{"benchmark", "ship_parse_chunk"}, {"error", "no sample " + sample}}.dump().c_str());
      rc = 1;
      continue;
    }
    const std::string file = dir + "/" + name + "_replicated.log";
    const uint64_t lines = Replicate(sample, file, target);
    std::printf("%s\n", BenchOne(name, format, file, lines).dump().c_str());
    std::fflush(stdout);
    std::filesystem::remove(file);
  }
  {
    const std::string sample = dir + "/json_sample.jsonl";
    std::ofstream(sample, std::ios::binary) << JsonSample(SystemClock::Instance().NowMs());
    const std::string file = dir + "/json_replicated.jsonl";
    const uint64_t lines = Replicate(sample, file, target / 2);
    const json ship = BenchOne("json", parse::Format::kJson, file, lines);
    std::printf("%s\n", ship.dump().c_str());
    std::fflush(stdout);
    if (o.make_line_decoder) {
      const uint64_t line_input_lines = std::max<uint64_t>(2000, std::min<uint64_t>(lines, 200'000 * o.scale));
      std::printf("%s\n", BenchLineInput(o, file, line_input_lines, ship["lines_per_s_per_core"]).dump().c_str());
      std::fflush(stdout);
    }
    std::filesystem::remove(file);
    std::filesystem::remove(sample);
  }
  if (made) std::filesystem::remove_all(dir);
  std::printf("%s\n", BenchFirstDelivery(std::max(3, static_cast<int>(5 * o.scale))).dump().c_str());
  std::fflush(stdout);
  return rc;
}

}  // namespace logdex
