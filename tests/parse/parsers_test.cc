#include "parse/parsers.h"

#include <gtest/gtest.h>

#include "parse/assembler.h"
#include "tests/parse/helpers.h"

namespace logdex::parse {
namespace {

const ManualClock kClock(1'795'910'400'000);  // 2026-11-29T00:00:00Z

std::unique_ptr<LineParser> Make(Format f, std::string regex = "", std::string time_format = "") {
  ParserOptions o;
  o.format = f;
  o.regex = std::move(regex);
  o.time_format = std::move(time_format);
  auto p = LineParser::Create(o, kClock);
  EXPECT_TRUE(p.ok()) << p.error().ToString();
  return std::move(*p);
}

std::map<std::string, std::string> Tags(const ParsedLine& p) {
  std::map<std::string, std::string> m;
  for (const TagView& t : p.tags) m[std::string(t.key)] = std::string(t.value);
  return m;
}

TEST(Parsers, AutoRecognizesHdfsAndOpenStackLines) {
  auto p = Make(Format::kAuto);
  ParsedLine out;
  p->Parse("081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 terminating", &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_EQ(out.format, Format::kLog4j);
  EXPECT_EQ(out.severity, Severity::kInfo);
  EXPECT_TRUE(out.has_severity);
  EXPECT_EQ(out.ts_ms, 1226262975000);
  p->Parse("nova-api.log.1.2017-05-16_13:53:08 2017-05-16 00:00:00.008 25746 WARNING nova.compute [req-1] x", &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kWarn);
  EXPECT_EQ(out.ts_ms, 1494892800008);
}

TEST(Parsers, Log4jVariants) {
  auto p = Make(Format::kLog4j);
  ParsedLine out;
  p->Parse("2024-03-01 12:00:00,123 ERROR [main] com.acme.Foo: boom", &out);
  EXPECT_EQ(out.severity, Severity::kError);
  EXPECT_EQ(out.ts_ms, 1709294400123);
  p->Parse("2024-03-01 12:00:00.123 [pool-1-thread-2] WARN  com.acme.Foo - slow", &out);
  EXPECT_EQ(out.severity, Severity::kWarn);
  p->Parse("2024-03-01 12:00:00,123 - root - CRITICAL - disk", &out);  // Python logging
  EXPECT_EQ(out.severity, Severity::kFatal);
  p->Parse("[DEBUG] 2024-03-01T12:00:00Z starting", &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kDebug);
  p->Parse("2024-03-01 12:00:00 no level here", &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_FALSE(out.has_severity);
  EXPECT_EQ(out.severity, Severity::kInfo);
  EXPECT_EQ(out.message, "2024-03-01 12:00:00 no level here");
}

TEST(Parsers, UnparsedLinesKeepTheirTextWithTheDefaultSeverity) {
  ParserOptions o;
  o.format = Format::kLog4j;
  o.default_severity = Severity::kWarn;
  auto p = LineParser::Create(o, kClock);
  ASSERT_TRUE(p.ok());
  ParsedLine out;
  (*p)->Parse("no timestamp at all", &out);
  EXPECT_FALSE(out.parsed);
  EXPECT_EQ(out.message, "no timestamp at all");
  EXPECT_EQ(out.severity, Severity::kWarn);
  EXPECT_EQ(out.ts_ms, kClock.NowMs());  // no earlier timestamp yet
  (*p)->Parse("2024-03-01 12:00:00 INFO ok", &out);
  (*p)->Parse("still no timestamp", &out);
  EXPECT_EQ(out.ts_ms, 1709294400000);  // the last parsed one
}

TEST(Parsers, SyslogRfc5424TakesSeverityHostAppAndStructuredData) {
  auto p = Make(Format::kSyslog);
  ParsedLine out;
  p->Parse(R"(<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="App"] An application event)",
           &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kInfo);  // 165 & 7 = 5 (notice)
  EXPECT_EQ(out.host, "mymachine.example.com");
  EXPECT_EQ(out.app, "evntslog");
  EXPECT_EQ(out.ts_ms, 1065910455003);
  auto tags = Tags(out);
  EXPECT_EQ(tags["msgid"], "ID47");
  EXPECT_EQ(tags["iut"], "3");
  EXPECT_EQ(tags["eventSource"], "App");
  p->Parse("<11>1 - host app - - - failed", &out);
  EXPECT_EQ(out.severity, Severity::kError);
  EXPECT_FALSE(out.has_ts);
}

TEST(Parsers, SyslogRfc3164WithAndWithoutPri) {
  auto p = Make(Format::kSyslog);
  ParsedLine out;
  p->Parse("<34>Oct 11 22:14:15 mymachine su[123]: 'su root' failed for lonvick", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kFatal);  // 34 & 7 = 2 (crit)
  EXPECT_EQ(out.host, "mymachine");
  EXPECT_EQ(out.app, "su");
  p->Parse("2024-03-01T12:00:00.5+00:00 web1 nginx: started", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.host, "web1");
  EXPECT_EQ(out.app, "nginx");
  EXPECT_EQ(out.ts_ms, 1709294400500);
}

TEST(Parsers, JsonLinesFieldsAndTags) {
  auto p = Make(Format::kJson);
  ParsedLine out;
  p->Parse(R"({"@timestamp":"2024-03-01T12:00:00.250Z","level":"warning","msg":"disk \"low\"","host":"h7","free=pct":12,"ctx":{"a":[1,2]}})",
           &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.ts_ms, 1709294400250);
  EXPECT_EQ(out.severity, Severity::kWarn);
  EXPECT_EQ(out.message, "disk \"low\"");
  EXPECT_EQ(out.host, "h7");
  auto tags = Tags(out);
  EXPECT_EQ(tags.size(), 2u);
  EXPECT_EQ(tags["free_pct"], "12");
  EXPECT_EQ(tags["ctx"], R"({"a":[1,2]})");
  p->Parse(R"({"ts":1709294400.5,"severity":50,"message":"x"})", &out);  // pino-style numbers
  EXPECT_EQ(out.ts_ms, 1709294400500);
  EXPECT_EQ(out.severity, Severity::kError);
  p->Parse(R"({"broken": )", &out);
  EXPECT_FALSE(out.parsed);
  EXPECT_EQ(out.message, R"({"broken": )");
}

TEST(Parsers, Logfmt) {
  auto p = Make(Format::kLogfmt);
  ParsedLine out;
  p->Parse(R"(time=2024-03-01T12:00:00Z level=error msg="payment \"failed\"" order=42 retry)", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kError);
  EXPECT_EQ(out.ts_ms, 1709294400000);
  EXPECT_EQ(out.message, "payment \"failed\"");
  auto tags = Tags(out);
  EXPECT_EQ(tags["order"], "42");
  EXPECT_EQ(tags.count("retry"), 1u);
  auto a = Make(Format::kAuto);
  a->Parse(R"(ts=1709294400 lvl=warn msg=hello)", &out);
  EXPECT_EQ(out.format, Format::kLogfmt);
  EXPECT_EQ(out.severity, Severity::kWarn);
  a->Parse("the time is now", &out);  // prose with a field name is not logfmt
  EXPECT_FALSE(out.parsed);
  EXPECT_TRUE(out.tags.empty());
}

TEST(Parsers, ApacheErrorLogBothGenerations) {
  auto p = Make(Format::kApache);
  ParsedLine out;
  p->Parse("[Sun Dec 04 04:47:44 2005] [error] mod_jk child workerEnv in error state 6", &out);
  EXPECT_EQ(out.severity, Severity::kError);
  EXPECT_EQ(out.ts_ms, 1133671664000);
  p->Parse("[Fri Sep 09 10:42:29.902022 2011] [core:notice] [pid 35708:tid 4328636416] x", &out);
  EXPECT_EQ(out.severity, Severity::kInfo);
  EXPECT_EQ(out.ts_ms, 1315564949902);
  p->Parse("[Fri Sep 09 10:42:29 2011] [proxy:trace3] y", &out);
  EXPECT_EQ(out.severity, Severity::kTrace);
}

TEST(Parsers, LogcatThreadtimeAndBrief) {
  auto p = Make(Format::kLogcat);
  ParsedLine out;
  p->Parse("03-17 16:13:38.811  1702  2395 F WindowManager: boom", &out);
  EXPECT_EQ(out.severity, Severity::kFatal);
  EXPECT_EQ(Tags(out)["tag"], "WindowManager");
  p->Parse("W/ActivityManager(  586): Unable to start", &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_EQ(out.severity, Severity::kWarn);
  EXPECT_EQ(Tags(out)["tag"], "ActivityManager");
}

TEST(Parsers, UserRegexWithNamedGroupsAndTimeFormat) {
  auto p = Make(Format::kRegex, R"(^(?P<ts>\S+ \S+) \[(?P<level>\w+)\] (?P<user_id>\w+): (?P<msg>.*)$)",
                "%d/%m/%Y %H:%M:%S.%f");
  ParsedLine out;
  p->Parse("16/05/2017 00:00:00.008 [ERROR] alice: card declined", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(out.ts_ms, 1494892800008);
  EXPECT_EQ(out.severity, Severity::kError);
  EXPECT_EQ(out.message, "card declined");
  EXPECT_EQ(Tags(out)["user_id"], "alice");
  p->Parse("does not match", &out);
  EXPECT_FALSE(out.parsed);
}

TEST(Parsers, RejectsBadOptions) {
  ParserOptions o;
  o.format = Format::kRegex;
  EXPECT_FALSE(LineParser::Create(o, kClock).ok());  // no regex
  o.regex = "(unclosed";
  EXPECT_FALSE(LineParser::Create(o, kClock).ok());
  o.regex = "(no)(names)";
  EXPECT_FALSE(LineParser::Create(o, kClock).ok());
  o.regex = R"((?P<msg>.*))";
  o.time_zone = "Mars/Olympus";
  EXPECT_FALSE(LineParser::Create(o, kClock).ok());
}

TEST(Parsers, SanitizeTagKeyReplacesEquals) {
  std::string buf;
  EXPECT_EQ(SanitizeTagKey("a=b=c", &buf), "a_b_c");
  EXPECT_EQ(SanitizeTagKey("", &buf), "_");
  EXPECT_EQ(SanitizeTagKey("plain", &buf), "plain");
}

TEST(Assembler, JoinsStackTracesIntoThePreviousRecord) {
  auto p = Make(Format::kAuto);
  testing::CollectingSink sink;
  RecordAssembler a(*p, sink, AssemblerOptions{});
  const char* lines[] = {
      "2024-03-01 12:00:00,000 INFO [main] app: starting",
      "2024-03-01 12:00:01,000 ERROR [main] app: request failed",
      "java.lang.IllegalStateException: boom",
      "\tat com.acme.A.run(A.java:10)",
      "\tat com.acme.B.run(B.java:20)",
      "Caused by: java.io.IOException: disk",
      "\t... 2 more",
      "",
      "2024-03-01 12:00:02,000 WARN [main] app: retrying",
      "a stray line that is no continuation",
  };
  for (const char* l : lines) ASSERT_TRUE(a.AddLine(l).ok());
  ASSERT_TRUE(a.Flush().ok());
  ASSERT_EQ(sink.records.size(), 4u);
  EXPECT_EQ(sink.records[1].severity, Severity::kError);
  EXPECT_EQ(sink.records[1].message,
            "2024-03-01 12:00:01,000 ERROR [main] app: request failed\njava.lang.IllegalStateException: boom\n"
            "\tat com.acme.A.run(A.java:10)\n\tat com.acme.B.run(B.java:20)\nCaused by: java.io.IOException: "
            "disk\n\t... 2 more\n");
  EXPECT_EQ(sink.records[3].message, "a stray line that is no continuation");
  EXPECT_EQ(sink.records[3].severity, Severity::kInfo);
  EXPECT_EQ(a.joined_lines(), 6u);
  EXPECT_EQ(a.lines(), 10u);
}

TEST(Assembler, CapsARecordAndStartsANewOneWithTheSameSeverity) {
  auto p = Make(Format::kLog4j);
  testing::CollectingSink sink;
  AssemblerOptions o;
  o.max_record_bytes = 70;
  RecordAssembler a(*p, sink, o);
  ASSERT_TRUE(a.AddLine("2024-03-01 12:00:01,000 ERROR x: failed").ok());
  ASSERT_TRUE(a.AddLine("\tat a.b.C.d(C.java:1)").ok());
  ASSERT_TRUE(a.AddLine("\tat a.b.C.e(C.java:2)").ok());
  ASSERT_TRUE(a.Flush().ok());
  ASSERT_EQ(sink.records.size(), 2u);
  EXPECT_EQ(sink.records[1].severity, Severity::kError);
  EXPECT_EQ(sink.records[1].ts_ms, sink.records[0].ts_ms);
  EXPECT_EQ(sink.records[1].message, "\tat a.b.C.e(C.java:2)");
}

TEST(Assembler, MultilineOffKeepsEveryLine) {
  auto p = Make(Format::kLog4j);
  testing::CollectingSink sink;
  AssemblerOptions o;
  o.multiline = false;
  RecordAssembler a(*p, sink, o);
  ASSERT_TRUE(a.AddLine("2024-03-01 12:00:01,000 ERROR x: failed").ok());
  ASSERT_TRUE(a.AddLine("\tat a.b.C.d(C.java:1)").ok());
  ASSERT_TRUE(a.Flush().ok());
  EXPECT_EQ(sink.records.size(), 2u);
}

// A JSON line nested 100,000 levels deep used to overflow the stack (ship
// exited 139; serve took a SIGSEGV and replayed into it after a restart).
// Over kMaxJsonDepth it is not parsed as JSON: the line stays whole, as
// unparsed text, and says why.
TEST(Parsers, JsonNestedPastTheDepthGuardStaysWholeAsUnparsedText) {
  std::string deep = R"({"time":"2026-11-29T10:00:00Z","level":"error","x":)";
  deep += std::string(100'000, '[') + std::string(100'000, ']') + "}";
  for (Format f : {Format::kJson, Format::kAuto}) {
    auto p = Make(f);
    ParsedLine out;
    p->Parse(deep, &out);
    EXPECT_FALSE(out.parsed);
    EXPECT_EQ(out.rejection, kJsonTooDeep);
    EXPECT_EQ(out.message, deep) << "kept whole";
  }
  // Just under the guard, nested values are kept as compact JSON text.
  std::string ok = R"({"time":"2026-11-29T10:00:00Z","msg":"m","x":)" + std::string(kMaxJsonDepth - 1, '[') +
                   std::string(kMaxJsonDepth - 1, ']') + "}";
  auto p = Make(Format::kJson);
  ParsedLine out;
  p->Parse(ok, &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_TRUE(out.rejection.empty());
  EXPECT_EQ(Tags(out)["x"], std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']'));
  // One level more is refused.
  std::string over = R"({"time":"2026-11-29T10:00:00Z","msg":"m","x":)" + std::string(kMaxJsonDepth, '[') +
                     std::string(kMaxJsonDepth, ']') + "}";
  p->Parse(over, &out);
  EXPECT_FALSE(out.parsed);
  EXPECT_EQ(out.rejection, kJsonTooDeep);
  // Brackets inside strings do not count.
  std::string quoted = R"({"time":"2026-11-29T10:00:00Z","msg":")" + std::string(1000, '[') + R"("})";
  p->Parse(quoted, &out);
  EXPECT_TRUE(out.parsed);
  EXPECT_EQ(out.message, std::string(1000, '['));
}

// Invalid UTF-8 inside a JSON string used to fail the whole line (serve
// dead-lettered its message); it is replaced by U+FFFD, the line kept and
// flagged so that callers count it.
TEST(Parsers, InvalidUtf8InAJsonLineIsReplacedAndTheLineKept) {
  auto p = Make(Format::kJson);
  ParsedLine out;
  p->Parse("{\"time\":\"2026-11-29T10:00:00Z\",\"msg\":\"bad \xff\xfe byte\",\"k\xc3\":\"v\"}", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_TRUE(out.utf8_replaced);
  EXPECT_EQ(out.message, "bad \xef\xbf\xbd\xef\xbf\xbd byte");
  EXPECT_EQ(Tags(out).count("k\xef\xbf\xbd"), 1u);
  p->Parse(R"({"time":"2026-11-29T10:00:00Z","msg":"fine é"})", &out);
  EXPECT_FALSE(out.utf8_replaced);
  EXPECT_EQ(out.message, "fine é");
}

// Issue 12: auto detection per input, not per line. In each format, lines
// whose message holds k=v pairs, URLs, JSON fragments or bracketed times are
// read in the input's format, and a stray line (one that per-line detection
// read as logfmt, with a garbage time) is kept whole with the time of the
// record before: every record has its own line's time or its predecessor's.
TEST(Assembler, AutoChoosesOneFormatPerInputAndKeepsItForEveryLine) {
  struct Input {
    Format want;
    std::vector<std::string> lines;
  };
  const std::string stray = "user=bob action=login time=not-a-time url=http://x.example/?a=b";
  const std::vector<Input> inputs = {
      {Format::kLog4j,
       {"2026-11-28 10:00:00,000 INFO [main] app: user=alice role=admin logged in",
        "2026-11-28 10:00:01,000 WARN [main] app: GET http://api.example/v1?x=1&y=2 took 3s",
        stray,
        "2026-11-28 10:00:02,000 ERROR [main] app: payload {\"order\":42,\"ok\":false}",
        "2026-11-28 10:00:03,000 INFO [main] app: replayed [2020-01-01 00:00:00] entry key=value"}},
      {Format::kSyslog,
       {"Nov 28 10:00:00 web1 sshd[12]: Accepted key=ssh-rsa for user=alice from 10.0.0.1",
        "Nov 28 10:00:01 web1 nginx[7]: GET http://x.example/?a=b {\"status\":200}",
        stray,
        "Nov 28 10:00:02 web1 cron[9]: [2020-01-01 00:00:00] job=backup done"}},
      {Format::kApache,
       {"[Sat Nov 28 10:00:00 2026] [error] [client 1.2.3.4] File does not exist: /var/www/a=b",
        "[Sat Nov 28 10:00:01 2026] [notice] GET http://x.example/?k=v {\"a\":1}",
        stray,
        "[Sat Nov 28 10:00:02 2026] [warn] [2020-01-01 00:00:00] level=error msg=nested"}},
      {Format::kLogcat,
       {"11-28 10:00:00.000  1702  2395 D WindowManager: token=Token{a64f992} state=1",
        "11-28 10:00:01.000  1702  8671 I Http: GET http://x.example/?a=b {\"a\":1}",
        stray,
        "11-28 10:00:02.000  1702  8671 W Sync: [2020-01-01 00:00:00] retry=3"}},
      {Format::kJson,
       {R"({"ts":"2026-11-28T10:00:00Z","level":"info","msg":"user=alice url=http://x/?a=b"})",
        R"({"ts":"2026-11-28T10:00:01Z","level":"warn","msg":"[2020-01-01 00:00:00] {\"a\":1}"})",
        stray,
        R"({"ts":"2026-11-28T10:00:02Z","level":"error","msg":"k=v"})"}},
      {Format::kLogfmt,
       {R"(ts=2026-11-28T10:00:00Z level=info msg="GET http://x.example/?a=b")",
        R"(ts=2026-11-28T10:00:01Z level=warn msg="{\"a\":1} [2020-01-01 00:00:00]")",
        "[2026-11-28 10:00:01] a bracketed line that is no logfmt",
        R"(ts=2026-11-28T10:00:02Z level=error msg=done user=bob)"}},
  };
  for (const Input& in : inputs) {
    SCOPED_TRACE(std::string(FormatName(in.want)));
    auto p = Make(Format::kAuto);
    testing::CollectingSink sink;
    AssemblerOptions ao;
    ao.multiline = in.want != Format::kJson;
    RecordAssembler a(*p, sink, ao);
    for (const std::string& l : in.lines) ASSERT_TRUE(a.AddLine(l).ok());
    EXPECT_TRUE(a.has_pending()) << "lines are held until the sample is complete";
    ASSERT_TRUE(a.Flush().ok());
    EXPECT_EQ(p->detected(), in.want);
    ASSERT_EQ(sink.records.size(), in.lines.size());
    EXPECT_EQ(a.unparsed_lines(), 1u);
    for (size_t i = 0; i < in.lines.size(); ++i) {
      const auto& r = sink.records[i];
      if (in.want != Format::kJson && in.want != Format::kLogfmt) {
        EXPECT_EQ(r.message, in.lines[i]);
      }
      EXPECT_GE(r.ts_ms, 1'795'860'000'000) << in.lines[i];  // 2026-11-28T10:00:00Z, the first line's time
      EXPECT_LE(r.ts_ms, 1'795'860'003'000) << in.lines[i];
      if (i > 0) {
        EXPECT_GE(r.ts_ms, sink.records[i - 1].ts_ms) << in.lines[i];
      }
    }
    // The stray line: whole, with the time of the record before.
    const size_t at = 2;
    EXPECT_EQ(sink.records[at].message, in.lines[at]);
    EXPECT_EQ(sink.records[at].ts_ms, sink.records[at - 1].ts_ms);
  }
}

// The sample decides by majority: a first line that looks like logfmt does
// not make a log4j file logfmt.
TEST(Parsers, DetectPicksTheFormatMostSampledLinesMatch) {
  auto p = Make(Format::kAuto);
  const std::vector<std::string_view> sample = {
      "level=info msg=starting pid=12",
      "2026-11-28 10:00:00,000 INFO [main] app: one",
      "2026-11-28 10:00:01,000 INFO [main] app: two k=v",
      "\tat com.acme.A.run(A.java:10)",
  };
  EXPECT_EQ(p->Detect(sample), Format::kLog4j);
  ParsedLine out;
  p->Parse("level=info msg=starting pid=12", &out);
  EXPECT_FALSE(out.parsed) << "not read as logfmt once the input is log4j";
  p->StartInput(0);
  EXPECT_EQ(p->detected(), Format::kAuto) << "each input chooses again";
  const std::vector<std::string_view> prose = {"hello world", "no format here"};
  EXPECT_EQ(p->Detect(prose), Format::kAuto);
}

// CRLF line ends: the '\r' is part of the line end, not of the message.
TEST(Assembler, CrlfLineEndsLeaveNoCarriageReturnInAnyRecord) {
  for (Format f : {Format::kAuto, Format::kLog4j, Format::kJson}) {
    auto p = Make(f);
    testing::CollectingSink sink;
    AssemblerOptions ao;
    ao.multiline = f != Format::kJson;
    RecordAssembler a(*p, sink, ao);
    const bool json = f == Format::kJson;
    const std::vector<std::string> lines =
        json ? std::vector<std::string>{R"({"ts":"2026-11-28T10:00:00Z","msg":"one"})" "\r",
                                        R"({"ts":"2026-11-28T10:00:01Z","msg":"two"})" "\r"}
             : std::vector<std::string>{"2026-11-28 10:00:00,000 ERROR [main] app: failed\r",
                                        "java.lang.IllegalStateException: boom\r", "\tat com.acme.A.run(A.java:10)\r",
                                        "a plain line\r"};
    for (const std::string& l : lines) ASSERT_TRUE(a.AddLine(l).ok());
    ASSERT_TRUE(a.Flush().ok());
    ASSERT_FALSE(sink.records.empty());
    for (const auto& r : sink.records) {
      EXPECT_EQ(r.message.find('\r'), std::string::npos) << FormatName(f) << ": " << r.message;
    }
  }
}

// simdjson (issue 12): float epochs keep their time (a double is written in
// fixed notation, not "1.7e+09"), and a line near the size limit with
// invalid UTF-8 is repaired, not refused for the repair's growth.
TEST(Parsers, JsonFloatEpochsAndRepairedLinesNearTheLimit) {
  auto p = Make(Format::kJson);
  ParsedLine out;
  for (const char* line : {R"({"ts":1700000000.0,"msg":"a"})", R"({"ts":1.7e9,"msg":"b"})"}) {
    p->Parse(line, &out);
    ASSERT_TRUE(out.parsed) << line;
    EXPECT_TRUE(out.has_ts) << line;
    EXPECT_EQ(out.ts_ms, 1'700'000'000'000) << line;
  }
  p->Parse(R"({"ts":"2026-11-28T10:00:00Z","msg":"m","ratio":0.25,"big":1e300,"tiny":1e-9})", &out);
  ASSERT_TRUE(out.parsed);
  EXPECT_EQ(Tags(out)["ratio"], "0.25");
  EXPECT_EQ(Tags(out)["big"], "1e+300");
  EXPECT_EQ(Tags(out)["tiny"], "1e-09");
  std::string near = R"({"ts":"2026-11-28T10:00:00Z","msg":")";
  near += std::string(400, '\xff');
  near += std::string(kMaxJsonLineBytes - near.size() - 2, 'x') + "\"}";
  ASSERT_LE(near.size(), kMaxJsonLineBytes);
  p->Parse(near, &out);
  EXPECT_TRUE(out.parsed) << out.rejection;
  EXPECT_TRUE(out.utf8_replaced);
}

// StartInput: untimed lines before the first timed one take the input's
// fallback time, not the previous input's last time or the clock.
TEST(Parsers, StartInputGivesUntimedLinesTheInputsTimeNotThePreviousOnes) {
  auto p = Make(Format::kAuto);
  ParsedLine out;
  p->Parse("2026-11-29 10:00:00,000 INFO first input", &out);
  ASSERT_TRUE(out.has_ts);
  p->StartInput(1'700'000'000'000);
  p->Parse("no time here", &out);
  EXPECT_FALSE(out.has_ts);
  EXPECT_EQ(out.ts_ms, 1'700'000'000'000);
  p->Parse("2026-11-29 11:00:00,000 INFO timed", &out);
  const int64_t timed = out.ts_ms;
  p->Parse("continuation", &out);
  EXPECT_EQ(out.ts_ms, timed) << "within an input, the previous line's time";
}

}  // namespace
}  // namespace logdex::parse
