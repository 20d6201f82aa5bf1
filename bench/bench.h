// `logdex bench NAME`: benchmarks that print their figures as one JSON
// object per benchmark on stdout, each with a baseline measured in the same
// run and the ratio to it.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace logdex {

class Clock;
class LineDecoder;

struct BenchOptions {
  std::string name;      // store | codec | fuzzy | index | ship | storage | consume | alert | tail | query | all
  std::string dir;       // scratch directory; empty = a new temporary one
  std::string data_dir = LOGDEX_DEFAULT_DATA_DIR;  // loghub samples
  double scale = 1.0;    // workload size factor
  // `bench consume` also runs through this real Kafka broker (its topic
  // `bench-real`, 32 partitions, and `bench-real.dlq` must exist), and counts
  // the CPU of `broker_pid` (when not 0) with the process's: the mock cluster
  // runs inside the process, a real broker beside it.
  std::string brokers;
  int broker_pid = 0;
  // `bench query` also runs its query shapes on HBase through this Thrift2
  // gateway (host:port; framed transport, binary protocol), in a namespace
  // of its own, beside RocksDB (bench/query_real_hbase.sh starts one).
  std::string hbase;
  // serve's line decoder (server/ builds it; bench/ does not link server/):
  // `bench ship` measures serve's line input with it; unset, that is skipped.
  std::function<std::unique_ptr<LineDecoder>(const Clock&)> make_line_decoder;
};

// Runs the named benchmark(s); returns the process exit code.
int RunBench(const BenchOptions& options);

}  // namespace logdex
