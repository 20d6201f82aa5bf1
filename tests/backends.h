// The TableStore backends that store-level suites (conformance, indexer,
// query) run against. Each suite instantiates over AllBackends().
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "store/table_store.h"

namespace logdex {

struct Backend {
  std::string name;
  // Opens (or reopens) a store whose data lives under `dir`, reading time from `clock`.
  std::function<std::unique_ptr<TableStore>(const std::string& dir, const Clock* clock)> open;
  // Makes the next writes fail at the batch entry with this index; -1 clears.
  std::function<void(TableStore&, int)> fail_writes_at;
  // Whether fail_writes_at works (a real HBase has no fault injection).
  bool fault_injection = true;
  // Write() of a batch is all-or-nothing across tables (RocksDB yes; HBase no:
  // there index rows go first and readers skip index rows without a main row).
  bool atomic_batches = true;
  // TTL expiry follows the `clock` given to open() (RocksDB and the test gateway yes;
  // a real HBase expires cells by its own wall clock, so tests that advance a
  // ManualClock past a TTL skip there).
  bool clock_drives_ttl = true;
};

inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

// Every backend that can run here: rocksdb; hbase (the test gateway) when built with it;
// hbase_real when LOGDEX_HBASE_THRIFT=host:port names a real Thrift2 gateway
// (LOGDEX_HBASE_TRANSPORT=framed|buffered, LOGDEX_HBASE_PROTOCOL=binary|compact,
// defaults framed and binary).
std::vector<Backend> AllBackends();

// For INSTANTIATE_TEST_SUITE_P's name generator.
struct BackendName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

}  // namespace logdex
