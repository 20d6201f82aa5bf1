// `logdex version` and `logdex bench`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "bench/bench.h"
#include "common/chunk_codec.h"
#include "server/commands.h"
#include "server/ingest_adapters.h"

namespace logdex {

void AddVersionCommand(CLI::App& app, CommandRun& run) {
  CLI::App* cmd = app.add_subcommand("version", "Print the version and build information");
  cmd->callback([&run] {
    run = [] {
      std::printf("logdex %s (chunk format %u.%u)\n", LOGDEX_VERSION, kChunkFormatMajor, kChunkFormatMinor);
      return 0;
    };
  });
}

void AddBenchCommand(CLI::App& app, CommandRun& run) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Run a benchmark and print its figures as JSON");
  cmd->add_option("name", options->name, "Benchmark: store | codec | fuzzy | index | ship | storage | consume | alert | tail | query | all")
      ->required()
      ->check(CLI::IsMember({"store", "codec", "fuzzy", "index", "ship", "storage", "consume", "alert", "tail", "query", "all"}));
  cmd->add_option("--dir", options->dir, "Scratch directory for store benchmarks (default: a temporary one)");
  cmd->add_option("--data", options->data_dir, "Directory of loghub samples for the codec benchmark")
      ->capture_default_str();
  cmd->add_option("--scale", options->scale, "Multiply the workload sizes by this factor")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--brokers", options->brokers,
                  "consume: also run end to end through this real Kafka broker (topics bench-real, 32 partitions, "
                  "and bench-real.dlq must exist; bench/consume_real_kafka.sh makes them)");
  cmd->add_option("--broker-pid", options->broker_pid, "consume: the real broker's pid; its CPU counts with logdex's")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--hbase", options->hbase,
                  "query: also run the query shapes on HBase through this Thrift2 gateway (HOST:PORT, framed, "
                  "binary; bench/query_real_hbase.sh starts one)");
  options->make_line_decoder = [](const Clock& clock) -> std::unique_ptr<LineDecoder> {
    return std::make_unique<ShipLineDecoder>("bench", "h1", clock);
  };
  cmd->callback([&run, options] { run = [options] { return RunBench(*options); }; });
}

}  // namespace logdex
