// logdex: one binary, subcommands. main() only parses the command line and
// runs the chosen subcommand (see commands.h).
#include <CLI/CLI.hpp>

#include "server/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"logdex: a Kafka-fed log indexing pipeline (ingest, index, query, alert)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(LOGDEX_VERSION));

  logdex::CommandRun run;
  logdex::AddVersionCommand(app, run);
  logdex::AddBenchCommand(app, run);
  logdex::AddServeCommand(app, run);
  logdex::AddQueryCommand(app, run);
  logdex::AddShipCommand(app, run);
  logdex::AddDemoCommand(app, run);

  CLI11_PARSE(app, argc, argv);
  return run ? run() : 0;
}
