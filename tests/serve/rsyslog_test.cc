// A real third-party shipper into `logdex serve` (issue 12): Debian's rsyslog
// (rsyslogd from the package rsyslog, omkafka from rsyslog-kafka) reads two
// Loghub samples with imfile and sends every line to Kafka with omkafka, as
// one JSON object per message (a list template with option.jsonf), into
// `serve --embedded-kafka`, which consumes the topic as JSON lines
// (consumer.topic_formats). Every line of the samples must come back from the
// query API as exactly one record whose message is the line, byte for byte:
// nothing missing, nothing twice, nothing else under the samples' apps.
//
// A line is the bytes between two LFs, which is how imfile splits a file.
// What rsyslog 8.2302 (Debian 12) does to the lines of these samples, seen by
// consuming its topic with kcat: nothing.
// - The samples end their lines with CRLF. imfile splits at LF only, so each
//   line's last byte is its CR; rsyslog keeps it in `msg` (the JSON carries
//   it as "\r"), and serve stores it: the record's message ends with the CR.
// - Trailing spaces (1,080 lines of Linux_2k.log, 118 of OpenSSH_2k.log) and
//   runs of spaces are kept. The samples hold no other control characters,
//   no non-ASCII bytes, no leading spaces and no repeated line, so nothing
//   else is put to the test here.
// The test checks what rsyslog sent (read back from the topic) against the
// file line by line, apart from what serve stored, so a change in rsyslog
// shows up as "rsyslog changed the lines", not as a serve failure.
//
// One change to the input, not to any line: a sample's last line has no line
// end, and imfile sends a line only once it ends, so the test's copy of each
// sample gets one final LF (that last line, unlike the others, has no CR).
//
// The test skips only when rsyslogd or its omkafka module is missing
// (scripts/install-deps.sh installs both); it prints the lines sent, the
// records found and the times until all were on Kafka and all were queryable.
#include <gtest/gtest.h>
#include <httplib.h>
#include <librdkafka/rdkafkacpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "consumer/kafka_clients.h"
#include "tests/serve/kafka_test_util.h"
#include "tests/serve/process.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using testing::ListeningPort;
using testing::Process;
using testing::WaitFor;

constexpr char kTopic[] = "syslog.json";
constexpr int kPartitions = 8;  // serve --embedded-kafka's default for every topic
constexpr int kDeadlineMs = 120'000;

struct Sample {
  std::string file;  // in tests/data/loghub
  std::string tag;   // imfile's Tag: rsyslog's programname, the records' app
};
const std::vector<Sample>& Samples() {
  static const std::vector<Sample> samples = {{"Linux_2k.log", "loghub-linux"}, {"OpenSSH_2k.log", "loghub-openssh"}};
  return samples;
}

using Steady = std::chrono::steady_clock;
double SecondsSince(Steady::time_point t) { return std::chrono::duration<double>(Steady::now() - t).count(); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The lines of `text` (split at LF; a last line without one counts too).
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(at));
      break;
    }
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return lines;
}

// `s` with CR, LF, backslash and other unprintable bytes written as escapes.
std::string Visible(const std::string& s) {
  std::string out;
  char buf[8];
  for (unsigned char c : s) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// How two multisets of lines differ: lines of `want` missing from `got` or
// there more often, and lines of `got` that `want` does not hold; empty when
// they are equal. At most `max` examples of each.
std::string Diff(const std::vector<std::string>& want, const std::vector<std::string>& got, size_t max = 5) {
  std::map<std::string, int> count;
  for (const std::string& l : want) ++count[l];
  for (const std::string& l : got) --count[l];
  size_t missing = 0, extra = 0;
  std::string missing_ex, extra_ex;
  for (const auto& [line, n] : count) {
    if (n > 0) {
      missing += n;
      if (missing <= max) missing_ex += "\n  missing (" + std::to_string(n) + "x): \"" + Visible(line) + "\"";
    } else if (n < 0) {
      extra += -n;
      if (extra <= max) extra_ex += "\n  extra (" + std::to_string(-n) + "x): \"" + Visible(line) + "\"";
    }
  }
  if (missing == 0 && extra == 0) return "";
  return std::to_string(missing) + " missing, " + std::to_string(extra) + " extra (duplicates or altered)" +
         missing_ex + extra_ex;
}

// The absolute path of rsyslogd, or empty when it is not installed.
std::string RsyslogdPath() {
  std::string out;
  if (testing::Run("command -v rsyslogd", &out) == 0) {
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (!out.empty() && out[0] == '/') return out;
  }
  for (const char* p : {"/usr/sbin/rsyslogd", "/sbin/rsyslogd"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// Sums the high watermarks (messages produced) of a topic's partitions with
// one consumer kept across calls; -1 when the cluster does not answer.
class Watermarks {
 public:
  explicit Watermarks(const std::string& bootstrap) {
    std::string err;
    auto conf =
        KafkaConf({{"bootstrap.servers", bootstrap}, {"group.id", "rsyslog-test-watermarks"}, {"log_level", "2"}});
    consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), err));
  }
  ~Watermarks() {
    if (consumer_) consumer_->close();
  }
  int64_t Produced(const std::string& topic, int partitions) {
    if (!consumer_) return -1;
    int64_t sum = 0;
    for (int p = 0; p < partitions; ++p) {
      int64_t low = -1, high = -1;
      if (consumer_->query_watermark_offsets(topic, p, &low, &high, 5000) != RdKafka::ERR_NO_ERROR) return -1;
      sum += high;
    }
    return sum;
  }

 private:
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
};

class RsyslogIntoServe : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // `serve --embedded-kafka` consuming kTopic as JSON lines; waits for its
  // bootstrap file (it owns its partitions) and /readyz.
  void StartServe() {
    const std::string config = Path("serve.yaml");
    std::ofstream(config) << "consumer:\n  topics: [logdex.chunks, " << kTopic << "]\n"
                          << "  topic_formats: {" << kTopic << ": json}\n"
                          << "  session_timeout: 6s\n  shutdown_deadline: 20s\n"
                          << "kafka:\n  log_level: \"3\"\n";
    const std::string bootstrap_file = Path("bootstrap");
    serve_ = std::make_unique<Process>(
        std::vector<std::string>{LOGDEX_BINARY, "serve", "--embedded-kafka", "--bootstrap-file", bootstrap_file,
                                 "--store-dir", Path("store"), "--http", "127.0.0.1:0", "--config", config},
        Path("serve.log"));
    ASSERT_TRUE(serve_->started());
    ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(bootstrap_file) || !serve_->running(); }, kDeadlineMs));
    ASSERT_TRUE(serve_->running()) << "serve exited\n" << serve_->Log();
    ASSERT_TRUE(WaitFor([&] {
      std::getline(std::ifstream(bootstrap_file), bootstrap_);
      return !bootstrap_.empty();
    }, kDeadlineMs)) << serve_->Log();
    port_ = ListeningPort(*serve_, kDeadlineMs);
    ASSERT_GT(port_, 0) << serve_->Log();
    ASSERT_TRUE(WaitFor([&] {
      httplib::Client http("127.0.0.1", port_);
      auto r = http.Get("/readyz");
      return r && r->status == 200;
    }, kDeadlineMs)) << serve_->Log();
  }

  // rsyslogd's configuration: one imfile input per sample, bound to a
  // ruleset whose only action is omkafka with the JSON template; rsyslog's
  // own messages go to a file (shown when the test fails).
  std::string RsyslogConfig() {
    const std::string work = Path("rsyslog-work");
    std::filesystem::create_directories(work);
    std::ostringstream c;
    c << "global(workDirectory=\"" << work << "\")\n"
      << "module(load=\"imfile\")\n"
      << "module(load=\"omkafka\")\n"
      << "template(name=\"json\" type=\"list\" option.jsonf=\"on\") {\n"
      << "  property(outname=\"@timestamp\" name=\"timereported\" dateFormat=\"rfc3339\" format=\"jsonf\")\n"
      << "  property(outname=\"host\" name=\"hostname\" format=\"jsonf\")\n"
      << "  property(outname=\"app\" name=\"programname\" format=\"jsonf\")\n"
      << "  property(outname=\"severity\" name=\"syslogseverity-text\" format=\"jsonf\")\n"
      << "  property(outname=\"message\" name=\"msg\" format=\"jsonf\")\n"
      << "}\n"
      << "ruleset(name=\"tokafka\") {\n"
      << "  action(type=\"omkafka\" broker=[\"" << bootstrap_ << "\"] topic=\"" << kTopic << "\" template=\"json\")\n"
      << "}\n";
    for (const Sample& s : Samples()) {
      c << "input(type=\"imfile\" File=\"" << Path("in-" + s.tag + ".log") << "\" Tag=\"" << s.tag
        << "\" freshStartTail=\"off\" ruleset=\"tokafka\")\n";
    }
    c << "action(type=\"omfile\" file=\"" << Path("rsyslog-internal.log") << "\")\n";
    const std::string path = Path("rsyslog.conf");
    std::ofstream(path) << c.str();
    return path;
  }

  std::string RsyslogLogs() const {
    return "rsyslogd output:\n" + (rsyslog_ ? rsyslog_->Log() : std::string()) + "\nrsyslog's own messages:\n" +
           ReadFile(Path("rsyslog-internal.log"));
  }

  // Every record of `app` in [from_ms, to_ms), following next_cursor; false
  // (and `error` set) when a page fails.
  bool QueryAll(const std::string& app, int64_t from_ms, int64_t to_ms, std::vector<nlohmann::json>* records,
                std::string* error) {
    records->clear();
    httplib::Client http("127.0.0.1", port_);
    http.set_read_timeout(30, 0);
    const std::string base = "/api/v1/query?app=" + app + "&from=" + std::to_string(from_ms) +
                             "&to=" + std::to_string(to_ms) + "&limit=1000";
    std::string cursor;
    for (int page = 0; page < 1000; ++page) {
      // A cursor is base64url and dots: nothing to escape.
      auto r = http.Get(cursor.empty() ? base : base + "&cursor=" + cursor);
      if (!r) {
        *error = "no answer: " + httplib::to_string(r.error());
        return false;
      }
      if (r->status != 200) {
        *error = std::to_string(r->status) + " " + r->body.substr(0, 300);
        return false;
      }
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      if (j.is_discarded() || !j.contains("records")) {
        *error = "not a query answer: " + r->body.substr(0, 300);
        return false;
      }
      for (auto& rec : j["records"]) records->push_back(std::move(rec));
      if (!j["next_cursor"].is_string()) return true;
      cursor = j["next_cursor"].get<std::string>();
    }
    *error = "over 1000 pages";
    return false;
  }

  TempDir dir_;
  // Declared after dir_ and in this order, so destruction kills rsyslogd,
  // then serve (SIGKILL if still running), then removes the directory: a
  // failing assertion leaves no child behind.
  std::unique_ptr<Process> serve_;
  std::unique_ptr<Process> rsyslog_;
  std::string bootstrap_;
  int port_ = -1;
};

TEST_F(RsyslogIntoServe, EveryLineOfTheLoghubSamplesIsFoundOnceByteForByte) {
  const std::string rsyslogd = RsyslogdPath();
  if (rsyslogd.empty()) {
    GTEST_SKIP() << "rsyslogd is not installed (scripts/install-deps.sh installs the packages rsyslog and "
                    "rsyslog-kafka)";
  }
  {
    const std::string probe = Path("probe.conf");
    std::ofstream(probe) << "module(load=\"omkafka\")\n";
    std::string out;
    testing::Run(rsyslogd + " -N1 -f " + probe, &out);
    if (out.find("could not load module 'omkafka'") != std::string::npos) {
      GTEST_SKIP() << "rsyslog's omkafka module is not installed (package rsyslog-kafka; scripts/install-deps.sh "
                      "installs it): "
                   << out;
    }
  }

  // The samples' lines, and the copies imfile reads (a final LF added).
  std::map<std::string, std::vector<std::string>> lines;  // by tag
  size_t total = 0;
  for (const Sample& s : Samples()) {
    std::string text = ReadFile(std::string(LOGDEX_SOURCE_DIR) + "/tests/data/loghub/" + s.file);
    ASSERT_FALSE(text.empty()) << s.file;
    if (text.back() != '\n') text += '\n';
    std::ofstream(Path("in-" + s.tag + ".log"), std::ios::binary) << text;
    lines[s.tag] = SplitLines(text);
    total += lines[s.tag].size();
  }
  ASSERT_EQ(total, 4000u) << "two samples of 2,000 lines";

  StartServe();
  if (HasFatalFailure()) return;

  const std::string config = RsyslogConfig();
  std::string out;
  ASSERT_EQ(testing::Run(rsyslogd + " -N1 -f " + config, &out), 0) << "rsyslogd -N1 refuses the config:\n"
                                                                     << out << "\n" << ReadFile(config);

  const int64_t from_ms = SystemClock::Instance().NowMs() - 60'000;  // imfile stamps a line when it reads it
  const auto started = Steady::now();
  rsyslog_ = std::make_unique<Process>(
      std::vector<std::string>{rsyslogd, "-n", "-f", config, "-i", Path("rsyslogd.pid")}, Path("rsyslogd.log"));
  ASSERT_TRUE(rsyslog_->started()) << rsyslogd;

  // Until every line is on Kafka and queryable (or the deadline).
  Watermarks watermarks(bootstrap_);
  int64_t produced = 0;
  double all_on_kafka_s = -1, all_queryable_s = -1;
  std::map<std::string, size_t> found;
  std::string query_error;
  const bool all_found = WaitFor(
      [&] {
        if (!rsyslog_->running() || !serve_->running()) return true;  // fails below
        produced = watermarks.Produced(kTopic, kPartitions);
        if (all_on_kafka_s < 0 && produced >= static_cast<int64_t>(total)) all_on_kafka_s = SecondsSince(started);
        const int64_t to_ms = SystemClock::Instance().NowMs() + 60'000;
        bool all = true;
        for (const Sample& s : Samples()) {
          std::vector<nlohmann::json> records;
          if (!QueryAll(s.tag, from_ms, to_ms, &records, &query_error)) return false;
          found[s.tag] = records.size();
          all = all && records.size() >= lines[s.tag].size();
        }
        if (all) all_queryable_s = SecondsSince(started);
        return all;
      },
      kDeadlineMs);
  ASSERT_TRUE(rsyslog_->running()) << "rsyslogd exited with " << rsyslog_->Wait() << "\n" << RsyslogLogs();
  ASSERT_TRUE(serve_->running()) << "serve exited with " << serve_->Wait() << "\n" << serve_->Log();
  ASSERT_TRUE(all_found) << "after " << kDeadlineMs / 1000 << " s: " << produced << " of " << total
                         << " messages on Kafka; found " << found["loghub-linux"] << " + " << found["loghub-openssh"]
                         << " records; last query error: " << query_error << "\n"
                         << RsyslogLogs() << "\nserve:\n" << serve_->Log();

  // serve has committed everything rsyslog produced (nothing in flight that
  // could still add a record), and dead-lettered nothing.
  ASSERT_TRUE(WaitFor([&] {
    produced = watermarks.Produced(kTopic, kPartitions);
    return produced > 0 && testing::Committed(bootstrap_, "logdex", kTopic, kPartitions) == produced;
  }, kDeadlineMs)) << "committed " << testing::Committed(bootstrap_, "logdex", kTopic, kPartitions) << " of "
                   << produced << "\n" << serve_->Log();
  EXPECT_EQ(watermarks.Produced(std::string(kTopic) + ".dlq", 1), 0) << "dead letters\n" << serve_->Log();

  // rsyslogd stops cleanly.
  rsyslog_->Signal(SIGTERM);
  ASSERT_TRUE(rsyslog_->WaitFor(60'000)) << RsyslogLogs();
  EXPECT_EQ(rsyslog_->Wait(), 0) << RsyslogLogs();

  // What rsyslog sent: one JSON object per message, its message the line.
  const std::vector<InMessage> sent =
      testing::ReadTopic(bootstrap_, kTopic, kPartitions, static_cast<size_t>(produced), 60'000);
  ASSERT_EQ(static_cast<int64_t>(sent.size()), produced);
  std::map<std::string, std::vector<std::string>> sent_lines;  // by app
  std::string host;
  for (const InMessage& m : sent) {
    std::string_view v = m.value;
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);  // the template's line end
    ASSERT_EQ(v.find('\n'), std::string_view::npos) << "one JSON object per message: " << Visible(std::string(v));
    auto j = nlohmann::json::parse(v, nullptr, false);
    ASSERT_TRUE(j.is_object() && j["message"].is_string() && j["app"].is_string() && j["host"].is_string())
        << Visible(std::string(v));
    sent_lines[j["app"].get<std::string>()].push_back(j["message"].get<std::string>());
    host = j["host"].get<std::string>();
  }

  const int64_t to_ms = SystemClock::Instance().NowMs() + 60'000;
  std::printf("\n%-16s %-15s %6s %13s %14s %7s %10s\n", "sample", "app", "lines", "rsyslog_sent", "records_found",
              "missing", "duplicate");
  size_t found_total = 0;
  for (const Sample& s : Samples()) {
    const std::vector<std::string>& want = lines[s.tag];
    // rsyslog itself: the lines it sent are the file's, unchanged (see the
    // top of this file: the CR of CRLF and trailing spaces included).
    const std::string changed = Diff(want, sent_lines[s.tag]);
    EXPECT_TRUE(changed.empty()) << "rsyslog changed the lines of " << s.file << " (what it sent against the file): "
                                 << changed;

    std::vector<nlohmann::json> records;
    std::string error;
    ASSERT_TRUE(QueryAll(s.tag, from_ms, to_ms, &records, &error)) << error;
    std::vector<std::string> stored;
    for (const auto& r : records) {
      stored.push_back(r.at("message").get<std::string>());  // at(): a missing field throws, failing the test
      EXPECT_EQ(r.at("app").get<std::string>(), s.tag);
      EXPECT_EQ(r.at("host").get<std::string>(), host);
    }
    // Each line exactly once, byte for byte, and no other record of the app.
    const std::string lost = Diff(want, stored);
    EXPECT_TRUE(lost.empty()) << s.file << ": the file's lines against serve's records: " << lost;
    const std::string stored_diff = Diff(sent_lines[s.tag], stored);
    EXPECT_TRUE(stored_diff.empty()) << s.file << ": what rsyslog sent against serve's records: " << stored_diff;
    std::map<std::string, int> count;
    for (const std::string& m : stored) ++count[m];
    size_t missing = 0, duplicate = 0;
    for (const std::string& l : want) {
      const int n = count.count(l) ? count[l] : 0;
      if (n == 0) ++missing;
      if (n > 1) duplicate += n - 1;
    }
    std::printf("%-16s %-15s %6zu %13zu %14zu %7zu %10zu\n", s.file.c_str(), s.tag.c_str(), want.size(),
                sent_lines[s.tag].size(), stored.size(), missing, duplicate);
    found_total += stored.size();
  }
  EXPECT_EQ(sent.size(), total) << "messages on " << kTopic;
  std::printf("%zu lines, %zu Kafka messages from rsyslog, %zu records found; from rsyslogd's start: all on Kafka "
              "after %.2f s, all queryable after %.2f s\n",
              total, sent.size(), found_total, all_on_kafka_s, all_queryable_s);

  serve_->Signal(SIGTERM);
  ASSERT_TRUE(serve_->WaitFor(60'000)) << serve_->Log();
  EXPECT_EQ(serve_->Wait(), 0) << serve_->Log();
}

}  // namespace
}  // namespace logdex
