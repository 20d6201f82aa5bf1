// serve's JSON-lines and text-lines input (ShipLineDecoder): guards against
// hostile lines, times that a replay derives the same way, and chunks of one
// stream (app, host, severity) each.
#include "server/ingest_adapters.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "common/clock.h"
#include "common/defaults.h"
#include "indexer/indexer.h"
#include "indexer/query.h"
#include "indexer/tables.h"
#include "store/rocksdb_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'795'910'400'000;  // 2026-11-29T00:00:00Z

InMessage Message(std::string value, int64_t kafka_ts_ms, int64_t offset = 1) {
  InMessage m;
  m.topic = "lines";
  m.offset = offset;
  m.value = std::move(value);
  m.timestamp_ms = kafka_ts_ms;
  return m;
}

// The decoder's serialized chunks, parsed.
std::vector<proto::LogChunk> Parsed(const std::vector<std::string>& chunks) {
  std::vector<proto::LogChunk> out;
  for (const std::string& bytes : chunks) EXPECT_TRUE(out.emplace_back().ParseFromString(bytes));
  return out;
}

std::vector<proto::LogRecord> Records(const std::vector<std::string>& chunks) {
  std::vector<proto::LogRecord> out;
  for (const proto::LogChunk& c : Parsed(chunks)) {
    auto batch = UnpackRecords(c, DecodeOptions{});
    EXPECT_TRUE(batch.ok()) << batch.error().ToString();
    if (batch.ok()) out.insert(out.end(), batch->records().begin(), batch->records().end());
  }
  return out;
}

// Untimed text lines used to take the previous message's time (possibly
// another partition's) or the clock's, so a replay wrote other rows.
TEST(LineInput, UntimedTextLinesTakeTheirKafkaMessagesTimestampOnEveryPass) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  auto timed = d.Decode(Message("2026-11-28 23:00:00,000 INFO timed line\n", kNow - 1000), InputFormat::kText);
  ASSERT_TRUE(timed.ok());
  const int64_t kafka_ts = kNow - 5'000;
  auto first = d.Decode(Message("no time of its own\nnor this one\n", kafka_ts), InputFormat::kText);
  ASSERT_TRUE(first.ok()) << first.error().message;
  clock.AdvanceMs(60'000);
  auto replay = d.Decode(Message("no time of its own\nnor this one\n", kafka_ts), InputFormat::kText);
  ASSERT_TRUE(replay.ok());
  auto a = Records(*first), b = Records(*replay);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ts_ms(), kafka_ts) << i;
    EXPECT_EQ(b[i].SerializeAsString(), a[i].SerializeAsString()) << i;
  }
  EXPECT_EQ(d.counters().untimed_messages, 0u);
}

// Issue 12: a line whose time serve refuses used to dead-letter its whole
// message (bad_timestamp), good lines and all; a stray k=v line in a log4j
// message was read as logfmt with a guessed time. Now the format is the
// message's, and a refused time becomes the Kafka message's, tagged.
TEST(LineInput, ARefusedTimeIsRestampedAndAStrayLineKeptInsteadOfLosingTheMessage) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  const int64_t kafka_ts = kNow - 5'000;
  auto chunks = d.Decode(Message("2026-11-28 23:00:00,000 INFO [main] app: one\n"
                                 "user=bob time=not-a-time\n"
                                 "1999-01-01 10:00:00,000 ERROR [main] app: from the last century\n"
                                 "2026-11-28 23:00:01,000 INFO [main] app: two\n",
                                 kafka_ts),
                         InputFormat::kText);
  ASSERT_TRUE(chunks.ok()) << chunks.error().message;
  DecodeOptions o;
  o.clock = &clock;
  for (const proto::LogChunk& c : Parsed(*chunks)) {
    EXPECT_TRUE(ValidateChunk(c, o).ok()) << "every chunk passes serve's validation";
  }
  auto records = Records(*chunks);
  ASSERT_EQ(records.size(), 4u);
  std::map<std::string, proto::LogRecord> by_message;
  for (const proto::LogRecord& r : records) by_message[r.message()] = r;
  const proto::LogRecord& stray = by_message["user=bob time=not-a-time"];
  EXPECT_EQ(stray.ts_ms(), 1'795'906'800'000) << "the time of the record before (23:00:00)";
  EXPECT_EQ(stray.tags_size(), 0) << "not read as logfmt";
  const proto::LogRecord& old = by_message["1999-01-01 10:00:00,000 ERROR [main] app: from the last century"];
  EXPECT_EQ(old.ts_ms(), kafka_ts);
  ASSERT_EQ(old.tags_size(), 1);
  EXPECT_EQ(old.tags(0).key(), kRestampedTag);
  EXPECT_EQ(old.tags(0).value(), "915184800000");
  EXPECT_EQ(d.counters().restamped_records, 1u);
  EXPECT_EQ(d.counters().unparsed_lines, 1u);
}

TEST(LineInput, JsonNestedPastTheGuardDeadLettersItsMessageWithTheReason) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  std::string deep = R"({"time":"2026-11-28T23:00:00Z","msg":"m","x":)" + std::string(100'000, '[') +
                     std::string(100'000, ']') + "}\n";
  auto r = d.Decode(Message(R"({"time":"2026-11-28T23:00:00Z","msg":"good"})" "\n" + deep, kNow), InputFormat::kJson);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("line 2: JSON nested deeper than 64 levels"), std::string::npos)
      << r.error().message;
}

// A JSON line's record reaches the decoder from AddLine, before its checks;
// with no default app or host (serve's defaults) that record fails for naming
// none, and the reason given must still be the line's own.
TEST(LineInput, ABadJsonLineIsRefusedForItsOwnReasonWhenTheServerHasNoDefaultAppOrHost) {
  ManualClock clock(kNow);
  ShipLineDecoder d("", "", clock);
  const std::string good = R"({"time":"2026-11-28T23:00:00Z","msg":"good","app":"a","host":"h"})" "\n";
  struct Case {
    std::string line, reason;
  };
  const Case cases[] = {
      {"not json at all\n", "line 2 is not a JSON object"},
      {R"({"time":"2026-11-28T23:00:00Z","msg":"m","x":)" + std::string(100, '[') + std::string(100, ']') + "}\n",
       "line 2: JSON nested deeper than 64 levels"},
      {R"({"msg":"no time","app":"a","host":"h"})" "\n", "line 2 has no timestamp"},
  };
  for (const Case& c : cases) {
    auto r = d.Decode(Message(good + c.line, kNow), InputFormat::kJson);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_NE(r.error().message.find(c.reason), std::string::npos) << r.error().message;
  }
  auto ok = d.Decode(Message(good, kNow), InputFormat::kJson);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(Records(*ok).size(), 1u) << "nothing of the refused messages is left in the next one";
}

TEST(LineInput, InvalidUtf8InAJsonLineIsKeptReplacedAndCounted) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  auto r = d.Decode(Message("{\"time\":\"2026-11-28T23:00:00Z\",\"msg\":\"a \xff b\"}\n", kNow), InputFormat::kJson);
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto records = Records(*r);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].message(), "a \xef\xbf\xbd b");
  EXPECT_EQ(d.counters().utf8_replaced_lines, 1u);
}

// Issue 12: a message whose lines mixed severities became one chunk per
// (app, host), which the indexer then unpacked, split by severity and packed
// again. Now the decoder groups by (app, host, severity) as ship does: every
// chunk has one severity, the indexer stores each as it is, and every line is
// found once, under its own severity.
TEST(LineInput, AMixedSeverityMessageYieldsOneChunkPerSeverityAndEveryLineIsFoundOnce) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  // Text: the default stream, four severities, a stack trace joined to its ERROR line.
  const std::string trace_record = "2026-11-28 23:30:01,000 ERROR [main] svc: request failed\n"
                                   "java.lang.IllegalStateException: boom\n"
                                   "\tat com.example.Svc.handle(Svc.java:42)";
  InMessage text = Message("2026-11-28 23:30:00,000 INFO [main] svc: started\n" + trace_record +
                               "\n"
                               "2026-11-28 23:30:02,000 WARN [main] svc: slow disk\n"
                               "2026-11-28 23:30:03,000 INFO [main] svc: request ok\n"
                               "2026-11-28 23:30:04,000 DEBUG [main] svc: cache hit\n"
                               "2026-11-28 23:30:05,000 ERROR [main] svc: request failed again\n",
                           kNow - 1000, /*offset=*/1);
  text.headers.emplace_back(std::string(kFormatHeader), "text");
  // JSON: two hosts, severities mixed on each.
  InMessage json = Message(R"({"time":"2026-11-28T23:31:00Z","level":"info","msg":"j1","host":"n1"})"
                           "\n"
                           R"({"time":"2026-11-28T23:31:01Z","level":"error","msg":"j2","host":"n1"})"
                           "\n"
                           R"({"time":"2026-11-28T23:31:02Z","level":"info","msg":"j3","host":"n2"})"
                           "\n"
                           R"({"time":"2026-11-28T23:31:03Z","level":"warn","msg":"j4","host":"n1"})"
                           "\n"
                           R"({"time":"2026-11-28T23:31:04Z","level":"error","msg":"j5","host":"n2"})"
                           "\n",
                           kNow - 1000, /*offset=*/2);
  json.headers.emplace_back(std::string(kFormatHeader), "json");

  // Every line once: (host, severity) of each message text.
  using Where = std::pair<std::string, Severity>;
  const std::map<std::string, Where> want = {
      {"2026-11-28 23:30:00,000 INFO [main] svc: started", {"host", Severity::kInfo}},
      {trace_record, {"host", Severity::kError}},
      {"2026-11-28 23:30:02,000 WARN [main] svc: slow disk", {"host", Severity::kWarn}},
      {"2026-11-28 23:30:03,000 INFO [main] svc: request ok", {"host", Severity::kInfo}},
      {"2026-11-28 23:30:04,000 DEBUG [main] svc: cache hit", {"host", Severity::kDebug}},
      {"2026-11-28 23:30:05,000 ERROR [main] svc: request failed again", {"host", Severity::kError}},
      {"j1", {"n1", Severity::kInfo}},
      {"j2", {"n1", Severity::kError}},
      {"j3", {"n2", Severity::kInfo}},
      {"j4", {"n1", Severity::kWarn}},
      {"j5", {"n2", Severity::kError}},
  };

  // The decoder: one chunk per (app, host, severity), none mixed.
  DecodeOptions decode;
  decode.clock = &clock;
  size_t chunks = 0;
  for (const auto& [m, format, streams] : {std::tuple{&text, InputFormat::kText, 4u},
                                           std::tuple{&json, InputFormat::kJson, 5u}}) {
    auto decoded = d.Decode(*m, format);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(decoded->size(), streams);
    std::set<std::tuple<std::string, std::string, uint32_t>> seen;
    for (const proto::LogChunk& c : Parsed(*decoded)) {
      EXPECT_NE(c.severity(), kMixedSeverity) << c.host();
      EXPECT_TRUE(seen.insert({c.app(), c.host(), c.severity()}).second) << "one chunk per stream";
      auto records = UnpackRecords(c, decode);
      ASSERT_TRUE(records.ok()) << records.error().ToString();
      for (const proto::LogRecord& r : records->records()) {
        EXPECT_EQ(r.severity(), c.severity()) << r.message();
        auto it = want.find(r.message());
        ASSERT_NE(it, want.end()) << r.message();
        EXPECT_EQ(c.host(), it->second.first) << r.message();
        EXPECT_EQ(r.severity(), SeverityCode(it->second.second)) << r.message();
      }
    }
    chunks += decoded->size();
  }

  // The batch path serve runs: each chunk is stored as it came, nothing split.
  TempDir dir;
  RocksDbOptions ro;
  ro.path = dir.path() + "/store";
  ro.clock = &clock;
  auto store = RocksDbStore::Open(ro);
  ASSERT_TRUE(store.ok()) << store.error().ToString();
  ASSERT_TRUE(CreateTables(**store, TableLayout{}).ok());
  IndexerOptions io;
  io.decode = decode;
  Indexer indexer(**store, io);
  BatchProcessorOptions bo;
  bo.decode = decode;
  BatchProcessor processor(indexer, bo, &d);
  ProcessedBatch batch;
  processor.Add(text, batch);
  processor.Add(json, batch);
  ASSERT_TRUE(batch.dead_letters.empty()) << batch.dead_letters[0].description;
  ASSERT_TRUE(batch.failed.ok()) << batch.failed.message();
  EXPECT_EQ(batch.chunks, chunks);
  EXPECT_EQ(batch.records, want.size());
  EXPECT_EQ(indexer.counters().split_by_severity, 0u) << "no chunk was unpacked and packed again by severity";
  EXPECT_EQ(indexer.counters().stored_chunks, chunks);
  ASSERT_TRUE((*store)->Write(batch.writes).ok());
  processor.Settle(true);

  // Every line is found once: by app over the hour, and under its own severity.
  QueryOptions qo;
  qo.decode = decode;
  QueryEngine engine(**store, qo);
  Query q;
  q.app = "app";
  q.from_ms = kNow - 3'600'000;
  q.to_ms = kNow;
  q.limit = 100;
  auto all = engine.Run(q);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  std::map<std::string, int> found;
  for (const ResultRecord& r : all->records) {
    ++found[r.message];
    auto it = want.find(r.message);
    ASSERT_NE(it, want.end()) << r.message;
    EXPECT_EQ(r.host, it->second.first) << r.message;
    EXPECT_EQ(r.severity, it->second.second) << r.message;
  }
  EXPECT_EQ(all->records.size(), want.size());
  for (const auto& [message, where] : want) EXPECT_EQ(found[message], 1) << message;
  for (Severity s : {Severity::kDebug, Severity::kInfo, Severity::kWarn, Severity::kError}) {
    q.severities = {s};
    auto page = engine.Run(q);
    ASSERT_TRUE(page.ok()) << page.error().ToString();
    size_t expected = 0;
    for (const auto& [message, where] : want) expected += where.second == s ? 1 : 0;
    EXPECT_EQ(page->records.size(), expected) << SeverityName(s);
    for (const ResultRecord& r : page->records) EXPECT_EQ(r.severity, s) << r.message;
  }
}

// The decoder writes each record straight into a ChunkWriter per stream; the
// chunks it returns are final: named by LineChunkIds in stream order, valid
// as chunk input is, and the same bytes on a replay (the same rows).
TEST(LineInput, ChunksAreNamedByTheirMessageValidAndTheSameBytesOnAReplay) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  InMessage m = Message(R"({"time":"2026-11-28T23:31:00Z","level":"info","msg":"j1","host":"n2","k":"v"})"
                        "\n"
                        R"({"time":"2026-11-28T23:31:01Z","level":"error","msg":"j2","host":"n1"})"
                        "\n"
                        R"({"time":"2026-11-28T23:31:02Z","level":"info","msg":"j3","host":"n1"})"
                        "\n",
                        kNow - 1000, /*offset=*/7);
  m.partition = 2;
  auto first = d.Decode(m, InputFormat::kJson);
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(first->size(), 3u);
  DecodeOptions o;
  o.clock = &clock;
  // Stream order: (app, n1, INFO), (app, n1, ERROR), (app, n2, INFO).
  const std::vector<std::pair<std::string, Severity>> order = {
      {"n1", Severity::kInfo}, {"n1", Severity::kError}, {"n2", Severity::kInfo}};
  for (uint32_t i = 0; i < first->size(); ++i) {
    auto c = DecodeChunk((*first)[i], o);
    ASSERT_TRUE(c.ok()) << c.error().ToString();
    const ChunkIds ids = LineChunkIds(m, i);
    EXPECT_EQ(c->producer_id(), ids.producer_id) << i;
    EXPECT_EQ(c->sequence(), ids.sequence) << i;
    EXPECT_EQ(c->sequence(), (7u << 16) | i) << i;
    EXPECT_EQ(c->host(), order[i].first) << i;
    EXPECT_EQ(c->severity(), SeverityCode(order[i].second)) << i;
    EXPECT_EQ(c->codec(), kDefaultCodec);
  }
  EXPECT_NE(LineChunkIds(m, 0).producer_id, LineChunkIds(Message("", 0), 0).producer_id) << "per partition";
  clock.AdvanceMs(60'000);
  auto replay = d.Decode(m, InputFormat::kJson);
  ASSERT_TRUE(replay.ok());
  EXPECT_EQ(*replay, *first) << "a replay makes the same bytes";
}

// The writer's chunks are the bytes the protobuf path would make for the same
// records and header (PackChunk, ids set, serialized): a replay after an
// upgrade from that path writes identical rows.
TEST(LineInput, ChunksAreTheBytesPackChunkWouldMakeOfTheSameRecords) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  InMessage m = Message("2026-11-28 23:00:00,000 INFO [main] app: one\n"
                        "1999-01-01 10:00:00,000 ERROR [main] app: re-stamped\n"
                        "2026-11-28 23:00:01,000 INFO [main] app: two k=v\n"
                        R"({"not": "json here, a text line"})" "\n",
                        kNow - 5'000, /*offset=*/3);
  auto chunks = d.Decode(m, InputFormat::kText);
  ASSERT_TRUE(chunks.ok()) << chunks.error().message;
  ASSERT_EQ(chunks->size(), 2u);
  for (const std::string& bytes : *chunks) {
    proto::LogChunk c;
    ASSERT_TRUE(c.ParseFromString(bytes));
    auto records = UnpackRecords(c, DecodeOptions{});
    ASSERT_TRUE(records.ok()) << records.error().ToString();
    PackOptions po;
    po.codec = c.codec();
    po.producer_id = c.producer_id();
    po.sequence = c.sequence();
    EXPECT_EQ(PackChunk(c.app(), c.host(), *records, po).SerializeAsString(), bytes) << c.severity();
  }
}

// A message dead-lettered half-way leaves nothing behind: the records read
// before its bad line are not in the next message's chunks.
TEST(LineInput, AMessageGivenUpHalfWayLeavesNoRecordInTheNextMessagesChunks) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  auto bad = d.Decode(Message(R"({"time":"2026-11-28T23:00:00Z","msg":"before the bad line"})"
                              "\n"
                              R"({"msg":"no time"})"
                              "\n",
                              kNow),
                      InputFormat::kJson);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("line 2 has no timestamp"), std::string::npos) << bad.error().message;
  auto good = d.Decode(Message(R"({"time":"2026-11-28T23:00:01Z","msg":"next"})" "\n", kNow, 2), InputFormat::kJson);
  ASSERT_TRUE(good.ok()) << good.error().message;
  auto records = Records(*good);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].message(), "next");
}

// The chunk index is the sequence's low 16 bits: a message naming more
// streams than that would give two chunks the same id (one would overwrite
// the other). It is dead-lettered with the reason instead.
TEST(LineInput, AMessageOfMoreStreamsThanChunkIdsCanNameIsRefusedWithTheReason) {
  ManualClock clock(kNow);
  ShipLineDecoder d("app", "host", clock);
  std::string value;
  for (uint32_t i = 0; i <= kMaxChunksPerLineMessage; ++i) {
    value += R"({"time":"2026-11-28T23:00:00Z","msg":"m","host":"h)" + std::to_string(i) + "\"}\n";
  }
  auto r = d.Decode(Message(value, kNow), InputFormat::kJson);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("more than 65536 streams"), std::string::npos) << r.error().message;
  auto next = d.Decode(Message(R"({"time":"2026-11-28T23:00:01Z","msg":"next"})" "\n", kNow, 2), InputFormat::kJson);
  ASSERT_TRUE(next.ok()) << next.error().message;
  EXPECT_EQ(Records(*next).size(), 1u);
}

}  // namespace
}  // namespace logdex
