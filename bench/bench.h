// `logdex bench NAME`: benchmarks that print their figures as one JSON
// object per benchmark on stdout, each with a baseline measured in the same
// run and the ratio to it.
#pragma once

#include <string>

namespace logdex {

struct BenchOptions {
  std::string name;      // store | codec | fuzzy | index | ship | storage | consume | alert | all
  std::string dir;       // scratch directory; empty = a new temporary one
  std::string data_dir = LOGDEX_DEFAULT_DATA_DIR;  // loghub samples
  double scale = 1.0;    // workload size factor
};

// Runs the named benchmark(s); returns the process exit code.
int RunBench(const BenchOptions& options);

}  // namespace logdex
