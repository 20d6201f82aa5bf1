// The shipping pipeline: inputs (files, --follow tails, stdin) -> LineParser
// -> RecordAssembler (one per input) -> Chunker -> ChunkSink (Kafka, or the
// dry-run file); and RunShip(), the whole `logdex ship` command.
//
// Checkpoints (follow mode with a state directory): the read positions are
// saved at barriers, one every checkpoint_interval_ms however busy the
// inputs are: the chunker is flushed (every complete record gets a
// sequence), and each input's position is the start of the oldest line its
// assembler still holds (a pending multi-line record, the format sample),
// else just past its last line: a record boundary. A barrier's positions are
// written once every chunk up to the barrier's last sequence is resolved by
// the sink: delivered, or dropped by the backlog bound (counted and logged);
// a chunk that failed is never resolved, so no checkpoint passes it. A clean
// stop (SIGINT/SIGTERM) flushes, waits for delivery and saves the exact
// final positions: a restart then resumes with no loss and no duplication.
// After a crash, too: every chunk was journaled before it was sent
// (journal.h), so a restart sends the journaled chunks again under their own
// sequences (the store keeps one copy), reads from the last saved barrier,
// skips the records those chunks hold and ends multi-line records where the
// journal says they ended; an auto-format input resumes with the format it
// had chosen (kept in the checkpoint and the journal). Exactly once, except
// where counted and logged: the journal could not be written or was full
// (at-least-once then), or a record read again differs from the journaled
// one at its offset (shipped again).
//
// Not thread-safe; Run() drives everything on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "parse/assembler.h"
#include "parse/parsers.h"
#include "ship/chunk_sink.h"
#include "ship/chunker.h"
#include "ship/kafka_producer.h"
#include "ship/sequence.h"
#include "ship/tailer.h"

namespace prometheus {
class Registry;
}

namespace logdex::ship {

struct PipelineOptions {
  parse::ParserOptions parser;
  // multiline defaults to on; RunShip turns it off for --format json.
  parse::AssemblerOptions assembler;
  ChunkerOptions chunker;
  std::vector<std::string> inputs;  // paths; "-" = stdin
  bool follow = false;
  // Where checkpoints live (follow mode); empty = no checkpoints.
  std::string state_dir;
  // Follow mode: wait this long when nothing is new.
  int64_t idle_poll_ms = 200;
  // Follow mode: a pending multi-line record is complete after this much
  // quiet on its input.
  int64_t multiline_idle_ms = 1000;
  // Follow mode: at most one checkpoint barrier per interval.
  int64_t checkpoint_interval_ms = 2000;
  // Follow mode with a state directory: the journal's segments stay under
  // this (journal.h); past it, chunks are sent unjournaled (counted).
  uint64_t journal_max_bytes = 1ull << 30;
  // How long Finish() waits for the last deliveries.
  int64_t delivery_timeout_ms = 300'000;
  // Progress line on stderr every second (RunShip: when stderr is a TTY).
  bool progress = false;
  // How the follow loop waits when the sink's Poll() returns at once (tests
  // may pass a no-op). Default: sleep.
  std::function<void(int64_t ms)> wait;
};

struct PipelineSummary {
  uint64_t lines = 0;
  uint64_t records = 0;
  uint64_t joined_lines = 0;
  uint64_t unparsed_lines = 0;
  uint64_t bytes_read = 0;
  ChunkerStats chunker;
  DeliveryReport delivery;
  // Per input, in order: its path and the format it was read with (auto:
  // the detected one; kAuto when no line matched a format).
  std::vector<std::pair<std::string, parse::Format>> formats;
};

class Pipeline {
 public:
  // `sink`, `sequences`, `clock` and `registry` must outlive the pipeline.
  Pipeline(PipelineOptions options, ChunkSink& sink, SequenceAllocator& sequences, const Clock& clock,
           prometheus::Registry& registry);
  ~Pipeline();

  // Ships every input to its end (no follow), or until `*stop` becomes true
  // (follow), then flushes and waits for delivery. Errors: bad options,
  // unreadable inputs, a failing sink.
  Result<PipelineSummary> Run(const std::atomic<bool>* stop = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Everything `logdex ship` takes (server/ship_command.cc fills it).
struct ShipCommandOptions {
  PipelineOptions pipeline;
  std::string format = "auto";
  std::string default_severity = "INFO";
  bool stream_from_line = false;
  bool no_multiline = false;
  bool dry_run = false;
  std::string out;  // dry run output; "-" = stdout
  ProducerOptions producer;
  bool progress_flag_set = false;  // --progress / --no-progress given
  bool progress = false;
  std::string retention = "7d";  // --retention: records older are counted
  bool check = false;            // --check: report how the files read, ship nothing
};

// Fills options.pipeline's parser, assembler and chunker options from the
// command's words (format, default severity, retention, multiline); returns
// what is wrong with them, empty when nothing is.
std::string ResolveLineOptions(ShipCommandOptions& options);

// Runs `logdex ship --check`: reads each input as ship would, without Kafka,
// and prints on stdout how it was read (ship/check.cc). 0 when every input
// was read; 1 when one could not be; 2 for bad options.
int RunShipCheck(ShipCommandOptions options);

// Runs `logdex ship`: 0 when every chunk was delivered (or written, in a dry
// run); 1 when some were not (what, on stderr); 2 for bad options.
int RunShip(ShipCommandOptions options);

}  // namespace logdex::ship
