// Subcommand registration. Each subcommand lives in its own
// server/<name>_command.cc: it declares its flags on the CLI11 app and, when
// chosen, sets `run` to the function main() calls after parsing. The work
// itself belongs to the module that owns it (bench/, ship/, consumer/, ...).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace logdex {

// What main() runs after parsing; returns the process exit code.
using CommandRun = std::function<int()>;

void AddVersionCommand(CLI::App& app, CommandRun& run);
void AddBenchCommand(CLI::App& app, CommandRun& run);
void AddServeCommand(CLI::App& app, CommandRun& run);
void AddQueryCommand(CLI::App& app, CommandRun& run);
void AddShipCommand(CLI::App& app, CommandRun& run);
void AddDemoCommand(CLI::App& app, CommandRun& run);

}  // namespace logdex
