// HttpServer over a real RocksDB store, through a real HTTP client: the
// query API (parameters, errors, paging, UTF-8), auth, health, readiness,
// metrics, and the server's lifecycle.
#include "http/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "common/time_parse.h"
#include "indexer/compactor.h"
#include "tests/failing_store.h"
#include "tests/server/http_answer.h"
#include "tests/server/served_store.h"

namespace logdex {
namespace {

using nlohmann::json;
using testing::ServedStore;

constexpr int64_t kStart = 1'790'000'000'000;  // the workload's first ms
constexpr int64_t kEnd = kStart + 6 * 3'600'000;

using testing::Answer;
using testing::Get;

// The API's JSON of one engine record, for comparisons.
json RecordJson(const ResultRecord& r) {
  json tags = json::object();
  for (const auto& [k, v] : r.tags) tags[k] = v;
  return {{"ts", r.ts_ms},     {"time", FormatTimestamp(r.ts_ms)}, {"severity", std::string(SeverityName(r.severity))},
          {"app", r.app},      {"host", r.host},                   {"message", r.message},
          {"tags", tags}};
}

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { served_ = new ServedStore(); }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override {
    served_->clock().SetMs(kStart + 7 * 3'600'000);
    served_->SetReady(false, "partitions not assigned yet");
  }
  void TearDown() override { served_->StopServing(); }

  static httplib::Params Range(const std::string& app) {
    return {{"app", app}, {"from", std::to_string(kStart)}, {"to", std::to_string(kEnd)}};
  }

  static ServedStore* served_;  // one store for the suite: filling it is the slow part
};

ServedStore* HttpServerTest::served_ = nullptr;

TEST_F(HttpServerTest, HealthzAnswersOk) {
  served_->Serve();
  auto c = served_->Client();
  Answer a = Get(*c, "/healthz");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "ok\n");
}

TEST_F(HttpServerTest, ReadyzFollowsTheReadinessCallback) {
  served_->Serve();
  auto c = served_->Client();
  Answer a = Get(*c, "/readyz");
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("partitions not assigned yet"), std::string::npos) << a.body;
  served_->SetReady(true, "");
  EXPECT_EQ(Get(*c, "/readyz").status, 200);
  served_->SetReady(false, "lag 12000 messages over the threshold of 1000");
  a = Get(*c, "/readyz");
  EXPECT_EQ(a.status, 503);
  EXPECT_NE(a.body.find("lag 12000 messages"), std::string::npos) << a.body;
}

TEST_F(HttpServerTest, QueryAnswersRecordsNextCursorAndStats) {
  served_->Serve();
  auto c = served_->Client();
  httplib::Params p = Range("app1");
  p.emplace("limit", "5");
  Answer a = Get(*c, "/api/v1/query", p);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.content_type, "application/json");
  ASSERT_TRUE(a.j.is_object()) << a.body;
  ASSERT_EQ(a.j["records"].size(), 5u);
  const json& r = a.j["records"][0];
  for (const char* key : {"ts", "time", "severity", "app", "host", "message", "tags"}) {
    EXPECT_TRUE(r.contains(key)) << key;
  }
  EXPECT_EQ(r["app"], "app1");
  EXPECT_EQ(r["time"], FormatTimestamp(r["ts"].get<int64_t>()));
  EXPECT_TRUE(r["tags"].is_object());
  EXPECT_TRUE(a.j["next_cursor"].is_string());
  for (const char* key : {"plan", "seeks", "rows_scanned", "chunks_read", "chunks_returned", "bytes_decompressed",
                          "index_rows_without_main", "meta_rows", "token_filters_read", "chunks_skipped_by_tokens",
                          "superseded_parts"}) {
    EXPECT_TRUE(a.j["stats"].contains(key)) << key;
  }
  EXPECT_GT(a.j["stats"]["seeks"].get<uint64_t>(), 0u);
}

TEST_F(HttpServerTest, PagingThroughCursorsEqualsTheEngineRunDirectly) {
  served_->Serve();
  auto c = served_->Client();
  Query q;
  q.app = "app2";
  q.severities = {Severity::kWarn, Severity::kError};
  q.from_ms = kStart + 600'000;
  q.to_ms = kEnd - 600'000;
  q.limit = 37;
  std::vector<QueryAnswer> want = served_->EnginePages(q);
  ASSERT_GT(want.size(), 3u) << "the query should take several pages";

  httplib::Params base = {{"app", "app2"},
                          {"severity", "warning"},
                          {"severity", "err"},
                          {"from", FormatTimestamp(q.from_ms)},
                          {"to", std::to_string(q.to_ms)},
                          {"limit", "37"}};
  std::string cursor;
  size_t page = 0, records = 0;
  for (;; ++page) {
    httplib::Params p = base;
    if (!cursor.empty()) p.emplace("cursor", cursor);
    Answer a = Get(*c, "/api/v1/query", p);
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_LT(page, want.size());
    const QueryAnswer& w = want[page];
    ASSERT_EQ(a.j["records"].size(), w.records.size()) << "page " << page;
    for (size_t i = 0; i < w.records.size(); ++i) {
      ASSERT_EQ(a.j["records"][i], RecordJson(w.records[i])) << "page " << page << " record " << i;
    }
    records += w.records.size();
    EXPECT_EQ(a.j["stats"]["rows_scanned"], w.stats.rows_scanned);
    EXPECT_EQ(a.j["stats"]["chunks_returned"], w.stats.chunks_returned);
    EXPECT_EQ(a.j["stats"]["plan"], w.stats.plan);
    if (w.next_cursor.empty()) {
      EXPECT_TRUE(a.j["next_cursor"].is_null());
      break;
    }
    // The server signs the engine's cursor: "<engine cursor>.<mac>".
    const std::string got = a.j["next_cursor"].get<std::string>();
    ASSERT_EQ(got.substr(0, got.rfind('.')), w.next_cursor);
    cursor = got;
  }
  EXPECT_EQ(page + 1, want.size());
  size_t brute = 0;
  for (const auto& r : served_->workload().records) brute += testing::Matches(r, q);
  EXPECT_EQ(records, brute);
}

TEST_F(HttpServerTest, SinceResolvesByTheInjectedClockAndItsCursorPinsTheRange) {
  served_->Serve();
  auto c = served_->Client();
  const int64_t now = served_->clock().NowMs();
  Query q;
  q.app = "app0";
  q.from_ms = now - 3 * 3'600'000;
  q.to_ms = now + 1;
  q.limit = 50;
  std::vector<QueryAnswer> want = served_->EnginePages(q);
  ASSERT_GT(want.size(), 2u);

  std::vector<json> got;
  std::string cursor;
  for (int page = 0; page < 1000; ++page) {
    httplib::Params p = {{"app", "app0"}, {"since", "3h"}, {"limit", "50"}};
    if (!cursor.empty()) p.emplace("cursor", cursor);
    Answer a = Get(*c, "/api/v1/query", p);
    ASSERT_EQ(a.status, 200) << a.body;
    for (const json& r : a.j["records"]) got.push_back(r);
    if (a.j["next_cursor"].is_null()) break;
    cursor = a.j["next_cursor"].get<std::string>();
    served_->clock().AdvanceMs(10 * 60'000);  // the clock moves between pages; the range must not
  }
  std::vector<json> expected;
  for (const QueryAnswer& w : want) {
    for (const ResultRecord& r : w.records) expected.push_back(RecordJson(r));
  }
  EXPECT_EQ(got, expected);
}

TEST_F(HttpServerTest, TimesInRfc3339WithOffsetsAndMillisecondsAreTheSameQuery) {
  served_->Serve();
  auto c = served_->Client();
  const int64_t from = kStart + 3'600'000, to = kStart + 2 * 3'600'000;
  auto run = [&](const std::string& f, const std::string& t) {
    Answer a = Get(*c, "/api/v1/query", {{"app", "app1"}, {"from", f}, {"to", t}, {"limit", "1000"}});
    EXPECT_EQ(a.status, 200) << f << " " << t << ": " << a.body;
    return a.j["records"];
  };
  json by_ms = run(std::to_string(from), std::to_string(to));
  ASSERT_GT(by_ms.size(), 10u);
  // 2026-09-21T15:13:20Z and its +01:00 / -05:30 spellings.
  EXPECT_EQ(run(FormatTimestamp(from), FormatTimestamp(to)), by_ms);
  EXPECT_EQ(run("2026-09-21T16:13:20+01:00", "2026-09-21T17:13:20+01:00"), by_ms);
  EXPECT_EQ(run("2026-09-21T09:43:20-05:30", "2026-09-21T16:13:20Z"), by_ms);
  // An unencoded '+' arrives as a space; the server reads it as the offset sign.
  c->set_url_encode(false);
  Answer raw = Get(*c, "/api/v1/query?app=app1&from=2026-09-21T16:13:20+01:00&to=2026-09-21T17:13:20+01:00&limit=1000");
  c->set_url_encode(true);
  ASSERT_EQ(raw.status, 200) << raw.body;
  EXPECT_EQ(raw.j["records"], by_ms);
}

struct BadCase {
  const char* what;
  httplib::Params params;
  int status;
  const char* parameter;  // "" when the error names no single parameter
  const char* says;
};

// The checks every refused request of a BadCase table gets: its status, a
// JSON error saying what was wrong and, when one parameter is at fault, naming it.
void ExpectRefused(const Answer& a, const BadCase& bc) {
  EXPECT_EQ(a.status, bc.status) << a.body;
  EXPECT_EQ(a.content_type, "application/json");
  ASSERT_TRUE(a.j.is_object() && a.j["error"].is_string()) << a.body;
  const std::string error = a.j["error"].get<std::string>();
  EXPECT_NE(error.find(bc.says), std::string::npos) << error;
  if (*bc.parameter) {
    EXPECT_EQ(a.j.value("parameter", ""), bc.parameter) << error;
    EXPECT_NE(error.find(std::string("'") + bc.parameter + "'"), std::string::npos) << error;
  }
}

TEST_F(HttpServerTest, BadParametersAre400sNamingTheParameterAndTheProblem) {
  served_->Serve();
  auto c = served_->Client();
  const std::string f = std::to_string(kStart), t = std::to_string(kEnd);
  const std::vector<BadCase> cases = {
      {"no time range", {{"app", "app1"}}, 400, "", "missing time range"},
      {"unknown parameter", {{"app", "app1"}, {"since", "1h"}, {"bogus", "1"}}, 400, "bogus", "unknown parameter 'bogus'"},
      {"bad severity", {{"app", "app1"}, {"since", "1h"}, {"severity", "ERROR,loud"}}, 400, "severity", "'loud'"},
      {"empty severity item", {{"app", "app1"}, {"since", "1h"}, {"severity", "ERROR,,WARN"}}, 400, "severity",
       "empty item"},
      {"tag without =", {{"app", "app1"}, {"since", "1h"}, {"tag", "dc"}}, 400, "tag", "key=value"},
      {"tag without key", {{"app", "app1"}, {"since", "1h"}, {"tag", "=east"}}, 400, "tag", "non-empty key"},
      {"bad from", {{"app", "app1"}, {"from", "yesterday"}, {"to", t}}, 400, "from", "'yesterday' is not a time"},
      {"bad to", {{"app", "app1"}, {"from", f}, {"to", "2026-13-01T00:00:00Z"}}, 400, "to", "month 13"},
      {"from without to", {{"app", "app1"}, {"from", f}}, 400, "to", "'to' is missing"},
      {"to without from", {{"app", "app1"}, {"to", t}}, 400, "from", "'from' is missing"},
      {"empty range", {{"app", "app1"}, {"from", t}, {"to", f}}, 400, "to", "must be after 'from'"},
      {"bad since", {{"app", "app1"}, {"since", "5"}}, 400, "since", "unit is missing"},
      {"since and from", {{"app", "app1"}, {"since", "1h"}, {"from", f}}, 400, "since", "cannot be combined"},
      {"limit not a number", {{"app", "app1"}, {"since", "1h"}, {"limit", "ten"}}, 400, "limit", "'ten'"},
      {"negative limit", {{"app", "app1"}, {"since", "1h"}, {"limit", "-3"}}, 400, "limit", "'-3'"},
      {"zero limit", {{"app", "app1"}, {"since", "1h"}, {"limit", "0"}}, 400, "limit", "at least 1"},
      {"bad scan", {{"app", "app1"}, {"since", "1h"}, {"scan", "maybe"}}, 400, "scan", "'maybe' is not true or false"},
      {"app twice", {{"app", "app1"}, {"app", "app2"}, {"since", "1h"}}, 400, "app", "more than once"},
      {"empty app", {{"app", ""}, {"since", "1h"}}, 400, "app", "'app' is empty"},
      {"mangled range cursor", {{"app", "app1"}, {"since", "1h"}, {"cursor", "r.12.x"}}, 400, "cursor",
       "invalid cursor"},
      // Refused by the engine (kInvalidArgument): its message, still a 400.
      {"no app, host or tag", {{"since", "1h"}}, 400, "", "a query needs app, host or tag"},
      {"limit over the maximum", {{"app", "app1"}, {"since", "1h"}, {"limit", "20000"}}, 400, "", "limit is over"},
      {"foreign cursor", {{"app", "app1"}, {"from", f}, {"to", t}, {"cursor", "AAAA"}}, 400, "cursor",
       "invalid cursor"},
      {"range too long", {{"app", "app1"}, {"since", "40d"}}, 400, "", "time range spans"},
      {"bad regex", {{"app", "app1"}, {"since", "1h"}, {"regex", "a(b"}}, 400, "regex",
       "parameter 'regex': 'a(b' is not an RE2 regular expression: missing )"},
      {"word without a token", {{"app", "app1"}, {"since", "1h"}, {"not_word", "--"}}, 400, "not_word",
       "parameter 'not_word': '--' has no token"},
      {"empty phrase", {{"app", "app1"}, {"since", "1h"}, {"phrase", ""}}, 400, "phrase", "parameter 'phrase': empty"},
  };
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.what);
    ExpectRefused(Get(*c, "/api/v1/query", bc.params), bc);
  }
  BadCase many{"17 text filters", {{"app", "app1"}, {"since", "1h"}}, 400, "word", "at most 16 text filters"};
  for (int i = 0; i < 17; ++i) many.params.emplace("word", "w" + std::to_string(i));
  ExpectRefused(Get(*c, "/api/v1/query", many.params), many);
}

// The volume endpoint's JSON, field by field, against the engine run directly.
TEST_F(HttpServerTest, VolumeAnswersBucketsPerSeverityTotalsAndStats) {
  served_->Serve();
  auto c = served_->Client();
  const int64_t from = kStart + 1'234, to = kEnd - 5'678;  // edges that cut through chunks
  Answer a = Get(*c, "/api/v1/volume",
                 {{"app", "app1"}, {"from", std::to_string(from)}, {"to", std::to_string(to)}, {"step", "1h"}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.content_type, "application/json");
  ASSERT_TRUE(a.j.is_object()) << a.body;
  std::set<std::string> keys;
  for (auto& [k, v] : a.j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"from", "to", "step_ms", "exact", "buckets", "totals", "inexact_records",
                                         "stats"}));
  EXPECT_EQ(a.j["from"], from);
  EXPECT_EQ(a.j["to"], to);
  EXPECT_EQ(a.j["step_ms"], 3'600'000);
  EXPECT_EQ(a.j["exact"], false);

  VolumeQuery vq;
  vq.filter.app = "app1";
  vq.filter.from_ms = from;
  vq.filter.to_ms = to;
  vq.step_ms = 3'600'000;
  auto want = served_->engine().Volume(vq);
  ASSERT_TRUE(want.ok()) << want.error().ToString();
  ASSERT_TRUE(a.j["buckets"].is_array());
  ASSERT_EQ(a.j["buckets"].size(), want->buckets.size());
  ASSERT_EQ(want->buckets.size(), 7u);  // 14:13:21.234 to 20:13:14.322: the hours 14:00 to 20:00
  const std::set<std::string> severity_names = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"};
  for (size_t i = 0; i < want->buckets.size(); ++i) {
    const json& b = a.j["buckets"][i];
    const VolumeBucket& w = want->buckets[i];
    std::set<std::string> bucket_keys;
    for (auto& [k, v] : b.items()) bucket_keys.insert(k);
    EXPECT_EQ(bucket_keys, (std::set<std::string>{"start", "time", "counts", "total"}));
    EXPECT_EQ(b["start"], w.start_ms);
    EXPECT_EQ(b["time"], FormatTimestamp(w.start_ms));
    EXPECT_EQ(b["total"], w.counts.total);
    std::set<std::string> names;
    for (auto& [name, n] : b["counts"].items()) {
      names.insert(name);
      EXPECT_EQ(n.get<uint64_t>(), w.counts.by_severity[VolumeSeverityIndex(*ParseSeverity(name))]) << name;
    }
    EXPECT_EQ(names, severity_names);
  }
  EXPECT_EQ(a.j["buckets"][0]["start"], kStart / 3'600'000 * 3'600'000);  // aligned to whole hours
  EXPECT_EQ(a.j["totals"]["total"], want->totals.total);
  EXPECT_GT(want->totals.total, 0u);
  for (const std::string& name : severity_names) {
    EXPECT_EQ(a.j["totals"]["counts"][name].get<uint64_t>(),
              want->totals.by_severity[VolumeSeverityIndex(*ParseSeverity(name))])
        << name;
  }
  EXPECT_EQ(a.j["inexact_records"], want->inexact_records);
  const json& stats = a.j["stats"];
  for (const char* key : {"plan", "seeks", "rows_scanned", "chunks_read", "chunks_returned", "bytes_decompressed",
                          "index_rows_without_main", "meta_rows", "corrupt_chunks"}) {
    EXPECT_TRUE(stats.contains(key)) << key;
  }
  EXPECT_EQ(stats["plan"], want->stats.plan);
  EXPECT_NE(stats["plan"].get<std::string>().find("idx_"), std::string::npos);
  EXPECT_EQ(stats["rows_scanned"], want->stats.rows_scanned);
  EXPECT_GT(stats["rows_scanned"].get<uint64_t>(), 0u);
  EXPECT_EQ(stats["chunks_read"], 0u);  // from the index rows alone
  EXPECT_EQ(stats["bytes_decompressed"], 0u);

  // contains: counted by reading, exactly the records the query returns.
  a = Get(*c, "/api/v1/volume", {{"app", "app1"}, {"from", std::to_string(from)}, {"to", std::to_string(to)},
                                 {"contains", "alpha"}, {"severity", "WARN,ERROR"}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j["exact"], true);
  EXPECT_EQ(a.j["step_ms"], DefaultVolumeStep(from, to));  // 6 h: 10 min buckets
  EXPECT_EQ(a.j["buckets"].size(), 37u);
  EXPECT_GT(a.j["stats"]["bytes_decompressed"].get<uint64_t>(), 0u);
  EXPECT_GT(a.j["stats"]["chunks_read"].get<uint64_t>(), 0u);
  EXPECT_EQ(a.j["inexact_records"], 0u);
  Query q;
  q.app = "app1";
  q.from_ms = from;
  q.to_ms = to;
  q.contains = "alpha";
  q.severities = {Severity::kWarn, Severity::kError};
  uint64_t records = 0, warn = 0;
  for (const QueryAnswer& page : served_->EnginePages(q)) {
    records += page.records.size();
    for (const ResultRecord& r : page.records) warn += r.severity == Severity::kWarn;
  }
  EXPECT_GT(records, 0u);
  EXPECT_EQ(a.j["totals"]["total"], records);
  EXPECT_EQ(a.j["totals"]["counts"]["WARN"], warn);
  EXPECT_EQ(a.j["totals"]["counts"]["INFO"], 0u);

  // exact=true without contains; `since` as in the query API.
  a = Get(*c, "/api/v1/volume", {{"host", "host2"}, {"since", "8h"}, {"exact", "true"}, {"step", "900000"}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j["exact"], true);
  EXPECT_EQ(a.j["step_ms"], 900'000);
  EXPECT_EQ(a.j["to"], served_->clock().NowMs() + 1);
}

TEST_F(HttpServerTest, VolumeBadParametersAre400sNamingTheParameterAndTheProblem) {
  served_->Serve();
  auto c = served_->Client();
  const std::string f = std::to_string(kStart), t = std::to_string(kEnd);
  const std::vector<BadCase> cases = {
      {"step without unit or digits", {{"app", "app1"}, {"since", "1h"}, {"step", "fast"}}, 400, "step", "'step'"},
      {"step with a bad unit", {{"app", "app1"}, {"since", "1h"}, {"step", "5y"}}, 400, "step", "'step'"},
      {"zero step", {{"app", "app1"}, {"since", "1h"}, {"step", "0"}}, 400, "step", "at least 1 ms"},
      {"negative step", {{"app", "app1"}, {"since", "1h"}, {"step", "-60s"}}, 400, "step", "'step'"},
      {"empty step", {{"app", "app1"}, {"since", "1h"}, {"step", ""}}, 400, "step", "'step'"},
      {"too many buckets", {{"app", "app1"}, {"from", f}, {"to", t}, {"step", "1s"}}, 400, "step",
       "21600 buckets over the range, over the maximum of 11000"},
      {"step twice", {{"app", "app1"}, {"since", "1h"}, {"step", "1m"}, {"step", "5m"}}, 400, "step", "more than once"},
      {"from equals to", {{"app", "app1"}, {"from", f}, {"to", f}}, 400, "to", "must be after 'from'"},
      {"from after to", {{"app", "app1"}, {"from", t}, {"to", f}}, 400, "to", "must be after 'from'"},
      {"unknown severity", {{"app", "app1"}, {"since", "1h"}, {"severity", "INFO,loud"}}, 400, "severity", "'loud'"},
      {"bad exact", {{"app", "app1"}, {"since", "1h"}, {"exact", "maybe"}}, 400, "exact",
       "'maybe' is not true or false"},
      {"limit is not a volume parameter", {{"app", "app1"}, {"since", "1h"}, {"limit", "5"}}, 400, "limit",
       "unknown parameter 'limit'"},
      {"cursor is not a volume parameter", {{"app", "app1"}, {"since", "1h"}, {"cursor", "x"}}, 400, "cursor",
       "unknown parameter 'cursor'"},
      {"unknown parameter", {{"app", "app1"}, {"since", "1h"}, {"bogus", "1"}}, 400, "bogus", "step, exact"},
      {"no time range", {{"app", "app1"}}, 400, "", "missing time range"},
      {"bad tag", {{"app", "app1"}, {"since", "1h"}, {"tag", "dc"}}, 400, "tag", "key=value"},
      {"empty app", {{"app", ""}, {"since", "1h"}}, 400, "app", "'app' is empty"},
      // Refused by the engine, as /api/v1/query refuses them.
      {"no app, host or tag", {{"since", "1h"}}, 400, "", "a query needs app, host or tag; set scan=true"},
      {"range too long", {{"app", "app1"}, {"since", "40d"}, {"step", "1d"}}, 400, "", "time range spans"},
      {"two tags from the index", {{"app", "app1"}, {"since", "1h"}, {"tag", "k=v1"}, {"tag", "dc=east"}}, 400, "tag",
       "counting from the index takes one tag"},
  };
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.what);
    Answer a = Get(*c, "/api/v1/volume", bc.params);
    ExpectRefused(a, bc);
    if (!*bc.parameter) {
      EXPECT_FALSE(a.j.contains("parameter")) << a.body;
    }
  }
  // The same request with exact=true or scan=true is answered.
  EXPECT_EQ(Get(*c, "/api/v1/volume", {{"app", "app1"}, {"since", "8h"}, {"tag", "k=v1"}, {"tag", "dc=east"},
                                       {"exact", "true"}}).status, 200);
  EXPECT_EQ(Get(*c, "/api/v1/volume", {{"since", "1h"}, {"scan", "true"}}).status, 200);
}

TEST_F(HttpServerTest, InvalidUtf8InMessagesIsReplacedNotFatal) {
  served_->Serve();
  auto c = served_->Client();
  Answer a = Get(*c, "/api/v1/query", {{"app", "utf8app"}, {"since", "8h"}});
  ASSERT_EQ(a.status, 200) << a.body;
  // nlohmann's parser rejects invalid UTF-8, so parsing at all proves the body is valid.
  ASSERT_TRUE(a.j.is_object()) << "the body is not valid JSON / UTF-8";
  ASSERT_EQ(a.j["records"].size(), 3u);
  const std::string replaced = "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD end";
  for (const json& r : a.j["records"]) EXPECT_EQ(r["message"], replaced);
}

TEST_F(HttpServerTest, StoreErrorsAre503WhenUnavailableAnd500Otherwise) {
  for (auto [code, status] : {std::pair{Errc::kUnavailable, 503}, std::pair{Errc::kIOError, 500}}) {
    testing::AlwaysFailing store(code, "injected store failure");
    QueryEngine engine(store, QueryOptions{});
    prometheus::Registry registry;
    HttpServer server(HttpServerOptions{}, engine, registry, nullptr, served_->clock());
    ASSERT_TRUE(server.Start().ok());
    httplib::Client c("127.0.0.1", server.port());
    Answer a = Get(c, "/api/v1/query", {{"app", "app1"}, {"since", "1h"}});
    EXPECT_EQ(a.status, status) << a.body;
    ASSERT_TRUE(a.j.is_object()) << a.body;
    // The text is logged with an error id, not sent (http_hardening_test.cc).
    EXPECT_EQ(a.j["error"].get<std::string>().find("injected store failure"), std::string::npos) << a.body;
    EXPECT_TRUE(a.j.contains("error_id")) << a.body;
  }
}

TEST_F(HttpServerTest, BearerTokenGuardsEverythingButHealthAndReadiness) {
  HttpServerOptions o;
  o.bearer_token = "s3cret-token";
  served_->Serve(o);
  served_->SetReady(true, "");
  auto c = served_->Client();
  httplib::Params p = {{"app", "app1"}, {"since", "1h"}};
  Answer a = Get(*c, "/api/v1/query", p);
  EXPECT_EQ(a.status, 401);
  EXPECT_NE(a.j.value("error", "").find("missing Authorization"), std::string::npos) << a.body;
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "Bearer s3cret-tokeN"}}).status, 401);
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "Bearer s3cret-token2"}}).status, 401);
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "Bearer s3cret"}}).status, 401);
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "Basic czNjcmV0LXRva2Vu"}}).status, 401);
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "Bearer s3cret-token"}}).status, 200);
  EXPECT_EQ(Get(*c, "/api/v1/query", p, {{"Authorization", "bearer s3cret-token"}}).status, 200);
  EXPECT_EQ(Get(*c, "/metrics").status, 401);
  EXPECT_EQ(Get(*c, "/metrics", {}, {{"Authorization", "Bearer s3cret-token"}}).status, 200);
  EXPECT_EQ(Get(*c, "/nope").status, 401);
  EXPECT_EQ(Get(*c, "/nope", {}, {{"Authorization", "Bearer s3cret-token"}}).status, 404);
  EXPECT_EQ(Get(*c, "/healthz").status, 200);
  EXPECT_EQ(Get(*c, "/readyz").status, 200);
  // The web UI's files hold no data: the page loads, then asks for the token.
  Answer page = Get(*c, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.content_type.rfind("text/html", 0), 0u) << page.content_type;
  EXPECT_EQ(Get(*c, "/ui/app.js").status, 200);
  EXPECT_EQ(Get(*c, "/ui/app.css").status, 200);
  EXPECT_EQ(Get(*c, "/ui/nope.js").status, 404) << "no data under /ui/ either";
  EXPECT_EQ(Get(*c, "/api/v1/tail").status, 401);
  // httplib's own helper sends the same header.
  c->set_bearer_token_auth("s3cret-token");
  EXPECT_EQ(Get(*c, "/api/v1/query", p).status, 200);
}

TEST_F(HttpServerTest, UnknownPathsAre404WithAJsonError) {
  served_->Serve();
  auto c = served_->Client();
  Answer a = Get(*c, "/api/v2/query");
  EXPECT_EQ(a.status, 404);
  ASSERT_TRUE(a.j.is_object()) << a.body;
  EXPECT_NE(a.j["error"].get<std::string>().find("/api/v2/query"), std::string::npos);
}

// The exposition, after a few requests of each kind.
std::string ScrapeAfterTraffic(ServedStore& served) {
  auto c = served.Client();
  EXPECT_EQ(Get(*c, "/api/v1/query", {{"app", "app1"}, {"since", "2h"}}).status, 200);
  EXPECT_EQ(Get(*c, "/api/v1/query", {{"app", "app1"}}).status, 400);
  EXPECT_EQ(Get(*c, "/healthz").status, 200);
  EXPECT_EQ(Get(*c, "/nope").status, 404);
  Answer m = Get(*c, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, "text/plain; version=0.0.4; charset=utf-8");
  return m.body;
}

// Volume over a compacted store: merged chunks are counted from their
// record counts per minute (`cnt`), none read. One whose `cnt` row is
// damaged is read instead (same answer), and the degraded mode is counted
// in the answer's stats and in logdex_query_unreadable_minute_counts_total,
// from /api/v1/volume and from Loki's count_over_time alike.
TEST(HttpServerCompacted, VolumeCountsMergedChunksByMinuteAndCountsUnreadableCounts) {
  testing::WorkloadSpec spec = ServedStore::SmallSpec();
  spec.max_records_per_chunk = 6;  // small chunks: what compaction merges
  ServedStore served(spec);
  CompactorOptions co;
  co.max_span_ms = 3'600'000;
  co.target_records = 500;
  auto compactor = Compactor::Create(served.store(), co);
  ASSERT_TRUE(compactor.ok()) << compactor.error().ToString();
  auto pass = (*compactor)->Pass(kEnd + co.settle_ms + co.max_span_ms + 1);
  ASSERT_TRUE(pass.ok()) << pass.error().ToString();
  ASSERT_GT(pass->merges, 0u);
  QueryOptions qo;
  qo.decode.clock = &served.clock();
  qo.max_chunk_span_ms = co.max_span_ms;  // the padding: merged chunks span up to an hour
  qo.index_count_span_ms = 60'000;       // as serve sets it
  QueryEngine engine(served.store(), qo);
  served.ServeEngine(engine);
  auto c = served.Client();
  const httplib::Params volume{{"app", "app1"}, {"from", std::to_string(kStart)}, {"to", std::to_string(kEnd)},
                               {"step", "5m"}};
  Answer a = Get(*c, "/api/v1/volume", volume);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_GT(a.j["stats"]["minute_counts_read"].get<uint64_t>(), 0u) << a.body;
  EXPECT_EQ(a.j["stats"]["unreadable_minute_counts"], 0) << a.body;
  EXPECT_EQ(a.j["stats"]["chunks_read"], 0) << a.body;
  uint64_t all = 0;
  for (const auto& r : served.workload().records) all += r.app == "app1" && r.ts >= kStart && r.ts < kEnd;
  EXPECT_EQ(a.j["totals"]["total"], all);

  // Damage the `cnt` row of one of app1's chunks counted by minute: at
  // least 60 s long (index_count_span_ms) and across a 5-minute edge.
  std::string damaged;
  for (Severity s : kAllSeverities) {
    ASSERT_TRUE(served.store()
                    .Scan(ScanSpec{std::string(LevelIndexTable(s)), "", "", false, 0},
                          [&](auto k, auto v) {
                            auto key = LevelIndexKey::Decode(k);
                            auto value = IndexValue::Decode(v);
                            if (key && value && value->has_minute_counts && value->main_key.app == AppIdOf("app1") &&
                                key->ts_ms - value->main_key.first_ts_ms >= 60'000 &&
                                value->main_key.first_ts_ms / 300'000 != key->ts_ms / 300'000) {
                              damaged = value->main_key.Encode();
                            }
                            return damaged.empty();
                          })
                    .ok());
    if (!damaged.empty()) break;
  }
  ASSERT_FALSE(damaged.empty());
  WriteBatch damage;
  damage.Put(kMinuteCountsTable, damaged, std::string("\x07 not a count", 14));
  ASSERT_TRUE(served.store().Write(damage).ok());
  Answer b = Get(*c, "/api/v1/volume", volume);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.j["stats"]["unreadable_minute_counts"], 1) << b.body;
  EXPECT_EQ(b.j["stats"]["chunks_read"], 1) << b.body;
  EXPECT_EQ(b.j["buckets"], a.j["buckets"]) << "the chunk read counts as its minutes did";
  auto metric = [&] {
    Answer m = Get(*c, "/metrics");
    std::smatch got;
    const std::regex line(R"(\nlogdex_query_unreadable_minute_counts_total ([0-9]+)\n)");
    return std::regex_search(m.body, got, line) ? std::stoi(got[1]) : -1;
  };
  EXPECT_EQ(metric(), 1);
  Answer loki = Get(*c, "/loki/api/v1/query_range",
                    {{"query", "count_over_time({app=\"app1\"}[5m])"}, {"start", std::to_string(kStart * 1'000'000)},
                     {"end", std::to_string(kEnd * 1'000'000)}, {"step", "300"}});
  ASSERT_EQ(loki.status, 200) << loki.body;
  EXPECT_EQ(metric(), 2) << "Grafana's count_over_time reads it too";
}

TEST_F(HttpServerTest, MetricsServeTheRegistryAndTheServersOwnCounters) {
  auto& things = prometheus::BuildCounter()
                     .Name("logdex_test_things_total")
                     .Help("Things counted by the test")
                     .Register(served_->registry())
                     .Add({});
  things.Increment(3);
  served_->Serve();
  const std::string body = ScrapeAfterTraffic(*served_);
  ASSERT_FALSE(body.empty());
  EXPECT_EQ(body.back(), '\n');
  EXPECT_NE(body.find("logdex_test_things_total 3"), std::string::npos) << body;
  EXPECT_NE(body.find("# HELP logdex_http_requests_total "), std::string::npos);
  EXPECT_NE(body.find("# TYPE logdex_http_requests_total counter"), std::string::npos);
  EXPECT_NE(body.find("# HELP logdex_http_query_duration_seconds "), std::string::npos);
  EXPECT_NE(body.find("# TYPE logdex_http_query_duration_seconds histogram"), std::string::npos);
  EXPECT_TRUE(std::regex_search(body, std::regex(R"(logdex_http_requests_total\{code="400",endpoint="query"\} [1-9])")))
      << body;
  EXPECT_TRUE(std::regex_search(body, std::regex(R"(logdex_http_requests_total\{code="404",endpoint="other"\} [1-9])")))
      << body;
  EXPECT_TRUE(std::regex_search(body, std::regex(R"(logdex_http_query_duration_seconds_count [1-9])"))) << body;
  // Every sample line parses, and every metric has help text.
  std::set<std::string> helped;
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)");
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+-]+|[+-]Inf|NaN)( -?[0-9]+)?$)");
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      helped.insert(m[1]);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      continue;
    } else {
      ASSERT_TRUE(std::regex_match(line, m, sample)) << "unparseable line: " << line;
      std::string family = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (!helped.count(family) && family.ends_with(suffix)) family.resize(family.size() - strlen(suffix));
      }
      EXPECT_TRUE(helped.count(family)) << "no HELP for " << line;
    }
  }
}

TEST_F(HttpServerTest, PromtoolChecksTheExpositionClean) {
  const char* promtool = "/usr/bin/promtool";
  if (!std::filesystem::exists(promtool)) {
    GTEST_SKIP() << promtool << " is absent: install the Debian package 'prometheus' to run this check";
  }
  served_->Serve();
  const std::string body = ScrapeAfterTraffic(*served_);
  TempDir dir;
  const std::string file = dir.path() + "/metrics.txt";
  std::ofstream(file) << body;
  const std::string cmd = std::string(promtool) + " check metrics < " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "promtool said: " << out << "\non:\n" << body;
}

TEST_F(HttpServerTest, StopIsPromptWithAnIdleKeepAliveConnectionAndIdempotent) {
  HttpServer& server = served_->Serve();
  const int port = server.port();
  ASSERT_GT(port, 0);
  auto c = served_->Client();
  c->set_keep_alive(true);
  ASSERT_EQ(Get(*c, "/healthz").status, 200);  // leaves the connection open and idle
  const auto t0 = std::chrono::steady_clock::now();
  server.Stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(2500)) << "Stop() waited on an idle connection";
  server.Stop();
  httplib::Client after("127.0.0.1", port);
  after.set_connection_timeout(1, 0);
  EXPECT_FALSE(after.Get("/healthz")) << "still serving after Stop()";
}

TEST_F(HttpServerTest, StopRightAfterStartAndWithoutStartReturns) {
  prometheus::Registry registry;
  {
    HttpServer never(HttpServerOptions{}, served_->engine(), registry, nullptr, served_->clock());
    never.Stop();
    EXPECT_EQ(never.port(), 0);
  }
  for (int i = 0; i < 20; ++i) {
    HttpServer s(HttpServerOptions{}, served_->engine(), registry, nullptr, served_->clock());
    ASSERT_TRUE(s.Start().ok());
    s.Stop();
  }
}

TEST_F(HttpServerTest, StartFailsOnABusyPortAndTwice) {
  HttpServer& first = served_->Serve();
  prometheus::Registry registry;
  HttpServerOptions o;
  o.port = first.port();
  HttpServer second(o, served_->engine(), registry, nullptr, served_->clock());
  Status s = second.Start();
  EXPECT_EQ(s.code(), Errc::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(first.port())), std::string::npos) << s.ToString();
  EXPECT_EQ(first.Start().code(), Errc::kFailedPrecondition);
}

// cpp-httplib listens with a backlog of 5: under a connection flood the
// kernel dropped new SYNs and a /healthz probe waited out a 1 s retransmit
// (HttpUnderAbuse saw a 1,020 ms probe). The server raises it to the
// kernel's limit; `ss` (iproute2) reads a listening socket's backlog.
TEST_F(HttpServerTest, ListensWithTheKernelsBacklogNotHttplibsFive) {
  HttpServer& server = served_->Serve();
  const std::string cmd = "ss -ltnH 'sport = :" + std::to_string(server.port()) + "' 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(::pclose(p), 0) << cmd << ": " << out << " (ss is in iproute2: scripts/install-deps.sh)";
  std::istringstream fields(out);
  std::string state;
  long queued = -1, backlog = -1;
  fields >> state >> queued >> backlog;
  ASSERT_EQ(state, "LISTEN") << out;
  long limit = 0;
  std::ifstream("/proc/sys/net/core/somaxconn") >> limit;
  ASSERT_GT(limit, 5);
  EXPECT_EQ(backlog, std::min<long>(SOMAXCONN, limit)) << out;
}

TEST(ParseListenAddress, ReadsHostPortAndBracketedIpv6) {
  HttpServerOptions o;
  ASSERT_TRUE(ParseListenAddress("0.0.0.0:8080", o).ok());
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 8080);
  ASSERT_TRUE(ParseListenAddress("[::1]:0", o).ok());
  EXPECT_EQ(o.host, "::1");
  EXPECT_EQ(o.port, 0);
  ASSERT_TRUE(ParseListenAddress("localhost:9100", o).ok());
  EXPECT_EQ(o.host, "localhost");
  for (const char* bad : {"8080", ":8080", "host:", "host:65536", "host:-1", "host:80x", "::1:80", "[::1]80"}) {
    Status s = ParseListenAddress(bad, o);
    EXPECT_EQ(s.code(), Errc::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace logdex
