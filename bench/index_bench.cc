// `logdex bench index`: indexing throughput into RocksDB, and the cost of
// indexing one more chunk incrementally next to the old system's rebuild of
// every index by a full scan, as the main table grows.
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "common/chunk_codec.h"
#include "common/clock.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "store/rocksdb_store.h"

namespace logdex {
namespace {

using nlohmann::json;

using bench::CpuSeconds;
using bench::Round2;
int64_t Now() { return bench::NowNs(); }
double Round(double v) { return Round2(v); }

// Chunks as the shipper makes them: one stream each, ~32 KiB of real lines,
// a tag summary; one in ten is ERROR (decompressed at ingest for alerting).
std::vector<std::string> ShipperChunks(const std::vector<std::string>& lines, size_t count, uint64_t* records) {
  std::vector<std::string> chunks;
  const int64_t base = SystemClock::Instance().NowMs() - 3'600'000;
  size_t line = 0;
  for (size_t c = 0; c < count; ++c) {
    proto::RecordBatch b;
    size_t bytes = 0;
    const Severity sev = c % 10 == 9 ? Severity::kError : Severity::kInfo;
    while (bytes < 32 * 1024) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(base + static_cast<int64_t>(c * 10 + b.records_size() % 10));
      r->set_severity(SeverityCode(sev));
      r->set_message(lines[line++ % lines.size()]);
      bytes += r->message().size();
      proto::Tag* t = r->add_tags();
      t->set_key("dc");
      t->set_value(c % 2 ? "east" : "west");
    }
    *records += b.records_size();
    PackOptions po;
    po.producer_id = 1;
    po.sequence = c + 1;
    chunks.push_back(PackChunk("app" + std::to_string(c % 20), "host" + std::to_string(c % 50), b, po)
                         .SerializeAsString());
  }
  return chunks;
}

json Throughput(const BenchOptions& o, const std::vector<std::string>& lines) {
  uint64_t records = 0;
  const size_t count = static_cast<size_t>(4000 * o.scale);
  std::vector<std::string> chunks = ShipperChunks(lines, count, &records);
  bench::ScratchDir dir(o.dir, "index");
  double wall = 0, cpu = 0;
  {
    auto store = bench::OpenStoreWithTables(dir.str());
    Indexer indexer(*store, IndexerOptions{});
    bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
    proto::ChunkSource src;
    src.set_topic("bench");
    const double cpu0 = CpuSeconds();
    const int64_t t0 = Now();
    for (size_t i = 0; i < chunks.size(); i += 64) {  // a consumer batch: 64 chunks, one write
      std::vector<std::string> part(chunks.begin() + i, chunks.begin() + std::min(chunks.size(), i + 64));
      LOGDEX_CHECK(indexer.IngestSerialized(part, src).ok());
    }
    LOGDEX_CHECK(store->Flush().ok());
    wall = (Now() - t0) / 1e9;
    cpu = CpuSeconds() - cpu0;
  }
  return {{"benchmark", "index_throughput"},
          {"store", "rocksdb, durability async, flushed at the end"},
          {"chunks", count},
          {"lines", records},
          {"wall_s", Round(wall)},
          {"cpu_s", Round(cpu)},
          {"chunks_per_s", Round(count / wall)},
          {"lines_per_s", Round(records / wall)},
          {"chunks_per_cpu_s", Round(count / cpu)},
          {"lines_per_cpu_s", Round(records / cpu)},
          {"note", "per core = per CPU-second of the whole process, RocksDB's background threads included"}};
}

// Tiny one-record chunks, so that the table can reach 10^6 chunks quickly.
std::string TinyChunk(uint64_t seq, int64_t base) {
  proto::RecordBatch b;
  proto::LogRecord* r = b.add_records();
  r->set_ts_ms(base + static_cast<int64_t>(seq));
  r->set_severity(SeverityCode(seq % 7 == 0 ? Severity::kWarn : Severity::kInfo));
  r->set_message("request " + std::to_string(seq) + " served");
  proto::Tag* t = r->add_tags();
  t->set_key("shard");
  t->set_value(std::to_string(seq % 30));
  PackOptions po;
  po.producer_id = 2;
  po.sequence = seq;
  return PackChunk("app" + std::to_string(seq % 20), "host" + std::to_string(seq % 50), b, po).SerializeAsString();
}

json Growth(const BenchOptions& o) {
  std::vector<uint64_t> sizes;
  for (uint64_t n : {10'000ull, 100'000ull, 1'000'000ull}) sizes.push_back(std::max<uint64_t>(100, n * o.scale));
  bench::ScratchDir dir(o.dir, "growth");
  json incremental = json::array(), rebuild = json::array();
  {
    auto store = bench::OpenStoreWithTables(dir.str());
    Indexer indexer(*store, IndexerOptions{});
    bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
    proto::ChunkSource src;
    src.set_topic("bench");
    const int64_t base = SystemClock::Instance().NowMs() - 6 * 3'600'000;
    uint64_t seq = 0;
    for (uint64_t size : sizes) {
      while (seq < size) {  // grow the table in batches of 1000
        std::vector<std::string> part;
        for (int i = 0; i < 1000 && seq < size; ++i) part.push_back(TinyChunk(++seq, base));
        LOGDEX_CHECK(indexer.IngestSerialized(part, src).ok());
      }
      // Incremental: index one more chunk, each in its own write, 1000 times.
      const int kProbe = 1000;
      int64_t t0 = Now();
      for (int i = 0; i < kProbe; ++i) LOGDEX_CHECK(indexer.IngestSerialized({TinyChunk(++seq, base)}, src).ok());
      const double per_chunk_us = (Now() - t0) / 1e3 / kProbe;
      incremental.push_back({{"main_table_chunks", seq}, {"us_per_added_chunk", Round(per_chunk_us)}});
      // Rebuild: derive every index row again from a full scan of the main table.
      t0 = Now();
      LOGDEX_CHECK(Indexer::RebuildIndexes(*store, IndexerOptions{}, 10'000).ok());
      const double rebuild_ms = (Now() - t0) / 1e6;
      rebuild.push_back({{"main_table_chunks", seq},
                         {"ms_per_rebuild", Round(rebuild_ms)},
                         {"ratio_rebuild_to_incremental", Round(rebuild_ms * 1000 / per_chunk_us)}});
    }
  }
  return {{"benchmark", "index_growth"},
          {"incremental", incremental},
          {"rebuild", rebuild},
          {"note", "the old system rebuilt every index by a full scan to take in new chunks; logdex indexes each "
                   "chunk as it arrives, at a cost that does not depend on the table's size"}};
}

}  // namespace

json BenchIndex(const BenchOptions& o, const std::vector<std::string>& lines) {
  json out = json::array();
  out.push_back(Throughput(o, lines));
  out.push_back(Growth(o));
  return out;
}

}  // namespace logdex
