// `logdex bench query`: the latency and cost of the main query shapes over a
// day of logs, text filters included, beside `grep -c` over the raw file of
// the same workload in the same run (issue 17's benchmark).
//
// Workload: 10^7 lines x --scale over the 24 h before the run's start,
// 4 apps x 8 hosts, severities INFO 88 % / WARN 8 % / ERROR 3 % / DEBUG 1 %,
// messages cycling through the Loghub samples (tests/data/loghub), seeded.
// Planted, at known frequencies:
//   - a rare token, in exactly 10 lines of app0 spread over the day, each
//     followed by the word "zeta" (for the phrase);
//   - a common token, in every line of app0 whose (host, minute) hashes to
//     1 in 100: about 1 % of app0's chunks (which split at 60 s windows).
// The lines go through ship's Chunker and the Indexer into RocksDB with
// logdex's tables, as serve stores them, and to a raw file (each line and a
// newline) for grep.
//
// Each query runs 5 times through the QueryEngine in process, every page of
// it (limit 10,000) unless it is a first page; reported: p50 and p95 (of 5
// runs: the slowest) wall ms, and per run the records, rows scanned, chunks
// read and bytes decompressed. Every text query's count is checked against
// what was planted: a wrong answer ends the benchmark with an error.
//
// Then the store is compacted (indexer/compactor.h, as serve's compactor
// does with compaction.enabled), which writes a token filter
// (common/token_bloom.h) with each merged chunk, and every text query runs
// again with the engine reading the filters and not: the "with index"
// and "without index" columns. Reported beside them: the filters' bytes
// against the SST bytes, the CPU building them against ingest's, and each
// filtered query's false-positive rate.
#include <sys/wait.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/indexing_sink.h"
#include "common/clock.h"
#include "common/defaults.h"
#include "common/ids.h"
#include "common/row_keys.h"
#include "common/token_bloom.h"
#include "common/tokens.h"
#include "indexer/compactor.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "indexer/query.h"
#include "ship/chunker.h"
#include "ship/sequence.h"
#include "store/hbase/hbase_store.h"

namespace logdex {
namespace {

using nlohmann::json;
using bench::Round2;

constexpr int kApps = 4, kHosts = 8, kRare = 10;
constexpr const char* kRareToken = "zqx7rare42";
constexpr const char* kCommonToken = "commontok9";

struct Shape {
  std::string name;
  Query query;
  bool all_pages = true;
  int64_t expect = -1;  // records it must return; -1: not checked
};

// The p50 and p95 (of 5 runs: the slowest) of wall times `ms` into `out`.
void PutLatencies(json& out, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  out["p50_ms"] = Round2(ms[ms.size() / 2]);
  out["p95_ms"] = Round2(ms[std::min(ms.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(ms.size())))]);
}

json Measure(const QueryEngine& engine, const Shape& s, int runs) {
  std::vector<double> ms;
  json last;
  for (int r = 0; r < runs; ++r) {
    Query q = s.query;
    uint64_t records = 0, rows = 0, chunks = 0, bytes = 0, pages = 0, filters = 0, skipped = 0, returned = 0;
    std::string plan;
    const int64_t t0 = bench::NowNs();
    for (;;) {
      auto a = engine.Run(q);
      if (!a.ok()) return {{"query", s.name}, {"error", a.error().ToString()}};
      ++pages;
      records += a->records.size();
      rows += a->stats.rows_scanned;
      chunks += a->stats.chunks_read;
      bytes += a->stats.bytes_decompressed;
      filters += a->stats.token_filters_read;
      skipped += a->stats.chunks_skipped_by_tokens;
      returned += a->stats.chunks_returned;
      plan = a->stats.plan;
      if (!s.all_pages || a->next_cursor.empty()) break;
      q.cursor = a->next_cursor;
    }
    ms.push_back(static_cast<double>(bench::NowNs() - t0) / 1e6);
    if (s.expect >= 0 && records != static_cast<uint64_t>(s.expect)) {
      return {{"query", s.name},
              {"error", "returned " + std::to_string(records) + " records, " + std::to_string(s.expect) +
                            " were planted"}};
    }
    last = {{"records", records}, {"pages", pages},           {"rows_scanned", rows},
            {"chunks_read", chunks}, {"bytes_decompressed", bytes}, {"plan", plan}};
    if (filters > 0) {
      // False positives: chunks a filter passed that returned nothing (for a
      // word whose records all return, the chunks without the token), of
      // the filtered chunks without it.
      const uint64_t passed = filters - skipped, negatives = filters - std::min(filters, returned);
      const uint64_t false_positives = passed - std::min(passed, returned);
      last["token_filters_read"] = filters;
      last["chunks_skipped_by_tokens"] = skipped;
      last["chunks_returned"] = returned;
      last["false_positive_rate"] = negatives ? Round2(100.0 * static_cast<double>(false_positives) / static_cast<double>(negatives)) / 100 : 0.0;
    }
  }
  last["query"] = s.name;
  PutLatencies(last, std::move(ms));
  return last;
}

// p50 and p95 wall ms of `runs` Volume() calls, with the last run's stats.
json MeasureVolume(const QueryEngine& engine, const std::string& name, const VolumeQuery& v, int runs) {
  std::vector<double> ms;
  json last;
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = bench::NowNs();
    auto a = engine.Volume(v);
    if (!a.ok()) return {{"query", name}, {"error", a.error().ToString()}};
    ms.push_back(static_cast<double>(bench::NowNs() - t0) / 1e6);
    last = {{"records", a->totals.total},           {"buckets", a->buckets.size()},
            {"rows_scanned", a->stats.rows_scanned}, {"chunks_read", a->stats.chunks_read},
            {"bytes_decompressed", a->stats.bytes_decompressed}};
  }
  last["query"] = name;
  PutLatencies(last, std::move(ms));
  return last;
}

// A shell word: `s` in single quotes, its own single quotes escaped.
std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `grep -c FLAG PATTERN FILE`, its count and wall ms (best of `runs`).
json Grep(const std::string& name, const std::string& flag, const std::string& pattern, const std::string& file,
          int runs, int64_t expect) {
  const std::string command = "LC_ALL=C grep -c " + flag + " " + ShellQuote(pattern) + " " + ShellQuote(file);
  double best = 1e300;
  int64_t count = -1;
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = bench::NowNs();
    FILE* p = ::popen(command.c_str(), "r");
    if (p == nullptr) return {{"query", name}, {"error", "cannot run grep"}};
    char buf[64] = {0};
    const bool read = std::fgets(buf, sizeof buf, p) != nullptr;
    const int status = ::pclose(p);
    best = std::min(best, static_cast<double>(bench::NowNs() - t0) / 1e6);
    // grep exits 0 when it found lines, 1 when none, 2 on an error.
    if (!read || status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) > 1) {
      return {{"query", name}, {"error", "grep failed: " + command}};
    }
    count = std::strtoll(buf, nullptr, 10);
  }
  if (count != expect) {
    return {{"query", name},
            {"error", "grep counted " + std::to_string(count) + ", " + std::to_string(expect) + " were planted"}};
  }
  return {{"query", name},
          {"command", "grep -c " + flag + " " + ShellQuote(pattern) + " RAW"},
          {"count", count},
          {"best_ms", Round2(best)}};
}

// What a token index would hold and skip, from the stored chunks (issue 17
// asks for the structure to be chosen from measurements): every main row is
// decoded and tokenized (common/tokens.h). Modelled:
//   - a bloom filter per chunk at 1 % false positives (9.6 bits per distinct
//     token, the optimum for that rate);
//   - a token table per (app, hour): each distinct token once, with the
//     chunks holding it (token bytes + 1 length byte, + 4 bytes per chunk).
// Both against the store's SST bytes, and the chunks each would read for the
// planted rare token in app0 (the bloom: the true ones + 1 % of the others).
json TokenIndexModel(RocksDbStore& store, const DecodeOptions& decode, uint64_t sst_bytes) {
  uint64_t chunks = 0, tokens = 0, bloom_bytes = 0, rare_chunks = 0, app0_chunks = 0;
  std::vector<uint64_t> per_chunk;
  std::map<std::pair<std::string, int64_t>, std::map<std::string, uint64_t>> windows;  // (app, hour) -> token -> chunks
  struct Group {
    std::set<std::string> tokens;
    uint64_t chunks = 0;
  };
  std::map<std::tuple<std::string, std::string, int64_t>, Group> groups;  // (app, host, hour)
  std::string scratch;
  RowVisitor visit = [&](std::string_view, std::string_view v) {
    proto::MainRow row;
    if (!row.ParseFromArray(v.data(), static_cast<int>(v.size()))) return true;
    auto records = UnpackRecords(row.chunk(), decode, &scratch);
    if (!records.ok() || records->records_size() == 0) return true;
    std::set<std::string_view> distinct;
    for (const proto::LogRecord& r : records->records()) {
      ForEachToken(r.message(), [&](std::string_view t) {
        distinct.insert(t);
        return true;
      });
    }
    ++chunks;
    tokens += distinct.size();
    per_chunk.push_back(distinct.size());
    bloom_bytes += (static_cast<uint64_t>(static_cast<double>(distinct.size()) * 9.6) + 7) / 8;
    const bool app0 = row.chunk().app() == "app0";
    app0_chunks += app0;
    if (app0 && distinct.count(kRareToken)) ++rare_chunks;
    const int64_t hour = records->records(0).ts_ms() / 3'600'000;
    auto& w = windows[{row.chunk().app(), hour}];
    for (std::string_view t : distinct) ++w[std::string(t)];
    Group& g = groups[{row.chunk().app(), row.chunk().host(), hour}];
    ++g.chunks;
    g.tokens.insert(distinct.begin(), distinct.end());
    return true;
  };
  const Status scanned = store.Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, visit);
  LOGDEX_CHECK(scanned.ok());
  uint64_t table_bytes = 0, window_tokens = 0;
  for (const auto& [key, w] : windows) {
    for (const auto& [t, n] : w) table_bytes += t.size() + 1 + 4 * n;
    window_tokens += w.size();
  }
  uint64_t group_bloom_bytes = 0, group_chunks_read = 0;
  for (const auto& [key, g] : groups) {
    group_bloom_bytes += (static_cast<uint64_t>(static_cast<double>(g.tokens.size()) * 9.6) + 7) / 8;
    if (std::get<0>(key) != "app0") continue;
    // A group holding the token is read whole; another, 1 % of the time.
    group_chunks_read += g.tokens.count(kRareToken) ? g.chunks : 0;
  }
  uint64_t app0_group_chunks = 0;
  for (const auto& [key, g] : groups) app0_group_chunks += std::get<0>(key) == "app0" && !g.tokens.count(kRareToken) ? g.chunks : 0;
  group_chunks_read += app0_group_chunks / 100;
  std::sort(per_chunk.begin(), per_chunk.end());
  auto at = [&](double q) { return per_chunk.empty() ? 0 : per_chunk[static_cast<size_t>(q * (per_chunk.size() - 1))]; };
  auto ratio = [&](uint64_t b) { return sst_bytes ? Round2(100.0 * static_cast<double>(b) / static_cast<double>(sst_bytes)) : 0; };
  return {{"stored_chunks", chunks},
          {"sst_bytes", sst_bytes},
          {"distinct_tokens_per_chunk", {{"mean", chunks ? Round2(static_cast<double>(tokens) / chunks) : 0}, {"p50", at(0.5)}, {"p99", at(0.99)}}},
          {"bloom_per_chunk_1pct", {{"bytes", bloom_bytes}, {"percent_of_sst", ratio(bloom_bytes)},
                                    {"app0_chunks_read_for_rare_token", rare_chunks + (app0_chunks - rare_chunks) / 100},
                                    {"app0_chunks", app0_chunks}}},
          {"bloom_per_app_host_hour_1pct", {{"groups", groups.size()}, {"bytes", group_bloom_bytes},
                                            {"percent_of_sst", ratio(group_bloom_bytes)},
                                            {"app0_chunks_read_for_rare_token", group_chunks_read}}},
          {"token_table_per_app_hour", {{"windows", windows.size()}, {"distinct_tokens", window_tokens},
                                        {"bytes", table_bytes}, {"percent_of_sst", ratio(table_bytes)},
                                        {"app0_chunks_read_for_rare_token", rare_chunks}}}};
}

// The query shapes again on HBase through the Thrift2 gateway `address`
// (host:port): the tables as ingested (every row of the RocksDB store,
// copied in batches), then each shape measured as on RocksDB; each one's
// record count must equal RocksDB's. `rocksdb` holds RocksDB's results, in
// the order of `shapes`.
json QueryOnHBase(const std::string& address, RocksDbStore& source, const std::vector<Shape>& shapes,
                  const json& rocksdb, const QueryOptions& qo, int runs) {
  const size_t colon = address.rfind(':');
  HBaseOptions ho;
  ho.host = address.substr(0, colon);
  ho.port = colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
  if (colon == std::string::npos || ho.port <= 0) return {{"error", "--hbase wants HOST:PORT, not " + address}};
  ho.ns = "bench_query_" + std::to_string(SystemClock::Instance().NowMs());
  auto store = HBaseTableStore::Open(ho);
  if (!store.ok()) return {{"error", "hbase " + address + ": " + store.error().ToString()}};
  if (Status st = CreateTables(**store, TableLayout{}); !st.ok()) return {{"error", "hbase tables: " + st.ToString()}};
  std::vector<std::string> tables = IndexTableNames();
  tables.emplace_back(kMainTable);
  uint64_t rows = 0, bytes = 0;
  const int64_t t0 = bench::NowNs();
  for (const std::string& t : tables) {
    WriteBatch batch;
    Status written;
    auto flush = [&] {
      if (batch.size() == 0 || !written.ok()) return;
      written = (*store)->Write(batch);
      batch = WriteBatch();
    };
    Status scanned = source.Scan(ScanSpec{t, "", "", false, 0}, [&](std::string_view k, std::string_view v) {
      batch.Put(t, std::string(k), std::string(v));
      ++rows;
      bytes += k.size() + v.size();
      if (batch.bytes() >= 1 << 20) flush();
      return written.ok();
    });
    flush();
    if (!scanned.ok() || !written.ok()) {
      return {{"error", "copying " + t + " to hbase: " + (scanned.ok() ? written : scanned).ToString()}};
    }
  }
  const double copy_s = static_cast<double>(bench::NowNs() - t0) / 1e9;
  std::fprintf(stderr, "bench query: %" PRIu64 " rows (%" PRIu64 " bytes) copied to hbase %s (namespace %s) in %.1f s\n",
               rows, bytes, address.c_str(), ho.ns.c_str(), copy_s);
  const QueryEngine engine(**store, qo);
  json out = json::array();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t examined_before = (*store)->counters().rows_examined;
    json m = Measure(engine, shapes[i], runs);
    // Rows every scanner page returned for one run of the shape (index rows,
    // meta rows, and main rows of a full scan; rows from get and getMultiple
    // are not counted): beside rows_scanned, the rows the engine used, what
    // the scanners' page sizes fetch.
    m["gateway_scan_rows_per_run"] = ((*store)->counters().rows_examined - examined_before) / static_cast<uint64_t>(runs);
    if (!m.contains("error") && m["records"] != rocksdb[i]["records"]) {
      m = {{"query", shapes[i].name},
           {"error", "hbase returned " + m["records"].dump() + " records, rocksdb " + rocksdb[i]["records"].dump()}};
    }
    if (!m.contains("error")) {
      const double r = rocksdb[i]["p50_ms"].get<double>();
      m["ratio_p50_to_rocksdb"] = r > 0 ? Round2(m["p50_ms"].get<double>() / r) : 0.0;
    }
    std::fprintf(stderr, "bench query (hbase): %s\n", m.dump().c_str());
    out.push_back(m);
    if (out.back().contains("error")) return {{"error", out.back().dump()}};
  }
  return {{"gateway", address},
          {"namespace", ho.ns},
          {"rows_copied", rows},
          {"bytes_copied", bytes},
          {"copy_s", Round2(copy_s)},
          {"queries", out},
          {"note", "the same rows as the RocksDB store (copied from it), read through the Thrift2 gateway (framed, "
                   "binary, scanner caching 256); first run cold on HBase's block cache"}};
}

// The query workload (seeded): the raw file's bytes, each line and its
// newline, and per line where it ends, its app, host and severity.
struct QueryWorkload {
  struct Line {
    uint64_t end = 0;  // in raw, past its newline
    uint8_t app = 0;
    uint8_t host = 0;
    Severity severity = Severity::kInfo;
  };
  std::string raw;
  std::vector<Line> lines;
  uint64_t app0_lines = 0;
  uint64_t common_lines = 0;  // with kCommonToken
};

// Lines of the Loghub samples in turn over 24 h, in kApps apps and kHosts
// hosts; kRareToken planted in kRare lines of app0, spread over the day;
// kCommonToken in app0's lines of 1 % of the (host, minute) windows.
QueryWorkload MakeQueryWorkload(const std::vector<std::string>& samples, uint64_t lines, int64_t start_ms) {
  QueryWorkload w;
  w.lines.reserve(lines);
  // The samples in turn, and a little for the planted tokens: one buffer,
  // not grown by doubling (1.4 GB at 10^7 lines).
  uint64_t cycle = 0;
  for (const std::string& sample : samples) cycle += sample.size() + 1;
  uint64_t rest = 0;
  for (uint64_t i = 0; i < lines % samples.size(); ++i) rest += samples[i].size() + 1;
  w.raw.reserve(lines / samples.size() * cycle + rest + lines / 8 + 1024);
  std::mt19937_64 rng(20261202);
  int rare = 0;
  for (uint64_t i = 0; i < lines; ++i) {
    const int64_t ts = bench::DayLineTime(start_ms, i, lines);
    int app = static_cast<int>(rng() % kApps);
    const int host = static_cast<int>(rng() % kHosts);
    const Severity severity = bench::PickSeverity(rng);
    w.raw += samples[i % samples.size()];
    // Line i is rare's k-th when it is the first line at or after k/10 of the day.
    if (rare < kRare && i >= static_cast<uint64_t>(rare) * lines / kRare + lines / (2 * kRare)) {
      app = 0;
      w.raw += std::string(" id=") + kRareToken + " zeta";
      ++rare;
    }
    if (app == 0) {
      ++w.app0_lines;
      const uint64_t window = Hash64(std::to_string(host) + "/" + std::to_string(ts / 60'000));
      if (window % 100 == 1) {
        w.raw += std::string(" ") + kCommonToken;
        ++w.common_lines;
      }
    }
    w.raw += '\n';
    w.lines.push_back(QueryWorkload::Line{w.raw.size(), static_cast<uint8_t>(app), static_cast<uint8_t>(host), severity});
  }
  return w;
}

}  // namespace

json BenchQuery(const BenchOptions& o) {
  const std::vector<std::string> samples = bench::LoadLines(o.data_dir);
  if (samples.empty()) return {{"benchmark", "query"}, {"error", "no loghub samples in " + o.data_dir}};
  const uint64_t lines = std::max<uint64_t>(20'000, static_cast<uint64_t>(10'000'000 * o.scale));
  const int runs = 5;
  bench::ScratchDir dir(o.dir, "query");
  auto store = bench::OpenStoreWithTables(dir.str() + "/store");
  IndexerOptions io;
  io.retention_ms = 7ll * 24 * 3600 * 1000;
  Indexer indexer(*store, io);
  bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
  bench::IndexingSink sink(indexer);
  const int64_t end_ms = SystemClock::Instance().NowMs() / 60'000 * 60'000;
  const int64_t start_ms = end_ms - 24ll * 3600 * 1000;
  ManualClock clock(end_ms);
  auto sequences = ship::SequenceAllocator::InMemory(1);
  ship::ChunkerOptions co;
  co.app = "bench";
  co.host = "h0";
  co.line_identity = ship::LineIdentity::kStream;
  co.codec = kDefaultCodec;
  ship::Chunker chunker(co, *sequences, sink, clock);
  const std::string raw_path = dir.str() + "/raw.log";

  // The workload first, in memory and in the raw file, so that ingest's
  // CPU is ingest's own (until 2026-12-07 it held the lines' generation and
  // the raw file's writes too).
  std::fprintf(stderr, "bench query: generating %" PRIu64 " lines\n", lines);
  QueryWorkload workload = MakeQueryWorkload(samples, lines, start_ms);
  const uint64_t raw_bytes = workload.raw.size(), common_lines = workload.common_lines,
                 app0_lines = workload.app0_lines;
  {
    std::ofstream raw(raw_path, std::ios::binary);
    raw << workload.raw;
    raw.close();
    LOGDEX_CHECK(raw.good());
  }

  // Ingest: ship's chunker, the indexer, RocksDB, flushed.
  std::vector<std::string> app_names, host_names;
  for (int a = 0; a < kApps; ++a) app_names.push_back("app" + std::to_string(a));
  for (int h = 0; h < kHosts; ++h) host_names.push_back("host" + std::to_string(h));
  const int64_t t0 = bench::NowNs();
  const double cpu0 = bench::CpuSeconds();
  const std::string_view all_lines = workload.raw;
  uint64_t begin = 0;
  for (uint64_t i = 0; i < lines; ++i) {
    const QueryWorkload::Line& line = workload.lines[i];
    parse::RecordView r;
    r.ts_ms = bench::DayLineTime(start_ms, i, lines);
    r.severity = line.severity;
    r.message = all_lines.substr(begin, line.end - 1 - begin);  // without its newline
    begin = line.end;
    r.app = app_names[line.app];
    r.host = host_names[line.host];
    LOGDEX_CHECK(chunker.OnRecord(r).ok());
  }
  LOGDEX_CHECK(chunker.FlushAll().ok());
  LOGDEX_CHECK(sink.Drain().ok());
  LOGDEX_CHECK(store->Flush().ok());
  const double ingest_s = static_cast<double>(bench::NowNs() - t0) / 1e9;
  const double ingest_cpu = bench::CpuSeconds() - cpu0;
  // Released before the queries (a string's move assignment may keep its buffer).
  std::string().swap(workload.raw);
  std::vector<QueryWorkload::Line>().swap(workload.lines);
  std::fprintf(stderr, "bench query: %" PRIu64 " lines (%" PRIu64 " raw bytes) stored in %.1f s; querying\n", lines,
               raw_bytes, ingest_s);

  QueryOptions qo;
  qo.decode.clock = &SystemClock::Instance();
  QueryEngine engine(*store, qo);
  auto base = [&](const std::string& app) {
    Query q;
    q.app = app;
    q.from_ms = start_ms;
    q.to_ms = end_ms + 1;
    q.limit = 10'000;
    return q;
  };
  auto text = [&](Query q, TextFilterKind kind, const std::string& t) {
    q.text.push_back(TextFilter{kind, false, t});
    return q;
  };
  std::vector<Shape> shapes;
  Query first = base("app0");
  first.limit = 100;
  shapes.push_back({"first page of an app", first, false});
  Query host = base("");
  host.host = "host3";
  host.limit = 100;
  shapes.push_back({"first page of a host (no app)", host, false});
  Query errors = base("app0");
  errors.severities = {Severity::kError};
  shapes.push_back({"ERROR of an app over 24 h (every page)", errors});
  shapes.push_back({"rare token, one app (word)", text(base("app0"), TextFilterKind::kWord, kRareToken), true, kRare});
  Query all = base("");
  all.scan = true;
  shapes.push_back({"rare token, every app (word, scan=true)", text(all, TextFilterKind::kWord, kRareToken), true,
                    kRare});
  Query newest = all;
  newest.from_ms = end_ms + 1 - 3'600'000;
  newest.limit = 100;
  shapes.push_back({"first page of every app, last hour (scan=true)", newest, false});
  shapes.push_back({"common token, one app (word, ~1 % of its chunks)",
                    text(base("app0"), TextFilterKind::kWord, kCommonToken), true,
                    static_cast<int64_t>(common_lines)});
  shapes.push_back({"phrase, one app", text(base("app0"), TextFilterKind::kPhrase, std::string(kRareToken) + " zeta"),
                    true, kRare});
  shapes.push_back({"regex with a literal, one app",
                    text(base("app0"), TextFilterKind::kRegex, "zqx7rare[0-9]+ ze[t]a"), true, kRare});
  // Its literals hold a whole token ("zqx7rare42" between '=' and ' '):
  // the token filters can rule chunks out (the one above, whose literals
  // are token fragments, cannot).
  shapes.push_back({"regex with a whole-token literal, one app",
                    text(base("app0"), TextFilterKind::kRegex, "id=zqx7rare42 ze[t]a"), true, kRare});
  // No literal at all (no sample line matches it: the planted count holds).
  shapes.push_back({"regex without a literal, one app",
                    text(base("app0"), TextFilterKind::kRegex, "[a-z]{3}[0-9][a-z]{4}[0-9]{2} [x-z][a-z]{3}"), true,
                    kRare});
  json queries = json::array();
  for (const Shape& s : shapes) {
    queries.push_back(Measure(engine, s, runs));
    std::fprintf(stderr, "bench query: %s\n", queries.back().dump().c_str());
    if (queries.back().contains("error")) return {{"benchmark", "query"}, {"error", queries.back().dump()}};
  }
  // scan=true shapes again on the main table, read whole and sorted (the
  // plan logdex used for them before it read every stream's index, and
  // still uses over QueryOptions::max_scan_index_ranges streams).
  auto main_table_scans = [&](const QueryOptions& base, const char* phase, json& out) {
    QueryOptions mo = base;
    mo.max_scan_index_ranges = 0;
    mo.max_scan_records = UINT64_MAX;  // it holds a range's records to sort them: never refused here
    const QueryEngine main_table(*store, mo);
    for (const Shape& s : shapes) {
      if (!s.query.scan) continue;
      out.push_back(Measure(main_table, s, runs));
      std::fprintf(stderr, "bench query (%s, main-table scan): %s\n", phase, out.back().dump().c_str());
      if (out.back().contains("error")) return false;
    }
    return true;
  };
  json main_scans = json::array();
  if (!main_table_scans(qo, "as ingested", main_scans)) return {{"benchmark", "query"}, {"error", main_scans.back()}};
  // What compaction (on by default) costs a query of a historical range:
  // queries pad their index ranges past `to` by the longest span the store
  // may hold, 3 h instead of ingest's 60 s once a compactor ran, also over
  // chunks it has not merged yet (a stream's open run; old chunks written
  // since the last deep pass). Two ranges 12 h back, as ingested with each
  // pad, then compacted.
  std::vector<Shape> historical;
  {
    Query minute = base("app0");
    minute.to_ms = end_ms + 1 - 12 * 3'600'000;
    minute.from_ms = minute.to_ms - 60'000;
    minute.limit = 100;
    historical.push_back({"first page of an app, one minute 12 h back", minute, false});
    Query hour = base("app0");
    hour.to_ms = end_ms + 1 - 12 * 3'600'000;
    hour.from_ms = hour.to_ms - 3'600'000;
    hour.severities = {Severity::kError};
    historical.push_back({"ERROR of an app, one hour 12 h back (every page)", hour});
  }
  // The UI's histogram (GET /api/v1/volume, from the index): one app over
  // 24 h in 60 buckets, as ingested (every chunk counted by its index row)
  // and, below, compacted (merged chunks span past the 60 s a chunk may
  // span to be counted so: they are read).
  VolumeQuery histogram;
  histogram.filter = base("app0");
  histogram.step_ms = (end_ms + 1 - start_ms) / 60;
  const json volume_as_ingested = MeasureVolume(engine, "histogram of an app, 24 h, 60 buckets", histogram, runs);
  std::fprintf(stderr, "bench query (as ingested): %s\n", volume_as_ingested.dump().c_str());
  if (volume_as_ingested.contains("error")) return {{"benchmark", "query"}, {"error", volume_as_ingested.dump()}};
  QueryOptions padded_qo = qo;
  padded_qo.max_chunk_span_ms = 3 * 3'600'000;  // compaction.max_span's default
  const QueryEngine padded(*store, padded_qo);
  json historical_60s = json::array(), historical_3h = json::array();
  for (const Shape& s : historical) {
    using Run = std::pair<const QueryEngine*, json*>;
    for (auto [e, out] : {Run{&engine, &historical_60s}, Run{&padded, &historical_3h}}) {
      out->push_back(Measure(*e, s, runs));
      std::fprintf(stderr, "bench query (as ingested, padded by %s): %s\n", e == &engine ? "60 s" : "3 h",
                   out->back().dump().c_str());
      if (out->back().contains("error")) return {{"benchmark", "query"}, {"error", out->back().dump()}};
    }
    if (historical_60s.back()["records"] != historical_3h.back()["records"]) {
      return {{"benchmark", "query"}, {"error", s.name + ": the pads returned different records"}};
    }
  }
  json hbase;
  if (!o.hbase.empty()) {
    hbase = QueryOnHBase(o.hbase, *store, shapes, queries, qo, runs);
    if (hbase.contains("error")) return {{"benchmark", "query"}, {"error", hbase["error"]}};
  }
  json grep = json::array({
      Grep("rare token, whole raw file", "-F", kRareToken, raw_path, runs, kRare),
      Grep("regex with a literal, whole raw file", "-E", "zqx7rare[0-9]+ ze[t]a", raw_path, runs, kRare),
  });
  for (const json& g : grep) {
    if (g.contains("error")) return {{"benchmark", "query"}, {"error", g.dump()}};
  }
  std::fprintf(stderr, "bench query: modelling a token index over the stored chunks\n");
  const json model = TokenIndexModel(*store, qo.decode, store->disk_usage()->sst);
  const uint64_t sst_ingested = store->disk_usage()->sst;

  // The same store compacted (indexer/compactor.h: chunks of up to 8192
  // records), which writes a token filter with each merged chunk; the text
  // queries again, reading the filters and not.
  std::fprintf(stderr, "bench query: compacting\n");
  CompactorOptions cpo;
  cpo.lookback_ms = 48ll * 3600 * 1000;
  cpo.max_pass_bytes = UINT64_MAX;
  cpo.indexer = io;
  auto compactor = Compactor::Create(*store, cpo);
  LOGDEX_CHECK(compactor.ok());
  const double compact_cpu0 = bench::CpuSeconds();
  auto pass = (*compactor)->Pass(end_ms + cpo.settle_ms + cpo.max_span_ms + 1);
  if (!pass.ok()) return {{"benchmark", "query"}, {"error", "compaction: " + pass.error().ToString()}};
  const double compact_cpu = bench::CpuSeconds() - compact_cpu0;
  LOGDEX_CHECK(store->Flush().ok());
  std::vector<std::string> tables = IndexTableNames();
  for (std::string_view t : {kMainTable, kMergedTable, kTokenTable, kMinuteCountsTable}) tables.emplace_back(t);
  for (const std::string& t : tables) LOGDEX_CHECK(store->CompactTable(t).ok());
  const uint64_t sst_compacted = store->disk_usage()->sst;
  QueryOptions merged_qo = qo;
  merged_qo.max_chunk_span_ms = cpo.max_span_ms;  // serve pads by the longest span it stored
  QueryOptions unfiltered_qo = merged_qo;
  unfiltered_qo.use_token_filters = false;
  const QueryEngine with_filters(*store, merged_qo), without_filters(*store, unfiltered_qo);
  json compacted_with = json::array(), compacted_without = json::array();
  json compacted_main_scans = json::array();
  if (!main_table_scans(with_filters.options(), "compacted", compacted_main_scans)) {
    return {{"benchmark", "query"}, {"error", compacted_main_scans.back()}};
  }
  for (const Shape& s : shapes) {
    if (s.query.text.empty()) continue;
    for (auto [engine, out] : {std::pair{&with_filters, &compacted_with}, std::pair{&without_filters, &compacted_without}}) {
      out->push_back(Measure(*engine, s, runs));
      std::fprintf(stderr, "bench query (compacted, token filters %s): %s\n", engine == &with_filters ? "on" : "off",
                   out->back().dump().c_str());
      if (out->back().contains("error")) return {{"benchmark", "query"}, {"error", out->back().dump()}};
    }
  }

  json historical_compacted = json::array();
  for (const Shape& s : historical) {
    historical_compacted.push_back(Measure(with_filters, s, runs));
    std::fprintf(stderr, "bench query (compacted, padded by 3 h): %s\n", historical_compacted.back().dump().c_str());
    if (historical_compacted.back().contains("error")) {
      return {{"benchmark", "query"}, {"error", historical_compacted.back().dump()}};
    }
  }
  QueryOptions volume_qo = merged_qo;
  volume_qo.index_count_span_ms = qo.max_chunk_span_ms;  // as serve sets it
  const QueryEngine compacted_volume(*store, volume_qo);
  const json volume_compacted =
      MeasureVolume(compacted_volume, "histogram of an app, 24 h, 60 buckets", histogram, runs);
  std::fprintf(stderr, "bench query (compacted): %s\n", volume_compacted.dump().c_str());
  if (volume_compacted.contains("error")) return {{"benchmark", "query"}, {"error", volume_compacted.dump()}};
  if (volume_compacted["records"] != volume_as_ingested["records"]) {
    return {{"benchmark", "query"}, {"error", "the histogram's total changed with compaction"}};
  }
  json padding = {{"as_ingested_padded_60s", historical_60s},
                  {"as_ingested_padded_3h", historical_3h},
                  {"compacted_padded_3h", historical_compacted},
                  {"note", "queries of a range 12 h back: serve pads index ranges past `to` by the longest span its "
                           "store may hold (60 s without compaction, 3 h with it, merged or not yet)"}};
  for (size_t i = 0; i < historical.size(); ++i) {
    const double a = historical_60s[i]["p50_ms"].get<double>(), b = historical_3h[i]["p50_ms"].get<double>();
    padding["ratio_p50_padded_3h_to_60s_as_ingested"].push_back(a > 0 ? Round2(b / a) : 0.0);
  }

  // The filters' false-positive rate, measured: every filter probed with
  // tokens no record holds.
  uint64_t probes = 0, false_hits = 0;
  LOGDEX_CHECK(store->Scan(ScanSpec{std::string(kTokenTable), "", "", false, 0}, [&](std::string_view, std::string_view v) {
    const TokenBloomView filter(v);
    for (int i = 0; i < 64; ++i) {
      ++probes;
      false_hits += filter.MayContain(TokenHash("absent" + std::to_string(probes) + "qq"));
    }
    return true;
  }).ok());

  const double rare_p50 = queries[3]["p50_ms"].get<double>();
  const double rare_filtered_p50 = compacted_with[0]["p50_ms"].get<double>();
  // Rare token over every app (shape 4, the first scan=true one): compacted,
  // every stream's index with filters against the main table read whole.
  const double every_app_streams_p50 = compacted_with[1]["p50_ms"].get<double>();
  const double every_app_main_p50 = compacted_main_scans[0]["p50_ms"].get<double>();
  const double grep_best = grep[0]["best_ms"].get<double>();
  auto percent = [](double part, double whole) { return whole > 0 ? Round2(100.0 * part / whole) : 0.0; };
  const json compaction = {
      {"merges", pass->merges},
      {"parts", pass->parts},
      {"cpu_s", Round2(compact_cpu)},
      {"token_filters", pass->token_filters},
      {"token_filters_skipped", pass->token_filters_skipped},
      {"token_filter_bytes", pass->token_filter_bytes},
      {"token_filter_build_cpu_s", Round2(static_cast<double>(pass->token_filter_cpu_ns) / 1e9)},
      {"token_filter_false_positive_rate",
       probes ? Round2(1e4 * static_cast<double>(false_hits) / static_cast<double>(probes)) / 1e4 : 0.0},
      {"token_filter_probes", probes},
      {"token_filter_percent_of_sst", percent(static_cast<double>(pass->token_filter_bytes), static_cast<double>(sst_compacted))},
      {"token_filter_build_percent_of_ingest_cpu", percent(static_cast<double>(pass->token_filter_cpu_ns) / 1e9, ingest_cpu)},
      {"sst_bytes_as_ingested", sst_ingested},
      {"sst_bytes_compacted", sst_compacted}};
  std::fprintf(stderr, "bench query: compaction %s\n", compaction.dump().c_str());
  return {{"benchmark", "query"},
          {"lines", lines},
          {"raw_bytes", raw_bytes},
          {"app0_lines", app0_lines},
          {"planted", {{"rare_token", kRareToken}, {"rare_lines", kRare}, {"common_token", kCommonToken},
                       {"common_lines", common_lines}}},
          {"stored_chunks", indexer.counters().stored_chunks},
          {"ingest_s", Round2(ingest_s)},
          {"ingest_cpu_s", Round2(ingest_cpu)},
          {"runs", runs},
          {"queries", queries},
          {"grep", grep},
          {"ratio_rare_token_one_app_p50_to_grep_whole_file_best", grep_best > 0 ? Round2(rare_p50 / grep_best) : 0.0},
          {"compaction", compaction},
          {"compacted_with_token_filters", compacted_with},
          {"compacted_without_token_filters", compacted_without},
          {"main_table_scans", main_scans},
          {"historical_range_padding", padding},
          {"histogram",
           {{"as_ingested", volume_as_ingested},
            {"compacted", volume_compacted},
            {"ratio_p50_compacted_to_as_ingested",
             volume_as_ingested["p50_ms"].get<double>() > 0
                 ? Round2(volume_compacted["p50_ms"].get<double>() / volume_as_ingested["p50_ms"].get<double>())
                 : 0.0}}},
          {"compacted_main_table_scans", compacted_main_scans},
          {"speedup_rare_token_every_app_compacted_main_table_to_streams_with_filters",
           every_app_streams_p50 > 0 ? Round2(every_app_main_p50 / every_app_streams_p50) : 0.0},
          {"ratio_rare_token_every_app_with_filters_p50_to_grep_whole_file_best",
           grep_best > 0 ? Round2(every_app_streams_p50 / grep_best) : 0.0},
          {"speedup_rare_token_one_app_as_ingested_to_compacted_with_filters",
           rare_filtered_p50 > 0 ? Round2(rare_p50 / rare_filtered_p50) : 0.0},
          {"ratio_rare_token_one_app_with_filters_p50_to_grep_whole_file_best",
           grep_best > 0 ? Round2(rare_filtered_p50 / grep_best) : 0.0},
          {"token_index_model", model},
          {"hbase", hbase.is_null() ? json("not run (--hbase HOST:PORT)") : hbase},
          {"note", "QueryEngine in process over RocksDB (logdex's tables, flushed, block cache warm after the first "
                   "run); every page at limit 10,000 unless a first page; p95 of 5 runs is the slowest run; grep: "
                   "LC_ALL=C grep -c on the raw file (the lines and newlines), best of 5, page cache warm; ingest CPU: the "
                   "process's, from the first line chunked (ship's Chunker: records packed, zstd-1) to the store "
                   "flushed (the indexer, RocksDB's threads), the lines generated in memory before; compaction's "
                   "CPU is apart (compaction.cpu_s)"}};
}

}  // namespace logdex
