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
  // Write() of a batch is all-or-nothing across tables (RocksDB yes; HBase no:
  // there index rows go first and readers skip index rows without a main row).
  bool atomic_batches = true;
};

inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

// Every backend that can run here.
std::vector<Backend> AllBackends();

// For INSTANTIATE_TEST_SUITE_P's name generator.
struct BackendName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return info.param.name;
  }
};

}  // namespace logdex
