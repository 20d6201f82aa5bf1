// hbase_write_bench: write throughput of HBaseTableStore through the Thrift2
// test gateway (tests/hbase/hbase_test_server.h, loopback), with the same
// workload written directly into RocksDbStore in the same run as the
// baseline. Rows are main-table rows: 34-byte keys, incompressible values.
//
//   hbase_write_bench [--rows N] [--value-bytes N] [--batch-rows N]
//                     [--transport framed|buffered] [--protocol binary|compact]
//                     [--durability skip_wal|async|sync]
//
// Prints one JSON object. The test gateway is a fixture over RocksDB on the
// same machine: its figure measures the client, Thrift encoding and the
// loopback hop, not an HBase cluster. With LOGDEX_HBASE_THRIFT=host:port (as
// tests/engines/hbase_run.sh sets it), the same batches also go through that
// real gateway to its HBase, into a namespace of their own:
//   tests/engines/hbase_run.sh framed binary -- build/store/hbase/hbase_write_bench
// (the real gateway's transport and protocol are --transport and --protocol).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "common/clock.h"
#include "common/row_keys.h"
#include "store/rocksdb_store.h"
#include "tests/hbase/served_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

struct Config {
  int rows = 2000;
  int value_bytes = 64 * 1024;
  int batch_rows = 32;
  HBaseOptions::Transport transport = HBaseOptions::Transport::kFramed;
  HBaseOptions::Protocol protocol = HBaseOptions::Protocol::kBinary;
  Durability durability = Durability::kAsync;
};

const char* Name(Durability d) {
  return d == Durability::kSkipWal ? "skip_wal" : d == Durability::kSync ? "sync" : "async";
}

// The same batches for both backends.
std::vector<WriteBatch> Workload(const Config& c) {
  std::mt19937_64 rng(42);
  std::vector<WriteBatch> batches;
  WriteBatch b;
  for (int i = 0; i < c.rows; ++i) {
    MainKey k;
    k.app = AppId(rng());
    k.host = HostId(rng());
    k.salt = SaltOf(k.app, k.host, kDefaultSaltBuckets);
    k.severity = Severity::kInfo;
    k.first_ts_ms = 1'700'000'000'000 + i;
    k.chunk = ChunkId(rng());
    std::string value(static_cast<size_t>(c.value_bytes), '\0');
    for (size_t j = 0; j + 8 <= value.size(); j += 8) {
      uint64_t r = rng();
      std::memcpy(&value[j], &r, 8);
    }
    b.Put(kMainTable, k.Encode(), std::move(value));
    if (static_cast<int>(b.size()) == c.batch_rows) batches.push_back(std::move(b)), b = WriteBatch();
  }
  if (!b.empty()) batches.push_back(std::move(b));
  return batches;
}

nlohmann::json Run(TableStore& store, const std::vector<WriteBatch>& batches) {
  TableOptions o;
  o.block_cache = false;
  o.ttl_seconds = 7 * 24 * 3600;
  o.pre_split = kDefaultSaltBuckets;  // as indexer/tables.cc creates it
  if (Status s = store.CreateTable(kMainTable, o); !s.ok()) {
    std::fprintf(stderr, "create table: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  const Clock& clock = SystemClock::Instance();
  uint64_t rows = 0, bytes = 0;
  const int64_t t0 = clock.MonotonicNs();
  for (const WriteBatch& b : batches) {
    if (Status s = store.Write(b); !s.ok()) {
      std::fprintf(stderr, "write: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    rows += b.size();
    bytes += b.bytes();
  }
  const double seconds = static_cast<double>(clock.MonotonicNs() - t0) / 1e9;
  return {{"rows", rows},
          {"bytes", bytes},
          {"seconds", seconds},
          {"rows_per_s", rows / seconds},
          {"mib_per_s", static_cast<double>(bytes) / (1 << 20) / seconds}};
}

int Main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") {
      c.rows = std::atoi(next().c_str());
    } else if (a == "--value-bytes") {
      c.value_bytes = std::atoi(next().c_str());
    } else if (a == "--batch-rows") {
      c.batch_rows = std::atoi(next().c_str());
    } else if (a == "--transport") {
      c.transport = next() == "buffered" ? HBaseOptions::Transport::kBuffered : HBaseOptions::Transport::kFramed;
    } else if (a == "--protocol") {
      c.protocol = next() == "compact" ? HBaseOptions::Protocol::kCompact : HBaseOptions::Protocol::kBinary;
    } else if (a == "--durability") {
      std::string d = next();
      c.durability = d == "skip_wal" ? Durability::kSkipWal : d == "sync" ? Durability::kSync : Durability::kAsync;
    } else {
      std::fprintf(stderr, "usage: hbase_write_bench [--rows N] [--value-bytes N] [--batch-rows N] "
                           "[--transport framed|buffered] [--protocol binary|compact] "
                           "[--durability skip_wal|async|sync]\n");
      return 2;
    }
  }
  if (c.rows <= 0 || c.value_bytes < 0 || c.batch_rows <= 0) {
    std::fprintf(stderr, "rows and batch-rows must be positive\n");
    return 2;
  }
  const std::vector<WriteBatch> batches = Workload(c);

  nlohmann::json rocks_result, hbase_result, real_result;
  {
    TempDir dir;
    RocksDbOptions o;
    o.path = dir.path();
    o.durability = c.durability;
    auto store = RocksDbStore::Open(o);
    if (!store.ok()) return std::fprintf(stderr, "%s\n", store.error().ToString().c_str()), 1;
    rocks_result = Run(**store, batches);
  }
  {
    TempDir dir;
    HBaseOptions o;
    o.transport = c.transport;
    o.protocol = c.protocol;
    o.durability = c.durability;
    o.pool_size = 1;
    auto store = ServedHBaseStore::Open(dir.path(), &SystemClock::Instance(), o);
    if (!store.ok()) return std::fprintf(stderr, "%s\n", store.error().ToString().c_str()), 1;
    hbase_result = Run(**store, batches);
    hbase_result["putMultiple_calls"] = (*store)->server().stats().calls["putMultiple"];
  }
  if (const char* addr = std::getenv("LOGDEX_HBASE_THRIFT"); addr && std::strchr(addr, ':')) {
    const std::string a(addr);
    HBaseOptions o;
    o.host = a.substr(0, a.rfind(':'));
    o.port = std::atoi(a.c_str() + a.rfind(':') + 1);
    o.transport = c.transport;
    o.protocol = c.protocol;
    o.durability = c.durability;
    o.pool_size = 1;
    o.ns = "bench" + std::to_string(SystemClock::Instance().NowMs());
    auto store = HBaseTableStore::Open(o);
    if (!store.ok()) return std::fprintf(stderr, "%s: %s\n", addr, store.error().ToString().c_str()), 1;
    real_result = Run(**store, batches);
    real_result["gateway"] = a;
  }
  nlohmann::json out = {
      {"workload",
       {{"rows", c.rows},
        {"key_bytes", MainKey::kSize},
        {"value_bytes", c.value_bytes},
        {"batch_rows", c.batch_rows},
        {"durability", Name(c.durability)},
        {"transport", c.transport == HBaseOptions::Transport::kFramed ? "framed" : "buffered"},
        {"protocol", c.protocol == HBaseOptions::Protocol::kBinary ? "binary" : "compact"}}},
      {"rocksdb_direct", rocks_result},
      {"hbase_thrift2_test_gateway", hbase_result},
      {"ratio_hbase_to_rocksdb_rows_per_s",
       hbase_result["rows_per_s"].get<double>() / rocks_result["rows_per_s"].get<double>()}};
  if (!real_result.is_null()) {
    out["hbase_real_gateway"] = real_result;
    out["ratio_real_hbase_to_rocksdb_rows_per_s"] =
        real_result["rows_per_s"].get<double>() / rocks_result["rows_per_s"].get<double>();
    out["ratio_real_hbase_to_test_gateway_rows_per_s"] =
        real_result["rows_per_s"].get<double>() / hbase_result["rows_per_s"].get<double>();
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace logdex

int main(int argc, char** argv) { return logdex::Main(argc, argv); }
