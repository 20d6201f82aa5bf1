#include "ship/pipeline.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <optional>
#include <thread>

#include "common/defaults.h"
#include "common/time_parse.h"
#include "ship/framing.h"

namespace logdex::ship {

using parse::Format;
using parse::FormatName;
using parse::LineParser;
using parse::ParseFormatName;
using parse::RecordAssembler;
using parse::RecordSink;
using parse::RecordView;

namespace {

// Forwards to the real sink and remembers the last sequence sent.
class TrackingSink final : public ChunkSink {
 public:
  explicit TrackingSink(ChunkSink& inner) : inner_(inner) {}
  Status Send(OutgoingChunk chunk) override {
    last_sequence_ = chunk.sequence;
    return inner_.Send(std::move(chunk));
  }
  void Poll(int timeout_ms) override { inner_.Poll(timeout_ms); }
  uint64_t LowestUnresolved() const override { return inner_.LowestUnresolved(); }
  DeliveryReport Finish(int64_t timeout_ms) override { return inner_.Finish(timeout_ms); }
  uint64_t last_sequence() const { return last_sequence_; }

 private:
  ChunkSink& inner_;
  uint64_t last_sequence_ = 0;
};

std::string AbsolutePath(const std::string& p) {
  if (p == "-") return p;
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

}  // namespace

struct Pipeline::Impl {
  PipelineOptions options;
  TrackingSink sink;
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
    std::deque<std::pair<uint64_t, FilePosition>> starts;
    uint64_t added = 0;
  };
  std::vector<Input> inputs;
  std::unique_ptr<CheckpointStore> checkpoints;
  struct Barrier {
    uint64_t sequence;
    std::vector<std::pair<std::string, FilePosition>> positions;
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
  prometheus::Counter* records_by_sev[6] = {};
  PipelineSummary synced;

  // Progress line.
  int64_t progress_start_ns = 0, progress_last_ns = 0;

  Impl(PipelineOptions o, ChunkSink& s, SequenceAllocator& seq, const Clock& c, prometheus::Registry& r)
      : options(std::move(o)), sink(s), sequences(seq), clock(c) {
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
          if (checkpoints) in.starts.emplace_back(++in.added, in.tailer->line_position());
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
    sink.Poll(0);
    Progress(false);
    SyncMetrics();
    return Status::Ok();
  }

  void ResolveBarriers() {
    while (!barriers.empty() && sink.LowestUnresolved() > barriers.front().sequence) {
      for (const auto& [path, pos] : barriers.front().positions) checkpoints->Set(path, pos);
      barriers.pop_front();
      Status s = checkpoints->Save();
      if (!s.ok()) spdlog::warn("ship: cannot save checkpoints: {}", s.ToString());
      else checkpoints_saved->Increment();
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
    while (!in.starts.empty() && (first == 0 || in.starts.front().first < first)) in.starts.pop_front();
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
    if (!in.starts.empty() && in.starts.front().first == first) return in.starts.front().second;
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
    const int64_t now = clock.MonotonicNs();
    if (!last_barrier_ns || now - *last_barrier_ns >= options.checkpoint_interval_ms * 1'000'000) {
      Barrier b{0, {}};
      bool known = true;
      for (const Input& in : inputs) {
        auto pos = SafePosition(in);
        if (!pos) known = false;
        else b.positions.emplace_back(in.path, *pos);
      }
      if (known) {
        Status s = chunker->FlushAll();
        if (!s.ok()) return s;
        b.sequence = sink.last_sequence();
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

  Result<PipelineSummary> Run(const std::atomic<bool>* stop) {
    if (options.inputs.empty()) return Error{Errc::kInvalidArgument, "no input: give files or - for stdin"};
    chunker = std::make_unique<Chunker>(options.chunker, sequences, sink, clock);
    if (options.follow && !options.state_dir.empty()) {
      checkpoints = std::make_unique<CheckpointStore>(options.state_dir);
      Status s = checkpoints->Load();
      if (!s.ok()) return s.error();
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
      if (!parser.ok()) return parser.error();
      in.parser = std::move(*parser);
      in.assembler = std::make_unique<RecordAssembler>(*in.parser, *chunker, options.assembler);
      in.last_data_ns = clock.MonotonicNs();
      inputs.push_back(std::move(in));
    }
    progress_start_ns = progress_last_ns = clock.MonotonicNs();
    auto stopped = [&] { return stop && stop->load(); };

    if (!options.follow) {
      for (Input& in : inputs) {
        while (!in.tailer->done() && !stopped()) {
          size_t got = 0;
          Status s = ReadInput(in, 4 << 20, &got);
          if (!s.ok()) return s.error();
          s = Step();
          if (!s.ok()) return s.error();
        }
        Status s = in.assembler->Flush();
        if (!s.ok()) return s.error();
      }
    } else {
      while (!stopped()) {
        bool any = false;
        for (Input& in : inputs) {
          size_t got = 0;
          Status s = ReadInput(in, 4 << 20, &got);
          if (!s.ok()) return s.error();
          in.at_end = got == 0;
          any = any || got > 0;
        }
        const int64_t now = clock.MonotonicNs();
        for (Input& in : inputs) {
          if (in.at_end && in.assembler->has_pending() &&
              now - in.last_data_ns >= options.multiline_idle_ms * 1'000'000) {
            Status s = in.assembler->Flush();
            if (!s.ok()) return s.error();
          }
        }
        Status s = Step();
        if (!s.ok()) return s.error();
        s = MaybeBarrier();
        if (!s.ok()) return s.error();
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
          Status s = ReadInput(in, 4 << 20, &got);
          if (!s.ok()) return s.error();
        } while (got > 0);
      }
    }
    for (Input& in : inputs) {
      Status s = in.assembler->Flush();
      if (!s.ok()) return s.error();
    }
    Status s = chunker->FlushAll();
    if (!s.ok()) return s.error();
    SyncMetrics();
    PipelineSummary summary = Summary();
    summary.delivery = sink.Finish(options.delivery_timeout_ms);
    Progress(true);
    if (checkpoints) {
      if (summary.delivery.complete()) {
        barriers.clear();
        for (const Input& in : inputs) checkpoints->Set(in.path, in.tailer->position());
        Status cs = checkpoints->Save();
        if (!cs.ok()) spdlog::warn("ship: cannot save checkpoints: {}", cs.ToString());
        else checkpoints_saved->Increment();
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
