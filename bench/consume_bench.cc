// `logdex bench consume`: end-to-end ingest (mock Kafka -> decode -> index ->
// RocksDB, queryable) next to its two limits measured in the same run: raw
// consumption of the same messages with no processing, and raw store writes
// of the same bytes. Figures are per CPU-second of the process (per core):
// the mock broker runs in this process, so every Kafka phase pays for it alike.
#include <librdkafka/rdkafkacpp.h>
#include <prometheus/registry.h>
#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "common/chunk_writer.h"
#include "common/row_keys.h"
#include "consumer/batch_processor.h"
#include "consumer/embedded_kafka.h"
#include "consumer/group_consumer.h"
#include "consumer/kafka_clients.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "ship/chunker.h"
#include "store/rocksdb_store.h"

namespace logdex {
namespace {

using nlohmann::json;

// The CPU of what is measured: this process (with the mock cluster in it), plus
// a real broker's process while the real-broker rounds run (g_broker_pid).
int g_broker_pid = 0;

// utime + stime of `pid` from /proc/<pid>/stat (fields 14 and 15), in seconds.
double ProcessCpu(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  LOGDEX_CHECK(paren != std::string::npos);
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double Cpu() { return bench::CpuSeconds() + (g_broker_pid > 0 ? ProcessCpu(g_broker_pid) : 0.0); }
int64_t NowNs() { return bench::NowNs(); }
double R(double v) { return bench::Round2(v); }

struct Phase {
  double cpu_s = 0, wall_s = 0;
};

struct EndToEnd {
  Phase phase;
  uint64_t lines = 0;            // lines in the timed span
  uint64_t indexed_records = 0;  // every record the member indexed
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Limit 1: raw consumption of every message, no processing.
Phase RawConsume(const std::string& bootstrap, const std::string& topic, int partitions, size_t messages) {
  auto c = ConsumerFromStart(bootstrap, "raw", topic, partitions);
  LOGDEX_CHECK(c != nullptr);
  size_t got = 0;
  double cpu0 = 0;
  int64_t t0 = 0;
  while (got < messages) {
    std::unique_ptr<RdKafka::Message> m(c->consume(100));
    if (!m || m->err()) continue;
    if (got++ == 0) {
      cpu0 = Cpu();
      t0 = NowNs();
    }
  }
  Phase out{Cpu() - cpu0, (NowNs() - t0) / 1e9};
  c->close();
  return out;
}

// Limit 2: raw store writes of the same bytes (one main-table row per
// message, 64 per batch, the WAL on), then a flush of the memtables.
Phase RawStore(const BenchOptions& o, const std::vector<std::string>& chunks, int64_t base) {
  bench::ScratchDir dir(o.dir, "raw-store");
  auto store = bench::OpenStoreWithTables(dir.str());
  const double cpu0 = Cpu();
  const int64_t t0 = NowNs();
  for (size_t i = 0; i < chunks.size(); i += 64) {
    WriteBatch b;
    for (size_t j = i; j < std::min(chunks.size(), i + 64); ++j) {
      b.Put(kMainTable, MainKey{static_cast<uint8_t>(j % 16), AppId(j), Severity::kInfo, base, HostId(j), ChunkId(j)}.Encode(), chunks[j]);
    }
    LOGDEX_CHECK(store->Write(b).ok());
  }
  LOGDEX_CHECK(store->Flush().ok());
  return {Cpu() - cpu0, (NowNs() - t0) / 1e9};
}

// End to end: a consumer-group member indexing into RocksDB, from the first
// message consumed to the last batch durable (then it is queryable), then a
// flush of the memtables as in the raw store phase. With `skip_wal`, as
// serve runs store.durability skip_wal: no WAL, and a flush then a commit
// every 8 MiB of messages (serve's default is 256 MiB or 5 s; the smaller
// step keeps several flush-and-commit cycles inside this short run).
// `verify` is serve's indexer.verify (default full). `ledger_check`: as
// serve runs with compaction on (the default): every chunk older than the
// settle (10 min; all of this bench's, an hour old) is looked up in the
// merge ledger, a range of the stream's rows, under the merge gate.
struct Variant {
  bool skip_wal = false;
  IngestVerify verify = IndexerOptions{}.verify;
  bool ledger_check = false;
};
EndToEnd RunEndToEnd(const BenchOptions& o, const std::string& bootstrap, const std::string& topic,
                     const std::string& group, size_t messages_total, Variant variant = {}) {
  const bool skip_wal = variant.skip_wal;
  bench::ScratchDir dir(o.dir, "e2e");
  auto store = bench::OpenStoreWithTables(dir.str(), skip_wal ? Durability::kSkipWal : Durability::kAsync);
  IndexerOptions io;
  io.verify = variant.verify;
  MergeGate gate;
  if (variant.ledger_check) {
    io.merged_check_ms = 10 * 60'000;        // compaction.settle's default
    io.merged_max_span_ms = 3 * 3'600'000;  // compaction.max_span's
    io.merge_gate = &gate;
  }
  Indexer indexer(*store, io);
  bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
  BatchProcessorOptions bo;
  bo.messages_outlive_batch = true;  // as serve runs it
  BatchProcessor processor(indexer, bo, nullptr);
  prometheus::Registry registry;
  ConsumerMetrics metrics(registry);
  GroupConsumerOptions go;
  go.kafka["bootstrap.servers"] = bootstrap;
  go.kafka["log_level"] = "2";
  go.group_id = group;
  go.topics = {topic};
  go.session_timeout_ms = 6000;
  if (skip_wal) {
    go.flush = [&store] { return store->Flush(); };
    go.flush_bytes = 8ull << 20;
  }
  EndToEnd out;
  std::atomic<uint64_t> messages{0};
  std::atomic<int64_t> first_ns{0}, last_ns{0};
  std::atomic<double> first_cpu{0}, last_cpu{0};
  uint64_t first_batch_records = 0;
  // [first, last] runs from the end of the first durable batch to the end
  // of the last: the group join is outside it, and so are the first
  // batch's lines (subtracted below).
  go.on_written = [&](const ProcessedBatch& b) {
    if (messages == 0) {
      first_ns = NowNs();
      first_cpu = Cpu();
      first_batch_records = b.records;
    }
    messages += b.messages;
    out.indexed_records += b.records;
    last_ns = NowNs();
    last_cpu = Cpu();
  };
  GroupConsumer consumer(go, *store, processor, metrics, SystemClock::Instance());
  LOGDEX_CHECK(consumer.Start().ok());
  std::atomic<bool> stop{false};
  std::thread run([&] { LOGDEX_CHECK(consumer.Run(stop).ok()); });
  while (messages < messages_total) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // The flush, timed from the last batch's end (leaving the group is not).
  const double before_flush = Cpu();
  const int64_t before_flush_ns = NowNs();
  LOGDEX_CHECK(store->Flush().ok());
  const double flush_cpu = Cpu() - before_flush;
  const double flush_s = (NowNs() - before_flush_ns) / 1e9;
  stop = true;
  run.join();
  out.phase = {last_cpu - first_cpu + flush_cpu, (last_ns - first_ns) / 1e9 + flush_s};
  out.lines = out.indexed_records - first_batch_records;
  return out;
}

void Produce(const std::string& bootstrap, const std::string& topic, int partitions,
             const std::vector<std::string>& chunks) {
  std::string err;
  auto conf = KafkaConf({{"bootstrap.servers", bootstrap}, {"log_level", "2"}});
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(conf.get(), err));
  LOGDEX_CHECK(p != nullptr);
  for (size_t i = 0; i < chunks.size(); ++i) {
    while (p->produce(topic, static_cast<int32_t>(i % partitions), RdKafka::Producer::RK_MSG_COPY,
                      const_cast<char*>(chunks[i].data()), chunks[i].size(), nullptr, 0, 0, nullptr, nullptr) ==
           RdKafka::ERR__QUEUE_FULL) {
      p->poll(10);
    }
  }
  LOGDEX_CHECK(p->flush(120'000) == RdKafka::ERR_NO_ERROR);
}

}  // namespace

json BenchConsume(const BenchOptions& o, const std::vector<std::string>& lines) {
  const size_t kShipChunkBytes = ship::ChunkerOptions{}.max_chunk_bytes;
  const int partitions = 32;  // the mock keeps ~5 MiB per partition
  const std::string topic = "bench";
  auto kafka = EmbeddedKafka::Start(1);
  LOGDEX_CHECK(kafka.ok());
  LOGDEX_CHECK((*kafka)->CreateTopic(topic, partitions).ok());
  LOGDEX_CHECK((*kafka)->CreateTopic(topic + ".dlq", 1).ok());
  const std::string bootstrap = (*kafka)->bootstrap();

  // Chunks as the shipper makes them under load: full (its max_chunk_bytes
  // of real lines each, 64 KiB) and in its codec (zstd-1). The mock keeps
  // ~5 MiB per partition: stay under it.
  std::vector<std::string> chunks;
  uint64_t total_lines = 0, total_bytes = 0;
  const size_t count = static_cast<size_t>(std::max(32.0, 6400 * std::min(o.scale, 1.0)));
  const int64_t base = SystemClock::Instance().NowMs() - 3'600'000;
  size_t next = 0;
  for (size_t c = 0; c < count; ++c) {
    proto::RecordBatch b;
    size_t payload = 0;  // as ship's Chunker counts it: a record that would pass the limit starts the next chunk
    for (;; ++next) {
      const std::string& line = lines[next % lines.size()];
      const int64_t ts = base + static_cast<int64_t>(c) * 20 + b.records_size() % 20;
      const uint32_t severity = SeverityCode(Severity::kInfo);
      const size_t size = ChunkWriter::RecordBytes(ChunkWriter::RecordBodyBytes(ts, severity, line, {}, {}));
      if (b.records_size() > 0 && payload + size > kShipChunkBytes) break;
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(ts);
      r->set_severity(severity);
      r->set_message(line);
      payload += size;
    }
    total_lines += b.records_size();
    PackOptions po;
    po.codec = kDefaultCodec;  // and its level, kDefaultZstdLevel, as ship's Chunker
    po.producer_id = 7;
    po.sequence = c + 1;
    chunks.push_back(PackChunk("app" + std::to_string(c % 20), "host" + std::to_string(c % 50), b, po)
                         .SerializeAsString());
    total_bytes += chunks.back().size();
  }
  Produce(bootstrap, topic, partitions, chunks);

  // Three rounds of each phase, interleaved, so that a noisy neighbour
  // spreads over all three; each figure is the median round.
  constexpr int kRounds = 3;
  std::vector<double> consume_rates, store_rates, e2e_rates, e2e_walls, skip_wal_rates, header_rates, ledger_rates;
  for (int round = 0; round < kRounds; ++round) {
    const Phase c = RawConsume(bootstrap, topic, partitions, chunks.size());
    consume_rates.push_back(total_lines / c.cpu_s);
    const Phase s = RawStore(o, chunks, base);
    store_rates.push_back(total_lines / s.cpu_s);
    const EndToEnd e = RunEndToEnd(o, bootstrap, topic, "e2e-" + std::to_string(round), chunks.size());
    LOGDEX_CHECK(e.indexed_records == total_lines);
    e2e_rates.push_back(e.lines / e.phase.cpu_s);
    e2e_walls.push_back(e.phase.wall_s);
    const EndToEnd w = RunEndToEnd(o, bootstrap, topic, "skip-wal-" + std::to_string(round), chunks.size(),
                                   {.skip_wal = true});
    LOGDEX_CHECK(w.indexed_records == total_lines);
    skip_wal_rates.push_back(w.lines / w.phase.cpu_s);
    const EndToEnd h = RunEndToEnd(o, bootstrap, topic, "verify-header-" + std::to_string(round), chunks.size(),
                                   {.verify = IngestVerify::kHeader});
    LOGDEX_CHECK(h.indexed_records == total_lines);
    header_rates.push_back(h.lines / h.phase.cpu_s);
    const EndToEnd l = RunEndToEnd(o, bootstrap, topic, "ledger-check-" + std::to_string(round), chunks.size(),
                                   {.ledger_check = true});
    LOGDEX_CHECK(l.indexed_records == total_lines);
    ledger_rates.push_back(l.lines / l.phase.cpu_s);
  }

  const double e2e_pc = R(Median(e2e_rates)), consume_pc = R(Median(consume_rates)), store_pc = R(Median(store_rates));
  const double slower = std::min(consume_pc, store_pc);
  auto rounded = [](std::vector<double> v) {
    for (double& x : v) x = R(x);
    return v;
  };
  json out = {{"benchmark", "consume_end_to_end"},
          {"messages", chunks.size()},
          {"lines", total_lines},
          {"mib", R(total_bytes / 1048576.0)},
          {"rounds", kRounds},
          {"end_to_end_lines_per_core_s", e2e_pc},
          {"end_to_end_wall_s", R(Median(e2e_walls))},
          {"limit_raw_consume_lines_per_core_s", consume_pc},
          {"limit_raw_store_write_lines_per_core_s", store_pc},
          {"ratio_to_raw_consume", R(e2e_pc / consume_pc)},
          {"ratio_to_raw_store_write", R(e2e_pc / store_pc)},
          {"ratio_to_slower_limit", R(e2e_pc / slower)},
          {"end_to_end_skip_wal_lines_per_core_s", R(Median(skip_wal_rates))},
          {"ratio_skip_wal_to_end_to_end", R(Median(skip_wal_rates) / e2e_pc)},
          {"rounds_end_to_end_skip_wal", rounded(skip_wal_rates)},
          {"end_to_end_verify_header_lines_per_core_s", R(Median(header_rates))},
          {"ratio_verify_full_to_header", R(e2e_pc / Median(header_rates))},
          {"rounds_end_to_end_verify_header", rounded(header_rates)},
          {"end_to_end_ledger_check_lines_per_core_s", R(Median(ledger_rates))},
          {"ratio_ledger_check_to_end_to_end", R(Median(ledger_rates) / e2e_pc)},
          {"rounds_end_to_end_ledger_check", rounded(ledger_rates)},
          {"rounds_end_to_end", rounded(e2e_rates)},
          {"rounds_raw_consume", rounded(consume_rates)},
          {"rounds_raw_store_write", rounded(store_rates)},
          {"note", "median of the rounds; per core = lines per CPU-second of the whole process (mock broker and RocksDB "
                   "threads included); both store phases end with a memtable flush (the steady-state cost of every "
                   "byte written); end to end excludes the group join and counts from the first batch made durable; "
                   "end to end runs indexer.verify full (the default: every chunk decompressed and checked), "
                   "verify_header the light check for trusted producers; ledger_check as serve ingests with compaction "
                   "on (the default) chunks older than its settle: each looked up in the merge ledger"}};

  // The same messages through a real broker, when one is named: end to end and
  // raw consumption, the broker's CPU counted with this process's.
  if (!o.brokers.empty()) {
    const std::string real_topic = "bench-real";
    Produce(o.brokers, real_topic, partitions, chunks);
    g_broker_pid = o.broker_pid;
    std::vector<double> real_e2e, real_walls, real_consume;
    for (int round = 0; round < kRounds; ++round) {
      const Phase c = RawConsume(o.brokers, real_topic, partitions, chunks.size());
      real_consume.push_back(total_lines / c.cpu_s);
      const EndToEnd e = RunEndToEnd(o, o.brokers, real_topic, "e2e-real-" + std::to_string(round), chunks.size());
      LOGDEX_CHECK(e.indexed_records == total_lines);
      real_e2e.push_back(e.lines / e.phase.cpu_s);
      real_walls.push_back(e.phase.wall_s);
    }
    g_broker_pid = 0;
    const double real_pc = R(Median(real_e2e));
    out["real_broker"] = {
        {"bootstrap", o.brokers},
        {"broker_cpu_counted", o.broker_pid > 0},
        {"end_to_end_lines_per_core_s", real_pc},
        {"end_to_end_wall_s", R(Median(real_walls))},
        {"limit_raw_consume_lines_per_core_s", R(Median(real_consume))},
        {"ratio_to_mock_end_to_end", R(real_pc / e2e_pc)},
        {"ratio_wall_to_mock_end_to_end", R(Median(real_walls) / Median(e2e_walls))},
        {"rounds_end_to_end", rounded(real_e2e)},
        {"rounds_raw_consume", rounded(real_consume)},
        {"note", "the same messages and rounds as above through the real broker; per core = lines per CPU-second "
                 "of this process plus the broker's (when its pid is given), as the mock's CPU is counted above"}};
  }
  return out;
}

}  // namespace logdex
