// `logdex bench storage`: what the store holds per raw byte of log, and how
// many rows, for three workloads and each chunk codec (issue 16's
// figures). The chunks are made by ship's own Chunker (64 KiB, 1 s linger,
// one stream per app, host and severity) on a simulated clock and indexed by
// the Indexer into RocksDB with logdex's tables, as serve does, without Kafka:
//
//   replay    N lines spread over the last 24 h, 4 apps x 8 hosts, severities
//             INFO 88 % / WARN 8 % / ERROR 3 % / DEBUG 1 %, read at once (a
//             file shipped after the fact: only the size threshold flushes).
//   replay_json  the same with JSON lines of about 200-250 bytes (bench::JsonLogLine:
//             time, level, message, host, app, a user, a random 64-bit request
//             id, a duration, a status), the replay issue 16 first measured.
//   realtime  S streams each logging one line a second for H simulated hours
//             (a fleet of quiet services: the 1 s linger flushes every line).
//
// Raw bytes are the lines with their newlines (Loghub sample lines but in
// replay_json; the stored message is the whole line, so nothing is saved by
// parsing). Figures per workload and codec:
//   - disk bytes per raw byte: "live" right after ingest (memtables unflushed,
//     WAL included) and "settled" after a flush of every memtable and a full
//     compaction of every table (what a store converges to once RocksDB's own
//     compactions are done);
//   - stored main rows and all rows per 10^6 lines (RocksDB entries, counted
//     after the compaction);
//   - ingest CPU seconds per 10^6 lines (chunking + indexing + RocksDB's
//     background threads) and the settle's CPU next to it;
//   - the same after chunk compaction (indexer/compactor.h, default options,
//     output zstd-3 by columns, the default, or plain zstd-3 to compare;
//     after snappy chunks too: serve's compactor has no snappy output, so a
//     store fed snappy chunks settles in zstd), once every record has
//     settled (one pass at end + settle + max_span), then a settle again:
//     "*_compacted" figures (the `merged` ledger included: about 1-2 bytes
//     a shipped part, indexer/merge_ledger.h; 8 before, when it was more
//     than the real-time workload's merged chunks),
//     and the pass's CPU per 10^6 lines next to ingest's (the whole process,
//     RocksDB's threads included);
//   - `goals`: issue 16's, per workload, on serve's defaults.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/indexing_sink.h"
#include "common/clock.h"
#include "common/severity.h"
#include "indexer/compactor.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "ship/chunker.h"
#include "ship/sequence.h"
#include "store/rocksdb_store.h"

namespace logdex {
namespace {

using nlohmann::json;
using bench::CpuSeconds;
using bench::Round2;


struct Workload {
  std::string name;
  uint64_t lines = 0;       // replay
  int streams = 0;          // realtime
  int64_t seconds = 0;      // realtime
  int64_t max_chunk_span_ms = 60'000;  // the indexer's (indexer.max_chunk_span)
  bool json_lines = false;  // the lines: JSON (bench::JsonLogLine) or the Loghub samples
};

// Ship's chunks in `codec`; the compactor writes `compacted_codec`.
json RunOne(const BenchOptions& o, const Workload& w, proto::Codec codec, proto::Codec compacted_codec,
            const std::vector<std::string>& samples) {
  LOGDEX_CHECK(compacted_codec == proto::CODEC_ZSTD || compacted_codec == proto::CODEC_ZSTD_COLUMNS);  // serve's choices
  bench::ScratchDir dir(o.dir, "storage");
  auto store = bench::OpenStoreWithTables(dir.str());
  IndexerOptions io;
  io.retention_ms = 7ll * 24 * 3600 * 1000;
  io.max_chunk_span_ms = w.max_chunk_span_ms;
  Indexer indexer(*store, io);
  bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
  bench::IndexingSink sink(indexer);

  // A whole minute, so that the indexer's 60 s windows fall the same way every run.
  const int64_t end_ms = SystemClock::Instance().NowMs() / 60'000 * 60'000;
  ManualClock clock(end_ms);
  auto sequences = ship::SequenceAllocator::InMemory(1);
  ship::ChunkerOptions co;
  co.app = "bench";
  co.host = "h0";
  co.line_identity = ship::LineIdentity::kStream;  // each record names its app and host
  co.codec = codec;
  ship::Chunker chunker(co, *sequences, sink, clock);

  std::mt19937_64 rng(20261202);
  std::vector<std::string> apps, hosts;
  for (int a = 0; a < 4; ++a) apps.push_back("app" + std::to_string(a));
  uint64_t lines = 0, raw_bytes = 0;
  size_t next_sample = 0;
  auto next_loghub_line = [&]() -> std::string_view { return samples[next_sample++ % samples.size()]; };
  auto emit = [&](int64_t ts_ms, std::string_view app, std::string_view host, Severity severity,
                  std::string_view message) {
    parse::RecordView r;
    r.ts_ms = ts_ms;
    r.severity = severity;
    r.message = message;
    r.app = app;
    r.host = host;
    LOGDEX_CHECK(chunker.OnRecord(r).ok());
    ++lines;
    raw_bytes += message.size() + 1;
  };

  // The replay's lines are drawn before ingest, so that ingest's CPU is
  // its own (a JSON line's formatting is not ingest's work).
  struct ReplayLine {
    uint8_t app = 0;
    uint8_t host = 0;
    Severity severity = Severity::kInfo;
    uint64_t json_end = 0;  // replay_json: where its line ends in json_text
  };
  std::vector<ReplayLine> replay;
  std::string json_text;
  const int64_t replay_start_ms = end_ms - 24ll * 3600 * 1000;
  auto replay_time = [&](uint64_t i) { return bench::DayLineTime(replay_start_ms, i, w.lines); };
  if (w.streams == 0) {
    for (int h = 0; h < 8; ++h) hosts.push_back("host" + std::to_string(h));
    replay.reserve(w.lines);
    if (w.json_lines) json_text.reserve(w.lines * 300);  // the longest lines; untouched pages cost nothing
    for (uint64_t i = 0; i < w.lines; ++i) {
      ReplayLine line;
      line.app = static_cast<uint8_t>(rng() % apps.size());
      line.host = static_cast<uint8_t>(rng() % hosts.size());
      line.severity = bench::PickSeverity(rng);
      if (w.json_lines) {
        const uint64_t r1 = rng();
        const uint64_t r2 = rng();
        json_text += bench::JsonLogLine(replay_time(i), SeverityName(line.severity), apps[line.app], hosts[line.host],
                                        r1, r2);
        line.json_end = json_text.size();
      }
      replay.push_back(line);
    }
  }

  const double cpu0 = CpuSeconds();
  if (w.streams == 0) {
    const std::string_view all_json = json_text;
    uint64_t json_begin = 0;
    for (uint64_t i = 0; i < w.lines; ++i) {
      const ReplayLine& line = replay[i];
      std::string_view message;
      if (w.json_lines) {
        message = all_json.substr(json_begin, line.json_end - json_begin);
        json_begin = line.json_end;
      } else {
        message = next_loghub_line();
      }
      emit(replay_time(i), apps[line.app], hosts[line.host], line.severity, message);
    }
  } else {
    // Stream i is (app i % 4, host i / 4); each logs at a fixed offset within its second.
    for (int s = 0; s < (w.streams + 3) / 4; ++s) hosts.push_back("host" + std::to_string(s));
    const int64_t start_ms = end_ms - w.seconds * 1000;
    // As ship's loop does (ship/pipeline.cc): the clock goes to each linger
    // deadline before it passes it, and the chunker flushes what is due, so
    // a stream's line arriving exactly a second after its last finds that
    // last one flushed.
    auto advance_to = [&](int64_t ts) {
      for (int64_t wait; (wait = chunker.MsUntilNextFlush()) >= 0 && clock.NowMs() + wait <= ts;) {
        clock.SetMs(clock.NowMs() + wait);
        LOGDEX_CHECK(chunker.Poll().ok());
      }
      clock.SetMs(ts);
    };
    clock.SetMs(start_ms);
    for (int64_t sec = 0; sec < w.seconds; ++sec) {
      for (int s = 0; s < w.streams; ++s) {
        const int64_t ts = start_ms + sec * 1000 + s * 1000 / w.streams;
        advance_to(ts);
        emit(ts, apps[static_cast<size_t>(s) % apps.size()], hosts[static_cast<size_t>(s) / apps.size()],
             bench::PickSeverity(rng), next_loghub_line());
      }
    }
    advance_to(end_ms);
    clock.SetMs(end_ms);
  }
  LOGDEX_CHECK(chunker.FlushAll().ok());
  LOGDEX_CHECK(sink.Drain().ok());
  const double ingest_cpu = CpuSeconds() - cpu0;
  LOGDEX_CHECK(ingest_cpu > 0);  // a ratio's denominator below
  const StoreDiskUsage live = *store->disk_usage();

  // Settle: every memtable flushed, every table compacted whole.
  const double cpu1 = CpuSeconds();
  LOGDEX_CHECK(store->Flush().ok());
  std::vector<std::string> tables = IndexTableNames();
  tables.push_back(std::string(kMainTable));
  tables.push_back(std::string(kMergedTable));  // the compactor's ledger (empty before it runs)
  tables.push_back(std::string(kTokenTable));   // merged chunks' token filters (likewise)
  tables.push_back(std::string(kMinuteCountsTable));  // their record counts per minute (likewise)
  uint64_t all_rows = 0, main_rows = 0;
  for (const std::string& t : tables) {
    LOGDEX_CHECK(store->CompactTable(t).ok());
    const uint64_t n = store->CountRawRows(t).value();
    all_rows += n;
    if (t == kMainTable) main_rows = n;
  }
  const double settle_cpu = CpuSeconds() - cpu1;
  const StoreDiskUsage settled = *store->disk_usage();

  // Compaction, once everything has settled, then a settle again.
  CompactorOptions cpo;
  cpo.indexer = io;
  cpo.codec = compacted_codec;
  cpo.lookback_ms = 48ll * 3600 * 1000;  // the replay's whole day
  cpo.max_pass_bytes = UINT64_MAX;
  auto compactor = Compactor::Create(*store, cpo);
  LOGDEX_CHECK(compactor.ok());
  const double cpu2 = CpuSeconds();
  auto pass = (*compactor)->Pass(end_ms + cpo.settle_ms + cpo.max_span_ms + 1);
  LOGDEX_CHECK(pass.ok());
  const double compaction_cpu = CpuSeconds() - cpu2;
  LOGDEX_CHECK(store->Flush().ok());
  uint64_t all_rows_after = 0, main_rows_after = 0;
  for (const std::string& t : tables) {
    LOGDEX_CHECK(store->CompactTable(t).ok());
    const uint64_t n = store->CountRawRows(t).value();
    all_rows_after += n;
    if (t == kMainTable) main_rows_after = n;
  }
  const StoreDiskUsage compacted = *store->disk_usage();

  const double per_million = 1e6 / static_cast<double>(lines);
  // Bytes per raw byte, rounded to 1 / `scale`.
  auto per_raw = [&](uint64_t bytes, double scale) {
    return static_cast<double>(static_cast<int64_t>(static_cast<double>(bytes) * scale / static_cast<double>(raw_bytes) + 0.5)) / scale;
  };
  auto ratio = [&](uint64_t bytes) { return per_raw(bytes, 1000); };
  json sst_by_table = json::object();  // where the compacted SST bytes are
  for (const auto& [table, bytes] : store->TableSstBytes()) {
    if (bytes > 0) sst_by_table[table] = per_raw(bytes, 10000);
  }
  return {{"workload", w.name},
          {"lines_kind", w.json_lines ? "json" : "loghub"},
          {"max_chunk_span_s", w.max_chunk_span_ms / 1000},
          {"codec", codec == proto::CODEC_ZSTD ? "zstd-" + std::to_string(kDefaultZstdLevel) : "snappy"},
          {"compacted_codec", "zstd-" + std::to_string(cpo.zstd_level) +
                                  (compacted_codec == proto::CODEC_ZSTD_COLUMNS ? "-columns" : "")},
          {"lines", lines},
          {"raw_bytes", raw_bytes},
          {"ship_chunks", sink.chunks()},
          {"stored_main_rows", main_rows},
          {"main_rows_per_million_lines", Round2(main_rows * per_million)},
          {"all_rows_per_million_lines", Round2(all_rows * per_million)},
          {"disk_per_raw_byte_live", ratio(live.total())},
          {"wal_per_raw_byte_live", ratio(live.wal)},
          {"disk_per_raw_byte_settled", ratio(settled.total())},
          {"sst_per_raw_byte_settled", ratio(settled.sst)},
          {"ingest_cpu_s_per_million_lines", Round2(ingest_cpu * per_million)},
          {"settle_cpu_s_per_million_lines", Round2(settle_cpu * per_million)},
          {"main_rows_per_million_lines_compacted", Round2(main_rows_after * per_million)},
          {"all_rows_per_million_lines_compacted", Round2(all_rows_after * per_million)},
          {"disk_per_raw_byte_compacted", ratio(compacted.total())},
          {"sst_per_raw_byte_compacted", ratio(compacted.sst)},
          {"sst_per_raw_byte_compacted_by_table", sst_by_table},
          {"compaction_cpu_s_per_million_lines", Round2(compaction_cpu * per_million)},
          {"compaction_cpu_per_ingest_cpu", Round2(compaction_cpu / ingest_cpu)},
          {"compaction_merges", pass->merges},
          {"compaction_parts", pass->parts},
          {"split_by_time", indexer.counters().split_by_time},
          {"indexed_chunks", indexer.counters().stored_chunks},
          {"indexed_records", indexer.counters().records}};
}

}  // namespace

json BenchStorage(const BenchOptions& o) {
  const std::vector<std::string> samples = bench::LoadLines(o.data_dir);
  if (samples.empty()) return {{"benchmark", "storage"}, {"error", "no loghub samples in " + o.data_dir}};
  const uint64_t replay_lines = std::max<uint64_t>(10'000, static_cast<uint64_t>(3'000'000 * o.scale));
  const std::vector<Workload> workloads = {
      {"replay", replay_lines, 0, 0},
      // The replay issue 16 measured first: JSON lines of about 200-250 bytes.
      {"replay_json", replay_lines, 0, 0, 60'000, true},
      // Three simulated hours at scale 1: the compactor's runs span up to 3 h
      // (max_span), so a shorter run leaves every stream one unfinished run.
      // Last: the summary below reads it so.
      {"realtime", 0, std::max(4, static_cast<int>(200 * std::min(1.0, o.scale * 4))),
       std::max<int64_t>(60, static_cast<int64_t>(3 * 3600 * o.scale))},
  };
  json runs = json::array();
  auto run = [&](const Workload& w, proto::Codec codec, proto::Codec compacted_codec) {
    runs.push_back(RunOne(o, w, codec, compacted_codec, samples));
    std::fprintf(stderr, "bench storage: %s\n", runs.back().dump().c_str());
    return runs.back();
  };
  // Per workload: ship's chunks in snappy, then in zstd, each as serve's
  // compactor settles them (zstd by columns, compaction.columns; serve has
  // no snappy output for merged chunks), and plain zstd at the same level
  // against the columns: the layout's own share.
  json columns_vs_plain = json::object();
  json goals = json::object();
  for (const Workload& w : workloads) {
    const json snappy = run(w, proto::CODEC_SNAPPY, proto::CODEC_ZSTD_COLUMNS);
    const json plain = run(w, proto::CODEC_ZSTD, proto::CODEC_ZSTD);
    const json columns = run(w, proto::CODEC_ZSTD, proto::CODEC_ZSTD_COLUMNS);
    const double p = plain["sst_per_raw_byte_compacted_by_table"].value("logs", 0.0);
    const double c = columns["sst_per_raw_byte_compacted_by_table"].value("logs", 0.0);
    columns_vs_plain[w.name] = {{"logs_per_raw_byte_plain", p},
                                {"logs_per_raw_byte_columns", c},
                                {"columns_per_plain", p > 0 ? std::round(c / p * 1000) / 1000 : 0.0},
                                {"compaction_cpu_s_per_million_lines_plain", plain["compaction_cpu_s_per_million_lines"]},
                                {"compaction_cpu_s_per_million_lines_columns", columns["compaction_cpu_s_per_million_lines"]}};
    // Issue 16's goals, on serve's defaults, once settled.
    auto goal = [](const json& figure, double limit) { return json{{"value", figure}, {"goal", limit}, {"met", figure.get<double>() <= limit}}; };
    goals[w.name] = {{"disk_per_raw_byte_zstd", goal(columns["disk_per_raw_byte_compacted"], 0.12)},
                     {"disk_per_raw_byte_snappy", goal(snappy["disk_per_raw_byte_compacted"], 0.25)},
                     {"main_rows_per_million_lines_zstd", goal(columns["main_rows_per_million_lines_compacted"], 500)},
                     {"main_rows_per_million_lines_snappy", goal(snappy["main_rows_per_million_lines_compacted"], 500)},
                     {"compaction_cpu_per_ingest_cpu_zstd", goal(columns["compaction_cpu_per_ingest_cpu"], 0.25)},
                     {"compaction_cpu_per_ingest_cpu_snappy", goal(snappy["compaction_cpu_per_ingest_cpu"], 0.25)}};
  }
  // What a longer indexer.max_chunk_span alone would change (issue 16, item 2).
  for (int64_t span_ms : {3'600'000ll, 6 * 3'600'000ll}) {
    run({"replay", replay_lines, 0, 0, span_ms}, proto::CODEC_ZSTD, proto::CODEC_ZSTD_COLUMNS);
  }
  return {{"benchmark", "storage"},
          {"runs", runs},
          {"columns_vs_plain", columns_vs_plain},
          {"goals", goals},
          {"realtime", {{"streams", workloads.back().streams}, {"seconds", workloads.back().seconds}}},
          {"compaction", "*_compacted: after one compactor pass (default options: 8192 records, 4 MiB, 3 h spans; "
                         "output in compacted_codec: zstd-3 by columns (the default) or plain zstd-3) once every "
                         "record settled, and a settle"},
          {"note", "RocksDB with logdex's tables (durability async); raw = the lines with newlines; live = right "
                   "after ingest, WAL included; settled = after a flush and a full compaction of every table; rows "
                   "are RocksDB entries after the compaction; CPU = the whole process (RocksDB's threads included; "
                   "the replays' lines are drawn before ingest, the real-time workload's as it runs (a sample each); "
                   "settle holds what RocksDB still ran after ingest)"}};
}

}  // namespace logdex
