// Live tail (server/tail.h): written batches reach the subscribers whose
// filters they pass, in order; a client that does not keep up is ended with
// the reason and never holds up Publish(); a full pending queue becomes a
// gap the clients are told of; GET /api/v1/tail streams it all as
// server-sent events through a real HTTP client.
#include "server/tail.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/row_keys.h"
#include "common/severity.h"
#include "server/http_server.h"
#include "tests/empty_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1'795'910'400'000;

struct Line {
  std::string app, host;
  Severity severity;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
};

// A written batch as the consumer hands it over: one main row per chunk
// (one chunk per (app, host, severity), as ingest stores them).
WriteBatch Written(const std::vector<Line>& lines, uint64_t* seq) {
  std::map<std::tuple<std::string, std::string, Severity>, proto::RecordBatch> streams;
  int64_t ts = kNow - 1000;
  for (const Line& l : lines) {
    proto::LogRecord* r = streams[{l.app, l.host, l.severity}].add_records();
    r->set_ts_ms(ts++);
    r->set_severity(SeverityCode(l.severity));
    r->set_message(l.message);
    for (const auto& [k, v] : l.tags) {
      proto::Tag* t = r->add_tags();
      t->set_key(k);
      t->set_value(v);
    }
  }
  WriteBatch batch;
  for (const auto& [stream, records] : streams) {
    PackOptions po;
    po.producer_id = 5;
    po.sequence = ++*seq;
    proto::MainRow row;
    *row.mutable_chunk() = PackChunk(std::get<0>(stream), std::get<1>(stream), records, po);
    batch.Put(kMainTable, "k" + std::to_string(*seq), row.SerializeAsString());
    batch.Put(LevelIndexTable(std::get<2>(stream)), "i" + std::to_string(*seq), "index rows are not tailed");
  }
  return batch;
}

// Everything `s` receives until `n` records came or `deadline_ms` passed.
TailBatch Collect(TailSubscription& s, size_t n, int deadline_ms = 20'000) {
  TailBatch all;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
  while (all.records.size() < n && !all.ended && std::chrono::steady_clock::now() < end) {
    TailBatch b = s.Next(100);
    for (auto& r : b.records) all.records.push_back(std::move(r));
    all.missed_batches += b.missed_batches;
    all.ended = b.ended;
    all.end_reason = b.end_reason;
  }
  return all;
}

double Metric(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    const auto& m = family.metric.at(0);
    return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return -1;
}

DecodeOptions Decode(const Clock& clock) {
  DecodeOptions d;
  d.clock = &clock;
  return d;
}

TEST(TailHub, RecordsReachTheSubscribersWhoseFiltersTheyPassInOrder) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailHub hub(TailOptions{}, Decode(clock), registry);
  uint64_t seq = 0;
  hub.Publish(Written({{"a", "h", Severity::kInfo, "before anyone listens", {}}}, &seq));  // nothing to do
  EXPECT_EQ(Metric(registry, "logdex_tail_batches_total"), 0);

  Query all;
  Query billing_errors;
  billing_errors.app = "billing";
  billing_errors.severities = {Severity::kError, Severity::kFatal};
  Query tagged;
  tagged.tags = {{"dc", "east"}};
  tagged.contains = "timeout";
  auto s_all = hub.Subscribe(all);
  auto s_billing = hub.Subscribe(billing_errors);
  auto s_tagged = hub.Subscribe(tagged);
  ASSERT_TRUE(s_all.ok() && s_billing.ok() && s_tagged.ok());
  EXPECT_EQ(Metric(registry, "logdex_tail_clients"), 3);

  hub.Publish(Written({{"billing", "h1", Severity::kError, "card declined", {}},
                       {"billing", "h1", Severity::kInfo, "paid", {}},
                       {"web", "h2", Severity::kError, "timeout upstream", {{"dc", "east"}}},
                       {"web", "h2", Severity::kError, "timeout again", {{"dc", "west"}}}},
                      &seq));
  hub.Publish(Written({{"billing", "h9", Severity::kFatal, "ledger gone", {{"dc", "east"}}}}, &seq));

  TailBatch got_all = Collect(**s_all, 5);
  ASSERT_EQ(got_all.records.size(), 5u);
  std::vector<std::string> messages;
  for (const ResultRecord& r : got_all.records) messages.push_back(r.message);
  // Chunk order within a batch (here one chunk per stream, streams in (app, host, severity) order), then
  // record order.
  EXPECT_EQ(messages, (std::vector<std::string>{"paid", "card declined", "timeout upstream", "timeout again",
                                                "ledger gone"}));
  TailBatch got_billing = Collect(**s_billing, 2);
  ASSERT_EQ(got_billing.records.size(), 2u);
  EXPECT_EQ(got_billing.records[0].message, "card declined");
  EXPECT_EQ(got_billing.records[1].message, "ledger gone");
  EXPECT_EQ(got_billing.records[1].app, "billing");
  EXPECT_EQ(got_billing.records[1].host, "h9");
  EXPECT_EQ(got_billing.records[1].severity, Severity::kFatal);
  TailBatch got_tagged = Collect(**s_tagged, 1);
  ASSERT_EQ(got_tagged.records.size(), 1u);
  EXPECT_EQ(got_tagged.records[0].message, "timeout upstream");
  // Nothing else arrives.
  EXPECT_TRUE((*s_tagged)->Next(200).records.empty());
  EXPECT_TRUE(testing::WaitFor([&] { return Metric(registry, "logdex_tail_records_total") == 8; }, 20'000))
      << Metric(registry, "logdex_tail_records_total");

  (*s_all)->Close();
  EXPECT_EQ(hub.subscribers(), 2u);
  hub.Stop();
  TailBatch end = (*s_billing)->Next(1000);
  EXPECT_TRUE(end.ended);
  EXPECT_EQ(end.end_reason, "the server is stopping");
  EXPECT_FALSE(hub.Subscribe(all).ok());
}

TEST(TailHub, AClientThatDoesNotKeepUpIsEndedWithTheReasonAndOthersGoOn) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailOptions o;
  o.max_client_bytes = 64 * 1024;
  TailHub hub(o, Decode(clock), registry);
  auto slow = hub.Subscribe(Query{});
  auto fast = hub.Subscribe(Query{});
  ASSERT_TRUE(slow.ok() && fast.ok());
  uint64_t seq = 0;
  size_t sent = 0, fast_got = 0;
  // The slow one never reads; the fast one reads each batch before the next.
  for (int b = 0; b < 40; ++b) {
    std::vector<Line> lines;
    for (int i = 0; i < 50; ++i) lines.push_back({"a", "h", Severity::kInfo, std::string(100, 'x') + std::to_string(sent++), {}});
    hub.Publish(Written(lines, &seq));
    fast_got += Collect(**fast, 50).records.size();
  }
  EXPECT_EQ(fast_got, sent);
  TailBatch s = (*slow)->Next(1000);
  EXPECT_TRUE(s.ended);
  EXPECT_NE(s.end_reason.find("did not keep up"), std::string::npos) << s.end_reason;
  EXPECT_EQ(Metric(registry, "logdex_tail_clients_dropped_total"), 1);
  EXPECT_EQ(hub.subscribers(), 1u);
}

TEST(TailHub, ABatchOverThePendingBoundIsSkippedAndTheClientsAreToldTheyMissedIt) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailOptions o;
  o.max_pending_bytes = 512;  // smaller than one batch's chunk bytes below
  TailHub hub(o, Decode(clock), registry);
  auto s = hub.Subscribe(Query{});
  ASSERT_TRUE(s.ok());
  uint64_t seq = 0;
  std::vector<Line> big;  // incompressible: over the bound once packed
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    std::string text;
    for (int c = 0; c < 200; ++c) text += static_cast<char>('a' + rng() % 26);
    big.push_back({"a", "h", Severity::kInfo, text, {}});
  }
  hub.Publish(Written(big, &seq));
  TailBatch b = (*s)->Next(5000);
  EXPECT_EQ(b.missed_batches, 1u);
  EXPECT_TRUE(b.records.empty());
  EXPECT_EQ(Metric(registry, "logdex_tail_batches_dropped_total"), 1);
  // A small batch still goes through.
  hub.Publish(Written({{"a", "h", Severity::kInfo, "small", {}}}, &seq));
  TailBatch next = Collect(**s, 1);
  ASSERT_EQ(next.records.size(), 1u);
  EXPECT_EQ(next.records[0].message, "small");
}

TEST(TailHub, SubscribersPastMaxClientsAreRefused) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailOptions o;
  o.max_clients = 2;
  TailHub hub(o, Decode(clock), registry);
  auto a = hub.Subscribe(Query{});
  auto b = hub.Subscribe(Query{});
  auto c = hub.Subscribe(Query{});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::kResourceExhausted);
  (*a)->Close();
  EXPECT_TRUE(hub.Subscribe(Query{}).ok()) << "a closed client frees its place";
}

// GET /api/v1/tail through a real client: events as they are published,
// filters from the query string, 400 for a time range, 503 past max_clients,
// and an end event when the server stops.
TEST(TailHttp, RecordsStreamAsServerSentEventsAndTheServerSaysWhyItEnds) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailOptions to;
  to.max_clients = 1;
  TailHub hub(to, Decode(clock), registry);
  TempDir dir;
  testing::EmptyStore store;
  QueryEngine engine(store, QueryOptions{});
  HttpServerOptions ho;
  ho.tail = &hub;
  HttpServer server(ho, engine, registry, [] { return ReadyState{true, ""}; }, clock);
  ASSERT_TRUE(server.Start().ok());

  httplib::Client bad("127.0.0.1", server.port());
  auto r = bad.Get("/api/v1/tail?app=x&since=1h");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("unknown parameter 'since'"), std::string::npos) << r->body;

  std::atomic<int> status{0};
  std::string stream;
  std::mutex mu;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(60, 0);
    c.Get("/api/v1/tail", httplib::Params{{"app", "billing"}, {"severity", "ERROR"}}, httplib::Headers{},
          [&](const httplib::Response& res) {
            status = res.status;
            return true;
          },
          [&](const char* data, size_t n) {
            std::lock_guard<std::mutex> l(mu);
            stream.append(data, n);
            return true;
          });
  });
  ASSERT_TRUE(testing::WaitFor([&] { return hub.subscribers() == 1; }, 20'000));
  httplib::Client second("127.0.0.1", server.port());
  auto busy = second.Get("/api/v1/tail");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503) << "max_clients is 1";

  uint64_t seq = 0;
  hub.Publish(Written({{"billing", "h1", Severity::kError, "card declined", {{"k", "v"}}},
                       {"billing", "h1", Severity::kInfo, "paid", {}},
                       {"web", "h1", Severity::kError, "other app", {}}},
                      &seq));
  ASSERT_TRUE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return stream.find("card declined") != std::string::npos;
  }, 20'000));
  server.Stop();
  client.join();
  EXPECT_EQ(status.load(), 200);
  // data: {record}\n\n ... event: end\ndata: {reason}\n\n
  std::vector<json> records;
  std::string end_reason;
  size_t at = 0;
  for (size_t e; (e = stream.find("\n\n", at)) != std::string::npos; at = e + 2) {
    const std::string block = stream.substr(at, e - at);
    if (block.rfind("data: ", 0) == 0) records.push_back(json::parse(block.substr(6)));
    if (block.rfind("event: end\ndata: ", 0) == 0) end_reason = json::parse(block.substr(17))["reason"];
  }
  ASSERT_EQ(records.size(), 1u) << stream;
  EXPECT_EQ(records[0]["message"], "card declined");
  EXPECT_EQ(records[0]["severity"], "ERROR");
  EXPECT_EQ(records[0]["app"], "billing");
  EXPECT_EQ(records[0]["tags"], json({{"k", "v"}}));
  EXPECT_EQ(end_reason, "the server is stopping");
}

// GET /api/v1/alerts: 404 without alerting; its parameters checked; the
// callback's JSON as it is, for records since now - `since`.
TEST(AlertsHttp, AnswersTheCallbacksJsonAndChecksItsParameters) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  testing::EmptyStore store;
  QueryEngine engine(store, QueryOptions{});
  {
    HttpServer off(HttpServerOptions{}, engine, registry, [] { return ReadyState{true, ""}; }, clock);
    ASSERT_TRUE(off.Start().ok());
    httplib::Client c("127.0.0.1", off.port());
    auto r = c.Get("/api/v1/alerts");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    EXPECT_NE(r->body.find("alerting is not enabled"), std::string::npos) << r->body;
  }
  prometheus::Registry registry2;
  int64_t asked_since = 0;
  size_t asked_limit = 0;
  HttpServerOptions o;
  o.alerts = [&](int64_t since_ms, size_t limit) -> Result<std::string> {
    asked_since = since_ms;
    asked_limit = limit;
    return std::string(R"({"groups":[],"pending":[],"truncated":false})");
  };
  HttpServer on(o, engine, registry2, [] { return ReadyState{true, ""}; }, clock);
  ASSERT_TRUE(on.Start().ok());
  httplib::Client c("127.0.0.1", on.port());
  auto r = c.Get("/api/v1/alerts");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["truncated"], false);
  EXPECT_EQ(asked_since, kNow - 24 * 3'600'000);
  EXPECT_EQ(asked_limit, 100u);
  r = c.Get("/api/v1/alerts?since=2h&limit=7");
  ASSERT_TRUE(r);
  EXPECT_EQ(asked_since, kNow - 2 * 3'600'000);
  EXPECT_EQ(asked_limit, 7u);
  for (const char* bad : {"/api/v1/alerts?since=soon", "/api/v1/alerts?limit=0", "/api/v1/alerts?limit=5000",
                          "/api/v1/alerts?app=x"}) {
    r = c.Get(bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad << ": " << r->body;
  }
}

}  // namespace
}  // namespace logdex
