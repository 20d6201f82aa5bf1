// Live tail (http/tail.h): written batches reach the subscribers whose
// filters they pass, in order; a client that does not keep up is ended with
// the reason and never holds up Publish(); a full pending queue becomes a
// gap the clients are told of; GET /api/v1/tail streams it all as
// server-sent events through a real HTTP client.
#include "http/tail.h"

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
#include "http/http_server.h"
#include "tests/empty_store.h"
#include "tests/server/written_batch.h"
#include "http/websocket_client.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1'795'910'400'000;

using testing::Line;

WriteBatch Written(const std::vector<Line>& lines, uint64_t* seq) { return testing::Written(lines, seq, kNow - 1000); }

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

namespace logdex {
namespace {

uint16_t CloseCodeOf(const websocket::Frame& f) {
  return f.payload.size() < 2 ? 0
                              : static_cast<uint16_t>((static_cast<uint8_t>(f.payload[0]) << 8) |
                                                      static_cast<uint8_t>(f.payload[1]));
}

// GET /loki/api/v1/tail, Loki's live tail, through a WebSocket client:
// what is refused is refused in plain HTTP before the upgrade (and
// Grafana's probe of /loki/api/v2alpha/tail must not see a 400, or it
// would dial that); the handshake's accept key; records that pass the
// whole LogQL selector as Loki's tail messages; a skipped batch as a dropped
// entry; a ping answered; the client's close echoed and its place freed;
// the server's stop a close 1001 with the reason.
TEST(LokiTailHttp, ALogQlTailStreamsLokisMessagesOverAWebSocket) {
  ManualClock clock(kNow);
  prometheus::Registry registry;
  TailOptions to;
  to.max_pending_bytes = 4096;  // the big batch below is skipped: a gap
  TailHub hub(to, Decode(clock), registry);
  testing::EmptyStore store;
  QueryEngine engine(store, QueryOptions{});
  HttpServerOptions ho;
  ho.tail = &hub;
  HttpServer server(ho, engine, registry, [] { return ReadyState{true, ""}; }, clock);
  ASSERT_TRUE(server.Start().ok());
  const std::string target = "/loki/api/v1/tail?query=" +
                              httplib::detail::encode_query_param(R"({app="billing", host=~"h[12]"} |= "card" != "test")");

  struct Refused {
    std::string what, target, headers, status, body;
  };
  const std::string ws = "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: " +
                         std::string(websocket::LoopbackClient::kKey) + "\r\n";
  for (const Refused& r : std::vector<Refused>{
           {"no upgrade", target, "", " 400 ", "is a WebSocket"},
           {"version 8", target, ws + "Sec-WebSocket-Version: 8\r\n", " 426 ", "must be 13"},
           {"a bad key", target,
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\n",
            " 400 ", "base64 of 16 bytes"},
           {"a metric query", "/loki/api/v1/tail?query=" + httplib::detail::encode_query_param(R"(rate({app="a"}[1m]))"),
            ws + "Sec-WebSocket-Version: 13\r\n", " 400 ", "not a metric query"},
           {"delay_for 6", target + "&delay_for=6", ws + "Sec-WebSocket-Version: 13\r\n", " 400 ", "delay_for"},
           {"Grafana's v2alpha probe", "/loki/api/v2alpha/tail?query=x", "", " 404 ", "no such endpoint"},
           {"another site's page", target, ws + "Sec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n", " 403 ",
            "is not this server"},
       }) {
    websocket::LoopbackClient c(server.port());
    ASSERT_TRUE(c.connected());
    const std::string head = c.Request(r.target, r.headers);
    EXPECT_NE(head.find(r.status), std::string::npos) << r.what << ": " << head;
    const size_t cl = head.find("Content-Length: ");
    ASSERT_NE(cl, std::string::npos) << r.what << ": " << head;
    const std::string body = c.Body(std::stoul(head.substr(cl + 16)));
    EXPECT_NE(body.find(r.body), std::string::npos) << r.what << ": " << body;
  }
  EXPECT_EQ(hub.subscribers(), 0u);

  {
    // A page of this server (its Origin is the Host) may.
    websocket::LoopbackClient same(server.port());
    const std::string host = "127.0.0.1:" + std::to_string(server.port());
    const std::string head = same.Request(target, ws + "Sec-WebSocket-Version: 13\r\nOrigin: http://" + host + "\r\n");
    EXPECT_EQ(head.rfind("HTTP/1.1 101 ", 0), 0u) << head;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return hub.subscribers() == 0; }, 20'000));
  websocket::LoopbackClient c(server.port());
  ASSERT_TRUE(c.connected());
  const std::string head = c.Upgrade(target + "&delay_for=2&limit=10");
  ASSERT_EQ(head.rfind("HTTP/1.1 101 ", 0), 0u) << head;
  EXPECT_NE(head.find("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nUpgrade: websocket\r\n"), std::string::npos) << head;
  ASSERT_TRUE(testing::WaitFor([&] { return hub.subscribers() == 1; }, 20'000));

  uint64_t seq = 0;
  hub.Publish(Written({{"billing", "h1", Severity::kError, "card declined", {{"k", "v"}}},
                       {"billing", "h1", Severity::kInfo, "card test: not for the filter", {}},
                       {"billing", "h3", Severity::kError, "card on another host", {}},
                       {"web", "h1", Severity::kError, "card in another app", {}},
                       {"billing", "h2", Severity::kWarn, "card expiring", {}}},
                      &seq));
  // Loki's tail messages: streams of {labels, values [["<ns>", "<line>"]]};
  // the batch's records may come in one message or several (one per wake-up).
  std::map<std::string, json> lines;
  std::optional<websocket::Frame> msg;
  json j;
  while (lines.size() < 2 && (msg = c.Next())) {
    ASSERT_EQ(msg->opcode, websocket::kText);
    j = json::parse(msg->payload);
    ASSERT_TRUE(j["streams"].is_array()) << j.dump();
    EXPECT_FALSE(j.contains("dropped_entries"));
    for (const json& stream : j["streams"]) {
      for (const json& v : stream["values"]) {
        ASSERT_TRUE(v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) << v.dump();
        lines[v[1]] = stream["stream"];
      }
    }
  }
  ASSERT_EQ(lines.size(), 2u) << j.dump();
  EXPECT_EQ(lines["card declined"], json({{"app", "billing"}, {"host", "h1"}, {"level", "error"}, {"k", "v"}}));
  EXPECT_EQ(lines["card expiring"], json({{"app", "billing"}, {"host", "h2"}, {"level", "warn"}}));

  // A batch over the pending bound is skipped: one dropped entry says how many.
  std::vector<Line> big;
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {  // incompressible: well over 4096 bytes once packed
    std::string text = "card ";
    for (int k = 0; k < 200; ++k) text += static_cast<char>('a' + rng() % 26);
    big.push_back({"billing", "h1", Severity::kInfo, text, {}});
  }
  hub.Publish(Written(big, &seq));
  msg = c.Next();
  ASSERT_TRUE(msg);
  j = json::parse(msg->payload);
  ASSERT_EQ(j["dropped_entries"].size(), 1u) << j.dump();
  EXPECT_EQ(j["dropped_entries"][0]["labels"], json({{"__logdex_missed_batches__", "1"}}));
  EXPECT_EQ(j["dropped_entries"][0]["timestamp"], std::to_string(kNow * 1'000'000));
  EXPECT_EQ(j["streams"], json::array());

  ASSERT_TRUE(c.SendFrame(websocket::kPing, "are you there"));
  msg = c.Next();
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->opcode, websocket::kPong);
  EXPECT_EQ(msg->payload, "are you there");

  ASSERT_TRUE(c.SendFrame(websocket::kClose, std::string("\x03\xe8", 2)));
  msg = c.Next();
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->opcode, websocket::kClose);
  EXPECT_EQ(CloseCodeOf(*msg), websocket::kNormal);
  EXPECT_TRUE(c.Eof());
  EXPECT_TRUE(testing::WaitFor([&] { return hub.subscribers() == 0; }, 20'000)) << "the closed client's place is freed";

  // The server stops: a close 1001 that says why.
  websocket::LoopbackClient last(server.port());
  ASSERT_EQ(last.Upgrade(target).rfind("HTTP/1.1 101 ", 0), 0u);
  ASSERT_TRUE(testing::WaitFor([&] { return hub.subscribers() == 1; }, 20'000));
  std::thread stop([&] { server.Stop(); });
  msg = last.Next();
  stop.join();
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->opcode, websocket::kClose);
  EXPECT_EQ(CloseCodeOf(*msg), websocket::kGoingAway);
  EXPECT_EQ(msg->payload.substr(2), "the server is stopping");
}

}  // namespace
}  // namespace logdex
