#include "ship/pipeline.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>
#include <unordered_set>

#include "common/defaults.h"
#include "common/time_parse.h"
#include "ship/framing.h"
#include "ship/journal.h"

namespace logdex::ship {

using parse::Format;
using parse::FormatName;
using parse::LineParser;
using parse::ParseFormatName;
using parse::RecordAssembler;
using parse::RecordSink;
using parse::RecordView;

namespace {

std::string AbsolutePath(const std::string& p) {
  if (p == "-") return p;
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

}  // namespace

struct Pipeline::Impl {
  PipelineOptions options;
  // The sink chain: chunker -> journal (follow mode with a state directory;
  // else a pass-through) -> the real sink.
  JournalSink sink;
  SequenceAllocator& sequences;
  const Clock& clock;
  std::unique_ptr<Chunker> chunker;

  struct Input {
    std::string path;  // absolute (checkpoint key)
    std::unique_ptr<FileTailer> tailer;
    std::unique_ptr<LineParser> parser;
    std::unique_ptr<RecordAssembler> assembler;
    int64_t last_data_ns = 0;
    bool at_end = false;
    // With checkpoints: (line number, position at its start) of each line the
    // assembler still holds; `added` numbers the lines given to it.
    struct HeldLine {
      uint64_t line;
      FilePosition start;
      uint64_t end;  // offset just past it, in its file
    };
    std::deque<HeldLine> starts;
    uint64_t added = 0;
    // After a crash: the records of this input that journaled chunks hold
    // (start -> end offset, per file), and where they ended.
    std::map<JournalReplay::FileKey, std::unordered_map<uint64_t, JournalReplay::Span>> replayed;
    std::map<JournalReplay::FileKey, std::unordered_set<uint64_t>> replayed_ends;
    std::map<JournalReplay::FileKey, uint64_t> replay_horizon;  // the furthest journaled end
    // Between the assembler and the chunker (OnInputRecord).
    std::unique_ptr<RecordSink> origin;
    uint32_t journal_input = 0;  // JournalSink::AddInput
  };
  // Gives each record of an input its span (journal) or skips it (replay).
  struct OriginSink final : RecordSink {
    Impl& impl;
    size_t input;
    OriginSink(Impl& i, size_t n) : impl(i), input(n) {}
    Status OnRecord(const RecordView& r) override { return impl.OnInputRecord(impl.inputs[input], r); }
  };
  std::vector<Input> inputs;
  std::unique_ptr<CheckpointStore> checkpoints;
  struct Barrier {
    uint64_t sequence = 0;
    uint64_t journal_segment = 0;  // the last segment its chunks are in
    struct Position {
      std::string path;
      FilePosition pos;
      std::string format;  // CheckpointStore::Format
    };
    std::vector<Position> positions;
  };
  std::deque<Barrier> barriers;
  std::optional<int64_t> last_barrier_ns;  // none yet
  bool barriers_held_logged = false;

  // Metrics (deltas pushed by SyncMetrics).
  prometheus::Counter* lines = nullptr;
  prometheus::Counter* bytes = nullptr;
  prometheus::Counter* unparsed = nullptr;
  prometheus::Counter* joined = nullptr;
  prometheus::Counter* chunks = nullptr;
  prometheus::Counter* rotations = nullptr;
  prometheus::Counter* truncations = nullptr;
  prometheus::Counter* checkpoints_saved = nullptr;
  prometheus::Counter* replay_chunks = nullptr;
  prometheus::Counter* replay_skipped = nullptr;
  prometheus::Counter* replay_mismatched = nullptr;
  std::optional<int64_t> last_mismatch_log_ns;
  prometheus::Counter* records_by_sev[6] = {};
  PipelineSummary synced;

  // Progress line.
  int64_t progress_start_ns = 0, progress_last_ns = 0;

  Impl(PipelineOptions o, ChunkSink& s, SequenceAllocator& seq, const Clock& c, prometheus::Registry& r)
      : options(std::move(o)),
        sink(s, options.follow && !options.state_dir.empty() ? options.state_dir + "/journal" : "",
             options.journal_max_bytes, r),
        sequences(seq),
        clock(c) {
    auto counter = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
    };
    lines = counter("logdex_ship_lines_read_total", "Input lines read");
    bytes = counter("logdex_ship_input_bytes_total", "Input bytes read");
    unparsed = counter("logdex_ship_unparsed_lines_total", "Lines that matched no format (kept as raw text)");
    joined = counter("logdex_ship_joined_lines_total", "Continuation lines joined into the record before them");
    chunks = counter("logdex_ship_chunks_packed_total", "Chunks packed by the chunker");
    rotations = counter("logdex_ship_file_rotations_total", "Followed files that were rotated");
    truncations = counter("logdex_ship_file_truncations_total", "Followed files that were truncated");
    checkpoints_saved = counter("logdex_ship_checkpoints_saved_total", "Read-position checkpoints written");
    replay_chunks = counter("logdex_ship_journal_replayed_chunks_total",
                            "Journaled chunks sent again after a restart (the store keeps one copy)");
    replay_skipped = counter("logdex_ship_journal_skipped_records_total",
                             "Records read again after a restart and skipped: a journaled chunk holds them");
    replay_mismatched = counter("logdex_ship_journal_mismatched_records_total",
                                "Records read again after a restart whose lines differ from the journaled "
                                "record's: shipped again (a duplicate, never a loss)");
    auto& fam = prometheus::BuildCounter()
                    .Name("logdex_ship_records_total")
                    .Help("Records packed into chunks, by severity")
                    .Register(r);
    for (Severity s : kAllSeverities) {
      records_by_sev[SeverityIndex(s)] = &fam.Add({{"severity", std::string(SeverityName(s))}});
    }
  }

  PipelineSummary Summary() const {
    PipelineSummary s;
    for (const Input& in : inputs) {
      s.lines += in.assembler->lines();
      s.records += in.assembler->records();
      s.joined_lines += in.assembler->joined_lines();
      s.unparsed_lines += in.assembler->unparsed_lines();
      s.bytes_read += in.tailer->stats().bytes;
    }
    s.chunker = chunker->stats();
    for (const Input& in : inputs) s.formats.emplace_back(in.path, in.parser->detected());
    return s;
  }

  void SyncMetrics() {
    PipelineSummary now = Summary();
    lines->Increment(static_cast<double>(now.lines - synced.lines));
    bytes->Increment(static_cast<double>(now.bytes_read - synced.bytes_read));
    unparsed->Increment(static_cast<double>(now.unparsed_lines - synced.unparsed_lines));
    joined->Increment(static_cast<double>(now.joined_lines - synced.joined_lines));
    chunks->Increment(static_cast<double>(now.chunker.chunks - synced.chunker.chunks));
    for (int i = 0; i < 6; ++i) {
      records_by_sev[i]->Increment(
          static_cast<double>(now.chunker.records_by_severity[i] - synced.chunker.records_by_severity[i]));
    }
    uint64_t rot = 0, trunc = 0;
    for (const Input& in : inputs) rot += in.tailer->stats().rotations, trunc += in.tailer->stats().truncations;
    rotations->Increment(static_cast<double>(rot - synced_rotations));
    truncations->Increment(static_cast<double>(trunc - synced_truncations));
    synced_rotations = rot;
    synced_truncations = trunc;
    synced = now;
  }
  uint64_t synced_rotations = 0, synced_truncations = 0;

  void Progress(bool final) {
    if (!options.progress) return;
    const int64_t now = clock.MonotonicNs();
    if (!final && now - progress_last_ns < 1'000'000'000) return;
    progress_last_ns = now;
    PipelineSummary s = Summary();
    const double secs = std::max(1e-9, (now - progress_start_ns) / 1e9);
    std::fprintf(stderr, "\r%llu lines  %.0f lines/s  %.1f MB/s  TRACE %llu DEBUG %llu INFO %llu WARN %llu ERROR %llu FATAL %llu\x1b[K%s",
                 static_cast<unsigned long long>(s.lines), s.lines / secs, s.bytes_read / secs / 1e6,
                 static_cast<unsigned long long>(s.chunker.records_by_severity[0]),
                 static_cast<unsigned long long>(s.chunker.records_by_severity[1]),
                 static_cast<unsigned long long>(s.chunker.records_by_severity[2]),
                 static_cast<unsigned long long>(s.chunker.records_by_severity[3]),
                 static_cast<unsigned long long>(s.chunker.records_by_severity[4]),
                 static_cast<unsigned long long>(s.chunker.records_by_severity[5]), final ? "\n" : "");
    std::fflush(stderr);
  }

  void Wait(int64_t ms) {
    if (ms <= 0) return;
    const int64_t t0 = clock.MonotonicNs();
    sink.Poll(static_cast<int>(ms));
    if (clock.MonotonicNs() - t0 >= ms * 1'000'000 / 2) return;  // the sink waited
    if (options.wait) options.wait(ms);
    else std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }

  Status ReadInput(Input& in, size_t max_bytes, size_t* got) {
    auto read = in.tailer->Read(
        [&](std::string_view line) {
          if (checkpoints) {
            const FilePosition at = in.tailer->line_position();
            in.starts.push_back({++in.added, at, in.tailer->line_end()});
            // A journaled record ended here (the first run flushed it on an
            // idle tail): end it here again, so the records read again are
            // the ones the journal holds.
            if (!in.replayed_ends.empty() && in.assembler->has_pending() && !in.assembler->sampling()) {
              auto e = in.replayed_ends.find({at.dev, at.ino});
              if (e != in.replayed_ends.end() && e->second.contains(at.offset)) {
                if (Status s = in.assembler->Flush(); !s.ok()) return s;
              }
            }
          }
          Status s = in.assembler->AddLine(line);
          if (checkpoints) TrimStarts(in);
          return s;
        },
        max_bytes);
    if (!read.ok()) return read.error();
    *got = *read;
    if (*read > 0) in.last_data_ns = clock.MonotonicNs();
    return Status::Ok();
  }

  Status Step() {
    Status s = chunker->Poll();
    if (!s.ok()) return s;
    if (s = sink.Flush(); !s.ok()) return s;
    sink.Poll(0);
    Progress(false);
    SyncMetrics();
    return Status::Ok();
  }

  void ResolveBarriers() {
    while (!barriers.empty() && sink.LowestUnresolved() > barriers.front().sequence) {
      for (const auto& p : barriers.front().positions) checkpoints->Set(p.path, p.pos, p.format);
      const uint64_t segment = barriers.front().journal_segment;
      barriers.pop_front();
      Status s = checkpoints->Save();
      if (!s.ok()) {
        spdlog::warn("ship: cannot save checkpoints: {}", s.ToString());
      } else {
        checkpoints_saved->Increment();
        sink.Release(segment);
      }
    }
  }

  // Forgets the start positions of lines that are in records given to the
  // chunker. Of the lines the assembler holds, only the pending record's
  // first line and the newest line can become the oldest held line later (a
  // new record starts at the newest line), so the rest are dropped too,
  // except while a format sample is held (any sampled line may start the
  // record left pending when the sample is parsed).
  static void TrimStarts(Input& in) {
    const uint64_t first = in.assembler->first_held_line();
    while (!in.starts.empty() && (first == 0 || in.starts.front().line < first)) in.starts.pop_front();
    if (!in.assembler->sampling() && in.starts.size() > 2) {
      in.starts.erase(in.starts.begin() + 1, in.starts.end() - 1);
    }
  }

  // Where a restart must read `in` from for nothing to be lost: the start of
  // the oldest line the assembler still holds, else past the last line read;
  // nullopt when that start is not known (then no barrier is taken).
  std::optional<FilePosition> SafePosition(const Input& in) const {
    const uint64_t first = in.assembler->first_held_line();
    if (first == 0) return in.tailer->position();
    if (!in.starts.empty() && in.starts.front().line == first) return in.starts.front().start;
    return std::nullopt;
  }

  // A barrier at record boundaries, every checkpoint interval, however busy
  // the inputs: the chunker is flushed (every complete record gets a
  // sequence), and each input's position is where its held lines start.
  // Barriers wait for the sink to resolve their chunks; a chunk that failed
  // never resolves, so past 64 waiting barriers the oldest is kept (it may
  // still resolve) and the ones after it are thinned.
  Status MaybeBarrier() {
    if (!checkpoints) return Status::Ok();
    for (Input& in : inputs) PruneReplay(in);
    const int64_t now = clock.MonotonicNs();
    if (!last_barrier_ns || now - *last_barrier_ns >= options.checkpoint_interval_ms * 1'000'000) {
      Barrier b;
      bool known = true;
      for (const Input& in : inputs) {
        auto pos = SafePosition(in);
        if (!pos) known = false;
        else b.positions.push_back({in.path, *pos, std::string(FormatAt(in))});
      }
      if (known) {
        Status s = chunker->FlushAll();
        if (!s.ok()) return s;
        auto segment = sink.Rotate();
        if (!segment.ok()) return segment.error();
        // While records the journal holds from before a restart lie ahead,
        // no segment goes: a crash now must still find them.
        b.journal_segment = ReplayPending() ? 0 : *segment;
        b.sequence = sink.max_sequence();
        barriers.push_back(std::move(b));
        last_barrier_ns = now;
        if (barriers.size() > 64) {
          barriers.erase(barriers.begin() + 1);
          if (!barriers_held_logged) {
            barriers_held_logged = true;
            spdlog::warn("ship: checkpoints are held back by chunk {} that was not delivered (see the error above); "
                         "a restart reads its lines again",
                         sink.LowestUnresolved());
          }
        }
      }
    }
    ResolveBarriers();
    return Status::Ok();
  }

  // What a checkpoint keeps of an input's format: the choice, once made.
  // (Only for --format auto: an explicit format is the options'.)
  // A view of a static name: no allocation on the per-record path.
  std::string_view FormatAt(const Input& in) const {
    if (options.parser.format != Format::kAuto || !in.assembler->sampled()) return {};
    return FormatName(in.parser->detected());
  }

  // Line `n` of `in`, if the pipeline still knows it.
  static const Input::HeldLine* Line(const Input& in, uint64_t n) {
    for (auto it = in.starts.rbegin(); it != in.starts.rend(); ++it) {
      if (it->line == n) return &*it;
      if (it->line < n) break;
    }
    return nullptr;
  }

  // After a restart: once every record the journal holds for `in` has been
  // read again (the oldest line it holds starts past the furthest journaled
  // end of its file, or it reads another file), forgets them.
  void PruneReplay(Input& in) {
    if (in.replayed.empty()) return;
    const std::optional<FilePosition> safe = SafePosition(in);
    if (!safe || (safe->dev == 0 && safe->ino == 0)) return;
    for (auto it = in.replay_horizon.begin(); it != in.replay_horizon.end();) {
      const bool current = it->first.dev == safe->dev && it->first.ino == safe->ino;
      if (!current || safe->offset >= it->second) {
        in.replayed.erase(it->first);
        in.replayed_ends.erase(it->first);
        it = in.replay_horizon.erase(it);
      } else {
        ++it;
      }
    }
  }

  bool ReplayPending() const {
    return std::any_of(inputs.begin(), inputs.end(), [](const Input& in) { return !in.replayed.empty(); });
  }

  // A record of an input on its way to the chunker. With a journal: skipped
  // if a journaled chunk holds it (a restart), else given its span.
  Status OnInputRecord(Input& in, const RecordView& r) {
    if (!sink.enabled() || in.path == "-") return chunker->OnRecord(r);
    const Input::HeldLine* first = Line(in, r.first_line);
    const Input::HeldLine* last = Line(in, r.first_line + r.lines - 1);
    if (!first || !last) return chunker->OnRecord(r);  // not expected: shipped, just not journaled
    const FilePosition& start = first->start;
    const uint64_t end = last->start.dev == start.dev && last->start.ino == start.ino ? last->end : start.offset;
    const uint64_t hash = RecordHash(r.message);
    if (options.parser.format == Format::kAuto) sink.SetInputFormat(in.journal_input, FormatAt(in));
    if (auto f = in.replayed.find({start.dev, start.ino}); f != in.replayed.end()) {
      if (auto it = f->second.find(start.offset); it != f->second.end()) {
        // The same lines, not others at the same offsets (a file rewritten in place).
        const bool same = it->second.end == end && it->second.hash == hash;
        const uint64_t journaled_end = it->second.end;
        f->second.erase(it);
        if (same) {
          replay_skipped->Increment();
          return Status::Ok();
        }
        replay_mismatched->Increment();
        const int64_t now = clock.MonotonicNs();
        if (!last_mismatch_log_ns || now - *last_mismatch_log_ns >= 60'000'000'000) {
          last_mismatch_log_ns = now;
          spdlog::warn("ship: {}: the record at byte {} read again after a restart (ending at byte {}) is not the "
                       "journaled one (ending at {}, or other bytes): shipped again (the store may hold its lines "
                       "twice; logdex_ship_journal_mismatched_records_total)",
                       in.path, start.offset, end, journaled_end);
        }
      }
    }
    RecordView copy = r;
    copy.origin = sink.Note({in.journal_input, start.dev, start.ino, start.offset, end, hash});
    return chunker->OnRecord(copy);
  }

  // A restart: sends the chunks the journal holds again and notes, per
  // input, the records they hold (skipped when read again).
  Status ReplayJournal() {
    auto replay = sink.Replay();
    if (!replay.ok()) return replay.error();
    uint64_t records = 0;
    for (Input& in : inputs) {
      auto it = replay->records.find(in.path);
      if (it == replay->records.end()) continue;
      in.replayed = std::move(it->second);
      for (const auto& [file, spans] : in.replayed) {
        records += spans.size();
        auto& ends = in.replayed_ends[file];
        uint64_t& horizon = in.replay_horizon[file];
        for (const auto& [start, span] : spans) {
          ends.insert(span.end);
          horizon = std::max(horizon, span.end);
        }
      }
      // An auto-format input whose checkpoint was taken while it sampled its
      // first lines: it goes on with the format those records were read with.
      if (auto f = replay->formats.find(in.path);
          f != replay->formats.end() && options.parser.format == Format::kAuto && !in.assembler->sampled()) {
        if (auto format = ParseFormatName(f->second)) {
          in.parser->Resume(*format);
          in.assembler->Resume();
        }
      }
    }
    replay_chunks->Increment(static_cast<double>(replay->chunks));
    if (replay->chunks > 0) {
      spdlog::info("ship: the journal held {} chunks ({} records from files) that may not have been delivered "
                   "before the last stop: sent again under their own sequences (the store keeps one copy); "
                   "their records are skipped when read again",
                   replay->chunks, records);
    }
    return Status::Ok();
  }

  Result<PipelineSummary> Run(const std::atomic<bool>* stop) {
    if (options.inputs.empty()) return Error{Errc::kInvalidArgument, "no input: give files or - for stdin"};
    chunker = std::make_unique<Chunker>(options.chunker, sequences, sink, clock);
    if (Status s = OpenInputs(); !s.ok()) return s.error();
    progress_start_ns = progress_last_ns = clock.MonotonicNs();
    auto stopped = [&] { return stop && stop->load(); };
    if (Status s = options.follow ? Follow(stopped) : ReadToEnd(stopped); !s.ok()) return s.error();
    return Finish();
  }

  // Opens every input where its checkpoint left it (with --follow and a
  // state directory), then sends again what the journal holds.
  Status OpenInputs() {
    if (options.follow && !options.state_dir.empty()) {
      checkpoints = std::make_unique<CheckpointStore>(options.state_dir);
      if (Status s = checkpoints->Load(); !s.ok()) return s;
    }
    TailerOptions to;
    to.follow = options.follow;
    for (const std::string& p : options.inputs) {
      Input in;
      in.path = AbsolutePath(p);
      std::optional<FilePosition> resume;
      if (checkpoints && p != "-") resume = checkpoints->Get(in.path);
      in.tailer = std::make_unique<FileTailer>(p, to, resume);
      auto parser = LineParser::Create(options.parser, clock);
      if (!parser.ok()) return Status(parser.error());
      in.parser = std::move(*parser);
      in.origin = std::make_unique<OriginSink>(*this, inputs.size());
      in.journal_input = sink.AddInput(in.path);
      in.assembler = std::make_unique<RecordAssembler>(*in.parser, *in.origin, options.assembler);
      if (resume && options.parser.format == Format::kAuto) {
        // Go on with the format the input had chosen: a new choice from
        // later lines could read the same lines into other records.
        if (auto f = ParseFormatName(checkpoints->Format(in.path)); f) {
          in.parser->Resume(*f);
          in.assembler->Resume();
        }
      }
      in.last_data_ns = clock.MonotonicNs();
      inputs.push_back(std::move(in));
    }
    return checkpoints ? ReplayJournal() : Status::Ok();
  }

  // Without --follow: each input to its end, one after the other.
  template <class Stopped>
  Status ReadToEnd(const Stopped& stopped) {
    for (Input& in : inputs) {
      while (!in.tailer->done() && !stopped()) {
        size_t got = 0;
        if (Status s = ReadInput(in, 4 << 20, &got); !s.ok()) return s;
        if (Status s = Step(); !s.ok()) return s;
      }
      if (Status s = in.assembler->Flush(); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // With --follow: every input in turn until stopped, then what is already
  // written to each.
  template <class Stopped>
  Status Follow(const Stopped& stopped) {
    while (!stopped()) {
      bool any = false;
      for (Input& in : inputs) {
        size_t got = 0;
        if (Status s = ReadInput(in, 4 << 20, &got); !s.ok()) return s;
        in.at_end = got == 0;
        any = any || got > 0;
      }
      const int64_t now = clock.MonotonicNs();
      for (Input& in : inputs) {
        if (in.at_end && in.assembler->has_pending() &&
            now - in.last_data_ns >= options.multiline_idle_ms * 1'000'000) {
          if (Status s = in.assembler->Flush(); !s.ok()) return s;
        }
      }
      if (Status s = Step(); !s.ok()) return s;
      if (Status s = MaybeBarrier(); !s.ok()) return s;
      if (!any) {
        int64_t wait = options.idle_poll_ms;
        int64_t linger = chunker->MsUntilNextFlush();
        if (linger >= 0) wait = std::min(wait, std::max<int64_t>(1, linger));
        Wait(wait);
      }
    }
    // A clean stop: take what is already written, then finish.
    for (Input& in : inputs) {
      size_t got = 0;
      do {
        if (Status s = ReadInput(in, 4 << 20, &got); !s.ok()) return s;
      } while (got > 0);
    }
    return Status::Ok();
  }

  // Flushes every input and the chunker, waits for delivery, and saves the
  // checkpoints when everything was delivered.
  Result<PipelineSummary> Finish() {
    for (Input& in : inputs) {
      if (Status s = in.assembler->Flush(); !s.ok()) return s.error();
    }
    if (Status s = chunker->FlushAll(); !s.ok()) return s.error();
    SyncMetrics();
    PipelineSummary summary = Summary();
    summary.delivery = sink.Finish(options.delivery_timeout_ms);
    Progress(true);
    if (checkpoints) {
      if (summary.delivery.complete()) {
        barriers.clear();
        for (const Input& in : inputs) checkpoints->Set(in.path, in.tailer->position(), std::string(FormatAt(in)));
        Status cs = checkpoints->Save();
        if (!cs.ok()) {
          spdlog::warn("ship: cannot save checkpoints: {}", cs.ToString());
        } else {
          checkpoints_saved->Increment();
          // Every chunk delivered, every line before the positions.
          if (auto segment = sink.Rotate(); segment.ok()) sink.Release(*segment);
        }
      } else {
        ResolveBarriers();
      }
    }
    return summary;
  }
};

Pipeline::Pipeline(PipelineOptions options, ChunkSink& sink, SequenceAllocator& sequences, const Clock& clock,
                   prometheus::Registry& registry)
    : impl_(std::make_unique<Impl>(std::move(options), sink, sequences, clock, registry)) {}
Pipeline::~Pipeline() = default;

Result<PipelineSummary> Pipeline::Run(const std::atomic<bool>* stop) { return impl_->Run(stop); }

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

std::string DefaultStateDir(const std::string& app, const std::string& host) {
  std::string base;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) base = x;
  else if (const char* h = std::getenv("HOME"); h && *h) base = std::string(h) + "/.local/state";
  else return "";
  std::string name = app + "@" + host;
  for (char& c : name) {
    if (c == '/' || c == '\0') c = '_';
  }
  return base + "/logdex/ship/" + name;
}

}  // namespace

std::string ResolveLineOptions(ShipCommandOptions& o) {
  PipelineOptions& p = o.pipeline;
  auto format = ParseFormatName(o.format);
  if (!format) return "unknown --format " + o.format;
  p.parser.format = *format;
  auto sev = ParseSeverity(o.default_severity);
  if (!sev) return "unknown --default-severity " + o.default_severity;
  p.parser.default_severity = *sev;
  if (o.no_multiline || *format == Format::kJson) p.assembler.multiline = false;
  p.chunker.line_identity = o.stream_from_line ? LineIdentity::kStream : LineIdentity::kTags;
  if (o.retention == "0") {
    p.chunker.retention_ms = 0;
  } else {
    auto retention = ParseDuration(o.retention);
    if (!retention.ok()) return "--retention " + o.retention + ": " + retention.error().message;
    p.chunker.retention_ms = *retention;
  }
  // Fail early on bad parser options (regex, time format, zone).
  auto probe = LineParser::Create(p.parser, SystemClock::Instance());
  if (!probe.ok()) return probe.error().message;
  return "";
}

int RunShip(ShipCommandOptions o) {
  if (!spdlog::get("ship")) {
    auto logger = spdlog::stderr_color_mt("ship");
    spdlog::set_default_logger(logger);
  }
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "logdex ship: %s\n", msg.c_str());
    return 2;
  };
  if (std::string error = ResolveLineOptions(o); !error.empty()) return usage(error);
  PipelineOptions& p = o.pipeline;
  if (p.chunker.app.empty() || p.chunker.host.empty()) return usage("--app and --host are required");
  if (p.inputs.empty()) return usage("no input: give files, or - for stdin");
  if (o.dry_run && o.out.empty()) return usage("--dry-run needs --out FILE (- for stdout)");
  if (!o.dry_run && o.producer.brokers.empty()) return usage("--brokers is required (or --dry-run --out FILE)");
  if (o.producer.topic.empty()) o.producer.topic = std::string(kDefaultTopic);
  p.progress = o.progress_flag_set ? o.progress : ::isatty(STDERR_FILENO) == 1;

  // Producer identity and sequences.
  const bool state_given = !p.state_dir.empty();
  if (!state_given && !o.dry_run) p.state_dir = DefaultStateDir(p.chunker.app, p.chunker.host);
  std::unique_ptr<SequenceAllocator> sequences;
  if (!p.state_dir.empty()) {
    auto opened = SequenceAllocator::Open(p.state_dir);
    if (opened.ok()) {
      sequences = std::move(*opened);
    } else if (state_given || opened.error().code == Errc::kFailedPrecondition) {
      std::fprintf(stderr, "logdex ship: %s\n", opened.error().ToString().c_str());
      return 2;
    } else {
      spdlog::warn("ship: no state directory ({}); using a fresh random producer id", opened.error().ToString());
      p.state_dir.clear();
    }
  }
  if (!sequences) sequences = SequenceAllocator::InMemory(RandomProducerId());

  prometheus::Registry registry;
  const Clock& clock = SystemClock::Instance();
  std::unique_ptr<ChunkSink> sink;
  if (o.dry_run) {
    auto f = FramedFileSink::Open(o.out);
    if (!f.ok()) return usage(f.error().message);
    sink = std::move(*f);
  } else {
    auto k = KafkaChunkProducer::Create(o.producer, registry, clock);
    if (!k.ok()) return usage(k.error().message);
    sink = std::move(*k);
  }

  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  Pipeline pipeline(p, *sink, *sequences, clock, registry);
  auto result = pipeline.Run(&g_stop);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!result.ok()) {
    std::fprintf(stderr, "logdex ship: %s\n", result.error().ToString().c_str());
    return 1;
  }
  const PipelineSummary& s = *result;
  const DeliveryReport& d = s.delivery;
  const std::string where = o.dry_run ? "written to " + o.out : "delivered to " + o.producer.topic;
  std::fprintf(stderr, "logdex ship: %llu lines, %llu records (%llu joined lines, %llu unparsed), %llu chunks %s\n",
               static_cast<unsigned long long>(s.lines), static_cast<unsigned long long>(s.records),
               static_cast<unsigned long long>(s.joined_lines), static_cast<unsigned long long>(s.unparsed_lines),
               static_cast<unsigned long long>(d.delivered_chunks), where.c_str());
  if (p.parser.format == Format::kAuto) {
    for (const auto& [path, format] : s.formats) {
      if (format == Format::kAuto) {
        std::fprintf(stderr, "logdex ship: %s: no line matched a format; every line shipped as plain text\n",
                     path.c_str());
      } else {
        std::fprintf(stderr, "logdex ship: %s: format %s (detected from its first lines; lines that do not match "
                     "it are shipped whole)\n", path.c_str(), std::string(FormatName(format)).c_str());
      }
    }
  }
  if (s.chunker.restamped > 0) {
    std::fprintf(stderr,
                 "logdex ship: %llu records had a time serve refuses (before 2000 or over a day ahead): shipped "
                 "with the time of shipping, tagged %s=<their time>\n",
                 static_cast<unsigned long long>(s.chunker.restamped), std::string(kRestampedTag).c_str());
  }
  if (s.chunker.past_retention > 0) {
    std::fprintf(stderr,
                 "logdex ship: WARNING: %llu records are older than the retention (--retention %s): they are "
                 "stored, but no query reaches them\n",
                 static_cast<unsigned long long>(s.chunker.past_retention), o.retention.c_str());
  }
  if (!d.complete()) {
    std::fprintf(stderr,
                 "logdex ship: NOT DELIVERED: %llu chunks (%llu records) dropped by the backlog bound, "
                 "%llu chunks (%llu records) failed\n",
                 static_cast<unsigned long long>(d.dropped_chunks), static_cast<unsigned long long>(d.dropped_records),
                 static_cast<unsigned long long>(d.failed_chunks), static_cast<unsigned long long>(d.failed_records));
    return 1;
  }
  return 0;
}

}  // namespace logdex::ship
