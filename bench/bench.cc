#include "bench/bench.h"

#include "bench/bench_util.h"

#include <fcntl.h>
#include <snappy.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/row_keys.h"
#include "store/rocksdb_store.h"

namespace logdex {
namespace {

using nlohmann::json;

double Seconds(int64_t start_ns) { return (SystemClock::Instance().MonotonicNs() - start_ns) / 1e9; }
int64_t Now() { return bench::NowNs(); }
double Mb(double bytes) { return bytes / (1024.0 * 1024.0); }
double Round(double v) { return bench::Round2(v); }

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

// Batch writes of 34-byte main-table keys with 64 KiB values, next to
// appending the same bytes to a plain file (both made durable at the end).
json BenchStore(const BenchOptions& o) {
  const size_t kValue = 64 * 1024, kBatchRows = 16;
  const size_t rows = static_cast<size_t>(1600 * o.scale);  // 100 MiB at scale 1
  const std::string pool = RandomBytes(4 << 20, 42);
  auto value_of = [&](size_t i) { return pool.substr((i * 7919) % (pool.size() - kValue), kValue); };
  auto key_of = [&](size_t i) {
    MainKey k{static_cast<uint8_t>(i % 16), AppIdOf("app" + std::to_string(i % 20)), Severity::kInfo,
              static_cast<int64_t>(1'700'000'000'000 + i), HostIdOf("host" + std::to_string(i % 50)), ChunkId(i)};
    return k.Encode();
  };

  bench::ScratchDir dir(o.dir, "store");
  RocksDbOptions ro;
  ro.path = dir.str() + "/db";
  auto store = RocksDbStore::Open(ro);
  LOGDEX_CHECK(store.ok());
  TableOptions main;
  main.block_cache = false;
  LOGDEX_CHECK((*store)->CreateTable(kMainTable, main).ok());

  uint64_t bytes = 0;
  int64_t t0 = Now();
  for (size_t i = 0; i < rows; i += kBatchRows) {
    WriteBatch batch;
    for (size_t j = i; j < std::min(rows, i + kBatchRows); ++j) batch.Put(kMainTable, key_of(j), value_of(j));
    bytes += batch.bytes();
    LOGDEX_CHECK((*store)->Write(batch).ok());
  }
  double write_s = Seconds(t0);
  LOGDEX_CHECK((*store)->Flush().ok());
  double store_s = Seconds(t0);

  // Baseline: the same bytes appended to a file, then fdatasync.
  std::string file = dir.str() + "/raw";
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LOGDEX_CHECK(fd >= 0);
  t0 = Now();
  for (size_t i = 0; i < rows; ++i) {
    std::string rec = key_of(i) + value_of(i);
    LOGDEX_CHECK(::write(fd, rec.data(), rec.size()) == static_cast<ssize_t>(rec.size()));
  }
  LOGDEX_CHECK(::fdatasync(fd) == 0);
  double raw_s = Seconds(t0);
  ::close(fd);

  return {{"benchmark", "store_batch_write"},
          {"backend", "rocksdb"},
          {"durability", "async"},
          {"rows", rows},
          {"key_bytes", MainKey::kSize},
          {"value_bytes", kValue},
          {"rows_per_batch", kBatchRows},
          {"mib", Round(Mb(bytes))},
          {"write_mib_per_s", Round(Mb(bytes) / write_s)},
          {"write_rows_per_s", Round(rows / write_s)},
          {"write_and_flush_mib_per_s", Round(Mb(bytes) / store_s)},
          {"baseline_file_append_fdatasync_mib_per_s", Round(Mb(bytes) / raw_s)},
          {"ratio_write_and_flush_to_file_append", Round(raw_s / store_s * 100) / 100}};
}


// Chunk pack/unpack throughput next to raw snappy on the same bytes.
json BenchCodec(const BenchOptions& o) {
  std::vector<std::string> lines = bench::LoadLines(o.data_dir);
  if (lines.empty()) return {{"benchmark", "chunk_codec"}, {"error", "no loghub samples in " + o.data_dir}};

  // ~64 KiB batches of real lines, as the shipper makes them.
  std::vector<proto::RecordBatch> batches;
  proto::RecordBatch cur;
  size_t cur_bytes = 0;
  int64_t ts = 1'700'000'000'000;
  for (int rep = 0; rep < std::max(1, static_cast<int>(8 * o.scale)); ++rep) {
    for (const std::string& line : lines) {
      proto::LogRecord* r = cur.add_records();
      r->set_ts_ms(ts++);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message(line);
      cur_bytes += line.size() + 12;
      if (cur_bytes >= 64 * 1024) {
        batches.push_back(std::move(cur));
        cur = {};
        cur_bytes = 0;
      }
    }
  }
  std::vector<std::string> raw;
  uint64_t raw_bytes = 0;
  for (const auto& b : batches) {
    raw.push_back(b.SerializeAsString());
    raw_bytes += raw.back().size();
  }

  // Pack (serialize + compress + crc32c + tag summary) and unpack (header +
  // crc32c + decompress + parse + validate) with each codec on the same chunks.
  auto measure = [&](proto::Codec codec, int level) {
    std::vector<std::string> wire;
    wire.reserve(batches.size());
    int64_t t0 = Now();
    for (const auto& b : batches) {
      PackOptions po;
      po.codec = codec;
      po.zstd_level = level;
      po.sequence = wire.size();
      wire.push_back(PackChunk("bench", "h1", b, po).SerializeAsString());
    }
    const double pack_s = Seconds(t0);
    DecodeOptions dopt;
    std::string scratch;
    uint64_t records = 0, payload_bytes = 0;
    t0 = Now();
    for (const std::string& w : wire) {
      auto chunk = DecodeChunk(w, dopt);
      LOGDEX_CHECK(chunk.ok());
      auto recs = UnpackRecords(*chunk, dopt, &scratch);
      LOGDEX_CHECK(recs.ok());
      records += recs->records_size();
      payload_bytes += chunk->payload().size();
    }
    const double unpack_s = Seconds(t0);
    const std::string name = codec == proto::CODEC_ZSTD           ? "zstd-" + std::to_string(level)
                             : codec == proto::CODEC_ZSTD_COLUMNS ? "zstd-" + std::to_string(level) + "-columns"
                             : codec == proto::CODEC_SNAPPY       ? "snappy"
                                                                  : "none";
    json j = {{"codec", name},
              {"compression_ratio", Round(static_cast<double>(raw_bytes) / payload_bytes)},
              {"pack_mib_per_s", Round(Mb(raw_bytes) / pack_s)},
              {"unpack_mib_per_s", Round(Mb(raw_bytes) / unpack_s)}};
    return std::make_tuple(j, pack_s, unpack_s, records);
  };
  auto [snappy_j, pack_s, unpack_s, records] = measure(proto::CODEC_SNAPPY, 0);
  json codecs = json::array({snappy_j});
  for (int level : {1, 3, 9}) codecs.push_back(std::get<0>(measure(proto::CODEC_ZSTD, level)));
  // Records by columns (merged chunks' codec), here on ship-sized chunks.
  for (int level : {1, 3}) codecs.push_back(std::get<0>(measure(proto::CODEC_ZSTD_COLUMNS, level)));
  codecs.push_back(std::get<0>(measure(proto::CODEC_NONE, 0)));

  // Baseline: snappy alone on the same serialized batches.
  std::string scratch;
  std::vector<std::string> compressed(raw.size());
  uint64_t compressed_bytes = 0;
  int64_t t0 = Now();
  for (size_t i = 0; i < raw.size(); ++i) snappy::Compress(raw[i].data(), raw[i].size(), &compressed[i]);
  double snappy_c_s = Seconds(t0);
  for (const auto& c : compressed) compressed_bytes += c.size();
  t0 = Now();
  for (const auto& c : compressed) LOGDEX_CHECK(snappy::Uncompress(c.data(), c.size(), &scratch));
  double snappy_u_s = Seconds(t0);

  const double mib = Mb(raw_bytes);
  return {{"benchmark", "chunk_codec"},
          {"chunks", batches.size()},
          {"records", records},
          {"uncompressed_mib", Round(mib)},
          {"compression_ratio", Round(static_cast<double>(raw_bytes) / compressed_bytes)},
          {"pack_mib_per_s", Round(mib / pack_s)},
          {"unpack_mib_per_s", Round(mib / unpack_s)},
          {"baseline_snappy_compress_mib_per_s", Round(mib / snappy_c_s)},
          {"baseline_snappy_uncompress_mib_per_s", Round(mib / snappy_u_s)},
          {"ratio_pack_to_snappy_compress", Round(snappy_c_s / pack_s)},
          {"ratio_unpack_to_snappy_uncompress", Round(snappy_u_s / unpack_s)},
          {"codecs", codecs},
          {"note", "MiB are uncompressed RecordBatch bytes; pack = serialize + compress + crc32c + tag summary; "
                   "unpack = parse header + crc32c + decompress + parse records + validate; the top-level pack and "
                   "unpack figures are snappy's (the default)"}};
}

// Rows examined: fuzzy scan (one pass over 16 salt buckets) vs a full scan
// with a filter, for "app X, severity ERROR" over the main table's keys.
json BenchFuzzy(const BenchOptions& o) {
  bench::ScratchDir dir(o.dir, "fuzzy");
  RocksDbOptions ro;
  ro.path = dir.str() + "/db";
  auto store = RocksDbStore::Open(ro);
  LOGDEX_CHECK(store.ok());
  LOGDEX_CHECK((*store)->CreateTable(kMainTable, TableOptions{}).ok());
  const int apps = 20, hosts = 50, per_stream = std::max(1, static_cast<int>(20 * o.scale));
  uint64_t rows = 0;
  for (int a = 0; a < apps; ++a) {
    WriteBatch batch;
    for (int h = 0; h < hosts; ++h) {
      for (Severity s : {Severity::kDebug, Severity::kInfo, Severity::kWarn, Severity::kError, Severity::kFatal}) {
        for (int t = 0; t < per_stream; ++t) {
          AppId app = AppIdOf("app" + std::to_string(a));
          HostId host = HostIdOf("host" + std::to_string(h));
          MainKey k{SaltOf(app, host, kDefaultSaltBuckets), app, s, 1'700'000'000'000 + t * 1000, host,
                    static_cast<ChunkId>(rows)};
          batch.Put(kMainTable, k.Encode(), "v");
          ++rows;
        }
      }
    }
    LOGDEX_CHECK((*store)->Write(batch).ok());
  }
  LOGDEX_CHECK((*store)->Flush().ok());

  const AppId want_app = AppIdOf("app7");
  MainKey probe{0, want_app, Severity::kError, 0, HostId(), ChunkId()};
  FuzzyScanSpec fs;
  fs.range.table = std::string(kMainTable);
  fs.key = probe.Encode();
  fs.mask = std::string(MainKey::kSize, '\1');
  for (size_t i = 1; i <= 9; ++i) fs.mask[i] = '\0';  // app (8 bytes) and severity fixed

  uint64_t before = (*store)->counters().rows_examined, fuzzy_hits = 0;
  int64_t t0 = Now();
  LOGDEX_CHECK((*store)->FuzzyScan(fs, [&](std::string_view, std::string_view) { return ++fuzzy_hits, true; }).ok());
  double fuzzy_s = Seconds(t0);
  uint64_t fuzzy_examined = (*store)->counters().rows_examined - before;

  before = (*store)->counters().rows_examined;
  uint64_t full_hits = 0;
  ScanSpec full{std::string(kMainTable), "", "", false, 0};
  t0 = Now();
  LOGDEX_CHECK((*store)
                   ->Scan(full,
                          [&](std::string_view key, std::string_view) {
                            auto k = MainKey::Decode(key);
                            if (k && k->app == want_app && k->severity == Severity::kError) ++full_hits;
                            return true;
                          })
                   .ok());
  double full_s = Seconds(t0);
  uint64_t full_examined = (*store)->counters().rows_examined - before;
  LOGDEX_CHECK(full_hits == fuzzy_hits);

  return {{"benchmark", "fuzzy_scan"},
          {"table_rows", rows},
          {"salt_buckets", kDefaultSaltBuckets},
          {"query", "app=app7 severity=ERROR, all time"},
          {"matches", fuzzy_hits},
          {"fuzzy_rows_examined", fuzzy_examined},
          {"full_scan_rows_examined", full_examined},
          {"ratio_full_to_fuzzy_rows_examined", Round(static_cast<double>(full_examined) / fuzzy_examined)},
          {"fuzzy_ms", Round(fuzzy_s * 1000)},
          {"full_scan_ms", Round(full_s * 1000)}};
}

}  // namespace

json BenchIndex(const BenchOptions& o, const std::vector<std::string>& lines);    // index_bench.cc
json BenchConsume(const BenchOptions& o, const std::vector<std::string>& lines);  // consume_bench.cc
json BenchAlert(const BenchOptions& o);                                           // alert_bench.cc
int RunShipBench(const BenchOptions& o);  // ship_bench.cc
json BenchStorage(const BenchOptions& o);  // storage_bench.cc
json BenchTail(const BenchOptions& o);     // tail_bench.cc
json BenchQuery(const BenchOptions& o);    // query_bench.cc

int RunBench(const BenchOptions& o) {
  const bool all = o.name == "all";
  if (all || o.name == "store") std::printf("%s\n", BenchStore(o).dump().c_str());
  if (all || o.name == "codec") {
    json j = BenchCodec(o);
    std::printf("%s\n", j.dump().c_str());
    if (j.contains("error")) return 1;
  }
  if (all || o.name == "fuzzy") std::printf("%s\n", BenchFuzzy(o).dump().c_str());
  if ((all || o.name == "ship") && RunShipBench(o) != 0) return 1;
  if (all || o.name == "storage") {
    json j = BenchStorage(o);
    std::printf("%s\n", j.dump().c_str());
    if (j.contains("error")) return 1;
  }
  if (all || o.name == "index") {
    std::vector<std::string> lines = bench::LoadLines(o.data_dir);
    if (lines.empty()) {
      std::fprintf(stderr, "bench index: no loghub samples in %s\n", o.data_dir.c_str());
      return 1;
    }
    for (const json& j : BenchIndex(o, lines)) std::printf("%s\n", j.dump().c_str());
  }
  if (all || o.name == "alert") {
    json j = BenchAlert(o);
    std::printf("%s\n", j.dump().c_str());
    if (j.contains("error")) return 1;
  }
  if (all || o.name == "tail") std::printf("%s\n", BenchTail(o).dump().c_str());
  if (all || o.name == "query") {
    json j = BenchQuery(o);
    std::printf("%s\n", j.dump().c_str());
    if (j.contains("error")) return 1;
  }
  if (all || o.name == "consume") {
    std::vector<std::string> lines = bench::LoadLines(o.data_dir);
    if (lines.empty()) {
      std::fprintf(stderr, "bench consume: no loghub samples in %s\n", o.data_dir.c_str());
      return 1;
    }
    std::printf("%s\n", BenchConsume(o, lines).dump().c_str());
  }
  return 0;
}

}  // namespace logdex
