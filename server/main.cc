// logdex: one binary, subcommands. This file only parses the command line
// and hands off to the module that owns each subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "common/chunk_codec.h"

int main(int argc, char** argv) {
  CLI::App app{"logdex: a Kafka-fed log indexing pipeline (ingest, index, query, alert)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(LOGDEX_VERSION));

  CLI::App* version = app.add_subcommand("version", "Print the version and build information");

  logdex::BenchOptions bench_options;
  CLI::App* bench = app.add_subcommand("bench", "Run a benchmark and print its figures as JSON");
  bench->add_option("name", bench_options.name, "Benchmark: store | codec | fuzzy | all")
      ->required()
      ->check(CLI::IsMember({"store", "codec", "fuzzy", "all"}));
  bench->add_option("--dir", bench_options.dir, "Scratch directory for store benchmarks (default: a temporary one)");
  bench->add_option("--data", bench_options.data_dir, "Directory of loghub samples for the codec benchmark")
      ->capture_default_str();
  bench->add_option("--scale", bench_options.scale, "Multiply the workload sizes by this factor")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  CLI11_PARSE(app, argc, argv);

  if (*version) {
    std::printf("logdex %s (chunk format %u.%u)\n", std::string(LOGDEX_VERSION).c_str(),
                logdex::kChunkFormatMajor, logdex::kChunkFormatMinor);
    return 0;
  }
  if (*bench) return logdex::RunBench(bench_options);
  return 0;
}
