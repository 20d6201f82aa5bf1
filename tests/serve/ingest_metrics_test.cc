// IngestMetrics (server/ingest_metrics.h): the ingest path's degraded modes
// added for issue 12, records re-stamped by the line input and records past
// the store's retention, each as a counter and a warn line (at most one a
// minute; one line per stream for the retention).
#include "server/ingest_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "common/chunk_codec.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "tests/backends.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

double CounterOf(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].counter.value;
  }
  return -1;
}

std::string OldChunk(const std::string& app, int64_t ts, uint64_t seq) {
  proto::RecordBatch b;
  for (int i = 0; i < 2; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(ts + i);
    r->set_severity(SeverityCode(Severity::kInfo));
    r->set_message("m");
  }
  PackOptions po;
  po.producer_id = 5;
  po.sequence = seq;
  return PackChunk(app, "h1", b, po).SerializeAsString();
}

TEST(IngestMetrics, PastRetentionAndRestampedRecordsAreCountedAndWarnedPerStream) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));

  const int64_t day = 86'400'000;
  ManualClock clock(1'800'000'000'000);
  TempDir dir;
  auto store = AllBackends().front().open(dir.path() + "/store", &clock);
  IndexerOptions io;
  io.decode.clock = &clock;
  io.retention_ms = 7 * day;
  ASSERT_TRUE(CreateTables(*store, TableLayout{}).ok());
  Indexer indexer(*store, io);
  proto::ChunkSource src;
  src.set_topic("t");
  ASSERT_TRUE(indexer.IngestSerialized({OldChunk("billing", clock.NowMs() - 8 * day, 1),
                                        OldChunk("search", clock.NowMs() - 9 * day, 2),
                                        OldChunk("fresh", clock.NowMs() - day, 3)},
                                       src)
                  .ok());
  ShipLineDecoder::Counters lines;
  lines.restamped_records = 3;

  prometheus::Registry registry;
  IngestMetrics metrics(registry, clock);
  metrics.Update(indexer.counters(), lines, &indexer);
  EXPECT_EQ(CounterOf(registry, "logdex_ingest_past_retention_records_total"), 4);
  EXPECT_EQ(CounterOf(registry, "logdex_line_input_restamped_records_total"), 3);
  std::string log;
  for (const std::string& line : ring->last_formatted()) log += line;
  EXPECT_NE(log.find("2 records of billing/h1 are older than the store's retention"), std::string::npos) << log;
  EXPECT_NE(log.find("2 records of search/h1 are older"), std::string::npos) << log;
  EXPECT_EQ(log.find("fresh/h1"), std::string::npos) << log;
  EXPECT_NE(log.find("3 records had a time serve refuses"), std::string::npos) << log;

  // Within the minute: counted, not logged again.
  ASSERT_TRUE(indexer.IngestSerialized({OldChunk("billing", clock.NowMs() - 8 * day, 4)}, src).ok());
  const size_t logged = ring->last_formatted().size();
  metrics.Update(indexer.counters(), lines, &indexer);
  EXPECT_EQ(CounterOf(registry, "logdex_ingest_past_retention_records_total"), 6);
  EXPECT_EQ(ring->last_formatted().size(), logged);
  // A minute later, the streams since the last line.
  clock.AdvanceMs(61'000);
  metrics.Update(indexer.counters(), lines, &indexer);
  log.clear();
  for (const std::string& line : ring->last_formatted()) log += line;
  EXPECT_NE(log.rfind("2 records of billing/h1"), log.find("2 records of billing/h1")) << log;

  spdlog::set_default_logger(previous);
}

// Ledger rows no format allows (Compactor.ReSendsAreRecognisedByLedgerRows...
// shows what the indexer does with them): a counter and a warn line.
TEST(IngestMetrics, UnreadableLedgerReadsAreCountedAndWarned) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));
  ManualClock clock(1'800'000'000'000);
  prometheus::Registry registry;
  IngestMetrics metrics(registry, clock);
  IndexerCounters counters;
  counters.unreadable_ledger_reads = 2;
  metrics.Update(counters, ShipLineDecoder::Counters{}, nullptr);
  EXPECT_EQ(CounterOf(registry, "logdex_indexer_unreadable_ledger_reads_total"), 2);
  std::string log;
  for (const std::string& line : ring->last_formatted()) log += line;
  EXPECT_NE(log.find("2 reads of compactor ledger rows found them unreadable"), std::string::npos) << log;
  spdlog::set_default_logger(previous);
}

}  // namespace
}  // namespace logdex
