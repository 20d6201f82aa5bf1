// A consumer batch reads the store once per table, not once per chunk
// (Indexer::Prefetch): the meta rows of its streams and names, and the
// alert_seen rows of its ERROR chunks, each in one MultiGet, with the same
// rows staged as a Get per chunk gives. A staging that failed on a read is
// staged again without decoding the messages again (BatchProcessor::Restage).
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "alerting/stager.h"
#include "common/chunk_codec.h"
#include "common/clock.h"
#include "consumer/batch_processor.h"
#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "server/ingest_adapters.h"
#include "store/rocksdb_store.h"
#include "tests/alerting/alerting_test_util.h"
#include "tests/failing_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'795'910'400'000;  // 2026-11-29T00:00:00Z

// Counts the reads of each table; `batched` is what it says of MultiGet
// (TableStore::batched_gets), and with `fail_reads` every read fails.
class CountingReads final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    ++gets[std::string(table)];
    if (fail_reads) return Error{Errc::kUnavailable, "injected read failure"};
    return base_.Get(table, key);
  }
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override {
    ++multi_gets[std::string(table)];
    if (fail_reads) return Error{Errc::kUnavailable, "injected read failure"};
    return base_.MultiGet(table, keys);
  }
  bool batched_gets() const override { return batched; }

  std::map<std::string, int> gets, multi_gets;
  bool batched = true;
  bool fail_reads = false;
};

// A store, its counting view, an indexer with serve's alert observer, and a
// batch processor: serve's ingest path without Kafka.
struct Pipeline {
  explicit Pipeline(const std::string& dir, bool batched, LineDecoder* lines = nullptr) {
    RocksDbOptions ro;
    ro.path = dir;
    ro.clock = &clock;
    auto opened = RocksDbStore::Open(ro);
    LOGDEX_CHECK(opened.ok());
    base = std::move(*opened);
    store = std::make_unique<CountingReads>(*base);
    store->batched = batched;
    LOGDEX_CHECK(CreateTables(*store, TableLayout{}).ok());
    LOGDEX_CHECK(alerting::CreateAlertingTables(*store, config).ok());
    stager = std::make_unique<alerting::AlertStager>(config, *store, clock, registry);
    IndexerOptions io;
    io.decode.clock = &clock;
    indexer = std::make_unique<Indexer>(*store, io);
    indexer->AddObserver(std::make_unique<AlertObserver>(*stager, /*shared_store=*/false, nullptr));
    BatchProcessorOptions bo;
    bo.decode.clock = &clock;
    bo.topic_formats["lines"] = InputFormat::kJson;
    processor = std::make_unique<BatchProcessor>(*indexer, bo, lines);
  }

  ManualClock clock{kNow};
  prometheus::Registry registry;
  std::unique_ptr<TableStore> base;
  std::unique_ptr<CountingReads> store;
  alerting::AlertingConfig config = alerting::testing::OneSinkNoLimits();
  std::unique_ptr<alerting::AlertStager> stager;
  std::unique_ptr<Indexer> indexer;
  std::unique_ptr<BatchProcessor> processor;
};

// A chunk of 3 records of `severity` from `host`, tagged, by producer 9.
// With `summarized`, their messages are long enough that the chunk keeps its
// tag summary (kMaxTagSummaryShare), which names the tag keys to read ahead.
std::string Chunk(const std::string& host, Severity severity, uint64_t seq, bool summarized = true) {
  proto::RecordBatch b;
  uint64_t noise = seq;
  for (int i = 0; i < 3; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(kNow - 10'000 + static_cast<int64_t>(seq) * 10 + i);
    r->set_severity(SeverityCode(severity));
    std::string message = "order " + std::to_string(seq) + " step " + std::to_string(i) + " ";
    for (int c = 0; summarized && c < 150; ++c) {
      noise = noise * 6364136223846793005ull + 1442695040888963407ull;
      message.push_back(static_cast<char>('a' + (noise >> 59) % 26));
    }
    r->set_message(message);
    proto::Tag* t = r->add_tags();
    t->set_key("region");
    t->set_value(i % 2 ? "eu" : "us");
    t = r->add_tags();
    t->set_key("shard");
    t->set_value(std::to_string(seq % 3));
  }
  PackOptions po;
  po.producer_id = 9;
  po.sequence = seq;
  return PackChunk("orders", host, b, po).SerializeAsString();
}

// 40 messages: 4 hosts x (INFO, ERROR) x 5 chunks, sequences from `first_seq`.
std::vector<InMessage> Messages(uint64_t first_seq, bool summarized = true) {
  std::vector<InMessage> out;
  uint64_t seq = first_seq;
  for (int h = 0; h < 4; ++h) {
    for (Severity s : {Severity::kInfo, Severity::kError}) {
      for (int i = 0; i < 5; ++i) {
        InMessage& m = out.emplace_back();
        m.topic = "logs";
        m.offset = static_cast<int64_t>(seq);
        m.timestamp_ms = kNow - 1'000;
        m.value = Chunk("web-" + std::to_string(h), s, seq++, summarized);
      }
    }
  }
  return out;
}

std::vector<std::tuple<std::string, std::string, std::string>> Rows(const WriteBatch& batch) {
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  for (const WriteBatch::Entry& e : batch.entries()) rows.emplace_back(e.table, e.key, e.Value());
  std::sort(rows.begin(), rows.end());
  return rows;
}

// Chunks without a tag summary (records with short messages: the summary
// outweighs them) name their tag keys only in their records: the name rows
// of keys not yet known are read one by one, once, and remembered.
TEST(BatchReads, ChunksWithoutATagSummaryReadEachNewTagKeyNameOnce) {
  TempDir dir;
  Pipeline ahead(dir.path() + "/ahead", /*batched=*/true);
  Pipeline one_by_one(dir.path() + "/gets", /*batched=*/false);
  const std::vector<InMessage> messages = Messages(1, /*summarized=*/false);
  proto::LogChunk first;
  ASSERT_TRUE(first.ParseFromString(std::string(messages[0].value.view())));
  ASSERT_FALSE(first.has_tag_summary());

  ProcessedBatch a, b;
  ahead.processor->Add(messages, a);
  one_by_one.processor->Add(messages, b);
  ASSERT_TRUE(a.failed.ok()) << a.failed.ToString();
  ASSERT_TRUE(b.failed.ok()) << b.failed.ToString();
  EXPECT_EQ(a.chunks, 40u);
  EXPECT_EQ(Rows(a.writes), Rows(b.writes));
  EXPECT_EQ(ahead.store->multi_gets[std::string(kMetaTable)], 1);
  EXPECT_EQ(ahead.store->gets[std::string(kMetaTable)], 2) << "the names of \"region\" and \"shard\"";

  ASSERT_TRUE(ahead.store->Write(a.writes).ok());
  ahead.processor->Settle(true);
  ProcessedBatch c;
  ahead.processor->Add(Messages(1000, /*summarized=*/false), c);
  ASSERT_TRUE(c.failed.ok()) << c.failed.ToString();
  EXPECT_EQ(ahead.store->gets[std::string(kMetaTable)], 2) << "known since the first batch";
}

TEST(BatchReads, ABatchReadsItsMetaAndSeenRowsInOneMultiGetEachAndStagesTheSameRows) {
  TempDir dir;
  Pipeline ahead(dir.path() + "/ahead", /*batched=*/true);
  Pipeline one_by_one(dir.path() + "/gets", /*batched=*/false);
  const std::vector<InMessage> messages = Messages(1);

  ProcessedBatch a, b;
  ahead.processor->Add(messages, a);
  one_by_one.processor->Add(messages, b);
  ASSERT_TRUE(a.failed.ok()) << a.failed.ToString();
  ASSERT_TRUE(b.failed.ok()) << b.failed.ToString();
  EXPECT_EQ(a.chunks, 40u);
  EXPECT_TRUE(a.dead_letters.empty());

  // A Get per key without reading ahead: 1 app, 4 hosts, 2 tag keys, 8 streams;
  // one alert_seen row per ERROR chunk.
  EXPECT_EQ(one_by_one.store->gets[std::string(kMetaTable)], 15);
  EXPECT_EQ(one_by_one.store->gets[std::string(alerting::kSeenTable)], 20);
  EXPECT_EQ(one_by_one.store->multi_gets.size(), 0u);
  // Reading ahead: one MultiGet per table, and no Get of either table.
  EXPECT_EQ(ahead.store->multi_gets[std::string(kMetaTable)], 1);
  EXPECT_EQ(ahead.store->multi_gets[std::string(alerting::kSeenTable)], 1);
  EXPECT_EQ(ahead.store->gets[std::string(kMetaTable)], 0);
  EXPECT_EQ(ahead.store->gets[std::string(alerting::kSeenTable)], 0);

  const auto rows = Rows(a.writes);
  EXPECT_EQ(rows, Rows(b.writes)) << "reading ahead changes how the store is read, not what is staged";
  EXPECT_GT(std::count_if(rows.begin(), rows.end(),
                          [](const auto& r) { return std::get<0>(r) == kOutboxTable; }),
            0)
      << "the ERROR chunks were alerted on";

  // The next batch of the same streams, a minute later, over stores that
  // hold the first: the meta rows are known, so only the chunks' alert_seen
  // rows are read; the stream extents grow, as with a Get per key.
  ASSERT_TRUE(ahead.store->Write(a.writes).ok());
  ahead.processor->Settle(true);
  ASSERT_TRUE(one_by_one.store->Write(b.writes).ok());
  one_by_one.processor->Settle(true);
  const std::vector<InMessage> next = Messages(1000);  // records from kNow on: the next minute
  ProcessedBatch c, d;
  ahead.processor->Add(next, c);
  one_by_one.processor->Add(next, d);
  ASSERT_TRUE(c.failed.ok()) << c.failed.ToString();
  EXPECT_EQ(ahead.store->multi_gets[std::string(kMetaTable)], 1) << "nothing new to read";
  EXPECT_EQ(ahead.store->multi_gets[std::string(alerting::kSeenTable)], 2);
  EXPECT_EQ(ahead.store->gets[std::string(kMetaTable)], 0);
  EXPECT_EQ(ahead.store->gets[std::string(alerting::kSeenTable)], 0);
  const auto next_rows = Rows(c.writes);
  EXPECT_EQ(next_rows, Rows(d.writes));
  EXPECT_EQ(std::count_if(next_rows.begin(), next_rows.end(),
                          [](const auto& r) { return std::get<0>(r) == kMetaTable; }),
            8)
      << "each stream's extent grew into the next minute";

  // A replay of the first batch after a restart (the stager remembers no
  // recent chunk): the seen rows read ahead say every ERROR chunk was
  // staged, and no alert is staged again.
  ASSERT_TRUE(ahead.store->Write(c.writes).ok());
  ahead.processor->Settle(true);
  ahead.stager->DiscardCache();
  ProcessedBatch replay;
  ahead.processor->Add(messages, replay);
  ASSERT_TRUE(replay.failed.ok()) << replay.failed.ToString();
  EXPECT_EQ(ahead.store->multi_gets[std::string(alerting::kSeenTable)], 3);
  EXPECT_EQ(ahead.store->gets[std::string(alerting::kSeenTable)], 0) << "answered by the read ahead";
  EXPECT_EQ(replay.chunks, 40u);
  for (const WriteBatch::Entry& e : replay.writes.entries()) {
    EXPECT_NE(e.table, kOutboxTable) << "a replay notifies no one";
  }
}

// Lines in, a fixed chunk per message out, counting its calls.
class CountingLines final : public LineDecoder {
 public:
  Result<std::vector<std::string>> Decode(const InMessage& m, InputFormat) override {
    ++calls;
    return std::vector<std::string>{Chunk("web-7", Severity::kError, static_cast<uint64_t>(m.offset) + 1)};
  }
  int calls = 0;
};

TEST(BatchReads, AStagingThatFailedOnAReadIsStagedAgainWithoutDecodingAgain) {
  TempDir dir;
  CountingLines lines;
  Pipeline p(dir.path() + "/store", /*batched=*/true, &lines);
  std::vector<InMessage> messages;
  for (int i = 0; i < 6; ++i) {
    InMessage& m = messages.emplace_back();
    m.topic = "lines";
    m.offset = i;
    m.value = i == 3 ? std::string() : "{\"msg\": \"x\"}";
    if (i == 3) {  // not a chunk: a dead letter, in its place, once
      m.topic = "logs";
      m.value = "not a chunk";
    }
  }

  p.store->fail_reads = true;
  ProcessedBatch batch;
  p.processor->Add(messages, batch);
  EXPECT_FALSE(batch.failed.ok()) << "the reads failed (ahead, then a stream's extent)";
  EXPECT_EQ(lines.calls, 5);
  p.processor->Settle(false);

  p.store->fail_reads = false;
  p.processor->Restage(batch);
  ASSERT_TRUE(batch.failed.ok()) << batch.failed.ToString();
  EXPECT_EQ(lines.calls, 5) << "staged again, not decoded again";
  EXPECT_EQ(batch.chunks, 5u);
  EXPECT_EQ(batch.records, 15u);
  ASSERT_EQ(batch.dead_letters.size(), 1u) << "the undecodable message's dead letter, not twice";
  EXPECT_EQ(batch.dead_letters[0].message.offset, 3);
  EXPECT_EQ(batch.messages, 6u);
  EXPECT_EQ((batch.next_offsets[{"lines", 0}]), 6);
  ASSERT_TRUE(p.store->Write(batch.writes).ok());
  p.processor->Settle(true);

  size_t main_rows = 0;
  ASSERT_TRUE(p.base->Scan(ScanSpec{std::string(kMainTable), "", "", false, 0}, [&](auto, auto) {
    ++main_rows;
    return true;
  }).ok());
  EXPECT_EQ(main_rows, 5u) << "every chunk made from lines is stored, from the bytes kept since decoding";
}

}  // namespace
}  // namespace logdex
