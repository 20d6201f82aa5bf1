// The Loki read API (http/loki_api.h) through a real HttpServer and HTTP
// client, on every backend, with the requests Grafana's Loki data source
// sends. Their shapes are taken from Grafana's source (grafana/grafana):
//   - the data source check: pkg/tsdb/loki/healthcheck.go, an instant query
//     vector(1)+vector(1) at 4 s, which must answer one sample of value "2";
//   - log and metric queries: pkg/tsdb/loki/api.go makeDataRequest:
//     start/end in integer ns, step as "<N>ms", limit, direction;
//   - the logs volume: public/app/plugins/datasource/loki/datasource.ts
//     getSupplementaryQuery, `sum by (level, detected_level)
//     (count_over_time(<expr> | drop __error__[$__auto]))`, $__auto filled
//     with the step in its largest unit (pkg/tsdb/loki/parse_query.go);
//   - the label browser: LanguageProvider.ts, labels, label/<name>/values
//     and series?match[] with ns start/end; index/stats per selector;
//   - answers: pkg/promlib/converter/prom.go reads stream values as
//     ["<ns string>", "<line>"] and matrix/vector samples as [<seconds
//     number>, "<value string>"]; errors are shown from the body.
// Every answer is compared with a brute-force filter over the records ingested.
#include "common/ascii.h"
#include "http/loki_api.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "indexer/indexer.h"
#include "indexer/tables.h"
#include "http/http_server.h"
#include "tests/backends.h"
#include "tests/indexer/workload.h"
#include "http/tail.h"
#include "tests/server/http_answer.h"
#include "http/websocket_client.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using nlohmann::json;
using testing::MakeWorkload;
using testing::Rec;
using testing::Workload;
using testing::WorkloadSpec;

constexpr int64_t kStart = 1'790'000'000'000;  // the workload's first ms (WorkloadSpec's default)
constexpr int64_t kNs = 1'000'000;

std::string Ns(int64_t ms) { return std::to_string(ms * kNs); }


std::string Level(const Rec& r) { return AsciiLower(std::string(SeverityName(r.sev))); }

using Reply = testing::Answer;

class LokiApiTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { Fill(WorkloadSpec{.apps = 3, .hosts = 5, .tag_values = 5, .records = 4000}); }

  void Fill(const WorkloadSpec& spec) {
    server_.reset();
    engine_.reset();
    store_.reset();
    store_ = GetParam().open(dir_.path() + "/s" + std::to_string(++stores_), &clock_);
    ASSERT_NE(store_, nullptr);
    ASSERT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    w_ = MakeWorkload(spec);
    IndexerOptions io;
    io.decode.clock = &clock_;
    Indexer indexer(*store_, io);
    proto::ChunkSource src;
    src.set_topic("t");
    for (size_t i = 0; i < w_.chunks.size(); i += 500) {
      std::vector<std::string> part(w_.chunks.begin() + i, w_.chunks.begin() + std::min(w_.chunks.size(), i + 500));
      ASSERT_TRUE(indexer.IngestSerialized(part, src).ok());
    }
    QueryOptions qo;
    qo.decode.clock = &clock_;
    engine_ = std::make_unique<QueryEngine>(*store_, qo);
    Serve({});
  }

  void Serve(HttpServerOptions o) {
    server_.reset();
    server_ = std::make_unique<HttpServer>(std::move(o), *engine_, registry_, [] { return ReadyState{true, ""}; },
                                           clock_);
    ASSERT_TRUE(server_->Start().ok());
  }

  Reply Get(const std::string& endpoint, const httplib::Params& params, const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    return testing::Get(c, "/loki/api/v1/" + endpoint, params, headers);
  }

  // A log query as Grafana's Explore sends it.
  Reply LogQuery(const std::string& query, int64_t start_ms, int64_t end_ms, int limit, const std::string& direction) {
    return Get("query_range", {{"direction", direction},
                               {"end", Ns(end_ms)},
                               {"limit", std::to_string(limit)},
                               {"query", query},
                               {"start", Ns(start_ms)},
                               {"step", "60000ms"}});
  }

  // Records of `r` (a streams answer) as "ts message", newest first
  // (oldest first when `forward`); each stream's values must come in that order.
  static std::vector<std::string> Entries(const Reply& r, bool forward = false) {
    std::vector<std::pair<int64_t, std::string>> out;
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return {};
    EXPECT_EQ(r.j["status"], "success");
    EXPECT_EQ(r.j["data"]["resultType"], "streams");
    for (const json& stream : r.j["data"]["result"]) {
      EXPECT_TRUE(stream["stream"].is_object());
      EXPECT_TRUE(stream["stream"].contains("app") && stream["stream"].contains("host") &&
                  stream["stream"].contains("level"));
      int64_t last = forward ? INT64_MIN : INT64_MAX;
      for (const json& v : stream["values"]) {
        EXPECT_TRUE(v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) << v.dump();
        const std::string ns = v[0];
        EXPECT_EQ(ns.substr(ns.size() - 6), "000000") << "ms times in ns";
        const int64_t ts = std::stoll(ns.substr(0, ns.size() - 6));
        EXPECT_TRUE(forward ? ts > last : ts < last) << "values in the direction's order";
        last = ts;
        out.emplace_back(ts, v[1]);
      }
    }
    // Streams are groups; across them, the direction's order by time (times are unique here).
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return forward ? a < b : a > b; });
    std::vector<std::string> s;
    for (auto& [ts, m] : out) s.push_back(std::to_string(ts) + " " + m);
    return s;
  }

  // The brute-force answer: records passing `keep` in [from, to], newest
  // first (backward) or oldest first, at most `limit`.
  std::vector<std::string> Expected(const std::function<bool(const Rec&)>& keep, int64_t from, int64_t to,
                                    size_t limit, bool forward) const {
    std::vector<const Rec*> match;
    for (const Rec& r : w_.records) {
      if (r.ts >= from && r.ts <= to && keep(r)) match.push_back(&r);
    }
    std::sort(match.begin(), match.end(), [&](const Rec* a, const Rec* b) { return forward ? a->ts < b->ts : a->ts > b->ts; });
    if (match.size() > limit) match.resize(limit);
    std::vector<std::string> s;
    for (const Rec* r : match) s.push_back(std::to_string(r->ts) + " " + r->message);
    return s;
  }

  static std::string Tag(const Rec& r, const std::string& key) {
    for (const auto& [k, v] : r.tags) {
      if (k == key) return v;
    }
    return "";
  }

  TempDir dir_;
  ManualClock clock_{kStart + 7 * 3'600'000};
  int stores_ = 0;
  Workload w_;
  std::unique_ptr<TableStore> store_;
  std::unique_ptr<QueryEngine> engine_;
  prometheus::Registry registry_;
  std::unique_ptr<HttpServer> server_;  // last: stops first
};

TEST_P(LokiApiTest, GrafanasDataSourceCheckGetsTheOneSampleOfTwoItChecks) {
  // pkg/tsdb/loki/healthcheck.go: vector(1)+vector(1), From 1 s, To 4 s.
  Reply r = Get("query", {{"direction", "backward"}, {"query", "vector(1)+vector(1)"}, {"time", "4000000000"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["status"], "success");
  EXPECT_EQ(r.j["data"]["resultType"], "vector");
  ASSERT_EQ(r.j["data"]["result"].size(), 1u);
  const json& sample = r.j["data"]["result"][0];
  EXPECT_EQ(sample["metric"], json::object());
  ASSERT_TRUE(sample["value"].is_array() && sample["value"].size() == 2);
  EXPECT_TRUE(sample["value"][0].is_number());
  EXPECT_EQ(sample["value"][1], "2");
}

TEST_P(LokiApiTest, ExploresLogQueryAnswersTheNewestRecordsInStreamsOfTheirLabels) {
  const int64_t from = kStart + 3'600'000, to = kStart + 5 * 3'600'000;
  Reply r = LogQuery(R"({app="app1"})", from, to, 1000, "backward");
  std::vector<std::string> got = Entries(r);
  EXPECT_EQ(got, Expected([](const Rec& x) { return x.app == "app1"; }, from, to, 1000, false));
  EXPECT_FALSE(got.empty());
  // Each entry sits in the stream of its own labels: app, host, level, tags.
  std::map<std::string, const Rec*> by_entry;
  for (const Rec& x : w_.records) by_entry[std::to_string(x.ts) + " " + x.message] = &x;
  for (const json& stream : r.j["data"]["result"]) {
    for (const json& v : stream["values"]) {
      const std::string ns = v[0];
      const Rec* x = by_entry.at(ns.substr(0, ns.size() - 6) + " " + v[1].get<std::string>());
      json want = {{"app", x->app}, {"host", x->host}, {"level", Level(*x)}};
      for (const auto& [k, val] : x->tags) want[k] = val;
      EXPECT_EQ(stream["stream"], want) << v.dump();
    }
  }
  EXPECT_TRUE(r.j["data"]["stats"]["summary"]["totalEntriesReturned"].is_number());
}

TEST_P(LokiApiTest, SelectorsAndLineFiltersReturnExactlyWhatABruteForceFilterReturns) {
  struct Case {
    std::string query;
    std::function<bool(const Rec&)> keep;
  };
  const std::regex five(R"(request [0-9]*5 )");
  const std::vector<Case> cases = {
      {R"({app="app0", host!="host1"})", [](const Rec& x) { return x.app == "app0" && x.host != "host1"; }},
      {R"({app=~"app[01]", level=~"error|fatal"})",
       [](const Rec& x) { return (x.app == "app0" || x.app == "app1") && (x.sev == Severity::kError || x.sev == Severity::kFatal); }},
      {R"({host="host2"} |= "alpha" != "bravo")",
       [](const Rec& x) {
         return x.host == "host2" && x.message.find("alpha") != std::string::npos &&
                x.message.find("bravo") == std::string::npos;
       }},
      {R"({k="v3"} |~ "request [0-9]*5 ")", [&](const Rec& x) { return Tag(x, "k") == "v3" && std::regex_search(x.message, five); }},
      {R"({app="app2", dc!~"ea.*"} !~ "(?i)ECHO")",
       [](const Rec& x) {
         return x.app == "app2" && Tag(x, "dc").rfind("ea", 0) != 0 && x.message.find("echo") == std::string::npos;
       }},
      {R"({level="warn", app!="app1", dc="west"})",
       [](const Rec& x) { return x.sev == Severity::kWarn && x.app != "app1" && Tag(x, "dc") == "west"; }},
      {"{level!=\"debug\",host=~\"host[34]\"} | drop __error__ |= `kilo`",
       [](const Rec& x) {
         return x.sev != Severity::kDebug && (x.host == "host3" || x.host == "host4") &&
                x.message.find("kilo") != std::string::npos;
       }},
  };
  const int64_t from = w_.start_ms, to = w_.end_ms;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    std::vector<std::string> all = Entries(LogQuery(c.query, from, to, 5000, "backward"));
    std::vector<std::string> want = Expected(c.keep, from, to, 5000, false);
    EXPECT_EQ(all, want);
    EXPECT_GT(want.size(), 0u) << "a case that matches nothing proves little";
    // A page of 20, newest first, and the oldest 20 with direction=forward.
    EXPECT_EQ(Entries(LogQuery(c.query, from, to, 20, "backward")), Expected(c.keep, from, to, 20, false));
    EXPECT_EQ(Entries(LogQuery(c.query, from, to, 20, "forward"), true), Expected(c.keep, from, to, 20, true));
  }
}

// The logs volume histogram: one series per level, each point the records of
// its window [t - range, t), as /api/v1/volume's buckets count them (from the
// index rows: a chunk in the bucket of its last record).
TEST_P(LokiApiTest, TheLogsVolumeQueryCountsEachWindowAsTheVolumeApiDoes) {
  const int64_t step = 600'000;
  const int64_t start = (w_.start_ms / step) * step, end = start + 7 * 3'600'000;
  Reply r = Get("query_range",
                {{"direction", "backward"},
                 {"end", Ns(end)},
                 {"query", R"(sum by (level, detected_level) (count_over_time({app="app1"} | drop __error__[10m])))"},
                 {"start", Ns(start)},
                 {"step", "600000ms"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["data"]["resultType"], "matrix");
  VolumeQuery vq;
  vq.filter.app = "app1";
  vq.filter.from_ms = start - step;
  vq.filter.to_ms = end;
  vq.step_ms = step;
  auto volume = engine_->Volume(vq);
  ASSERT_TRUE(volume.ok()) << volume.error().ToString();
  std::map<std::pair<std::string, int64_t>, uint64_t> want;  // (level, t) -> count
  std::map<std::string, uint64_t> want_total;
  for (const VolumeBucket& b : volume->buckets) {
    for (Severity s : kAllSeverities) {
      const uint64_t n = b.counts.by_severity[VolumeSeverityIndex(s)];
      if (n == 0) continue;
      want[{AsciiLower(std::string(SeverityName(s))), b.start_ms + step}] = n;
      want_total[AsciiLower(std::string(SeverityName(s)))] += n;
    }
  }
  std::map<std::pair<std::string, int64_t>, uint64_t> got;
  std::map<std::string, uint64_t> got_total;
  for (const json& series : r.j["data"]["result"]) {
    ASSERT_EQ(series["metric"].size(), 1u) << series["metric"].dump();
    const std::string level = series["metric"]["level"];
    for (const json& v : series["values"]) {
      ASSERT_TRUE(v[0].is_number() && v[1].is_string()) << v.dump();
      const int64_t t = static_cast<int64_t>(std::llround(v[0].get<double>() * 1000));
      got[{level, t}] = std::stoull(v[1].get<std::string>());
      got_total[level] += std::stoull(v[1].get<std::string>());
    }
  }
  EXPECT_EQ(got, want);
  // Over the whole workload, every record of app1 once, under its level.
  std::map<std::string, uint64_t> records;
  for (const Rec& x : w_.records) {
    if (x.app == "app1") ++records[Level(x)];
  }
  EXPECT_EQ(got_total, records);
}

// Grafana's log volume repeats the log query's line filters: any of them
// (|=, !=, |~, !~) is counted by reading the records, exactly.
TEST_P(LokiApiTest, TheLogsVolumeOfAQueryWithLineFiltersCountsExactlyTheLinesThatPass) {
  const int64_t step = 3'600'000;
  const int64_t start = (w_.start_ms / step) * step, end = start + 8 * step;
  Reply r = Get("query_range",
                {{"end", Ns(end)},
                 {"query", R"(sum by (level) (count_over_time({app="app1"} |~ "(alpha|bravo) request" != "done!" !~ "request [0-9]*7 " | drop __error__[1h])))"},
                 {"start", Ns(start)},
                 {"step", "3600000ms"}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::map<std::string, uint64_t> got;
  for (const json& series : r.j["data"]["result"]) {
    for (const json& v : series["values"]) got[series["metric"]["level"]] += std::stoull(v[1].get<std::string>());
  }
  // Every point's window is the hour before it: the points from start + 1 h to end cover [start, end).
  std::map<std::string, uint64_t> want;
  const std::regex pass("(alpha|bravo) request"), drop("request [0-9]*7 ");
  for (const Rec& x : w_.records) {
    if (x.app != "app1" || x.ts < start || x.ts >= end) continue;
    if (!std::regex_search(x.message, pass) || std::regex_search(x.message, drop)) continue;
    ++want[Level(x)];
  }
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

TEST_P(LokiApiTest, InstantRateSumByAppCountsEveryRecordOfAWindowOverTheWholeWorkload) {
  const int64_t t = w_.end_ms + 60'000;
  Reply r = Get("query", {{"query", R"(sum by (app) (rate({level="error"}[7h])))"}, {"time", Ns(t)}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["data"]["resultType"], "vector");
  std::map<std::string, double> got;
  for (const json& s : r.j["data"]["result"]) got[s["metric"]["app"]] = std::stod(s["value"][1].get<std::string>());
  std::map<std::string, double> want;
  for (const Rec& x : w_.records) {
    if (x.sev == Severity::kError) want[x.app] += 1.0 / (7 * 3600);
  }
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [app, rate] : want) EXPECT_NEAR(got[app], rate, 1e-9) << app;
}

TEST_P(LokiApiTest, LabelsValuesSeriesAndStatsComeFromTheCatalog) {
  const httplib::Params range = {{"start", Ns(w_.start_ms)}, {"end", Ns(w_.end_ms)}};
  Reply labels = Get("labels", range);
  ASSERT_EQ(labels.status, 200) << labels.body;
  EXPECT_EQ(labels.j["data"], json({"app", "dc", "host", "k", "level"}));

  std::set<std::string> apps, hosts_of_app0, levels;
  std::set<std::tuple<std::string, std::string, std::string>> streams_app1_error;
  std::set<std::pair<std::string, std::string>> streams_app1;
  uint64_t entries_app1 = 0;
  for (const Rec& x : w_.records) {
    apps.insert(x.app);
    levels.insert(Level(x));
    if (x.app == "app0") hosts_of_app0.insert(x.host);
    if (x.app == "app1") {
      ++entries_app1;
      streams_app1.emplace(x.host, Level(x));
      if (x.sev == Severity::kError) streams_app1_error.emplace(x.app, x.host, Level(x));
    }
  }
  EXPECT_EQ(Get("label/app/values", range).j["data"], json(apps));
  EXPECT_EQ(Get("label/level/values", range).j["data"], json(levels));
  httplib::Params narrowed = range;
  narrowed.emplace("query", R"({app="app0"})");
  EXPECT_EQ(Get("label/host/values", narrowed).j["data"], json(hosts_of_app0));
  Reply tag_values = Get("label/k/values", range);
  EXPECT_EQ(tag_values.status, 200);
  EXPECT_EQ(tag_values.j["data"], json::array());
  EXPECT_EQ(tag_values.j["warnings"].size(), 1u) << "says why it is empty";

  httplib::Params series = range;
  series.emplace("match[]", R"({app="app1", level="error"})");
  Reply s = Get("series", series);
  ASSERT_EQ(s.status, 200) << s.body;
  std::set<std::tuple<std::string, std::string, std::string>> got;
  for (const json& l : s.j["data"]) got.emplace(l["app"], l["host"], l["level"]);
  EXPECT_EQ(got, streams_app1_error);

  httplib::Params stats = range;
  stats.emplace("query", R"({app="app1"})");
  Reply st = Get("index/stats", stats);
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(st.j["entries"], entries_app1) << "top-level fields, no data wrapper";
  EXPECT_EQ(st.j["streams"], streams_app1.size());
  EXPECT_GT(st.j["chunks"].get<uint64_t>(), 0u);
  EXPECT_EQ(st.j["bytes"], 0);

  Reply build = Get("status/buildinfo", {});
  EXPECT_EQ(build.status, 200);
  EXPECT_TRUE(build.j["version"].is_string());
}

TEST_P(LokiApiTest, WhatIsNotSupportedOrWrongIsA400ThatSaysWhat) {
  const int64_t from = w_.start_ms, to = w_.end_ms;
  struct Case {
    std::string query;
    std::string says;
    httplib::Params extra;
  };
  const std::vector<Case> cases = {
      {R"({app="app0"} | json)", "'| json' is not supported", {}},
      {R"({app=~"("})", "invalid regular expression", {}},
      {"{}", "at least one matcher", {}},
      {R"(topk(3, count_over_time({app="app0"}[1m])))", "'topk' is not supported", {}},
      {R"(sum without (app) (count_over_time({app="app0"}[1m])))", "sum without", {}},
      {R"(sum by (k) (count_over_time({app="app0"}[1m])))", "groups metric queries by app, host and level", {}},
      {R"(count_over_time({app="app0"} |~ "(x"[1m]))", "line filter regex: '(x' is not an RE2 regular expression", {}},
      {R"(count_over_time({app="app0", k!="v1"}[1m]))", "tag matchers with = only", {}},
      {R"(count_over_time({app="app0"}[5x]))", "not a duration", {}},
      {R"({app="app0"})", "direction", {{"direction", "sideways"}}},
      {R"({app="app0"})", "limit", {{"limit", "many"}}},
      {R"({app="app0"})", "start is after end", {{"start", Ns(to)}, {"end", Ns(from)}}},
      {R"({app="app0"})", "start", {{"start", "yesterday"}}},
      {R"(rate({app="app0"}[1m]))", "raise step", {{"step", "1ms"}}},
      // Hostile sizes: refused before any arithmetic could overflow or any loop run away.
      {std::string(1000, '(') + "1" + std::string(1000, ')'), "nested deeper than 32", {}},
      {"vector(" + std::string(100, '(') + "1" + std::string(100, ')') + ")", "nested deeper than 32", {}},
      {R"(rate({app="app0"}[1m]))", "step", {{"step", "9223372036854775807ms"}}},
      {R"(rate({app="app0"}[1m]))", "over a year", {{"step", "400d"}}},
      {R"(count_over_time({app="app0"}[400d]))", "over a year", {}},
      {R"(count_over_time({app="app0"}[4611686018427387904ms]))", "[", {}},
      {R"({app="app0"})", "too far from now", {{"start", "-900000000000.5"}}},
      {R"(rate({app="app0"}[1m]))", "buckets of their gcd", {{"start", Ns(to - 9 * 86'400'000)}, {"step", "300000ms"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    httplib::Params p = {{"query", c.query}, {"start", Ns(from)}, {"end", Ns(to)}};
    for (const auto& [k, v] : c.extra) p.erase(k), p.emplace(k, v);
    Reply r = Get("query_range", p);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << r.body;
    EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u) << r.content_type;
  }
  Reply missing = Get("query_range", {});
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("query: missing"), std::string::npos) << missing.body;
  Reply instant_log = Get("query", {{"query", R"({app="app0"})"}});
  EXPECT_EQ(instant_log.status, 400);
  Reply unknown = Get("patterns", {});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("does not serve /loki/api/v1/patterns"), std::string::npos) << unknown.body;
}

TEST_P(LokiApiTest, ASelectorOverMoreAppsThanTheFanOutLimitIsRefusedAndATokenIsRequired) {
  Fill(WorkloadSpec{.apps = 70, .hosts = 2, .tag_values = 2, .records = 3000});
  Reply r = LogQuery(R"({level=~".+"})", w_.start_ms, w_.end_ms, 10, "backward");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("matches 70 apps"), std::string::npos) << r.body;
  // Named by =, the same records are found.
  EXPECT_EQ(Entries(LogQuery(R"({app="app7"})", w_.start_ms, w_.end_ms, 10, "backward")),
            Expected([](const Rec& x) { return x.app == "app7"; }, w_.start_ms, w_.end_ms, 10, false));

  HttpServerOptions o;
  o.bearer_token = "s3cret";
  Serve(o);
  EXPECT_EQ(Get("labels", {}).status, 401);
  EXPECT_EQ(Get("labels", {}, {{"Authorization", "Bearer s3cret"}}).status, 200);
}

// /loki/api/v1/tail: its first message holds the `limit` newest records
// since `start` that pass the query, oldest first (Loki's order), in
// Loki's tail message; a token-protected server refuses the upgrade without
// the token. (The live part: tests/server/tail_test.cc, LokiTailHttp; a
// real browser's WebSocket: tests/ui/ui_test.mjs.)
TEST_P(LokiApiTest, TailStartsWithTheNewestRecordsSinceStartOldestFirst) {
  prometheus::Registry tail_registry;
  DecodeOptions decode;
  decode.clock = &clock_;
  TailHub hub(TailOptions{}, decode, tail_registry);
  struct StopFirst {  // the server goes before the hub, however the test ends
    std::unique_ptr<HttpServer>& server;
    ~StopFirst() { server.reset(); }
  } stop_first{server_};
  HttpServerOptions o;
  o.tail = &hub;
  Serve(o);
  const int64_t from = kStart + 3 * 3'600'000;
  const std::string query = R"({app="app1", level!="debug"} != "zzz")";
  websocket::LoopbackClient c(server_->port());
  const std::string head = c.Upgrade("/loki/api/v1/tail?query=" + httplib::detail::encode_query_param(query) +
                                     "&limit=25&start=" + Ns(from));
  ASSERT_EQ(head.rfind("HTTP/1.1 101 ", 0), 0u) << head;
  auto first = c.Next();
  ASSERT_TRUE(first);
  ASSERT_EQ(first->opcode, websocket::kText);
  const json j = json::parse(first->payload);
  std::vector<std::pair<int64_t, std::string>> got;
  for (const json& stream : j["streams"]) {
    EXPECT_EQ(stream["stream"]["app"], "app1");
    int64_t last = INT64_MIN;
    for (const json& v : stream["values"]) {
      const std::string ns = v[0];
      const int64_t ts = std::stoll(ns.substr(0, ns.size() - 6));
      EXPECT_GT(ts, last) << "oldest first";
      last = ts;
      got.emplace_back(ts, v[1]);
    }
  }
  std::sort(got.begin(), got.end());
  std::vector<std::string> got_s;
  for (auto& [ts, m] : got) got_s.push_back(std::to_string(ts) + " " + m);
  std::vector<std::string> want = Expected(
      [](const Rec& x) { return x.app == "app1" && x.sev != Severity::kDebug && x.message.find("zzz") == std::string::npos; },
      from, clock_.NowMs(), 25, false);
  std::reverse(want.begin(), want.end());
  ASSERT_EQ(want.size(), 25u);
  EXPECT_EQ(got_s, want);

  o.bearer_token = "s3cret";
  Serve(o);
  websocket::LoopbackClient anonymous(server_->port());
  EXPECT_EQ(anonymous.Upgrade("/loki/api/v1/tail?query=" + httplib::detail::encode_query_param(query)).rfind("HTTP/1.1 401 ", 0),
            0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, LokiApiTest, ::testing::ValuesIn(AllBackends()), BackendName());

}  // namespace
}  // namespace logdex
