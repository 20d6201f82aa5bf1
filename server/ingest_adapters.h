// Adapters that plug the parse module (parse/) and the alert stager into the
// consumer's batch path (consumer/ knows neither module: the dependency rule
// of docs/ARCHITECTURE.md, "Modules and dependencies", keeps consumer ->
// indexer -> store).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "alerting/stager.h"
#include "common/clock.h"
#include "consumer/batch_processor.h"

namespace logdex {

// JSON lines and plain text lines (rsyslog omkafka, Fluent Bit, Vector) into
// chunks through parse's LineParser and RecordAssembler, one per stream
// (app, host, severity) as `logdex ship` makes them, each record written by a
// ChunkWriter straight from the parser's views: a message whose lines mix
// severities yields one chunk per severity, each stored as it is (nothing is
// packed, unpacked and packed again).
// - json: one object per line; every line needs a timestamp field, else the
//   message is dead-lettered (reason unparseable_lines);
// - text: any format `logdex ship --format auto` knows; a line without a
//   timestamp takes the previous line's of the same message, or the Kafka
//   message's timestamp for the message's first lines (so a replay writes the
//   same rows);
// - text: the format is chosen once per message from its first lines (see
//   parse/parsers.h, "auto"); lines that do not match it are kept whole;
// - a record whose own time ValidateChunk would refuse (before 2000, over a
//   day ahead) takes the Kafka message's timestamp and the tag
//   logdex_restamped_from=<its time>, instead of its whole message being
//   dead-lettered (counted: restamped_records);
// - app and host come from the line's fields, else the defaults; a record
//   with neither is an error;
// - guards: a JSON line nested deeper than parse::kMaxJsonDepth or longer
//   than parse::kMaxJsonLineBytes dead-letters its message with that reason;
//   invalid UTF-8 in a JSON line is replaced (U+FFFD) and the line kept,
//   and counted.
// Not thread-safe (one per consumer loop); counters() likewise.
class ShipLineDecoder final : public LineDecoder {
 public:
  struct Counters {
    uint64_t utf8_replaced_lines = 0;  // JSON lines kept with invalid UTF-8 replaced
    uint64_t unparsed_lines = 0;       // text lines no format matched (kept whole)
    uint64_t untimed_messages = 0;     // messages without a Kafka timestamp
    uint64_t restamped_records = 0;    // records whose own time serve refuses: given the message's, tagged
  };

  ShipLineDecoder(std::string default_app, std::string default_host, const Clock& clock);
  ~ShipLineDecoder() override;
  Result<std::vector<std::string>> Decode(const InMessage& message, InputFormat format) override;

  const Counters& counters() const { return counters_; }

 private:
  // Parses the message's lines into the stream writers.
  Status Read(const InMessage& message, InputFormat format);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  Counters counters_;
};

// Alert staging as the last link of the indexer's chain: the records of each
// stored chunk at or above the stager's lowest severity go to
// AlertStager::Stage, by reference, and its rows join the batch that stores
// the chunk (so the chunk and its notifications are written together, and
// alert_seen last: the stager marks it WriteLast). Whether a chunk is worth
// decompressing for alerts is this observer's call (WantsRecords), not the
// indexer's. A failed stage fails the batch (it is retried), as a failed
// store read of any observer does.
class AlertObserver final : public ChunkObserver {
 public:
  // `shared_store`: other members write the same alert state (HBase), so the
  // stager reloads it from the store for every batch instead of trusting its
  // cache; otherwise group windows and digest counts would diverge.
  // `on_written(n)`: a batch holding n staged notifications was written
  // (serve counts them and wakes the dispatcher).
  AlertObserver(alerting::AlertStager& stager, bool shared_store, std::function<void(size_t)> on_written)
      : stager_(stager), shared_store_(shared_store), on_written_(std::move(on_written)) {}

  bool WantsRecords(Severity severity) const override { return severity >= stager_.MinSeverity(); }
  // Merged records were alerted on when they arrived.
  bool ObservesMergedChunks() const override { return false; }

  Status Observe(const StreamChunk& c, WriteBatch& batch) override {
    if (c.records == nullptr || !stager_.Wants(*c.chunk)) return Status::Ok();
    auto n = stager_.Stage(*c.chunk, c.id, *c.records, c.received_ms, batch);
    if (!n.ok()) return Status(n.error().code, "alert staging: " + n.error().message);
    staged_ += *n;
    return Status::Ok();
  }

  // The alert_seen rows of the chunks it will stage, in one read (a failed
  // one leaves each to the stager's own read). A split chunk is staged as
  // its parts, under ids of their own: not these.
  void Prefetch(std::span<const ChunkToStage> chunks) override {
    std::vector<ChunkId> ids;
    for (const ChunkToStage& c : chunks) {
      if (!c.split && stager_.Wants(*c.chunk)) ids.push_back(StoredChunkId(*c.chunk, *c.source));
    }
    if (!ids.empty()) (void)stager_.PrefetchSeen(ids);
  }

  void Settle(bool written) override {
    stager_.DiscardPrefetched();
    const size_t staged = std::exchange(staged_, 0);
    if (written && staged > 0 && on_written_) on_written_(staged);
    if (written) stager_.BatchWritten();
    if (!written || shared_store_) stager_.DiscardCache();
  }

 private:
  alerting::AlertStager& stager_;
  const bool shared_store_;
  const std::function<void(size_t)> on_written_;
  size_t staged_ = 0;  // since the last Settle
};

}  // namespace logdex
