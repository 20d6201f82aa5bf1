// Parser acceptance on real logs: the Loghub samples in tests/data/loghub
// (https://github.com/logpai/loghub; see the LICENSE and CITATION there).
//
// Line counts: every line of these samples starts with its own header
// (checked: no line starts with whitespace, "Caused by:" or an exception
// name), so the multi-line rules merge nothing and every sample yields
// exactly one record per line. Merging is covered on synthetic stack traces
// in parsers_test.cc.
#include <gtest/gtest.h>

#include <map>

#include "common/clock.h"
#include "parse/assembler.h"
#include "parse/parsers.h"
#include "tests/parse/helpers.h"

namespace logdex::parse {
namespace {

using testing::CollectingSink;
using testing::CsvColumn;
using testing::LoghubPath;
using testing::ReadLines;

// 2026-11-29, so that year inference is deterministic.
const ManualClock kClock(1'795'900'000'000);

std::string Normalize(const std::string& level) {
  static const std::map<std::string, std::string> kMap = {
      {"WARNING", "WARN"}, {"SEVERE", "ERROR"}, {"W", "WARN"},    {"E", "ERROR"}, {"I", "INFO"},
      {"D", "DEBUG"},      {"V", "TRACE"},      {"F", "FATAL"},   {"notice", "INFO"}, {"error", "ERROR"}};
  auto it = kMap.find(level);
  if (it != kMap.end()) return it->second;
  std::string up = level;
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return up;
}

struct Parsed {
  std::vector<testing::Rec> records;
  uint64_t unparsed = 0, joined = 0, lines = 0;
};

Parsed ParseFile(const std::string& name, Format format) {
  ParserOptions po;
  po.format = format;
  auto parser = LineParser::Create(po, kClock);
  EXPECT_TRUE(parser.ok());
  CollectingSink sink;
  RecordAssembler assembler(**parser, sink, AssemblerOptions{});
  for (const std::string& line : ReadLines(LoghubPath(name))) EXPECT_TRUE(assembler.AddLine(line).ok());
  EXPECT_TRUE(assembler.Flush().ok());
  return Parsed{std::move(sink.records), assembler.unparsed_lines(), assembler.joined_lines(), assembler.lines()};
}

struct LevelCase {
  const char* sample;
  Format format;
};

void PrintTo(const LevelCase& c, std::ostream* os) { *os << c.sample << "/" << FormatName(c.format); }

class LoghubLevels : public ::testing::TestWithParam<LevelCase> {};

TEST_P(LoghubLevels, ParsedLevelOfEveryLineEqualsTheCsvLevel) {
  const LevelCase& c = GetParam();
  const std::string log = std::string(c.sample) + "_2k.log";
  const std::vector<std::string> want = CsvColumn(LoghubPath(log + "_structured.csv"), "Level");
  ASSERT_EQ(want.size(), 2000u);
  Parsed p = ParseFile(log, c.format);
  EXPECT_EQ(p.lines, 2000u);
  EXPECT_EQ(p.unparsed, 0u);
  EXPECT_EQ(p.joined, 0u);
  ASSERT_EQ(p.records.size(), want.size()) << "one record per line";
  size_t mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (SeverityName(p.records[i].severity) != Normalize(want[i])) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << c.sample << " line " << i + 1 << ": parsed " << SeverityName(p.records[i].severity)
                      << ", CSV says " << want[i] << ": " << p.records[i].message;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Samples, LoghubLevels,
    ::testing::Values(LevelCase{"HDFS", Format::kAuto}, LevelCase{"HDFS", Format::kLog4j},
                      LevelCase{"Spark", Format::kAuto}, LevelCase{"Spark", Format::kLog4j},
                      LevelCase{"OpenStack", Format::kAuto}, LevelCase{"OpenStack", Format::kLog4j},
                      LevelCase{"Apache", Format::kApache}, LevelCase{"Apache", Format::kAuto},
                      LevelCase{"Android", Format::kLogcat}, LevelCase{"Android", Format::kAuto}),
    [](const auto& info) { return std::string(info.param.sample) + "_" + std::string(FormatName(info.param.format)); });

TEST(LoghubTimestamps, HdfsSparkOpenStackApacheAndroidTimesMatchTheCsv) {
  // First line of each sample, in UTC.
  Parsed hdfs = ParseFile("HDFS_2k.log", Format::kAuto);
  EXPECT_EQ(hdfs.records[0].ts_ms, 1226262975000);  // 2008-11-09 20:36:15
  Parsed spark = ParseFile("Spark_2k.log", Format::kAuto);
  EXPECT_EQ(spark.records[0].ts_ms, 1497039040000);  // 2017-06-09 20:10:40
  Parsed os = ParseFile("OpenStack_2k.log", Format::kAuto);
  EXPECT_EQ(os.records[0].ts_ms, 1494892800008);  // 2017-05-16 00:00:00.008
  Parsed apache = ParseFile("Apache_2k.log", Format::kApache);
  EXPECT_EQ(apache.records[0].ts_ms, 1133671664000);  // 2005-12-04 04:47:44
  Parsed android = ParseFile("Android_2k.log", Format::kLogcat);
  EXPECT_EQ(android.records[0].ts_ms, 1773764018811);  // 2026-03-17 16:13:38.811 (year inferred)
  EXPECT_EQ(android.records[0].tags.size(), 1u);
  EXPECT_EQ(android.records[0].tags[0], (std::pair<std::string, std::string>{"tag", "WindowManager"}));
  // Every line is kept whole as the message.
  EXPECT_EQ(hdfs.records[0].message, ReadLines(LoghubPath("HDFS_2k.log"))[0]);
}

TEST(LoghubSyslog, LinuxAndOpenSshLinesYieldHostAndApp) {
  struct Case {
    const char* sample;
    const char* host_column;
    const char* app_column;
  };
  // The Linux CSV keeps the host in its "Level" column; OpenSSH's in "Component".
  for (Case c : {Case{"Linux", "Level", "Component"}, Case{"OpenSSH", "Component", nullptr}}) {
    for (Format f : {Format::kSyslog, Format::kAuto}) {
      const std::string log = std::string(c.sample) + "_2k.log";
      const auto hosts = CsvColumn(LoghubPath(log + "_structured.csv"), c.host_column);
      Parsed p = ParseFile(log, f);
      ASSERT_EQ(p.records.size(), 2000u) << c.sample;
      EXPECT_EQ(p.unparsed, 0u) << c.sample;
      std::vector<std::string> apps;
      if (c.app_column) apps = CsvColumn(LoghubPath(log + "_structured.csv"), c.app_column);
      size_t app_mismatch = 0;
      for (size_t i = 0; i < p.records.size(); ++i) {
        ASSERT_EQ(p.records[i].host, hosts[i]) << c.sample << " line " << i + 1;
        ASSERT_FALSE(p.records[i].app.empty()) << c.sample << " line " << i + 1;
        if (c.app_column && p.records[i].app != apps[i]) ++app_mismatch;
        if (!c.app_column) {
          EXPECT_EQ(p.records[i].app, "sshd");
        }
      }
      // Linux has one line whose tag the CSV reads differently
      // ("combo  -- root[2421]: ..."): allow at most that.
      EXPECT_LE(app_mismatch, 1u) << c.sample;
      EXPECT_EQ(p.records[0].severity, Severity::kInfo);  // no PRI: the default
    }
  }
}

}  // namespace
}  // namespace logdex::parse
