// JournalSink: makes `logdex ship --follow` exactly-once across crashes.
//
// Checkpoints alone are at-least-once: after a crash, the lines since the
// last saved checkpoint are read again and would be packed into new chunks
// under new sequence numbers, which the store cannot tell from the first
// copies. So, with a state directory, every chunk is first written to a
// journal (`<state>/journal/<segment>.log`, fsynced) and only then given to
// the real sink; each journal entry holds the chunk as sent and, per record,
// the file (dev, inode), byte range and message hash its lines came from,
// and the format an auto-format input had chosen.
//
// A restart (Replay) sends every journaled chunk again, with its sequence, so
// the store writes the same rows (idempotent), and reports the records those
// chunks hold: the pipeline reads from the checkpoint as before, with the
// same format, but skips those records (same offsets and same bytes), and
// ends a multi-line record where the journal says it ended (an idle flush
// the first run made). Records after the checkpoint that were in no
// journaled chunk are packed anew. Every line reaches the store once; the
// exceptions are counted: a record read again that differs from the
// journaled one at its offset is shipped again
// (logdex_ship_journal_mismatched_records_total), and chunks sent
// unjournaled (below) make a crash at-least-once.
//
// Segments: a checkpoint barrier calls Rotate() (the next chunks go to a new
// segment) and, once the barrier's positions are saved, Release() deletes
// the segments up to it: their chunks are resolved and their lines lie
// before the saved positions. After a restart, no segment is released until
// every record the journal held has been read again (a second crash must
// still find them). Entries are [u32 length][u32 CRC-32C][a
// serialized proto::ShipJournalEntry], little-endian; a torn last entry (a
// crash while writing it) was never sent and is ignored.
//
// Writes are batched: Send() queues the chunk; the queue is written and
// fsynced, then forwarded, at 1 MiB, at every Poll() and before Finish().
// LowestUnresolved() counts queued chunks as unresolved. If the journal
// cannot be written, or its segments would pass max_bytes (a long Kafka
// outage: nothing resolves, so nothing is released), chunks are forwarded
// unjournaled (delivery goes on; a crash may then ship the lines since the
// checkpoint twice): logged once a minute, counted in
// logdex_ship_journal_errors_total{reason="write"|"full"}.
//
// Without a journal directory the sink is a pass-through that tracks the
// highest sequence sent (checkpoint barriers need it). Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ship/chunk_sink.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace logdex::ship {

// Where a record's lines came from: the input (JournalSink::AddInput), the
// file and the byte range.
struct RecordSpan {
  uint32_t input = 0;
  uint64_t dev = 0, ino = 0;
  uint64_t start = 0, end = 0;
  uint64_t hash = 0;  // RecordHash of its message
};

// XXH64 of a record's message (what a replay checks before it skips one).
uint64_t RecordHash(std::string_view message);

// What the journal held at a restart, by input: per file (dev, inode), the
// start offset -> (end offset, hash) of each record in a journaled chunk.
struct JournalReplay {
  struct FileKey {
    uint64_t dev, ino;
    bool operator<(const FileKey& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
  };
  struct Span {
    uint64_t end, hash;
  };
  std::map<std::string, std::map<FileKey, std::unordered_map<uint64_t, Span>>> records;
  // The format each auto-format input had chosen (the newest entry's).
  std::map<std::string, std::string> formats;
  uint64_t chunks = 0;
  uint64_t torn_entries = 0;  // a crash (or a failed write) mid-entry
};

class JournalSink final : public ChunkSink {
 public:
  // `dir` empty: no journal (pass-through). `inner` must outlive the sink.
  JournalSink(ChunkSink& inner, std::string dir, uint64_t max_bytes, prometheus::Registry& registry);
  ~JournalSink() override;

  // Reads the segments a previous run left, sends their chunks to the inner
  // sink again and returns the records they hold. Call once, before Send().
  Result<JournalReplay> Replay();

  // Names an input (its absolute path, the checkpoint key) for RecordSpan.
  uint32_t AddInput(std::string path);
  // The format an auto-format input has chosen, kept in the entries.
  void SetInputFormat(uint32_t input, std::string_view format);
  // Records the span of a record given to the chunker; returns the id to put
  // in its RecordView::origin (never 0).
  uint64_t Note(const RecordSpan& span);

  Status Send(OutgoingChunk chunk) override;
  void Poll(int timeout_ms) override;
  uint64_t LowestUnresolved() const override;
  DeliveryReport Finish(int64_t timeout_ms) override;

  // Writes and fsyncs the queued entries, then forwards the queued chunks
  // (Poll does it too; this one reports the inner sink's failure, which
  // sticks: the chunks not forwarded stay unresolved).
  Status Flush();
  // Writes what is queued and closes the current segment; returns the
  // number of the last segment closed (0: none yet).
  Result<uint64_t> Rotate();
  // Deletes segments numbered up to `segment`.
  void Release(uint64_t segment);

  // The highest sequence sent (replays included).
  uint64_t max_sequence() const { return max_sequence_; }
  bool enabled() const { return !dir_.empty(); }

 private:
  Status WriteQueued();
  void JournalError(prometheus::Counter* counter, const std::string& what);
  // Bytes of the segment files on disk.
  uint64_t SegmentBytes() const;

  ChunkSink& inner_;
  std::string dir_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;  // in the segments not yet released
  prometheus::Counter* write_errors_ = nullptr;
  prometheus::Counter* full_ = nullptr;
  prometheus::Counter* entries_ = nullptr;
  uint64_t max_sequence_ = 0;
  uint64_t next_origin_ = 1;
  std::vector<std::string> inputs_, input_formats_;
  std::optional<Status> failed_;  // the inner sink's failure (sticky)
  std::optional<int64_t> write_retry_s_;  // after a write error: no new segment before this
  std::unordered_map<uint64_t, RecordSpan> spans_;  // noted, not yet in a sent chunk
  std::vector<OutgoingChunk> queued_;
  std::string buffer_;  // queued entries, framed
  uint64_t segment_ = 0;  // the open segment's number (0: none open)
  uint64_t last_segment_ = 0;  // the highest number used
  int fd_ = -1;
  std::optional<int64_t> last_error_log_s_;
};

}  // namespace logdex::ship
