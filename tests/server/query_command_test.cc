// `logdex query` end to end: the built binary (LOGDEX_BINARY) against an
// in-process HttpServer over a filled RocksDB store.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/server/served_store.h"

namespace logdex {
namespace {

using nlohmann::json;
using testing::ServedStore;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `logdex <args>` with its stdout and stderr captured.
CliRun Logdex(const std::vector<std::string>& args) {
  TempDir dir;
  std::string cmd = Quote(LOGDEX_BINARY);
  for (const std::string& a : args) cmd += " " + Quote(a);
  cmd += " 2>" + Quote(dir.path() + "/err");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return r;
  }
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(dir.path() + "/err");
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

class QueryCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { served_ = new ServedStore(); }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void TearDown() override { served_->StopServing(); }

  std::string Url() const { return "http://127.0.0.1:" + std::to_string(served_->server().port()); }

  // The engine's records for app `app` over the last `hours` hours, in pages of `page`.
  std::vector<ResultRecord> EngineRecords(const std::string& app, int hours, uint32_t page) {
    Query q;
    q.app = app;
    q.from_ms = served_->clock().NowMs() - hours * 3'600'000ll;
    q.to_ms = served_->clock().NowMs() + 1;
    q.limit = page;
    std::vector<ResultRecord> out;
    for (QueryAnswer& a : served_->EnginePages(q)) {
      for (ResultRecord& r : a.records) out.push_back(std::move(r));
    }
    return out;
  }

  static ServedStore* served_;
};

ServedStore* QueryCommandTest::served_ = nullptr;

TEST_F(QueryCommandTest, JsonLimitFollowsCursorsAcrossPages) {
  served_->Serve();
  const std::vector<ResultRecord> all = EngineRecords("app1", 8, 1000);
  ASSERT_GT(all.size(), 1500u) << "the workload should give app1 more than one 1000-record page";

  CliRun r = Logdex({"query", "--server", Url(), "--app", "app1", "--since", "8h", "--limit", "1500", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out.substr(0, 500);
  ASSERT_EQ(j["records"].size(), 1500u);
  for (size_t i = 0; i < 1500; ++i) {
    const json& got = j["records"][i];
    ASSERT_EQ(got["ts"], all[i].ts_ms) << i;
    ASSERT_EQ(got["message"], all[i].message) << i;
    ASSERT_EQ(got["severity"], std::string(SeverityName(all[i].severity))) << i;
    ASSERT_EQ(got["app"], "app1");
    ASSERT_EQ(got["host"], all[i].host);
    ASSERT_TRUE(got["tags"].is_object());
  }
  EXPECT_TRUE(j["next_cursor"].is_string()) << "more records remain";
  EXPECT_EQ(j["stats"]["pages"], 2) << "1000 + 500";
  EXPECT_GT(j["stats"]["chunks_returned"].get<uint64_t>(), 0u);

  // Continuing from next_cursor yields the rest.
  CliRun rest = Logdex({"query", "--server", Url(), "--app", "app1", "--since", "8h", "--limit", "100000", "--json",
                     "--cursor", j["next_cursor"].get<std::string>()});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  json k = json::parse(rest.out, nullptr, false);
  ASSERT_TRUE(k.is_object());
  ASSERT_EQ(k["records"].size(), all.size() - 1500);
  EXPECT_EQ(k["records"][0]["ts"], all[1500].ts_ms);
  EXPECT_TRUE(k["next_cursor"].is_null());
}

TEST_F(QueryCommandTest, LimitAboveWhatMatchesReturnsEverythingAndNoCursor) {
  served_->Serve();
  const std::vector<ResultRecord> all = EngineRecords("app0", 2, 1000);
  ASSERT_GT(all.size(), 0u);
  CliRun r = Logdex({"query", "--server", Url(), "--app", "app0", "--since", "2h", "--limit", "50000", "--json",
                  "--severity", "debug,info", "--severity", "WARNING", "--severity", "E", "--severity", "fatal"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["records"].size(), all.size());
  EXPECT_TRUE(j["next_cursor"].is_null());
}

TEST_F(QueryCommandTest, FromToAndTagFiltersReachTheServer) {
  served_->Serve();
  const int64_t from = 1'790'000'000'000 + 3'600'000, to = from + 3'600'000;
  Query q;
  q.tags = {{"k", "v3"}};
  q.from_ms = from;
  q.to_ms = to;
  q.limit = 10'000;
  std::vector<QueryAnswer> want = served_->EnginePages(q);
  ASSERT_EQ(want.size(), 1u);
  CliRun r = Logdex({"query", "--server", Url(), "--tag", "k=v3", "--from", "2026-09-21T16:13:20+01:00", "--to",
                  std::to_string(to), "--limit", "10000", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["records"].size(), want[0].records.size());
  for (const json& rec : j["records"]) EXPECT_EQ(rec["tags"]["k"], "v3");
}

// The text filter flags reach the server as their parameters, repeated.
TEST_F(QueryCommandTest, TextFilterFlagsReachTheServer) {
  served_->Serve();
  const int64_t from = 1'790'000'000'000, to = from + 24 * 3'600'000;
  Query q;
  q.app = "app1";
  q.from_ms = from;
  q.to_ms = to;
  q.limit = 10'000;
  q.text = {{TextFilterKind::kWord, false, "request"},
            {TextFilterKind::kRegex, false, "^(alpha|bravo) "},
            {TextFilterKind::kPhrase, true, "alpha request"},
            {TextFilterKind::kWord, true, "delta"}};
  std::vector<QueryAnswer> want = served_->EnginePages(q);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_FALSE(want[0].records.empty());
  CliRun r = Logdex({"query", "--server", Url(), "--app", "app1", "--from", std::to_string(from), "--to",
                     std::to_string(to), "--limit", "10000", "--json", "--word", "request", "--regex",
                     "^(alpha|bravo) ", "--not-phrase", "alpha request", "--not-word", "delta"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["records"].size(), want[0].records.size());
  for (const json& rec : j["records"]) {
    const std::string m = rec["message"];
    EXPECT_EQ(m.rfind("bravo ", 0), 0u) << m;  // alpha lines all start "alpha request"
    EXPECT_EQ(m.find("delta"), std::string::npos) << m;
  }
}

TEST_F(QueryCommandTest, TablePrintsOneLinePerRecordWithAHeader) {
  served_->Serve();
  CliRun r = Logdex({"query", "--server", Url(), "--app", "utf8app", "--since", "8h"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_EQ(rows[0].rfind("TIME", 0), 0u) << rows[0];
  for (const char* col : {"SEVERITY", "APP", "HOST", "MESSAGE"}) EXPECT_NE(rows[0].find(col), std::string::npos);
  EXPECT_NE(rows[1].find("2026-09-21T15:13:20.00"), std::string::npos) << rows[1];
  EXPECT_NE(rows[1].find("ERROR"), std::string::npos);
  EXPECT_NE(rows[1].find("utf8app"), std::string::npos);
  EXPECT_NE(rows[1].find("bad \xEF\xBF\xBD"), std::string::npos) << rows[1];
  EXPECT_NE(r.err.find("3 records"), std::string::npos) << r.err;
}

TEST_F(QueryCommandTest, VolumePrintsOneLinePerBucketAndTheTotals) {
  served_->Serve();
  const std::string from = "2026-09-21T14:13:20Z";  // the workload's first ms (1'790'000'000'000)
  const std::string to = "2026-09-21T20:13:20Z";    // + 6 h
  CliRun r = Logdex({"query", "--server", Url(), "--volume", "--app", "app1", "--from", from, "--to", to, "--step",
                     "1h"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 1u + 7u + 1u) << r.out;  // header, 7 hour buckets (14:00 .. 20:00), totals
  EXPECT_EQ(rows[0].rfind("START", 0), 0u) << rows[0];
  for (const char* col : {"TOTAL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}) {
    EXPECT_NE(rows[0].find(col), std::string::npos) << col;
  }
  EXPECT_EQ(rows[1].rfind("2026-09-21T14:00:00.000Z", 0), 0u) << rows[1];
  EXPECT_EQ(rows[8].rfind("(all)", 0), 0u) << rows[8];
  VolumeQuery vq;
  vq.filter.app = "app1";
  vq.filter.from_ms = 1'790'000'000'000;
  vq.filter.to_ms = vq.filter.from_ms + 6 * 3'600'000;
  vq.step_ms = 3'600'000;
  auto want = served_->engine().Volume(vq);
  ASSERT_TRUE(want.ok());
  std::istringstream total_line(rows[8]);
  std::string label;
  uint64_t total = 0;
  total_line >> label >> total;
  EXPECT_EQ(total, want->totals.total) << rows[8];
  EXPECT_NE(r.err.find("7 buckets of 3600000 ms; from the index"), std::string::npos) << r.err;

  // --json: the server's answer as is; --exact counts by reading.
  r = Logdex(
      {"query", "--server", Url(), "--volume", "--exact", "--app", "app1", "--from", from, "--to", to, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["exact"], true);
  EXPECT_GT(j["stats"]["bytes_decompressed"].get<uint64_t>(), 0u);

  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--volume", "--limit", "5"},
                                                std::vector<std::string>{"--step", "1m"},
                                                std::vector<std::string>{"--volume", "--step", "5y"},
                                                std::vector<std::string>{"--volume", "--step", "0"}}) {
    std::vector<std::string> args = {"query", "--server", Url(), "--app", "app1"};
    args.insert(args.end(), flags.begin(), flags.end());
    r = Logdex(args);
    EXPECT_EQ(r.exit_code, 2) << flags.back() << ": " << r.err;
  }
}

TEST_F(QueryCommandTest, ServerRefusalsGoToStderrWithANonZeroExit) {
  served_->Serve();
  CliRun r = Logdex({"query", "--server", Url(), "--since", "1h", "--json"});  // no app, host or tag
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("HTTP 400"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a query needs app, host or tag"), std::string::npos) << r.err;
}

TEST_F(QueryCommandTest, BadFlagValuesAreRefusedBeforeAnyRequest) {
  served_->Serve();
  struct Case {
    std::vector<std::string> flags;
    const char* says;
  };
  for (const Case& c : {Case{{"--severity", "loud"}, "--severity: 'loud'"}, Case{{"--tag", "dc"}, "--tag: 'dc'"},
                        Case{{"--since", "5"}, "--since: '5'"},
                        Case{{"--from", "yesterday", "--to", "2026-09-21T16:13:20Z"}, "--from: 'yesterday'"}}) {
    std::vector<std::string> args = {"query", "--server", Url(), "--app", "app1"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    CliRun r = Logdex(args);
    EXPECT_EQ(r.exit_code, 2) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

TEST_F(QueryCommandTest, ConnectionFailureNamesTheUrl) {
  // A port that was just free: nothing listens there once the server stops.
  HttpServer& server = served_->Serve();
  const std::string url = Url();
  server.Stop();
  CliRun r = Logdex({"query", "--server", url, "--app", "app1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot reach " + url + "/api/v1/query"), std::string::npos) << r.err;
}

TEST_F(QueryCommandTest, TokenIsSentWhenGivenAndMissingOneIsReported) {
  HttpServerOptions o;
  o.bearer_token = "tok-123";
  served_->Serve(o);
  CliRun denied = Logdex({"query", "--server", Url(), "--app", "app1", "--json"});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("HTTP 401"), std::string::npos) << denied.err;
  CliRun ok = Logdex({"query", "--server", Url(), "--app", "app1", "--json", "--token", "tok-123"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(json::parse(ok.out, nullptr, false).is_object());
}

}  // namespace
}  // namespace logdex
