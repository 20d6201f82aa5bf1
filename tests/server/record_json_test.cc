// AppendRecordJson and AppendJsonString against what they replace: the
// record built as an nlohmann::json object and dumped with invalid UTF-8
// replaced (http_server.cc's RecordToJson and Dump, as they were). Loki's
// tail messages, written with them, against the object loki_api.cc built.
#include "http/record_json.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/severity.h"
#include "common/time_parse.h"
#include "http/loki_api.h"

namespace logdex {
namespace {

using nlohmann::json;

std::string Dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The reference: the DOM the query API and live tail built per record.
std::string ReferenceRecord(const ResultRecord& r) {
  json tags = json::object();
  for (const auto& [k, v] : r.tags) tags[k] = v;
  return Dumped({{"ts", r.ts_ms},
                 {"time", FormatTimestamp(r.ts_ms)},
                 {"severity", std::string(SeverityName(r.severity))},
                 {"app", r.app},
                 {"host", r.host},
                 {"message", r.message},
                 {"tags", std::move(tags)}});
}

std::string Written(std::string_view s) {
  std::string out;
  AppendJsonString(out, s);
  return out;
}

TEST(RecordJson, StringsAreEscapedAsNlohmannDumpsThem) {
  for (std::string s : {std::string(""), std::string("plain"), std::string("quote \" backslash \\ slash /"),
                        std::string("\b\f\n\r\t", 5), std::string("\x00\x01\x1f\x7f", 4), std::string("é ü 日本 😀"),
                        std::string("\xff"), std::string("\xc3"), std::string("a\xc3("), std::string("\xe2\x82"),
                        std::string("\xed\xa0\x80"),  // a surrogate
                        std::string("\xc0\xaf"),      // overlong
                        std::string("\xf4\x90\x80\x80"),  // past U+10FFFF
                        std::string("\xf0\x9f\x98"), std::string("\x80\x80 tail")}) {
    EXPECT_EQ(Written(s), Dumped(json(s))) << json(s).dump(-1, ' ', true, json::error_handler_t::replace);
  }
}

// Random strings over an alphabet dense in what needs care: escapes,
// control bytes, lead and continuation bytes of every length, the bytes
// that bound the valid ranges (0xC1/0xC2, 0x9F/0xA0, 0x8F/0x90, 0xF4/0xF5).
std::string RandomBytes(std::mt19937_64& rng) {
  // Its first 17 bytes end with the literal's NUL byte.
  static const std::string kAlphabet = std::string("aZ9 _/\"\\\b\f\n\r\t\x01\x1f\x7f", 17) +
                                       "\x80\x8f\x90\x9f\xa0\xbf\xc0\xc1\xc2\xdf\xe0\xe1\xec\xed\xee\xef\xf0\xf1\xf3\xf4"
                                       "\xf5\xff";
  std::string s(rng() % 24, '\0');
  for (char& c : s) c = kAlphabet[rng() % kAlphabet.size()];
  if (rng() % 8 == 0) s.push_back('\0');
  return s;
}

TEST(RecordJson, RandomRecordsAreWhatTheDomDumped) {
  std::mt19937_64 rng(20261204);
  for (int i = 0; i < 20'000; ++i) {
    ResultRecord r;
    r.ts_ms = static_cast<int64_t>(rng() % 4'000'000'000'000ull) - (rng() % 4 == 0 ? 1'000'000'000'000 : 0);
    r.severity = kAllSeverities[rng() % kAllSeverities.size()];
    r.app = RandomBytes(rng);
    r.host = RandomBytes(rng);
    r.message = RandomBytes(rng) + RandomBytes(rng);
    const int tags = static_cast<int>(rng() % 5);
    for (int t = 0; t < tags; ++t) {
      // Few distinct keys: a key given twice keeps its last value.
      std::string key = rng() % 2 ? std::string(1, "abc"[rng() % 3]) : RandomBytes(rng);
      r.tags.emplace_back(std::move(key), RandomBytes(rng));
    }
    std::string got;
    AppendRecordJson(got, r);
    const std::string want = ReferenceRecord(r);
    ASSERT_EQ(got, want) << "record " << i;
  }
}

TEST(RecordJson, AppendsToWhatIsThere) {
  ResultRecord r;
  r.ts_ms = 1'764'806'400'123;
  r.severity = Severity::kError;
  r.app = "web";
  r.host = "h1";
  r.message = "boom";
  r.tags = {{"b", "2"}, {"a", "1"}, {"b", "3"}};
  std::string out = "data: ";
  AppendRecordJson(out, r);
  EXPECT_EQ(out, "data: {\"app\":\"web\",\"host\":\"h1\",\"message\":\"boom\",\"severity\":\"ERROR\",\"tags\":{\"a\":\"1\","
                 "\"b\":\"3\"},\"time\":\"" + FormatTimestamp(r.ts_ms) + "\",\"ts\":1764806400123}");
}

// The reference: loki_api.cc's tail message as it was, an object dumped.
std::string ReferenceLokiTail(const std::vector<ResultRecord>& records, uint64_t missed_batches, int64_t now_ms) {
  constexpr int64_t kNsPerMs = 1'000'000;
  std::map<std::map<std::string, std::string>, size_t> stream_of;
  json streams = json::array();
  for (const ResultRecord& r : records) {
    std::map<std::string, std::string> labels{
        {"app", r.app}, {"host", r.host}, {"level", std::string(SeverityTableSuffix(r.severity))}};
    for (const auto& [k, v] : r.tags) labels.emplace(k, v);
    auto [it, added] = stream_of.try_emplace(std::move(labels), streams.size());
    if (added) streams.push_back(json{{"stream", it->first}, {"values", json::array()}});
    streams[it->second]["values"].push_back(json::array({std::to_string(r.ts_ms * kNsPerMs), r.message}));
  }
  json msg = {{"streams", std::move(streams)}};
  if (missed_batches > 0) {
    msg["dropped_entries"] = json::array({json{{"labels", {{"__logdex_missed_batches__", std::to_string(missed_batches)}}},
                                               {"timestamp", std::to_string(now_ms * kNsPerMs)}}});
  }
  return Dumped(msg);
}

// Few apps, hosts and tag keys (app, host and level among them), so that
// streams repeat and labels collide; the bytes as RandomBytes makes them.
TEST(RecordJson, LokiTailMessagesAreWhatTheDomDumped) {
  std::mt19937_64 rng(20261205);
  LokiTail tail;
  tail.passes = [](const ResultRecord& r) { return r.message.size() % 5 != 0; };
  static const char* const kKeys[] = {"app", "host", "level", "k", "zone"};
  for (int i = 0; i < 2'000; ++i) {
    std::vector<ResultRecord> records(rng() % 12);
    for (ResultRecord& r : records) {
      r.ts_ms = static_cast<int64_t>(rng() % 4'000'000'000'000ull) - (rng() % 4 == 0 ? 1'000'000'000'000 : 0);
      r.severity = kAllSeverities[rng() % kAllSeverities.size()];
      r.app = rng() % 3 ? std::string(1, "ab"[rng() % 2]) : RandomBytes(rng);
      r.host = rng() % 3 ? "h" : RandomBytes(rng);
      r.message = RandomBytes(rng) + RandomBytes(rng);
      for (int t = 0, n = static_cast<int>(rng() % 3); t < n; ++t) {
        r.tags.emplace_back(kKeys[rng() % 5], rng() % 2 ? std::string("v") : RandomBytes(rng));
      }
    }
    const uint64_t missed = rng() % 3 == 0 ? rng() % 1000 : 0;
    const int64_t now = 1'764'806'400'123;
    std::vector<ResultRecord> passing;
    for (const ResultRecord& r : records) {
      if (tail.passes(r)) passing.push_back(r);
    }
    const std::string got = LokiApi::TailMessage(tail, records, missed, now);
    if (passing.empty() && missed == 0) {
      EXPECT_EQ(got, "") << "message " << i;
      continue;
    }
    ASSERT_EQ(got, ReferenceLokiTail(passing, missed, now)) << "message " << i;
  }
}

}  // namespace
}  // namespace logdex
