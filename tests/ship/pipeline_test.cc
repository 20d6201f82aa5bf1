#include "ship/pipeline.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "ship/framing.h"
#include "tests/ship/helpers.h"
#include "tests/test_util.h"

namespace logdex::ship {
namespace {

using parse::Format;
using parse::ParserOptions;
using testing::CapturingChunkSink;

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << text;
}

std::vector<std::string> Messages(const CapturingChunkSink& sink, const Clock& clock) {
  std::vector<std::string> out;
  for (const auto& b : sink.Decode(clock)) {
    for (const auto& r : b.records()) out.push_back(r.message());
  }
  return out;
}

PipelineOptions Base(const std::string& input) {
  PipelineOptions o;
  o.inputs = {input};
  o.chunker.app = "app";
  o.chunker.host = "h1";
  o.parser.format = Format::kLog4j;
  return o;
}

TEST(Pipeline, ShipsAFileIntoChunksThatDecodeToEveryLine) {
  ManualClock clock(1'795'910'400'000);
  prometheus::Registry registry;
  auto seq = SequenceAllocator::InMemory(9);
  CapturingChunkSink sink;
  PipelineOptions o = Base(testing::LoghubPath("HDFS_2k.log"));
  o.chunker.max_chunk_bytes = 8 * 1024;
  Pipeline p(o, sink, *seq, clock, registry);
  auto r = p.Run();
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r->lines, 2000u);
  EXPECT_EQ(r->records, 2000u);
  EXPECT_TRUE(r->delivery.complete());
  EXPECT_GT(sink.chunks.size(), 20u);
  // Per stream (INFO, WARN), the lines of that level in input order.
  std::map<uint32_t, std::vector<std::string>> got, want;
  for (const auto& b : sink.Decode(clock)) {
    for (const auto& r : b.records()) got[r.severity()].push_back(r.message());
  }
  const auto lines = testing::ReadLines(testing::LoghubPath("HDFS_2k.log"));
  const auto levels = testing::CsvColumn(testing::LoghubPath("HDFS_2k.log_structured.csv"), "Level");
  for (size_t i = 0; i < lines.size(); ++i) want[SeverityCode(*ParseSeverity(levels[i]))].push_back(lines[i]);
  EXPECT_EQ(got.size(), 2u);
  EXPECT_EQ(got, want);
}

// Follow mode with a ManualClock: the wait hook plays the writer between
// polls (append, rotate, truncate), then stops the pipeline.
TEST(Pipeline, FollowShipsAcrossRotationAndTruncationAndResumesFromItsCheckpoint) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  const std::string state = dir.path() + "/state";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i) { return "2026-11-29 00:00:00,000 INFO line " + std::to_string(i); };
  Append(f, line(1) + "\n" + line(2) + "\n");
  std::vector<std::string> want = {line(1), line(2)};

  std::atomic<bool> stop{false};
  int step = 0;
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = state;
  o.checkpoint_interval_ms = 0;
  o.wait = [&](int64_t ms) {
    clock.AdvanceMs(ms);
    switch (++step) {
      case 1:
        Append(f, line(3) + "\n");
        want.push_back(line(3));
        break;
      case 2:  // rotate: rename, the writer finishes the old file, then a new one
        std::filesystem::rename(f, f + ".1");
        Append(f + ".1", line(4) + "\n");
        Append(f, line(5) + "\n");
        want.push_back(line(4));
        want.push_back(line(5));
        break;
      case 3:  // truncate and write less than before
        std::filesystem::resize_file(f, 0);
        Append(f, "6\n");
        want.push_back("6");
        break;
      case 8:
        stop = true;
        break;
    }
  };
  {
    prometheus::Registry registry;
    auto seq = SequenceAllocator::Open(state);
    ASSERT_TRUE(seq.ok());
    CapturingChunkSink sink;
    Pipeline p(o, sink, **seq, clock, registry);
    auto r = p.Run(&stop);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
    EXPECT_EQ(Messages(sink, clock), want);
  }
  // Written while stopped: a restart ships exactly these.
  Append(f, line(7) + "\n" + line(8) + "\n");
  stop = false;
  step = 7;
  prometheus::Registry registry;
  auto seq = SequenceAllocator::Open(state);
  ASSERT_TRUE(seq.ok());
  CapturingChunkSink sink;
  Pipeline p(o, sink, **seq, clock, registry);
  auto r = p.Run(&stop);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(Messages(sink, clock), (std::vector<std::string>{line(7), line(8)}));
}

// Issue 12: a file that never goes quiet (a line every poll, a record always
// pending) never checkpointed, so a crash re-shipped everything since the
// start. Now a barrier comes every interval at a record boundary: a crash
// snapshot of the state resumes at the pending record's first line, and a
// restart from it re-ships only the lines after that checkpoint.
TEST(Pipeline, ABusyFileCheckpointsAtRecordBoundariesSoACrashReshipsOnlyTheLastInterval) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  const std::string state = dir.path() + "/state";
  const std::string crashed = dir.path() + "/crashed";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i) { return "2026-11-29 00:00:00,000 INFO line " + std::to_string(i); };
  int written = 0;
  auto write_line = [&] { Append(f, line(++written) + "\n"); };
  write_line();

  std::atomic<bool> stop{false};
  int step = 0;
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = state;
  o.checkpoint_interval_ms = 1000;
  int written_at_crash = 0;
  CapturingChunkSink sink;
  size_t delivered_at_crash = 0;
  o.wait = [&](int64_t ms) {
    clock.AdvanceMs(ms);
    ++step;
    if (step == 40) {  // the crash: the state as a SIGKILL would leave it
      std::filesystem::copy(state, crashed, std::filesystem::copy_options::recursive);
      written_at_crash = written;
      delivered_at_crash = Messages(sink, clock).size();
    }
    if (step == 60) stop = true;
    write_line();  // busy: the file grows at every poll
  };
  {
    prometheus::Registry registry;
    auto seq = SequenceAllocator::Open(state);
    ASSERT_TRUE(seq.ok());
    Pipeline p(o, sink, **seq, clock, registry);
    auto r = p.Run(&stop);
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
  ASSERT_GT(written_at_crash, 20);
  CheckpointStore at_crash(crashed);
  ASSERT_TRUE(at_crash.Load().ok());
  auto pos = at_crash.Get(std::filesystem::absolute(f).string());
  ASSERT_TRUE(pos.has_value()) << "no checkpoint in " << written_at_crash << " lines of a busy file";
  // A record boundary: the start of a line, past everything delivered but the last interval.
  const std::string text = testing::ReadAll(f);
  ASSERT_GT(pos->offset, 0u);
  EXPECT_EQ(text[pos->offset - 1], '\n') << "offset " << pos->offset;
  const size_t lines_before = static_cast<size_t>(std::count(text.begin(), text.begin() + pos->offset, '\n'));
  EXPECT_LE(lines_before, delivered_at_crash) << "the checkpoint is past only delivered lines";
  EXPECT_LE(static_cast<size_t>(written_at_crash) - lines_before, 20u) << "at most about an interval re-read";

  // The restart after the crash: every line from the checkpoint on, once.
  stop = false;
  step = 1000;
  o.state_dir = crashed;
  o.wait = [&](int64_t ms) {
    clock.AdvanceMs(ms);
    if (++step == 1005) stop = true;
  };
  prometheus::Registry registry;
  auto seq = SequenceAllocator::Open(crashed);
  ASSERT_TRUE(seq.ok());
  CapturingChunkSink restarted;
  Pipeline p(o, restarted, **seq, clock, registry);
  auto r = p.Run(&stop);
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  std::vector<std::string> want;
  for (int i = static_cast<int>(lines_before) + 1; i <= written; ++i) want.push_back(line(i));
  EXPECT_EQ(Messages(restarted, clock), want);
}

// Messages of `chunks` as the store keeps them: one copy per sequence
// (a chunk sent again has the same id, so the same rows).
std::multiset<std::string> StoredMessages(const std::vector<OutgoingChunk>& chunks, const Clock& clock) {
  std::set<uint64_t> seen;
  CapturingChunkSink once;
  for (const OutgoingChunk& c : chunks) {
    if (seen.insert(c.sequence).second) once.chunks.push_back(c);
  }
  const std::vector<std::string> m = Messages(once, clock);
  return {m.begin(), m.end()};
}

// Messages of `chunks`, in order.
std::vector<std::string> MessagesOf(std::vector<OutgoingChunk> chunks, const Clock& clock) {
  CapturingChunkSink sink;
  sink.chunks = std::move(chunks);
  return Messages(sink, clock);
}

// A counter's value (its series with label reason=`reason`, when given); -1 when absent.
double CounterValue(prometheus::Registry& registry, const std::string& name, const std::string& reason = "") {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      const bool match = reason.empty() || std::any_of(m.label.begin(), m.label.end(), [&](const auto& l) {
        return l.name == "reason" && l.value == reason;
      });
      if (match) return m.counter.value;
    }
  }
  return -1;
}

// Calls `on_poll` whenever the pipeline polls it (once per loop, busy or not).
struct PollHookSink : CapturingChunkSink {
  std::function<void()> on_poll;
  void Poll(int) override {
    if (on_poll) on_poll();
  }
};

// One follow run of `o` (its state_dir) that calls `script(step)` at every
// wait. At `crash_step` (0: never) the state is copied to `crash_dir` as a
// SIGKILL would leave it, and the chunks delivered so far are what the
// return holds; the run stops at `stop_step`. Without a crash: every chunk.
// `crash_at_poll`: the crash comes at that sink poll instead (a busy loop
// polls between reads, without waiting).
std::vector<OutgoingChunk> RunFollow(PipelineOptions o, ManualClock& clock, const std::function<void(int)>& script,
                                     int crash_step, int stop_step, const std::string& crash_dir,
                                     prometheus::Registry& registry, int crash_at_poll = 0) {
  std::atomic<bool> stop{false};
  int step = 0, polls = 0;
  PollHookSink sink;
  std::vector<OutgoingChunk> at_crash;
  bool crashed = false;
  auto crash = [&] {
    std::filesystem::copy(o.state_dir, crash_dir, std::filesystem::copy_options::recursive);
    at_crash = sink.chunks;
    crashed = true;
  };
  sink.on_poll = [&] {
    if (++polls == crash_at_poll) crash();
  };
  o.wait = [&](int64_t ms) {
    clock.AdvanceMs(ms);
    ++step;
    if (script) script(step);
    if (step == crash_step) crash();
    if (step >= stop_step) stop = true;
  };
  auto seq = SequenceAllocator::Open(o.state_dir);
  EXPECT_TRUE(seq.ok());
  if (!seq.ok()) return {};
  Pipeline p(o, sink, **seq, clock, registry);
  auto r = p.Run(&stop);
  EXPECT_TRUE(r.ok()) << r.error().ToString();
  return crashed ? at_crash : sink.chunks;
}

// Issue 12 (exactly-once across crashes): a multi-line record the first run
// ended on an idle tail (its stack frame came later, as a record of its
// own), then a crash before the next checkpoint, and a torn journal entry. A
// restart sends the journaled chunks again and reads the same lines into
// the same records, skipping those: the store holds every line once, and
// the frame stays a record of its own (joined, it would be shipped twice).
TEST(Pipeline, ACrashAfterAnIdleFlushReplaysTheJournalAndStoresEveryLineOnce) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  const std::string crashed = dir.path() + "/crashed";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i, const char* sev = "INFO") {
    return "2026-11-29 00:00:00,000 " + std::string(sev) + " line " + std::to_string(i);
  };
  const std::string frame = "\tat org.example.Worker.run(Worker.java:7)";
  Append(f, line(1) + "\n" + line(2) + "\n");
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.checkpoint_interval_ms = 3'600'000;  // one barrier at the start, none after
  o.multiline_idle_ms = 500;
  auto script = [&](int step) {
    if (step == 2) Append(f, line(3, "ERROR") + "\n");  // pending...
    if (step == 12) Append(f, frame + "\n");            // ...flushed before this
    if (step == 14) Append(f, line(4) + "\n" + line(5, "WARN") + "\n");
    if (step == 31) Append(f, line(6) + "\n");  // after the crash: only the restart reads it
  };
  prometheus::Registry first, registry;
  std::vector<OutgoingChunk> all = RunFollow(o, clock, script, 30, 31, crashed, first);
  ASSERT_FALSE(all.empty());
  // The crash also tore the entry being written (its chunk was never sent).
  std::vector<std::filesystem::path> segments;
  for (const auto& e : std::filesystem::directory_iterator(crashed + "/journal")) segments.push_back(e.path());
  ASSERT_FALSE(segments.empty()) << "no journal segment at the crash";
  std::sort(segments.begin(), segments.end());
  Append(segments.back().string(), std::string("\x30\x00\x00\x00torn", 8));

  o.state_dir = crashed;
  for (auto& c : RunFollow(o, clock, nullptr, 0, 10, "", registry)) all.push_back(std::move(c));
  const std::multiset<std::string> want = {line(1), line(2), line(3, "ERROR"), frame, line(4), line(5, "WARN"),
                                           line(6)};
  EXPECT_EQ(StoredMessages(all, clock), want);
  EXPECT_GT(CounterValue(registry, "logdex_ship_journal_replayed_chunks_total"), 0);
  EXPECT_GT(CounterValue(registry, "logdex_ship_journal_skipped_records_total"), 0);
  EXPECT_EQ(CounterValue(registry, "logdex_ship_journal_mismatched_records_total"), 0);
  // A clean stop: everything delivered, so no segment is left to replay.
  std::vector<std::filesystem::path> left;
  for (const auto& e : std::filesystem::directory_iterator(crashed + "/journal")) left.push_back(e.path());
  EXPECT_TRUE(left.empty()) << left.size() << " segments left after a clean stop";
}

// An auto-format input checkpointed while it sampled its first lines: the
// sample (2 lines) was parsed on an idle tail, a stack frame came later as
// a record of its own, then the crash. The restart goes on with the format
// the journal says those records were read with (sampling again, the frame
// would join the record before it: shipped twice).
TEST(Pipeline, ARestartAfterACrashWhileSamplingReadsTheLinesAsTheFirstRunDid) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  const std::string l1 = "2026-11-29 00:00:00,000 INFO one", l2 = "2026-11-29 00:00:01,000 ERROR two";
  const std::string frame = "\tat org.example.Worker.run(Worker.java:7)";
  Append(f, l1 + "\n" + l2 + "\n");
  PipelineOptions o = Base(f);
  o.parser.format = Format::kAuto;
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.checkpoint_interval_ms = 3'600'000;
  o.multiline_idle_ms = 500;
  auto script = [&](int step) {
    if (step == 10) Append(f, frame + "\n");
  };
  prometheus::Registry r1, r2;
  std::vector<OutgoingChunk> all = RunFollow(o, clock, script, 20, 21, dir.path() + "/crashed", r1);
  CheckpointStore cp(dir.path() + "/crashed");
  ASSERT_TRUE(cp.Load().ok());
  ASSERT_EQ(cp.Format(std::filesystem::absolute(f).string()), "") << "the checkpoint was not taken while sampling";
  o.state_dir = dir.path() + "/crashed";
  for (auto& c : RunFollow(o, clock, nullptr, 0, 5, "", r2)) all.push_back(std::move(c));
  EXPECT_EQ(StoredMessages(all, clock), (std::multiset<std::string>{l1, l2, frame}));
  EXPECT_EQ(CounterValue(r2, "logdex_ship_journal_mismatched_records_total"), 0);
}

// copytruncate (or a reused inode): after the crash the file is rewritten
// with other lines at the same offsets. They are new records: shipped, not
// skipped as the journaled ones they sit where.
TEST(Pipeline, ARestartShipsLinesWrittenInPlaceOfJournaledOnes) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  auto line = [](char c, int i) { return "2026-11-29 00:00:00,000 INFO line " + std::string(1, c) + std::to_string(i); };
  Append(f, line('a', 1) + "\n" + line('a', 2) + "\n");
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.checkpoint_interval_ms = 3'600'000;
  prometheus::Registry r1, r2;
  std::vector<OutgoingChunk> all = RunFollow(o, clock, nullptr, 20, 21, dir.path() + "/crashed", r1);
  std::filesystem::resize_file(f, 0);
  Append(f, line('b', 1) + "\n" + line('b', 2) + "\n");  // same lengths, same offsets
  o.state_dir = dir.path() + "/crashed";
  for (auto& c : RunFollow(o, clock, nullptr, 0, 5, "", r2)) all.push_back(std::move(c));
  EXPECT_EQ(StoredMessages(all, clock),
            (std::multiset<std::string>{line('a', 1), line('a', 2), line('b', 1), line('b', 2)}));
}

// A crash, then a second one while the restart is still reading the lines
// the journal holds (past its first checkpoint: over 4 MiB): the first
// checkpoint after a restart must not release the journal of the lines
// still ahead of it, or the third run ships them again.
TEST(Pipeline, ASecondCrashWhileReplayingStillFindsTheJournaledRecords) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i) { return "2026-11-29 00:00:00,000 INFO line " + std::to_string(i) + std::string(80, 'x'); };
  std::vector<std::string> want = {line(0)};
  Append(f, line(0) + "\n");
  auto grow = [&](int step) {  // after run 1's first checkpoint (at the start): ~7 MiB, two 4 MiB reads
    if (step != 1) return;
    std::ofstream out(f, std::ios::binary | std::ios::app);
    for (int i = 1; i < 60'000; ++i) {
      want.push_back(line(i));
      out << want.back() << '\n';
    }
  };
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.checkpoint_interval_ms = 3'600'000;  // run 1: the checkpoint stays at the start
  prometheus::Registry r1, r2, r3;
  std::vector<OutgoingChunk> all = RunFollow(o, clock, grow, 5, 6, dir.path() + "/crash1", r1);
  o.state_dir = dir.path() + "/crash1";
  o.checkpoint_interval_ms = 0;  // run 2: a checkpoint after each read; the crash after the first
  for (auto& c : RunFollow(o, clock, nullptr, 0, 2, dir.path() + "/crash2", r2, 2)) all.push_back(std::move(c));
  CheckpointStore cp(dir.path() + "/crash2");
  ASSERT_TRUE(cp.Load().ok());
  auto at = cp.Get(std::filesystem::absolute(f).string());
  ASSERT_TRUE(at.has_value());
  ASSERT_GT(at->offset, 0u) << "the second crash came before run 2 checkpointed";
  ASSERT_LT(at->offset, std::filesystem::file_size(f)) << "the second crash came after run 2 read everything";
  o.state_dir = dir.path() + "/crash2";
  for (auto& c : RunFollow(o, clock, nullptr, 0, 5, "", r3)) all.push_back(std::move(c));
  const std::multiset<std::string> got = StoredMessages(all, clock);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == std::multiset<std::string>(want.begin(), want.end()));
}

// A checkpoint of a --format regex run, restarted with --format auto: the
// saved choice is not one auto can make, so it is ignored (it used to crash).
TEST(Pipeline, AnExplicitFormatInTheCheckpointIsIgnoredByAnAutoRestart) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  Append(f, "2026-11-29 00:00:00,000 INFO one\n");
  PipelineOptions o = Base(f);
  o.parser.format = Format::kRegex;
  o.parser.regex = "^(?P<ts>\\S+ \\S+) (?P<level>\\w+) (?P<msg>.*)$";
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  prometheus::Registry r1, r2;
  EXPECT_EQ(RunFollow(o, clock, nullptr, 0, 3, "", r1).size(), 1u);
  Append(f, "2026-11-29 00:00:01,000 WARN two\n");
  o.parser = ParserOptions{};  // auto
  EXPECT_EQ(MessagesOf(RunFollow(o, clock, nullptr, 0, 3, "", r2), clock),
            (std::vector<std::string>{"2026-11-29 00:00:01,000 WARN two"}));
}

// The journal cannot be written (its directory is gone, a file in its
// place): chunks are still delivered, and the failure is counted and logged.
TEST(Pipeline, AJournalThatCannotBeWrittenIsCountedAndDeliveryGoesOn) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i) { return "2026-11-29 00:00:00,000 INFO line " + std::to_string(i); };
  Append(f, line(1) + "\n");
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.checkpoint_interval_ms = 0;  // a barrier (a new segment) every loop
  auto script = [&](int step) {
    if (step != 3) return;
    std::filesystem::remove_all(o.state_dir + "/journal");
    Append(o.state_dir + "/journal", "not a directory\n");
    Append(f, line(2) + "\n");
  };
  prometheus::Registry registry;
  EXPECT_EQ(MessagesOf(RunFollow(o, clock, script, 0, 10, "", registry), clock),
            (std::vector<std::string>{line(1), line(2)}));
  EXPECT_GT(CounterValue(registry, "logdex_ship_journal_errors_total", "write"), 0);
  EXPECT_EQ(CounterValue(registry, "logdex_ship_journal_errors_total", "full"), 0);
}

// A journal at its size bound (a long Kafka outage keeps every segment):
// chunks are sent unjournaled, counted as "full", and delivered.
TEST(Pipeline, AFullJournalIsCountedAndDeliveryGoesOn) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  ManualClock clock(1'795'910'400'000);
  auto line = [](int i) { return "2026-11-29 00:00:00,000 INFO line " + std::to_string(i); };
  Append(f, line(1) + "\n" + line(2) + "\n");
  PipelineOptions o = Base(f);
  o.follow = true;
  o.state_dir = dir.path() + "/state";
  o.journal_max_bytes = 16;  // smaller than any entry
  prometheus::Registry registry;
  EXPECT_EQ(MessagesOf(RunFollow(o, clock, nullptr, 0, 10, "", registry), clock),
            (std::vector<std::string>{line(1), line(2)}));
  EXPECT_GT(CounterValue(registry, "logdex_ship_journal_errors_total", "full"), 0);
  EXPECT_EQ(CounterValue(registry, "logdex_ship_journal_entries_total"), 0);
}

TEST(Pipeline, DryRunWritesLengthPrefixedChunks) {
  TempDir dir;
  ManualClock clock(1'795'910'400'000);
  prometheus::Registry registry;
  auto seq = SequenceAllocator::InMemory(3);
  auto sink = FramedFileSink::Open(dir.path() + "/out.bin");
  ASSERT_TRUE(sink.ok());
  PipelineOptions o = Base(testing::LoghubPath("Android_2k.log"));
  o.parser.format = Format::kLogcat;
  Pipeline p(o, **sink, *seq, clock, registry);
  auto r = p.Run();
  ASSERT_TRUE(r.ok());
  auto frames = ReadFramedFile(dir.path() + "/out.bin");
  ASSERT_TRUE(frames.ok());
  EXPECT_EQ(frames->size(), r->delivery.delivered_chunks);
  DecodeOptions d;
  d.clock = &clock;
  uint64_t records = 0;
  for (const std::string& v : *frames) {
    auto c = DecodeChunk(v, d);
    ASSERT_TRUE(c.ok());
    records += c->record_count();
  }
  EXPECT_EQ(records, 2000u);
}

TEST(Pipeline, ProgressLineShowsRatesAndRecordsBySeverity) {
  ManualClock clock(1'795'910'400'000);
  prometheus::Registry registry;
  auto seq = SequenceAllocator::InMemory(3);
  CapturingChunkSink sink;
  PipelineOptions o = Base(testing::LoghubPath("HDFS_2k.log"));
  o.progress = true;
  Pipeline p(o, sink, *seq, clock, registry);
  ::testing::internal::CaptureStderr();
  auto r = p.Run();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.ok());
  EXPECT_NE(err.find("2000 lines"), std::string::npos) << err;
  EXPECT_NE(err.find("lines/s"), std::string::npos) << err;
  EXPECT_NE(err.find("MB/s"), std::string::npos) << err;
  EXPECT_NE(err.find("INFO 1920 WARN 80"), std::string::npos) << err;
}

#ifdef LOGDEX_BINARY
struct CliRun {
  int code;
  std::string err;
};

CliRun Logdex(const std::string& args, const std::string& dir) {
  const std::string err = dir + "/stderr.txt";
  int rc = std::system((std::string(LOGDEX_BINARY) + " " + args + " 2> " + err + " > " + dir + "/stdout.txt").c_str());
  return CliRun{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, testing::ReadAll(err)};
}

TEST(ShipCli, DryRunExitsZeroAndWritesEveryRecord) {
  TempDir dir;
  CliRun r = Logdex("ship --app a --host h --format apache --dry-run --out " + dir.path() + "/o.bin " +
                     testing::LoghubPath("Apache_2k.log"),
                 dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  auto frames = ReadFramedFile(dir.path() + "/o.bin");
  ASSERT_TRUE(frames.ok());
  EXPECT_FALSE(frames->empty());
  EXPECT_NE(r.err.find("2000 records"), std::string::npos) << r.err;
}

// `ship --codec zstd-columns`: chunks with their records by columns, which
// read back to every line, smaller than ship's default codec makes them.
TEST(ShipCli, CodecZstdColumnsWritesChunksByColumnsThatReadBack) {
  TempDir dir;
  uint64_t bytes[2] = {0, 0};
  for (int columns : {0, 1}) {
    const std::string out = dir.path() + "/o" + std::to_string(columns) + ".bin";
    CliRun r = Logdex(std::string("ship --app a --host h --format log4j --retention 100000d") +
                          (columns ? " --codec zstd-columns" : "") + " --dry-run --out " + out + " " +
                          testing::LoghubPath("HDFS_2k.log"),
                      dir.path());
    ASSERT_EQ(r.code, 0) << r.err;
    auto frames = ReadFramedFile(out);
    ASSERT_TRUE(frames.ok());
    ASSERT_FALSE(frames->empty());
    DecodeOptions d;
    uint64_t records = 0;
    for (const std::string& v : *frames) {
      auto c = DecodeChunk(v, d);
      ASSERT_TRUE(c.ok()) << c.error().ToString();
      EXPECT_EQ(c->codec(), columns ? proto::CODEC_ZSTD_COLUMNS : proto::CODEC_ZSTD);
      auto unpacked = UnpackRecords(*c, d);
      ASSERT_TRUE(unpacked.ok()) << unpacked.error().ToString();
      records += static_cast<uint64_t>(unpacked->records_size());
      bytes[columns] += c->payload().size();
    }
    EXPECT_EQ(records, 2000u);
  }
  EXPECT_LT(bytes[1], bytes[0]) << "by columns, the payloads are smaller";
}

// `ship --check`: how each Loghub sample reads, without Kafka (issue 12).
TEST(ShipCli, CheckReportsHowEachFileReads) {
  TempDir dir;
  const std::pair<const char*, const char*> samples[] = {
      {"Android_2k.log", "logcat"}, {"Apache_2k.log", "apache"},   {"HDFS_2k.log", "log4j"},
      {"Linux_2k.log", "syslog"},   {"OpenSSH_2k.log", "syslog"}, {"OpenStack_2k.log", "log4j"},
      {"Spark_2k.log", "log4j"}};
  std::string args = "ship --check";
  for (const auto& [name, format] : samples) args += " " + testing::LoghubPath(name);
  CliRun r = Logdex(args, dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string out = testing::ReadAll(dir.path() + "/stdout.txt");
  for (const auto& [name, format] : samples) {
    const size_t at = out.find(testing::LoghubPath(name) + "\n");
    ASSERT_NE(at, std::string::npos) << name << "\n" << out;
    const std::string report = out.substr(at, out.find("\n/", at + 1) - at);
    EXPECT_NE(report.find(std::string("format:      ") + format + " (detected"), std::string::npos) << report;
    EXPECT_NE(report.find("lines:       2000\n"), std::string::npos) << report;
    EXPECT_NE(report.find("records:     2000 "), std::string::npos) << report;
    EXPECT_NE(report.find("unparsed:    0 lines"), std::string::npos) << report;
    // Every sample is years old: past the default 7-day retention.
    EXPECT_NE(report.find("retention:   2000 records older than 7d"), std::string::npos) << report;
  }

  // A file with a stray line and a time serve would refuse: counted, with examples and line numbers.
  const std::string f = dir.path() + "/mixed.log";
  {
    std::ofstream o(f);
    o << "2026-11-28 10:00:00,000 INFO [main] app: one\n"
      << "user=bob time=not-a-time\n"
      << "1999-01-01 10:00:00,000 ERROR [main] app: from the last century\n"
      << "2026-11-28 10:00:01,000 INFO [main] app: two\n";
  }
  r = Logdex("ship --check --retention 0 " + f, dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string mixed = testing::ReadAll(dir.path() + "/stdout.txt");
  EXPECT_NE(mixed.find("format:      log4j (detected"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("unparsed:    1 lines"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("re-stamped:  1 records"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("unparsed, line 2: user=bob time=not-a-time"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("re-stamped, line 3: 1999-01-01"), std::string::npos) << mixed;
  EXPECT_EQ(mixed.find("retention:"), std::string::npos) << "--retention 0 checks none\n" << mixed;

  r = Logdex("ship --check " + dir.path() + "/missing.log", dir.path());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("missing.log"), std::string::npos) << r.err;
}

// What ship says about times: the detected format, records re-stamped, and
// records past the retention (shipped, but never queryable) are counted.
TEST(ShipCli, SummaryNamesTheFormatAndCountsRecordsPastRetention) {
  TempDir dir;
  CliRun r = Logdex("ship --app a --host h --dry-run --out " + dir.path() + "/o.bin " +
                        testing::LoghubPath("HDFS_2k.log"),
                    dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("HDFS_2k.log: format log4j (detected"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("WARNING: 2000 records are older than the retention (--retention 7d)"), std::string::npos)
      << r.err;
  r = Logdex("ship --app a --host h --retention 100000d --dry-run --out " + dir.path() + "/o.bin " +
                 testing::LoghubPath("HDFS_2k.log"),
             dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("older than the retention"), std::string::npos) << r.err;
  r = Logdex("ship --app a --host h --retention 7x --dry-run --out x " + testing::LoghubPath("HDFS_2k.log"),
             dir.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--retention 7x"), std::string::npos) << r.err;
}

TEST(ShipCli, ReadsStdin) {
  TempDir dir;
  const std::string in = dir.path() + "/in.jsonl";
  {
    std::ofstream f(in);
    f << R"({"ts":"2026-11-28T10:00:00Z","level":"error","msg":"one","order":"7"})" << "\n"
      << R"({"ts":"2026-11-28T10:00:01Z","level":"info","msg":"two"})" << "\n";
  }
  CliRun r =
      Logdex("ship --app a --host h --format json --dry-run --out " + dir.path() + "/o.bin - < " + in, dir.path());
  EXPECT_EQ(r.code, 0) << r.err;
  auto frames = ReadFramedFile(dir.path() + "/o.bin");
  ASSERT_TRUE(frames.ok());
  ASSERT_EQ(frames->size(), 2u);  // an ERROR chunk and an INFO chunk
  EXPECT_NE(r.err.find("2 records"), std::string::npos) << r.err;
}

TEST(ShipCli, RejectsBadUsageWithAMessage) {
  TempDir dir;
  CliRun r = Logdex("ship --app a --host h --format nope --dry-run --out x -", dir.path());
  EXPECT_NE(r.code, 0);
  r = Logdex("ship --app a --host h --format regex --regex '(' --dry-run --out x -", dir.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("regex"), std::string::npos) << r.err;
  r = Logdex("ship --app a --host h " + testing::LoghubPath("HDFS_2k.log"), dir.path());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--brokers"), std::string::npos) << r.err;
}

TEST(ShipCli, UnreachableKafkaExitsNonZeroAndSaysWhatWasNotDelivered) {
  TempDir dir;
  CliRun r = Logdex("ship --brokers 127.0.0.1:1 --app a --host h --state-dir " + dir.path() +
                     "/state --delivery-timeout-ms 1500 " + testing::LoghubPath("HDFS_2k.log"),
                 dir.path());
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("NOT DELIVERED"), std::string::npos) << r.err;
}
#endif

}  // namespace
}  // namespace logdex::ship
