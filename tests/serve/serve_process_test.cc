// `logdex serve` as a real process, with real peers: librdkafka's mock
// cluster, kcat from another process, a real Prometheus, group churn and a
// SIGKILL in the middle of ingest.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <librdkafka/rdkafkacpp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/ascii.h"
#include "common/chunk_codec.h"
#include "common/clock.h"
#include "common/defaults.h"
#include "common/net.h"
#include "common/row_keys.h"
#include "common/time_parse.h"
#include "consumer/embedded_kafka.h"
#include "indexer/tables.h"
#include "http/http_server.h"
#include "store/rocksdb_store.h"
#include "tests/hbase/hbase_test_server.h"
#include "tests/alerting/alertmanager_process.h"
#include "alerting/webhook_receiver.h"
#include "tests/serve/kafka_test_util.h"
#include "tests/serve/process.h"
#include "tests/serve/test_hbase.h"
#include "tests/serve/test_kafka.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

using testing::Committed;
using testing::ListeningPort;
using testing::Process;
using testing::TestProducer;
using testing::TestHBase;
using testing::TestKafka;
using testing::WaitFor;

std::string Chunk(uint64_t seq, const std::string& app = "app", int records = 4) {
  proto::RecordBatch b;
  for (int i = 0; i < records; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(SystemClock::Instance().NowMs() - 3'600'000 + static_cast<int64_t>(seq) * 10 + i);
    r->set_severity(SeverityCode(seq % 5 == 0 ? Severity::kWarn : Severity::kInfo));
    r->set_message("record " + std::to_string(seq) + "." + std::to_string(i));
  }
  PackOptions po;
  po.producer_id = 4242;
  po.sequence = seq;
  return PackChunk(app, "host" + std::to_string(seq % 7), b, po).SerializeAsString();
}

// Load that never waits on a consumer: chunks 1, 2, 3, ... (`chunk(seq)`,
// on partition seq % partitions) from a thread of its own, `per_tick` of
// them flushed every 250 ms, until Stop() or the end of the test (an early
// return included). sent() counts the delivered ones.
class PacedLoad {
 public:
  PacedLoad(const std::string& bootstrap, std::string topic, int partitions, uint64_t per_tick,
            std::function<std::string(uint64_t)> chunk)
      : thread_([=, this, topic = std::move(topic), chunk = std::move(chunk)] {
          TestProducer producer(bootstrap);
          for (uint64_t seq = 1; !stop_;) {
            for (uint64_t k = 0; k < per_tick; ++k, ++seq) {
              if (!producer.Queue(topic, static_cast<int32_t>(seq % partitions), chunk(seq))) {
                return End("queueing chunk " + std::to_string(seq) + " failed");
              }
            }
            if (!producer.Flush()) return End("chunks up to " + std::to_string(seq - 1) + " were not all delivered");
            sent_ = seq - 1;
            std::this_thread::sleep_for(std::chrono::milliseconds(250));  // pacing, not a wait
          }
          End("");
        }) {}
  ~PacedLoad() { Stop(); }

  // Stops the load once its current tick is delivered; then sent() is final.
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t sent() const { return sent_; }
  // Why the load ended early; empty while it runs or after a Stop().
  std::string error() const { return ended_ ? error_ : ""; }
  // Waits until at least `n` chunks were delivered; false when the load
  // ended first or 120 s passed.
  bool WaitSent(uint64_t n) const {
    return WaitFor([&] { return sent_ >= n || ended_; }, 120'000) && sent_ >= n;
  }
  bool WaitSentMore(uint64_t n) const { return WaitSent(sent_ + n); }

 private:
  void End(std::string error) {
    error_ = std::move(error);
    ended_ = true;  // publishes error_
  }
  std::atomic<uint64_t> sent_{0};
  std::atomic<bool> stop_{false}, ended_{false};
  std::string error_;
  std::thread thread_;  // last: started once the members above exist
};

// Waits until `query` answers with `want` records; `found` is the last count.
bool WaitForRecords(httplib::Client& http, const std::string& query, size_t want, int timeout_ms, size_t* found) {
  return WaitFor(
      [&] {
        auto r = http.Get(query);
        if (!r || r->status != 200) return false;
        *found = nlohmann::json::parse(r->body)["records"].size();
        return *found == want;
      },
      timeout_ms);
}

// Every line `app` has in the store, through the query API (all pages):
// multi-line records split back on their newlines. False on an HTTP error.
// `from` defaults to 2000 (a test that uses it raises query.max_range, 31 days).
bool QueryLines(httplib::Client& http, const std::string& app, const std::string& to, std::multiset<std::string>* got,
                const std::string& from = "2000-01-01T00:00:00Z") {
  got->clear();
  std::string cursor;
  for (;;) {
    std::string q = "/api/v1/query?app=" + app + "&from=" + from + "&to=" + to + "&limit=5000";
    if (!cursor.empty()) q += "&cursor=" + cursor;
    auto r = http.Get(q);
    if (!r || r->status != 200) return false;
    const nlohmann::json j = nlohmann::json::parse(r->body);
    for (const auto& rec : j["records"]) {
      const std::string message = rec["message"];
      size_t start = 0;
      for (size_t nl; (nl = message.find('\n', start)) != std::string::npos; start = nl + 1) {
        got->insert(message.substr(start, nl - start));
      }
      got->insert(message.substr(start));
    }
    if (j["next_cursor"].is_null()) return true;
    cursor = j["next_cursor"];
  }
}

// Every row of the chunk tables (main, indexes, meta) of a closed store.
std::map<std::string, std::vector<std::pair<std::string, std::string>>> Dump(const std::string& dir) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
  RocksDbOptions ro;
  ro.path = dir;
  auto store = RocksDbStore::Open(ro);
  EXPECT_TRUE(store.ok()) << dir;
  if (!store.ok()) return out;
  std::vector<std::string> tables = IndexTableNames();
  tables.emplace_back(kMainTable);
  for (const std::string& t : tables) {
    EXPECT_TRUE((*store)->Scan(ScanSpec{t, "", "", false, 0}, [&](std::string_view k, std::string_view v) {
      // The query cursors' key: random per store, not indexed data.
      if (t == kMetaTable && k == kCursorKeyRow) return true;
      out[t].emplace_back(k, v);
      return true;
    }).ok());
  }
  return out;
}

// (producer id, sequence) of every main row of a closed store.
std::set<uint64_t> StoredSequences(const std::string& dir) {
  std::set<uint64_t> seqs;
  auto dump = Dump(dir);  // not in the range-for: the temporary would die before the loop
  for (auto& [k, v] : dump[std::string(kMainTable)]) {
    proto::MainRow row;
    EXPECT_TRUE(row.ParseFromString(v));
    seqs.insert(row.chunk().sequence());
  }
  return seqs;
}

// A gauge or counter of a member's /metrics (the first series of `name`); -1 when absent.
double MetricOf(int port, const std::string& name) {
  httplib::Client http("127.0.0.1", port);
  auto r = http.Get("/metrics");
  if (!r || r->status != 200) return -1;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) == 0 && line.size() > name.size() && (line[name.size()] == ' ' || line[name.size()] == '{')) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return -1;
}


class ServeProcess : public ::testing::Test {
 protected:
  std::vector<std::string> ServeArgs(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {LOGDEX_BINARY, "serve", "--store-dir", dir_.path() + "/" + name,
                                     "--http", "127.0.0.1:0", "--config", Config()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::string Config() {
    const std::string path = dir_.path() + "/serve.yaml";
    std::ofstream(path) << "consumer:\n  session_timeout: 6s\n  batch_max_messages: 50\n  shutdown_deadline: 20s\n"
                        << "kafka:\n  log_level: \"3\"\n" << store_yaml_;
    return path;
  }

  // Two serve members, "a" and "b", in one group on one HBase store (the
  // Thrift2 test gateway, or a real HBase in the real_hbase/ variants) with
  // alerts to `receiver`; returns once each owns 4 of the 8 partitions.
  // `alerting_extra` goes under the alerting section.
  struct SharedMembers {
    std::unique_ptr<TestHBase> hbase;
    std::unique_ptr<TestKafka> kafka;
    int port_a = 0, port_b = 0;
    std::unique_ptr<Process> a, b;
  };
  void StartSharedMembers(const std::string& alerting_extra, alerting::WebhookReceiver& receiver,
                          SharedMembers* m) {
    StartSharedMembers([&](const TestHBase&) {
      return "alerting:\n  sinks:\n    - name: hook\n      type: webhook\n      url: " + receiver.url() + "\n" +
             alerting_extra;
    }, m);
  }
  // The same without alerting; `tail(hbase)` follows the store section (its
  // first lines may add to the store.hbase map).
  void StartSharedMembers(const std::function<std::string(const TestHBase&)>& tail, SharedMembers* m) {
    StartHBase(&m->hbase);
    if (IsSkipped() || HasFatalFailure()) return;
    const std::string config = dir_.path() + "/shared.yaml";
    std::ofstream(config) << "consumer:\n  session_timeout: 6s\n  batch_max_messages: 50\n  shutdown_deadline: 20s\n"
                          << "kafka:\n  log_level: \"3\"\n" << m->hbase->StoreYaml("shared") << tail(*m->hbase);
    StartKafka(8, &m->kafka);
    if (IsSkipped() || HasFatalFailure()) return;
    auto member = [&](const std::string& name) {
      return std::make_unique<Process>(
          std::vector<std::string>{LOGDEX_BINARY, "serve", "--config", config, "--http", "127.0.0.1:0", "--brokers",
                                   m->kafka->bootstrap(), "--group", "shared"},
          Log(name));
    };
    m->a = member("a");
    m->b = member("b");
    m->port_a = ListeningPort(*m->a, 180'000);  // after creating their tables
    m->port_b = ListeningPort(*m->b, 180'000);
    ASSERT_GT(m->port_a, 0) << m->a->Log();
    ASSERT_GT(m->port_b, 0) << m->b->Log();
    ASSERT_TRUE(WaitFor([&] {
      return MetricOf(m->port_a, "logdex_consumer_assigned_partitions") == 4 &&
             MetricOf(m->port_b, "logdex_consumer_assigned_partitions") == 4;
    }, 60'000)) << m->a->Log() << m->b->Log();
  }

  // SIGKILLs a member in the middle of ingest and restarts it; its tables end
  // up identical to those of a member that ran without a crash. With
  // `skip_wal`, the kill lands while written rows await a flush, and the test
  // checks that the crash lost them (Kafka replays them).
  void SigkillScenario(bool skip_wal);

  std::string store_yaml_;  // appended to Config()'s file

  // Starts `serve --embedded-kafka` on `port` and waits for its bootstrap
  // file; `bootstrap` is left empty when it does not come.
  std::unique_ptr<Process> StartEmbedded(int* port, std::string* bootstrap, std::vector<std::string> extra = {}) {
    const std::string bootstrap_file = dir_.path() + "/bootstrap";
    std::vector<std::string> args = {LOGDEX_BINARY, "serve", "--embedded-kafka", "--bootstrap-file", bootstrap_file,
                                     "--store-dir", dir_.path() + "/store", "--http", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::filesystem::remove(bootstrap_file);  // an earlier serve's
    auto serve = std::make_unique<Process>(args, Log("serve"));
    bootstrap->clear();
    // It appears once the consumer owns the partitions: after a group join, and
    // after creating the store's tables (seconds each on a real HBase).
    if (WaitFor([&] { return std::filesystem::exists(bootstrap_file); }, 180'000)) {
      std::getline(std::ifstream(bootstrap_file), *bootstrap);
    }
    *port = ListeningPort(*serve);
    return serve;
  }

  std::string Log(const std::string& name) { return dir_.path() + "/" + name + ".log"; }

  // The test's HBase (TestHBase: the Thrift2 test gateway, or a real HBase and
  // gateway in the real_hbase/ variants). A real one that cannot be had skips
  // the test or fails it; callers return when IsSkipped() or HasFatalFailure().
  void StartHBase(std::unique_ptr<TestHBase>* out) {
    TestHBase::Started s = TestHBase::Start(dir_.path());
    if (s.skip) GTEST_SKIP() << s.error;
    ASSERT_NE(s.hbase, nullptr) << s.error;
    *out = std::move(s.hbase);
  }

  // The test's Kafka (TestKafka: the mock cluster, or a real broker in the
  // real_kafka/ variants) with logdex's topic (`partitions`) and its DLQ. A
  // real broker that cannot be had skips the test (kafka.sh's exit 77) or
  // fails it; callers return when IsSkipped() or HasFatalFailure().
  void StartKafka(int partitions, std::unique_ptr<TestKafka>* out, const std::string& topic_configs = "") {
    TestKafka::Started s = TestKafka::Start(dir_.path());
    if (s.skip) GTEST_SKIP() << s.error;
    ASSERT_NE(s.kafka, nullptr) << s.error;
    const std::string topic(kDefaultTopic);
    ASSERT_TRUE(s.kafka->CreateTopic(topic, partitions, topic_configs)) << s.kafka->error();
    ASSERT_TRUE(s.kafka->CreateTopic(topic + ".dlq", 1)) << s.kafka->error();
    *out = std::move(s.kafka);
  }

  TempDir dir_;
};

// Issue 12: every Loghub sample (CRLF line ends, a last line without one,
// multi-line records) through `logdex ship --format auto` -> Kafka -> serve
// -> the query API: every line comes back exactly once, byte for byte
// (multi-line records split back on their newlines).
TEST_F(ServeProcess, EveryLoghubLineRoundTripsByteForByteThroughShipAndServe) {
  // The samples are years old: a retention and a query range that reach them.
  store_yaml_ = "store:\n  ttl: 36500d\nquery:\n  max_range: 36500d\n";
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap, {"--config", Config()});
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(60, 0);
  const char* samples[] = {"Android_2k.log", "Apache_2k.log",    "HDFS_2k.log", "Linux_2k.log",
                           "OpenSSH_2k.log", "OpenStack_2k.log", "Spark_2k.log"};
  const std::string to = std::to_string(SystemClock::Instance().NowMs() + 3'600'000);
  for (const char* name : samples) {
    SCOPED_TRACE(name);
    const std::string path = std::string(LOGDEX_LOGHUB_DIR) + "/" + name;
    std::string app = name;
    app = app.substr(0, app.find('_'));
    app = AsciiLower(app);
    std::string out;
    ASSERT_EQ(testing::Run(std::string(LOGDEX_BINARY) + " ship --brokers " + bootstrap + " --app " + app +
                               " --host h1 --format auto --retention 0 --no-progress " + path,
                           &out),
              0)
        << out;
    // The file's lines, without their line ends.
    std::multiset<std::string> want;
    {
      std::ifstream in(path, std::ios::binary);
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        want.insert(line);
      }
    }
    std::multiset<std::string> got;
    ASSERT_TRUE(WaitFor([&] { return QueryLines(http, app, to, &got) && got.size() >= want.size(); }, 120'000))
        << "found " << got.size() << " of " << want.size() << " lines\n" << serve.Log();
    EXPECT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "the lines that came back differ from the file's";
    if (got != want) {
      std::vector<std::string> missing, extra;
      std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
      std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
      for (size_t i = 0; i < std::min<size_t>(3, missing.size()); ++i) ADD_FAILURE() << "missing: " << missing[i];
      for (size_t i = 0; i < std::min<size_t>(3, extra.size()); ++i) ADD_FAILURE() << "extra: " << extra[i];
    }
    std::printf("%s: %zu lines shipped, %zu back\n", name, want.size(), got.size());
  }
  serve.Signal(SIGTERM);
  EXPECT_TRUE(serve.WaitFor(20'000));
}

// Issue 12: `logdex ship --follow` on a file receiving 100 lines/s (log4j
// lines, every tenth an ERROR with two stack-frame lines), SIGKILLed at
// random moments and restarted three times, then stopped cleanly: every line
// is in the store exactly once. The journal (ship/journal.h) makes the
// restarts send the chunks that may not have been delivered again under
// their own sequences and skip their records when it reads them again.
TEST_F(ServeProcess, ShipFollowKilledThreeTimesStoresEveryLineOnce) {
  store_yaml_ = "query:\n  max_range: 36500d\n";  // QueryLines asks from 2000 on
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap, {"--config", Config()});
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();

  const std::string file = dir_.path() + "/app.log";
  std::ofstream(file).close();
  std::atomic<uint64_t> written{0};
  std::atomic<bool> stop_writing{false};
  std::vector<std::string> lines;  // every line written (the writer's; read after join)
  std::thread writer([&] {
    std::ofstream out(file, std::ios::app | std::ios::binary);
    auto next = std::chrono::steady_clock::now();
    for (uint64_t n = 0; !stop_writing.load(); ++n) {
      const int64_t now = SystemClock::Instance().NowMs();
      const std::time_t secs = now / 1000;
      std::tm tm{};
      gmtime_r(&secs, &tm);
      char stamp[32];
      std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
      std::string record = std::string(stamp) + "," + std::to_string(1000 + now % 1000).substr(1);
      std::vector<std::string> record_lines;
      if (n % 10 == 9) {
        record_lines.push_back(record + " ERROR Worker - request " + std::to_string(n) + " failed");
        record_lines.push_back("\tat org.example.Worker.run(Worker.java:" + std::to_string(n) + ")");
        record_lines.push_back("\tat java.lang.Thread.run(Thread.java:" + std::to_string(n) + ")");
      } else {
        record_lines.push_back(record + " INFO Worker - request " + std::to_string(n) + " served in " +
                               std::to_string(n % 97) + " ms");
      }
      std::string bytes;
      for (const std::string& l : record_lines) bytes += l + "\n";
      out << bytes << std::flush;  // one record, one write
      lines.insert(lines.end(), record_lines.begin(), record_lines.end());
      written += record_lines.size();
      next += std::chrono::milliseconds(10 * record_lines.size());  // 100 lines/s
      std::this_thread::sleep_until(next);
    }
  });

  // Chunks with their records by columns (not ship's default): replayed
  // from the journal like any other, and read by serve.
  const std::vector<std::string> ship_args = {LOGDEX_BINARY, "ship", "--follow", "--brokers", bootstrap,
                                              "--app", "killed", "--host", "h1", "--format", "auto",
                                              "--codec", "zstd-columns",
                                              "--state-dir", dir_.path() + "/ship-state", "--no-progress", file};
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::printf("kill moments: seed %u\n", seed);
  const std::string journal = dir_.path() + "/ship-state/journal";
  auto journaled = [&] {  // a segment on disk: chunks a kill leaves to replay
    std::error_code ec;
    return std::filesystem::exists(journal, ec) && !std::filesystem::is_empty(journal, ec);
  };
  std::string ship_logs;
  for (int run = 0; run < 4; ++run) {
    const std::string log = Log("ship" + std::to_string(run));
    auto ship = std::make_unique<Process>(ship_args, log);
    ASSERT_TRUE(ship->started());
    // Runs while 150-450 more lines arrive (1.5-4.5 s: across a checkpoint
    // interval of 2 s, so kills land before, between and after checkpoints),
    // and until the journal holds something to replay.
    const uint64_t more = 150 + rng() % 300;
    const uint64_t until = written.load() + more;
    ASSERT_TRUE(WaitFor([&] { return (written.load() >= until && journaled()) || !ship->running(); }, 120'000));
    ASSERT_TRUE(ship->running()) << ship->Log();
    std::printf("run %d: stopped after %llu more lines\n", run, static_cast<unsigned long long>(more));
    if (run < 3) {
      ship->Signal(SIGKILL);
    } else {
      stop_writing = true;
      writer.join();
      ship->Signal(SIGTERM);  // a clean stop takes what is written, then finishes
    }
    EXPECT_TRUE(ship->WaitFor(60'000)) << ship->Log();
    ship_logs += ship->Log();
  }
  if (writer.joinable()) {
    stop_writing = true;
    writer.join();
  }

  const std::multiset<std::string> want(lines.begin(), lines.end());
  ASSERT_EQ(want.size(), lines.size()) << "the test's lines are not unique";
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(60, 0);
  const std::string to = std::to_string(SystemClock::Instance().NowMs() + 3'600'000);
  std::multiset<std::string> got;
  ASSERT_TRUE(WaitFor([&] { return QueryLines(http, "killed", to, &got) && got.size() >= want.size(); }, 120'000))
      << "found " << got.size() << " of " << want.size() << " lines\n" << ship_logs << serve.Log();
  // Duplicates would come late (a chunk sent again): wait until serve has
  // committed every message the topic holds (the last ship stopped cleanly,
  // after every delivery).
  const std::string topic(kDefaultTopic);
  int64_t high = -1;
  ASSERT_TRUE(WaitFor([&] {
    high = testing::HighWatermarks(bootstrap, topic, 8);
    return high > 0 && testing::Committed(bootstrap, "logdex", topic, 8) == high;
  }, 120'000)) << "committed " << testing::Committed(bootstrap, "logdex", topic, 8) << " of " << high;
  ASSERT_TRUE(QueryLines(http, "killed", to, &got));
  std::vector<std::string> missing, extra;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
  EXPECT_EQ(missing.size(), 0u);
  EXPECT_EQ(extra.size(), 0u) << "lines stored twice (or never written)";
  for (size_t i = 0; i < std::min<size_t>(3, missing.size()); ++i) ADD_FAILURE() << "missing: " << missing[i];
  for (size_t i = 0; i < std::min<size_t>(3, extra.size()); ++i) ADD_FAILURE() << "extra: " << extra[i];
  // The restarts did have journaled chunks to send again (the kills did not
  // all land on quiet moments), so the journal is what the test proves.
  EXPECT_NE(ship_logs.find("the journal held"), std::string::npos) << ship_logs;
  std::printf("%zu lines written across 3 SIGKILLs, %zu stored\n", want.size(), got.size());
  serve.Signal(SIGTERM);
  EXPECT_TRUE(serve.WaitFor(20'000));
}

// kcat, from another process, produces a chunk made here into
// `serve --embedded-kafka`; it is queryable over HTTP within a second.
TEST_F(ServeProcess, ChunkProducedByKcatIsQueryableWithinOneSecond) {
  if (testing::Run("command -v kcat") != 0) GTEST_SKIP() << "kcat is not installed (scripts/install-deps.sh)";
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap);
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  httplib::Client http("127.0.0.1", port);
  ASSERT_TRUE(WaitFor([&] { return http.Get("/readyz") && http.Get("/readyz")->status == 200; }, 20'000))
      << serve.Log();

  const std::string chunk_file = dir_.path() + "/chunk.bin";
  std::ofstream(chunk_file, std::ios::binary) << Chunk(1, "kcat-app", 3);
  std::string out;
  ASSERT_EQ(testing::Run("kcat -P -b " + bootstrap + " -t " + std::string(kDefaultTopic) + " -p 0 " + chunk_file, &out),
            0)
      << out;
  const int64_t produced = SystemClock::Instance().MonotonicNs();
  size_t found = 0;
  ASSERT_TRUE(WaitForRecords(http, "/api/v1/query?app=kcat-app&since=2h&limit=100", 3, 5'000, &found))
      << "found " << found << "\n" << serve.Log();
  const double seconds = (SystemClock::Instance().MonotonicNs() - produced) / 1e9;
  EXPECT_LT(seconds, 1.0) << "queryable " << seconds << " s after kcat returned";
  serve.Signal(SIGTERM);
  EXPECT_TRUE(serve.WaitFor(20'000));
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// Issue 18: live tail end to end. `logdex query --follow` on a serve fed by
// kcat (an outside producer) with JSON lines: every line of the followed app
// produced after the client subscribed is printed once, the other app's none;
// a serve that stops ends the tail with the reason, and the client says so.
TEST_F(ServeProcess, QueryFollowPrintsEachLineKcatProducesOnceAndSaysWhyServeEndedIt) {
  if (testing::Run("command -v kcat") != 0) GTEST_SKIP() << "kcat is not installed (scripts/install-deps.sh)";
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap);
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  Process follow({LOGDEX_BINARY, "query", "--server", "http://127.0.0.1:" + std::to_string(port), "--follow", "--json",
                  "--app", "tail-app"},
                 Log("follow"));
  ASSERT_TRUE(WaitFor([&] { return MetricOf(port, "logdex_tail_clients") == 1; }, 30'000))
      << follow.Log() << serve.Log();

  const std::string lines_file = dir_.path() + "/lines.jsonl";
  {
    std::ofstream out(lines_file);
    const std::string now = FormatTimestamp(SystemClock::Instance().NowMs() - 1000);
    for (int i = 0; i < 300; ++i) {
      const std::string app = i % 5 == 4 ? "other-app" : "tail-app";
      out << R"({"time":")" << now << R"(","level":"info","app":")" << app << R"(","host":"h1","msg":"tail line )" << i
          << "\"}\n";
    }
  }
  std::string out;
  ASSERT_EQ(testing::Run("kcat -P -b " + bootstrap + " -t " + std::string(kDefaultTopic) +
                             " -H logdex-format=json < " + lines_file,
                         &out),
            0)
      << out;
  std::multiset<std::string> got;
  auto printed = [&] {
    got.clear();
    std::istringstream log(follow.Log());
    for (std::string line; std::getline(log, line);) {
      if (line.empty() || line[0] != '{') continue;
      nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
      if (r.is_object() && r.contains("message")) {
        got.insert(r["app"].get<std::string>() + " " + r["message"].get<std::string>());
      }
    }
    return got.size() >= 240;
  };
  ASSERT_TRUE(WaitFor(printed, 30'000)) << got.size() << " lines printed\n" << follow.Log();
  std::multiset<std::string> want;
  for (int i = 0; i < 300; ++i) {
    if (i % 5 != 4) want.insert("tail-app tail line " + std::to_string(i));
  }
  EXPECT_EQ(got, want);

  serve.Signal(SIGTERM);
  EXPECT_TRUE(serve.WaitFor(30'000));
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
  ASSERT_TRUE(follow.WaitFor(30'000)) << follow.Log();
  EXPECT_EQ(follow.Wait(), 1);
  EXPECT_NE(follow.Log().find("the server ended the live tail: the server is stopping"), std::string::npos)
      << follow.Log();
}

// store.backend: hbase. serve writes through the Thrift2 protocol to a
// THBaseService gateway (the test gateway, or a real HBase's in real_hbase/)
// and answers queries from it; an unreachable gateway fails the start with its
// address.
TEST_F(ServeProcess, TheHBaseBackendIndexesAndAnswersThroughTheThrift2Gateway) {
  std::unique_ptr<TestHBase> hbase;
  StartHBase(&hbase);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string config = dir_.path() + "/hbase.yaml";
  std::ofstream(config) << hbase->StoreYaml("logdex_test");
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap, {"--config", config});
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  TestProducer producer(bootstrap);
  for (uint64_t i = 1; i <= 20; ++i) {
    ASSERT_TRUE(producer.Send(std::string(kDefaultTopic), static_cast<int32_t>(i % 8), Chunk(i, "hb-app", 4)));
  }
  httplib::Client http("127.0.0.1", port);
  size_t found = 0;
  ASSERT_TRUE(WaitForRecords(http, "/api/v1/query?app=hb-app&since=3h&limit=1000", 80, 60'000, &found))
      << "found " << found << "\n" << serve.Log();
  if (HBaseTestServer* gateway = hbase->fixture()) {
    EXPECT_TRUE(gateway->Table("logdex_test:logs").has_value()) << "the main table lives in the namespace";
    EXPECT_GE(gateway->stats().calls["putMultiple"], 1u);
  }
  auto host = http.Get("/api/v1/query?host=host3&since=3h&limit=1000");
  ASSERT_TRUE(host && host->status == 200);
  EXPECT_EQ(nlohmann::json::parse(host->body)["records"].size(), 12u) << "seqs 3, 10, 17 with 4 records each";
  EXPECT_EQ(MetricOf(port, "logdex_store_ttl_kept_tables"), 0);
  // Compaction, on by default, waits for compaction.hbase on HBase: said
  // by a warn line and the gauge.
  EXPECT_EQ(MetricOf(port, "logdex_compaction_active"), 0);
  EXPECT_EQ(MetricOf(port, "logdex_compaction_unavailable"), 1);
  EXPECT_NE(serve.Log().find("compaction: off: on HBase it needs compaction.hbase: true"), std::string::npos)
      << serve.Log();
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();

  // A member started with a shorter store.ttl (a host left behind by a
  // rolling change) leaves the tables' TTL as it is, warns, and counts them:
  // logs, idx_<level> × 6, idx_host, idx_tag, merged, tok and cnt.
  const std::string shorter = dir_.path() + "/hbase-1d.yaml";
  std::ofstream(shorter) << hbase->StoreYaml("logdex_test") << "  ttl: 1d\n";
  auto again = StartEmbedded(&port, &bootstrap, {"--config", shorter});
  ASSERT_FALSE(bootstrap.empty()) << again->Log();
  EXPECT_EQ(MetricOf(port, "logdex_store_ttl_kept_tables"), 12) << again->Log();
  EXPECT_NE(again->Log().find("keeps its TTL of 7.00 d"), std::string::npos) << again->Log();
  if (HBaseTestServer* gateway = hbase->fixture()) {
    EXPECT_EQ(gateway->Table("logdex_test:logs")->ttl_seconds, 7 * 86'400);
  }
  again->Signal(SIGTERM);
  EXPECT_EQ(again->Wait(), 0) << again->Log();

  const std::string unreachable = dir_.path() + "/unreachable.yaml";
  std::ofstream(unreachable) << "store:\n  backend: hbase\n  hbase:\n    port: " << FreeLoopbackPort() << "\n";
  Process failed({LOGDEX_BINARY, "serve", "--embedded-kafka", "--http", "127.0.0.1:0",
                  "--config", unreachable},
                 Log("unreachable"));
  EXPECT_EQ(failed.Wait(), 1);
  EXPECT_NE(failed.Log().find("logdex serve: store:"), std::string::npos) << failed.Log();
}

std::string ErrorChunk(const std::string& app, uint64_t seq) {
  proto::RecordBatch b;
  proto::LogRecord* r = b.add_records();
  r->set_ts_ms(SystemClock::Instance().NowMs() - 1000);
  r->set_severity(SeverityCode(Severity::kError));
  r->set_message("charge " + std::to_string(seq) + " declined by " + app);
  PackOptions po;
  po.producer_id = 77;
  po.sequence = seq;
  return PackChunk(app, "pay-1", b, po).SerializeAsString();
}

// Two members on one HBase store share one outbox. Only the owner of the
// topic's partition 0 delivers from it, so each alert reaches the webhook
// once, not once per member; when that member leaves, the other takes over.
TEST_F(ServeProcess, MembersSharingAnHBaseOutboxDeliverEachAlertOnce) {
  alerting::WebhookReceiver receiver;
  SharedMembers m;
  StartSharedMembers("", receiver, &m);
  if (IsSkipped() || HasFatalFailure()) return;
  const int port_a = m.port_a, port_b = m.port_b;
  auto& a = m.a;
  auto& m2 = m.b;
  const std::string b = m.kafka->bootstrap(), topic(kDefaultTopic);
  auto active = [&] { return std::make_pair(MetricOf(port_a, "logdex_alerting_dispatcher_active"),
                                            MetricOf(port_b, "logdex_alerting_dispatcher_active")); };
  ASSERT_TRUE(WaitFor([&] { return active().first + active().second == 1; }, 10'000))
      << "exactly one member delivers: " << active().first << " + " << active().second;

  TestProducer producer(b);
  auto send_and_count = [&](uint64_t from, uint64_t to) -> std::map<std::string, int> {
    for (uint64_t i = from; i <= to; ++i) {
      // One app per chunk: each is its own group, sent at once. Every partition.
      EXPECT_TRUE(producer.Send(topic, static_cast<int32_t>(i % 8), ErrorChunk("shop-" + std::to_string(i), i)));
    }
    EXPECT_TRUE(receiver.WaitFor(to, std::chrono::seconds(30))) << receiver.requests().size() << " of " << to;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // room for a second delivery to show up
    std::map<std::string, int> per_key;
    for (const auto& req : receiver.requests()) {
      auto j = nlohmann::json::parse(req.body, nullptr, false);
      per_key[j.is_discarded() ? "?" : j.value("idempotency_key", "?")]++;
    }
    return per_key;
  };
  auto first = send_and_count(1, 12);
  EXPECT_EQ(first.size(), 12u);
  for (const auto& [key, n] : first) EXPECT_EQ(n, 1) << key << " delivered " << n << " times";

  // The delivering member leaves; the other owns every partition and delivers.
  const bool a_delivers = active().first == 1;
  Process& leaving = a_delivers ? *a : *m2;
  const int staying_port = a_delivers ? port_b : port_a;
  leaving.Signal(SIGTERM);
  EXPECT_EQ(leaving.Wait(), 0) << leaving.Log();
  ASSERT_TRUE(WaitFor([&] { return MetricOf(staying_port, "logdex_alerting_dispatcher_active") == 1; }, 30'000));
  auto second = send_and_count(13, 18);
  EXPECT_EQ(second.size(), 18u);
  for (const auto& [key, n] : second) EXPECT_EQ(n, 1) << key << " delivered " << n << " times";
  for (auto* p : {a.get(), m2.get()}) {
    if (p != &leaving) {
      p->Signal(SIGTERM);
      EXPECT_EQ(p->Wait(), 0) << p->Log();
    }
  }
}

// Members sharing an HBase store share the alert state too: one group's
// records, arriving on both members' partitions, give one immediate
// notification in the window and digests whose counts add up to the rest.
TEST_F(ServeProcess, MembersSharingAnHBaseStoreKeepOneGroupWindowAndItsCounts) {
  alerting::WebhookReceiver receiver;
  SharedMembers m;
  StartSharedMembers("  limits: {group_window: 10s, digest_delay: 500ms, per_app: 0, global: 0}\n", receiver, &m);
  if (IsSkipped() || HasFatalFailure()) return;
  TestProducer producer(m.kafka->bootstrap());
  const int total = 16;
  for (int i = 1; i <= total; ++i) {
    // One template ("order <n> declined": the number is masked), hosts and partitions alternate.
    proto::RecordBatch b;
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(SystemClock::Instance().NowMs());
    r->set_severity(SeverityCode(Severity::kError));
    r->set_message("order " + std::to_string(1000 + i) + " declined");
    PackOptions po;
    po.producer_id = 88;
    po.sequence = static_cast<uint64_t>(i);
    ASSERT_TRUE(producer.Send(std::string(kDefaultTopic), i % 8,
                              PackChunk("shop", "pay-" + std::to_string(i % 8), b, po).SerializeAsString()));
    // Each record's batch is written before the next is sent: the members
    // take turns, they do not race (concurrent batches are not serialized).
    ASSERT_TRUE(WaitFor([&] {
      return MetricOf(m.port_a, "logdex_indexer_chunks_total") + MetricOf(m.port_b, "logdex_indexer_chunks_total") == i;
    }, 20'000)) << "chunk " << i;
  }
  // The window (10 s from the first) closes, then its digest falls due.
  int events = 0, counted = 0;
  ASSERT_TRUE(WaitFor([&] {
    events = counted = 0;
    for (const auto& req : receiver.requests()) {
      auto j = nlohmann::json::parse(req.body, nullptr, false);
      if (j.is_discarded()) continue;
      events += j.value("kind", "") == "event";
      counted += j.value("count", 0);
    }
    return counted >= total;
  }, 30'000)) << "notifications counted " << counted << " of " << total << "\n" << m.a->Log() << m.b->Log();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // room for an extra one to show up
  events = counted = 0;
  for (const auto& req : receiver.requests()) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    events += j.value("kind", "") == "event";
    counted += j.value("count", 0);
  }
  EXPECT_EQ(events, 1) << "one immediate notification per group window, whichever member saw the record";
  EXPECT_EQ(counted, total) << "the notifications' counts add up to every record";
  EXPECT_EQ(MetricOf(m.port_a, "logdex_query_longest_span_read_failures_total"), 0) << "exported";
  for (auto* p : {m.a.get(), m.b.get()}) {
    p->Signal(SIGTERM);
    EXPECT_EQ(p->Wait(), 0) << p->Log();
  }
}

// Issue 13, faults on HBase: the gateway dies (a real one by SIGKILL) while
// serve writes batches, and comes back; then HBase itself is SIGKILLed and
// started again; chunks keep coming throughout. serve pauses its partitions
// and retries (logdex_store_write_failures_total, logdex_consumer_paused),
// resumes by itself, and every record is found exactly once: offsets are
// committed only for rows HBase acknowledged with a WAL that outlives the
// kill, and a retried batch writes the same rows again. The test gateway is
// its own store: there both faults are a stop and a start in this process.
TEST_F(ServeProcess, HBaseGatewayAndHBaseKilledWhileServeWritesLoseNothing) {
  std::unique_ptr<TestHBase> hbase;
  StartHBase(&hbase);
  if (IsSkipped() || HasFatalFailure()) return;
  std::unique_ptr<TestKafka> kafka;
  StartKafka(8, &kafka);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string b = kafka->bootstrap(), topic(kDefaultTopic), group = "faults";
  const std::string config = dir_.path() + "/faults.yaml";
  std::ofstream(config) << "consumer:\n  session_timeout: 6s\n  batch_max_messages: 50\n  shutdown_deadline: 20s\n"
                        << "  retry_backoff_max: 2s\nkafka:\n  log_level: \"3\"\n"
                        << hbase->StoreYaml("faults") << "    rpc_timeout: 20s\n";
  Process serve({LOGDEX_BINARY, "serve", "--config", config, "--http", "127.0.0.1:0", "--brokers", b, "--group", group},
                Log("serve"));
  const int port = ListeningPort(serve, 180'000);  // after creating its tables (a real HBase: seconds each)
  ASSERT_GT(port, 0) << serve.Log();
  auto committed = [&] { return Committed(b, group, topic, 8); };
  auto failures = [&] { return MetricOf(port, "logdex_store_write_failures_total"); };
  auto paused = [&] { return MetricOf(port, "logdex_consumer_paused"); };
  // An outage indicator: failed writes plus writes and batches over 5 s (one slow
  // thing may count twice). A put to a dead gateway fails at once; a call through a
  // gateway whose HBase is down waits in HBase's client until it is back: a put, or
  // the read of a stream's extent a batch makes while it is staged (an HBase member
  // reads extents in each batch), which shows in the batch's time only.
  auto slow_or_failed = [&] {
    return failures() + MetricOf(port, "logdex_store_write_seconds_count") -
           MetricOf(port, "logdex_store_write_seconds_bucket{le=\"5\"}") +
           MetricOf(port, "logdex_consumer_batch_seconds_count") -
           MetricOf(port, "logdex_consumer_batch_seconds_bucket{le=\"5\"}");
  };

  // 40 chunks of 4 records a second, on every partition, until told to stop.
  PacedLoad load(b, topic, 8, 10, [](uint64_t seq) { return Chunk(seq, "faults", 4); });
  auto sent_more = [&](uint64_t n) { return load.WaitSentMore(n); };

  // 1. The gateway dies while batches go out, and stays away until serve has
  // failed a write, paused, and more chunks have come.
  ASSERT_TRUE(WaitFor([&] { return committed() >= 200; }, 120'000)) << serve.Log();
  ASSERT_TRUE(hbase->KillGateway()) << hbase->error();
  ASSERT_TRUE(WaitFor([&] { return failures() > 0 && paused() == 1; }, 120'000))
      << "serve did not show the gateway's outage\n" << serve.Log();
  ASSERT_TRUE(sent_more(100));
  const int64_t at_gateway_restart = committed();
  ASSERT_TRUE(hbase->RestartGateway()) << hbase->error();
  ASSERT_TRUE(WaitFor([&] { return paused() == 0 && committed() > at_gateway_restart; }, 180'000))
      << "serve did not resume by itself after the gateway came back\n" << serve.Log() << hbase->Logs();

  // 2. HBase dies while batches go out, and starts again on its data.
  ASSERT_TRUE(sent_more(80));
  const double outage_before = slow_or_failed();
  const int64_t at_hbase_kill = committed();
  ASSERT_TRUE(hbase->RestartHBase()) << hbase->error();
  ASSERT_TRUE(WaitFor([&] { return paused() == 0 && committed() > at_hbase_kill + 80; }, 300'000))
      << "serve did not resume by itself after HBase came back\n" << serve.Log() << hbase->Logs();
  if (hbase->real()) {
    EXPECT_GT(slow_or_failed(), outage_before) << "serve did not show HBase's outage";
  }

  ASSERT_TRUE(sent_more(80)) << load.error();
  load.Stop();
  const uint64_t total = load.sent();
  ASSERT_TRUE(WaitFor([&] { return committed() >= static_cast<int64_t>(total); }, 300'000))
      << "committed " << committed() << " of " << total << "\n" << serve.Log();

  std::multiset<std::string> want, got;
  for (uint64_t seq = 1; seq <= total; ++seq) {
    for (int i = 0; i < 4; ++i) want.insert("record " + std::to_string(seq) + "." + std::to_string(i));
  }
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(60, 0);
  // Chunk() stamps records an hour ago.
  const int64_t now = SystemClock::Instance().NowMs();
  ASSERT_TRUE(QueryLines(http, "faults", std::to_string(now + 3'600'000), &got, std::to_string(now - 7'200'000)))
      << serve.Log();
  std::vector<std::string> missing, extra;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
  EXPECT_EQ(missing.size(), 0u) << "records lost of " << want.size() << "\n" << serve.Log();
  EXPECT_EQ(extra.size(), 0u) << "records found twice (or never sent)";
  for (size_t i = 0; i < std::min<size_t>(3, missing.size()); ++i) ADD_FAILURE() << "missing: " << missing[i];
  for (size_t i = 0; i < std::min<size_t>(3, extra.size()); ++i) ADD_FAILURE() << "extra: " << extra[i];
  std::printf("%llu chunks; %.0f failed writes, %.0f failed or over 5 s; gateway %s\n",
              static_cast<unsigned long long>(total), failures(), slow_or_failed(),
              hbase->real() ? "real HBase's" : "the test gateway");
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// A shared outbox needs a topic whose partition 0 decides who delivers; with
// a topic regex, check-config (and serve) asks for it by its key.
TEST_F(ServeProcess, CheckConfigAsksForTheDispatchTopicOfAHBaseRegexSetup) {
  const std::string base = "consumer:\n  topic_regex: '^logs\\..*'\nstore:\n  backend: hbase\n  hbase:\n    host: hb\n"
                           "alerting:\n  sinks:\n    - {name: hook, type: webhook, url: 'http://127.0.0.1:9/'}\n";
  const std::string without = dir_.path() + "/regex.yaml", with = dir_.path() + "/regex-topic.yaml";
  const std::string no_sinks = dir_.path() + "/regex-no-sinks.yaml", rocks = dir_.path() + "/rocks.yaml";
  std::ofstream(without) << base;
  std::ofstream(with) << base << "  delivery:\n    dispatch_topic: logs.app\n";
  // Nothing to deliver, nothing to decide; and partition_0_owner needs a shared outbox.
  std::ofstream(no_sinks) << "consumer:\n  topic_regex: '^logs\\..*'\nstore:\n  backend: hbase\n  hbase:\n    host: hb\n";
  std::ofstream(rocks) << "alerting:\n  delivery: {dispatch: partition_0_owner}\n";
  Process no_sinks_ok({LOGDEX_BINARY, "check-config", no_sinks}, Log("no-sinks"));
  EXPECT_EQ(no_sinks_ok.Wait(), 0) << no_sinks_ok.Log();
  Process rocks_refused({LOGDEX_BINARY, "check-config", rocks}, Log("rocks"));
  EXPECT_EQ(rocks_refused.Wait(), 1);
  EXPECT_NE(rocks_refused.Log().find("partition_0_owner needs an outbox the members share"), std::string::npos)
      << rocks_refused.Log();
  Process refused({LOGDEX_BINARY, "check-config", without}, Log("refused"));
  EXPECT_EQ(refused.Wait(), 1);
  EXPECT_NE(refused.Log().find("alerting.delivery.dispatch_topic"), std::string::npos) << refused.Log();
  Process accepted({LOGDEX_BINARY, "check-config", with}, Log("accepted"));
  EXPECT_EQ(accepted.Wait(), 0) << accepted.Log();
}

// Kafka properties under which the consumer would lose or stall data are
// refused by check-config, naming the key, as serve refuses them at start.
TEST_F(ServeProcess, CheckConfigRefusesCooperativeStickyAndAnOffsetResetOtherThanEarliest) {
  const std::string sticky = dir_.path() + "/sticky.yaml", latest = dir_.path() + "/latest.yaml";
  const std::string plain = dir_.path() + "/range.yaml";
  std::ofstream(sticky) << "kafka:\n  partition.assignment.strategy: cooperative-sticky\n";
  std::ofstream(latest) << "kafka:\n  auto.offset.reset: latest\n";
  std::ofstream(plain) << "kafka:\n  partition.assignment.strategy: roundrobin\n";
  Process a({LOGDEX_BINARY, "check-config", sticky}, Log("sticky"));
  EXPECT_EQ(a.Wait(), 1) << a.Log();
  EXPECT_NE(a.Log().find("kafka.partition.assignment.strategy: cooperative-sticky is not supported"),
            std::string::npos)
      << a.Log();
  Process b({LOGDEX_BINARY, "check-config", latest}, Log("latest"));
  EXPECT_EQ(b.Wait(), 1) << b.Log();
  EXPECT_NE(b.Log().find("kafka.auto.offset.reset: only earliest is allowed"), std::string::npos) << b.Log();
  Process c({LOGDEX_BINARY, "check-config", plain}, Log("range"));
  EXPECT_EQ(c.Wait(), 0) << c.Log();
  // serve refuses it too, before it joins a group (no broker is needed for that).
  Process serve({LOGDEX_BINARY, "serve", "--config", sticky, "--store-dir", dir_.path() + "/sticky", "--http",
                 "127.0.0.1:0", "--brokers", "127.0.0.1:9", "--group", "g"},
                Log("serve"));
  EXPECT_NE(serve.Wait(), 0) << serve.Log();
  EXPECT_NE(serve.Log().find("cooperative-sticky is not supported"), std::string::npos) << serve.Log();
}

// An ERROR line produced to Kafka reaches a webhook receiver through a real
// Alertmanager: serve detects it in the ingest batch, stages it in the outbox
// and the dispatcher posts it to Alertmanager's API v2.
TEST_F(ServeProcess, AnErrorLineReachesTheReceiverThroughARealAlertmanager) {
  if (!alerting::testing::AlertmanagerInstalled()) {
    GTEST_SKIP() << "prometheus-alertmanager is not installed (scripts/install-deps.sh --servers)";
  }
  alerting::WebhookReceiver receiver;
  alerting::testing::AlertmanagerProcess am(receiver.url());
  ASSERT_TRUE(am.ready());
  const std::string config = dir_.path() + "/alerting.yaml";
  std::ofstream(config) << "alerting:\n  sinks:\n    - name: am\n      type: alertmanager\n"
                        << "      url: http://127.0.0.1:" << am.port() << "\n";
  std::string bootstrap;
  int port = 0;
  auto serve_process = StartEmbedded(&port, &bootstrap, {"--config", config});
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();

  proto::RecordBatch b;
  proto::LogRecord* r = b.add_records();
  r->set_ts_ms(SystemClock::Instance().NowMs() - 1000);
  r->set_severity(SeverityCode(Severity::kError));
  r->set_message("payment gateway timed out after 3000 ms");
  PackOptions po;
  po.producer_id = 99;
  po.sequence = 1;
  TestProducer producer(bootstrap);
  ASSERT_TRUE(producer.Send(std::string(kDefaultTopic), 0, PackChunk("payments", "pay-1", b, po).SerializeAsString()));

  ASSERT_TRUE(receiver.WaitFor(1, std::chrono::seconds(30))) << serve.Log();
  const std::string body = receiver.requests().front().body;
  auto j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  ASSERT_FALSE(j["alerts"].empty()) << body;
  EXPECT_EQ(j["alerts"][0]["labels"]["app"], "payments") << body;
  EXPECT_EQ(j["alerts"][0]["labels"]["host"], "pay-1") << body;
  EXPECT_EQ(j["alerts"][0]["labels"]["severity"], "error") << body;
  EXPECT_NE(body.find("payment gateway timed out"), std::string::npos) << body;
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// A real Prometheus scrapes /metrics; the consumed-messages counter comes
// back through its query API; promtool accepts the exposition.
TEST_F(ServeProcess, RealPrometheusScrapesTheConsumedCounter) {
  if (testing::Run("command -v prometheus && command -v promtool") != 0) {
    GTEST_SKIP() << "prometheus is not installed (scripts/install-deps.sh --servers)";
  }
  const int prom_port = FreeLoopbackPort();
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap);
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  TestProducer producer(bootstrap);
  for (uint64_t i = 1; i <= 25; ++i) ASSERT_TRUE(producer.Send(std::string(kDefaultTopic), static_cast<int32_t>(i % 8), Chunk(i)));

  httplib::Client http("127.0.0.1", port);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  const std::string exposition = dir_.path() + "/metrics.txt";
  std::ofstream(exposition) << metrics->body;
  std::string lint;
  EXPECT_EQ(testing::Run("promtool check metrics < " + exposition, &lint), 0) << lint;

  const std::string prom_config = dir_.path() + "/prometheus.yml";
  std::ofstream(prom_config) << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: logdex\n"
                             << "    static_configs:\n      - targets: ['127.0.0.1:" << port << "']\n";
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + prom_config,
                      "--storage.tsdb.path=" + dir_.path() + "/tsdb",
                      "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                     Log("prometheus"));
  httplib::Client prom("127.0.0.1", prom_port);
  double value = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = prom.Get("/api/v1/query?query=logdex_consumer_messages_total");
        if (!r || r->status != 200) return false;
        auto j = nlohmann::json::parse(r->body, nullptr, false);
        if (j.is_discarded() || j["data"]["result"].empty()) return false;
        value = std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
        return value >= 25;
      },
      40'000))
      << "prometheus saw " << value << "\n" << prometheus.Log();
  EXPECT_EQ(value, 25);
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// Two members share 8 partitions; a third joins and one leaves mid-stream.
// Together, their stores hold exactly the chunks produced.
TEST_F(ServeProcess, GroupChurnLosesNothingAndAddsNothing) {
  std::unique_ptr<TestKafka> kafka;
  StartKafka(8, &kafka);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string topic(kDefaultTopic);
  const std::string b = kafka->bootstrap();
  const auto args_a = ServeArgs("a", {"--brokers", b, "--group", "churn"});
  const auto args_c = ServeArgs("c", {"--brokers", b, "--group", "churn"});
  auto a = std::make_unique<Process>(args_a, Log("a"));
  Process m2(ServeArgs("b", {"--brokers", b, "--group", "churn"}), Log("b"));
  std::unique_ptr<Process> c;

  TestProducer producer(b);
  const uint64_t total = 4000;
  for (uint64_t i = 1; i <= total; ++i) {
    ASSERT_TRUE(producer.Queue(topic, static_cast<int32_t>(i % 8), Chunk(i)));
    if (i % 100 == 0) {
      ASSERT_TRUE(producer.Flush());
      std::this_thread::sleep_for(std::chrono::milliseconds(250));  // ~10 s in all
    }
    if (i == 1200) c = std::make_unique<Process>(args_c, Log("c"));
    if (i == 2400) {
      // a leaves the group mid-stream, once it has written a batch (on a
      // loaded machine its first assignment can come late).
      ASSERT_TRUE(WaitFor([&] { return MetricOf(ListeningPort(*a), "logdex_consumer_batches_total") > 0; }, 60'000))
          << a->Log();
      a->Signal(SIGTERM);
    }
    if (i == 3200) {
      // c owns partitions before the last 800 chunks, which go to every partition.
      ASSERT_TRUE(WaitFor([&] { return MetricOf(ListeningPort(*c), "logdex_consumer_assigned_partitions") > 0; },
                          60'000))
          << c->Log();
    }
  }
  ASSERT_TRUE(producer.Flush());
  ASSERT_TRUE(WaitFor([&] { return Committed(b, "churn", topic, 8) == static_cast<int64_t>(total); }, 90'000))
      << "committed " << Committed(b, "churn", topic, 8) << "\n" << m2.Log();
  EXPECT_EQ(a->Wait(), 0) << a->Log();
  m2.Signal(SIGTERM);
  c->Signal(SIGTERM);
  EXPECT_EQ(m2.Wait(), 0) << m2.Log();
  EXPECT_EQ(c->Wait(), 0) << c->Log();

  std::set<uint64_t> all;
  size_t members_with_data = 0;
  for (const char* name : {"a", "b", "c"}) {
    std::set<uint64_t> s = StoredSequences(dir_.path() + "/" + name);
    members_with_data += !s.empty();
    for (uint64_t seq : s) {
      EXPECT_GE(seq, 1u);
      EXPECT_LE(seq, total);
      all.insert(seq);
    }
  }
  EXPECT_EQ(all.size(), total) << "every produced chunk is stored, none other";
  EXPECT_EQ(members_with_data, 3u) << "all three members took part\n== a ==\n"
                                   << a->Log() << "== b ==\n" << m2.Log() << "== c ==\n" << c->Log();
}

// Issue 13: a rolling restart. Two members share the topic while chunks
// keep coming; each is stopped (SIGTERM) and started again on its store in
// turn, the second once the first owns partitions again. Every chunk is
// stored; on a real broker in one member's store only: a member commits what
// it wrote before its partitions move, and the next owner starts there (the
// mock cluster refuses those commits: see below).
TEST_F(ServeProcess, RollingRestartOfTwoMembersUnderLoadStoresEveryChunkOnce) {
  std::unique_ptr<TestKafka> kafka;
  StartKafka(8, &kafka);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string topic(kDefaultTopic);
  const std::string b = kafka->bootstrap();
  const auto args_a = ServeArgs("a", {"--brokers", b, "--group", "rolling"});
  const auto args_b = ServeArgs("b", {"--brokers", b, "--group", "rolling"});
  auto a = std::make_unique<Process>(args_a, Log("a"));
  auto m2 = std::make_unique<Process>(args_b, Log("b"));
  auto owns_partitions = [](Process& p) {
    return WaitFor([&] { return MetricOf(ListeningPort(p), "logdex_consumer_assigned_partitions") > 0; }, 90'000);
  };

  // The load: 100 chunks every 250 ms, until both restarts are done and at
  // least `total` were sent. It never waits on the members: one may own no
  // partition with anything new for a while (on a loaded machine b can read
  // the first 1,000 chunks before a joins).
  const uint64_t total = 4000;
  PacedLoad load(b, topic, 8, 100, [](uint64_t seq) { return Chunk(seq); });
  auto logs = [&] { return "== a ==\n" + a->Log() + "== b ==\n" + m2->Log(); };
  // Stops `member` once `sent` chunks were produced and it has written a
  // batch, and starts it again on its store.
  auto restart = [&](uint64_t sent, std::unique_ptr<Process>& member, const std::vector<std::string>& args,
                     const std::string& log) {
    ASSERT_TRUE(load.WaitSent(sent)) << "produced " << load.sent() << ": " << load.error();
    ASSERT_TRUE(WaitFor([&] { return MetricOf(ListeningPort(*member), "logdex_consumer_batches_total") > 0; },
                        90'000))
        << logs();
    member->Signal(SIGTERM);
    EXPECT_EQ(member->Wait(), 0) << member->Log();
    member = std::make_unique<Process>(args, Log(log));
  };

  ASSERT_TRUE(owns_partitions(*a) && owns_partitions(*m2)) << logs();
  restart(1000, a, args_a, "a-2");
  if (HasFatalFailure()) return;
  ASSERT_TRUE(owns_partitions(*a)) << "the restarted member rejoined\n" << a->Log();
  restart(2400, m2, args_b, "b-2");
  if (HasFatalFailure()) return;
  ASSERT_TRUE(owns_partitions(*m2)) << "the restarted member rejoined\n" << m2->Log();
  ASSERT_TRUE(load.WaitSent(total)) << "produced " << load.sent() << ": " << load.error();
  load.Stop();
  const uint64_t sent = load.sent();
  ASSERT_GE(sent, total);
  ASSERT_TRUE(WaitFor([&] { return Committed(b, "rolling", topic, 8) == static_cast<int64_t>(sent); }, 120'000))
      << "committed " << Committed(b, "rolling", topic, 8) << " of " << sent << "\n" << logs();
  for (auto* p : {a.get(), m2.get()}) {
    p->Signal(SIGTERM);
    EXPECT_EQ(p->Wait(), 0) << p->Log();
  }

  const std::set<uint64_t> in_a = StoredSequences(dir_.path() + "/a"), in_b = StoredSequences(dir_.path() + "/b");
  std::set<uint64_t> all(in_a);
  all.insert(in_b.begin(), in_b.end());
  EXPECT_EQ(all.size(), sent) << "every produced chunk is stored";
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(*all.begin(), 1u);
  EXPECT_EQ(*all.rbegin(), sent);
  std::vector<uint64_t> both;
  std::set_intersection(in_a.begin(), in_a.end(), in_b.begin(), in_b.end(), std::back_inserter(both));
  // librdkafka's mock cluster refuses offset commits while a rebalance is being
  // prepared ("Group rebalance in progress"); a real broker takes them from the
  // current generation until the member's revoke. On the mock, the batches a
  // member wrote in that window are written again by their next owner into its
  // own store (seen: 300-1,974 of 4,000 chunks on a loaded machine); so "by one
  // member only" is asserted on a real broker (KAFKA_ENGINE_TEST_SH: the
  // real_kafka/ variant) and counted here.
  if (kafka->real()) {
    EXPECT_TRUE(both.empty()) << both.size() << " chunks stored by both members, the first " << both.front() << "\n"
                              << [&] {
                                   std::string out;
                                   for (const char* name : {"a", "b", "a-2", "b-2"}) {
                                     std::ifstream in(Log(name));
                                     out += std::string("== ") + name + " ==\n";
                                     for (std::string line; std::getline(in, line);) {
                                       if (line.find("consumer:") != std::string::npos) out += line + "\n";
                                     }
                                   }
                                   return out;
                                 }();
  } else {
    std::printf("mock cluster: %zu of %llu chunks stored by both members\n", both.size(),
                static_cast<unsigned long long>(sent));
  }
  EXPECT_FALSE(in_a.empty());
  EXPECT_FALSE(in_b.empty());
}

void ServeProcess::SigkillScenario(bool skip_wal) {
  std::unique_ptr<TestKafka> kafka;
  StartKafka(8, &kafka);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string topic(kDefaultTopic);
  const std::string b = kafka->bootstrap();
  TestProducer producer(b);
  const int64_t total = 16000;
  for (int64_t i = 1; i <= total; ++i) ASSERT_TRUE(producer.Queue(topic, static_cast<int32_t>(i % 8), Chunk(i, "app", 2)));
  ASSERT_TRUE(producer.Flush());

  {
    // The reference runs uninterrupted with a WAL. With skip_wal, compaction
    // cannot run (nor write its meta rows): the reference turns it off.
    if (skip_wal) store_yaml_ = "compaction: {enabled: false}\n";
    Process ref(ServeArgs("ref", {"--brokers", b, "--group", "ref"}), Log("ref"));
    ASSERT_TRUE(WaitFor([&] { return Committed(b, "ref", topic, 8) == total; }, 120'000)) << ref.Log();
    ref.Signal(SIGTERM);
    ASSERT_EQ(ref.Wait(), 0) << ref.Log();
  }
  // A flush (then a commit) every 512 KiB of messages or 2 s: a few during
  // ingest. Compaction on by default, which skip_wal cannot have (it writes
  // nothing then: the tables still equal the reference's).
  if (skip_wal) store_yaml_ = "store:\n  durability: skip_wal\n  flush_bytes: 512KiB\n  flush_interval: 2s\n";
  int64_t at_kill = 0;
  double indexed_at_kill = 0;
  // With skip_wal, a flush may land between the last look at the metrics
  // and the kill, persisting everything: then this attempt cannot show a
  // loss, and the crash runs again on a fresh store and group (at most 3
  // attempts; a WAL that should not be there fails all of them).
  std::string name = "crash";
  for (int attempt = 0; attempt < 3; ++attempt) {
    name = attempt == 0 ? "crash" : "crash" + std::to_string(attempt);
    {
      const auto args = ServeArgs(name, {"--brokers", b, "--group", name});
      Process victim(args, Log(name + "-1"));
      if (attempt == 0) {
        // Compaction is on by default; skip_wal cannot have it: a warn line
        // and a gauge say so (issue 16: a degraded mode is said). Checked
        // before the kill's wait, which must follow the metrics closely.
        const int port = ListeningPort(victim);
        EXPECT_EQ(MetricOf(port, "logdex_compaction_active"), skip_wal ? 0 : 1) << victim.Log();
        EXPECT_EQ(MetricOf(port, "logdex_compaction_unavailable"), skip_wal ? 1 : 0) << victim.Log();
        EXPECT_EQ(victim.Log().find("compaction: off: durability skip_wal") != std::string::npos, skip_wal)
            << victim.Log();
        EXPECT_EQ(victim.Log().find("compaction: off:") != std::string::npos, skip_wal) << victim.Log();
      }
      ASSERT_TRUE(WaitFor([&] {
        if ((at_kill = Committed(b, name, topic, 8)) <= total / 10) return false;
        if (!skip_wal) return true;
        // Written rows await a flush, and no flush ran while this looked.
        const int port = ListeningPort(victim);
        const double flushes = MetricOf(port, "logdex_store_flush_seconds_count");
        indexed_at_kill = MetricOf(port, "logdex_indexer_chunks_total");
        return MetricOf(port, "logdex_consumer_unflushed_messages") > 0 &&
               MetricOf(port, "logdex_store_flush_seconds_count") == flushes;
      }, 120'000)) << victim.Log();
      victim.Signal(SIGKILL);
      EXPECT_EQ(victim.Wait(), 128 + SIGKILL);
    }
    EXPECT_LT(at_kill, total) << "the kill must land before the end of ingest";
    if (!skip_wal) break;
    // Without a WAL the crash lost what no flush had persisted...
    const size_t survived = Dump(dir_.path() + "/" + name)[std::string(kMainTable)].size();
    EXPECT_GE(static_cast<int64_t>(survived), at_kill) << "every committed chunk was flushed";
    if (static_cast<double>(survived) < indexed_at_kill) break;
    if (attempt == 2) {
      ADD_FAILURE() << "no crash lost an unflushed row in 3 attempts: " << survived << " rows survived of "
                    << indexed_at_kill << " indexed (is a WAL written with skip_wal?)";
    }
  }
  {
    // ... and the restart replays it from the last commit.
    Process again(ServeArgs(name, {"--brokers", b, "--group", name}), Log(name + "-2"));
    ASSERT_TRUE(WaitFor([&] { return Committed(b, name, topic, 8) == total; }, 120'000)) << again.Log();
    again.Signal(SIGTERM);
    ASSERT_EQ(again.Wait(), 0) << again.Log();
  }
  auto ref = Dump(dir_.path() + "/ref");
  auto crashed = Dump(dir_.path() + "/" + name);
  ASSERT_EQ(ref[std::string(kMainTable)].size(), static_cast<size_t>(total));
  for (auto& [table, rows] : ref) EXPECT_TRUE(crashed[table] == rows) << table << ": tables differ after the crash";
}

TEST_F(ServeProcess, SigkillMidBatchThenRestartGivesIdenticalTables) { SigkillScenario(false); }

// durability skip_wal: Kafka is the write-ahead log, offsets follow flushes.
TEST_F(ServeProcess, SigkillWithSkipWalLosesOnlyUncommittedRowsAndReplaysThem) { SigkillScenario(true); }

// A chunk of `records` records of ~10 KB of random letters: snappy cannot
// shrink it, so a few dozen fill the mock cluster's 5 MiB per partition.
std::string BigChunk(uint64_t seq, int records = 20) {
  std::mt19937_64 rng(seq);
  proto::RecordBatch b;
  for (int i = 0; i < records; ++i) {
    proto::LogRecord* r = b.add_records();
    r->set_ts_ms(SystemClock::Instance().NowMs() - 3'600'000 + i);
    r->set_severity(SeverityCode(Severity::kInfo));
    std::string text(10'000, 'a');
    for (char& c : text) c = static_cast<char>('a' + rng() % 26);
    r->set_message(text);
  }
  PackOptions po;
  po.producer_id = 4343;
  po.sequence = seq;
  return PackChunk("big", "host0", b, po).SerializeAsString();
}

// The issue's late consumer: `logdex ship` of 2,000,000 lines, started the
// moment `serve --embedded-kafka` writes its bootstrap file. serve writes it
// only once its consumer owns the partitions, so every line is indexed and
// nothing is counted lost. (Label `load`: tests/CMakeLists.txt.)
class ServeProcessLoad : public ServeProcess {};

TEST_F(ServeProcessLoad, TwoMillionLinesShippedTheMomentTheBootstrapFileAppearsAreAllIndexed) {
  const int64_t total = 2'000'000;
  const std::string lines = dir_.path() + "/lines.json";
  {
    // 3 apps x 4 hosts (tags of one stream: one partition takes it all), an
    // hour of timestamps, random trace ids: ~40 bytes a line once packed, so
    // the ~3 s of a first group join is more than the mock cluster keeps.
    std::ofstream out(lines);
    const int64_t start = SystemClock::Instance().NowMs() - 3'600'000;
    std::mt19937_64 rng(7);
    char trace[40];
    for (int64_t i = 0; i < total; ++i) {
      std::snprintf(trace, sizeof trace, "%016llx span %08x", static_cast<unsigned long long>(rng()),
                    static_cast<unsigned>(rng()));
      out << "{\"ts\":" << start + i / 1000 << ",\"level\":\"info\",\"app\":\"late-" << i % 3 << "\",\"host\":\"node-"
          << (i / 3) % 4 << "\",\"msg\":\"request " << i << " trace " << trace << " served in " << i % 997
          << " ms\"}\n";
    }
    ASSERT_TRUE(out.flush());
  }
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap);
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  std::string out;
  const int64_t t0 = SystemClock::Instance().MonotonicNs();
  ASSERT_EQ(testing::Run(std::string(LOGDEX_BINARY) + " ship --brokers " + bootstrap +
                             " --app late --host any --format json --no-progress " + lines,
                         &out),
            0)
      << out;
  const double ship_s = (SystemClock::Instance().MonotonicNs() - t0) / 1e9;
  ASSERT_GT(port, 0) << serve.Log();
  // Every record indexed; or, when the loss counter moves, fail at once.
  double indexed = 0;
  EXPECT_TRUE(WaitFor([&] {
    indexed = MetricOf(port, "logdex_indexer_records_total");
    return indexed >= total || MetricOf(port, "logdex_consumer_lost_messages_total") > 0;
  }, 600'000)) << "indexed " << indexed << " of " << total;
  const double all_s = (SystemClock::Instance().MonotonicNs() - t0) / 1e9;
  EXPECT_EQ(indexed, total);
  EXPECT_LE(MetricOf(port, "logdex_consumer_lost_messages_total"), 0) << "no series: nothing lost";
  std::printf("late consumer: shipped %lld lines in %.1f s; %.0f indexed %.1f s after the bootstrap file appeared\n",
              static_cast<long long>(total), ship_s, indexed, all_s);
  const std::string log = serve.Log();
  EXPECT_LT(log.find("consumer: assigned"), log.find("embedded kafka: bootstrap")) << "announced after the assignment";
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// The consumer falls behind past the retention: 5 chunks are committed, serve
// stops, ~8 MB go into partition 0 (the mock cluster keeps ~5 MiB; a real
// broker's topic keeps 1 MiB segments up to 2 MiB, retention checked every
// second), serve starts again. The messages deleted before it came back are
// counted in logdex_consumer_lost_messages_total, logged with their range
// and shown on /readyz; the rest of the partition is indexed.
TEST_F(ServeProcess, LaggingPastTheRetentionIsCountedLoggedAndShownOnReadyz) {
  std::unique_ptr<TestKafka> kafka;
  StartKafka(8, &kafka, "retention.bytes=2097152 segment.bytes=1048576");
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string topic(kDefaultTopic);
  const std::string b = kafka->bootstrap();
  TestProducer producer(b);
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(producer.Send(topic, 0, Chunk(i)));  // offsets 0..4
  {
    Process first(ServeArgs("lag", {"--brokers", b, "--group", "lag"}), Log("lag1"));
    ASSERT_TRUE(WaitFor([&] { return Committed(b, "lag", topic, 8) == 5; }, 60'000)) << first.Log();
    first.Signal(SIGTERM);
    ASSERT_EQ(first.Wait(), 0) << first.Log();
  }
  const int big = 40;
  for (int i = 0; i < big; ++i) ASSERT_TRUE(producer.Queue(topic, 0, BigChunk(100 + static_cast<uint64_t>(i))));
  ASSERT_TRUE(producer.Flush());
  // The mock deletes as it appends; a broker in its retention check, once a
  // second: the log start must have moved past 5 and then held for 3 s (a
  // check during the appends may have deleted only part).
  int64_t low = 0;
  auto moved_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] {
    // A consumer per look: not more than 4 a second on a real broker.
    if (kafka->real()) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const int64_t now = testing::LogStart(b, topic, 0);
    if (now != low) {
      low = now;
      moved_at = std::chrono::steady_clock::now();
    }
    return low > 5 && (!kafka->real() || std::chrono::steady_clock::now() - moved_at >= std::chrono::seconds(3));
  }, 90'000)) << "the premise: the cluster deleted offsets from 5 on (log start " << low << ")";
  const int64_t lost = low - 5;

  Process again(ServeArgs("lag", {"--brokers", b, "--group", "lag"}), Log("lag2"));
  const int port = ListeningPort(again);
  ASSERT_GT(port, 0) << again.Log();
  ASSERT_TRUE(WaitFor([&] { return MetricOf(port, "logdex_consumer_lost_messages_total") == lost; }, 60'000))
      << MetricOf(port, "logdex_consumer_lost_messages_total") << " vs " << lost << "\n" << again.Log();
  ASSERT_TRUE(WaitFor([&] { return Committed(b, "lag", topic, 8) == 5 + big; }, 60'000)) << again.Log();
  const std::string range = "(offsets 5.." + std::to_string(low - 1) + ")";
  EXPECT_NE(again.Log().find("lost " + std::to_string(lost) + " messages of " + topic + "[0] " + range),
            std::string::npos)
      << again.Log();
  httplib::Client http("127.0.0.1", port);
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/readyz");
    body = r ? r->body : "";
    return r && r->status == 200;
  }, 30'000)) << body;
  EXPECT_NE(body.find(std::to_string(lost) + " messages lost"), std::string::npos) << body;
  EXPECT_NE(body.find(range), std::string::npos) << body;
  // The consumer commits a batch's offsets, then counts its chunks: wait for
  // the count (under ASan beside two CPU hogs, one read right after the
  // commit saw the last batch's 8 chunks still uncounted).
  EXPECT_TRUE(WaitFor([&] { return MetricOf(port, "logdex_indexer_chunks_total") == 5 + big - low; }, 30'000))
      << MetricOf(port, "logdex_indexer_chunks_total") << " chunks indexed of " << 5 + big - low
      << ": the rest of the partition is indexed";
  again.Signal(SIGTERM);
  EXPECT_EQ(again.Wait(), 0) << again.Log();
}

// A member that starts on a group whose offsets are all committed has no lag
// and is ready at once. Found by bench/peers on a real broker: the lag was
// taken from the log start until the first message arrived (librdkafka knows
// no position before it fetches), so a restarted, caught-up member reported
// the whole topic as lag and /readyz stayed 503 while the topic was quiet.
TEST_F(ServeProcess, ARestartedMemberThatIsCaughtUpHasNoLagAndIsReady) {
  store_yaml_ = "http:\n  ready_max_lag: 3\n";
  std::unique_ptr<TestKafka> kafka;
  StartKafka(4, &kafka);
  if (IsSkipped() || HasFatalFailure()) return;
  const std::string topic(kDefaultTopic);
  const std::string b = kafka->bootstrap();
  TestProducer producer(b);
  for (uint64_t i = 1; i <= 40; ++i) ASSERT_TRUE(producer.Send(topic, static_cast<int32_t>(i % 4), Chunk(i)));
  {
    Process first(ServeArgs("caught-up", {"--brokers", b, "--group", "caught-up"}), Log("caught-up1"));
    ASSERT_TRUE(WaitFor([&] { return Committed(b, "caught-up", topic, 4) == 40; }, 60'000)) << first.Log();
    first.Signal(SIGTERM);
    ASSERT_EQ(first.Wait(), 0) << first.Log();
  }
  Process again(ServeArgs("caught-up", {"--brokers", b, "--group", "caught-up"}), Log("caught-up2"));
  const int port = ListeningPort(again);
  ASSERT_GT(port, 0) << again.Log();
  ASSERT_TRUE(WaitFor([&] { return MetricOf(port, "logdex_consumer_assigned_partitions") == 4; }, 60'000))
      << again.Log();
  // A partition's lag series appears once its watermarks are known (the
  // client learns them from its first fetch): then every one says 0, and
  // /readyz is 200.
  httplib::Client http("127.0.0.1", port);
  std::vector<std::string> lags;
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/metrics");
    lags.clear();
    std::istringstream in(r && r->status == 200 ? r->body : "");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("logdex_consumer_lag_messages{", 0) == 0) lags.push_back(line);
    }
    return lags.size() == 4;
  }, 30'000)) << lags.size() << " lag series";
  for (const std::string& line : lags) {
    EXPECT_EQ(line.substr(line.rfind(' ') + 1), "0") << "10 messages a partition, all committed: " << line;
  }
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  EXPECT_EQ(MetricOf(port, "logdex_consumer_messages_total"), 0) << "nothing was consumed again";
  again.Signal(SIGTERM);
  EXPECT_EQ(again.Wait(), 0) << again.Log();
}

// `logdex ship --kafka` with a secret's value that librdkafka rejects: the
// error names the setting, never the value.
TEST_F(ServeProcess, ShipNeverEchoesARejectedSecretSetting) {
  const std::string lines = dir_.path() + "/one.log";
  std::ofstream(lines) << "2026-01-01T00:00:00Z INFO one line\n";
  std::string out;
  EXPECT_NE(testing::Run(std::string(LOGDEX_BINARY) + " ship --brokers 127.0.0.1:9 --app a --host h --no-progress "
                             "--kafka sasl.oauthbearer.method=hunter2-secret " + lines,
                         &out),
            0);
  EXPECT_EQ(out.find("hunter2-secret"), std::string::npos) << out;
  EXPECT_NE(out.find("sasl.oauthbearer.method"), std::string::npos) << out;
}

// The compaction tests' workload: chunks of a few records each, `per_app`
// of every (app, host), one every 72 s from `start` on (a run holds 9 at
// most), every fourth WARN (a run of its own), the others INFO. Every record
// has a time of its own, so newest first is one order. Chunk k of the a-th
// app goes to partition (k + a) % 8.
struct SmallChunks {
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> by;  // by app, and by host
  size_t records = 0;
  int64_t chunks = 0;

  // A record as the compaction tests compare it.
  static std::string Line(int64_t ts, std::string_view severity, const std::string& app, const std::string& host,
                          const std::string& message) {
    return std::to_string(ts) + " " + std::string(severity) + " " + app + "@" + host + " " + message;
  }
  // The lines of an app or a host, newest first.
  std::vector<std::string> Lines(const std::string& key) const {
    auto records = by.count(key) ? by.at(key) : std::vector<std::pair<int64_t, std::string>>{};
    std::sort(records.rbegin(), records.rend());
    std::vector<std::string> lines;
    for (auto& [ts, l] : records) lines.push_back(std::move(l));
    return lines;
  }
  bool Produce(TestProducer& producer, const std::vector<std::pair<std::string, std::string>>& app_hosts, int per_app,
               int64_t start, uint64_t* seq) {
    for (int k = 0; k < per_app; ++k) {
      for (size_t a = 0; a < app_hosts.size(); ++a) {
        const auto& [app, host] = app_hosts[a];
        const Severity severity = k % 4 == 3 ? Severity::kWarn : Severity::kInfo;
        proto::RecordBatch b;
        for (int i = 0; i < 1 + (k + static_cast<int>(a)) % 5; ++i) {
          proto::LogRecord* r = b.add_records();
          r->set_ts_ms(start + k * 72'000 + i * 1'000 + static_cast<int64_t>(a));
          r->set_severity(SeverityCode(severity));
          r->set_message(app + " record " + std::to_string(k) + "." + std::to_string(i));
          const std::string l = Line(r->ts_ms(), SeverityName(severity), app, host, r->message());
          by[app].emplace_back(r->ts_ms(), l);
          by[host].emplace_back(r->ts_ms(), l);
          ++records;
        }
        PackOptions po;
        po.producer_id = 1616;
        po.sequence = ++*seq;
        if (!producer.Queue(std::string(kDefaultTopic), static_cast<int32_t>((k + a) % 8),
                            PackChunk(app, host, b, po).SerializeAsString())) {
          return false;
        }
        ++chunks;
      }
    }
    return producer.Flush();
  }
};

// Every record of `filter` (app=... or host=...) over the last 4 h, `limit` a
// page, in the order the pages give them, page i asked of ports[i % size]
// (members sharing a store answer each other's cursors); false on an HTTP
// error (its status and body are the failure's message) or past `max_pages`.
// The chunks the pages read are added to `chunks_read` when given.
::testing::AssertionResult QueryLines(const std::vector<int>& ports, const std::string& filter, int limit,
                                      size_t max_pages, std::vector<std::string>* got,
                                      uint64_t* chunks_read = nullptr) {
  got->clear();
  std::string cursor;
  for (size_t page = 0; page <= max_pages; ++page) {
    httplib::Client http("127.0.0.1", ports[page % ports.size()]);
    http.set_read_timeout(60, 0);
    std::string q = "/api/v1/query?" + filter + "&since=4h&limit=" + std::to_string(limit);
    if (!cursor.empty()) q += "&cursor=" + cursor;
    auto r = http.Get(q);
    if (!r) {
      return ::testing::AssertionFailure() << "page " << page << " on port " << ports[page % ports.size()] << ": "
                                           << httplib::to_string(r.error());
    }
    if (r->status != 200) {
      return ::testing::AssertionFailure() << "page " << page << " on port " << ports[page % ports.size()] << ": "
                                           << r->status << " " << r->body;
    }
    const nlohmann::json j = nlohmann::json::parse(r->body);
    for (const auto& rec : j["records"]) {
      got->push_back(SmallChunks::Line(rec["ts"], rec["severity"].get<std::string>(), rec["app"], rec["host"],
                                       rec["message"]));
    }
    if (chunks_read) *chunks_read += j["stats"]["chunks_read"].get<uint64_t>();
    if (j["next_cursor"].is_null()) return ::testing::AssertionSuccess();
    cursor = j["next_cursor"];
  }
  return ::testing::AssertionFailure() << "more than " << max_pages << " pages";
}

// `got` is `expected`; else says what is missing, extra or out of order.
void ExpectSameLines(const std::vector<std::string>& got, const std::vector<std::string>& expected) {
  EXPECT_EQ(got.size(), expected.size());
  if (got == expected) return;
  const std::multiset<std::string> g(got.begin(), got.end()), w(expected.begin(), expected.end());
  std::vector<std::string> missing, extra;
  std::set_difference(w.begin(), w.end(), g.begin(), g.end(), std::back_inserter(missing));
  std::set_difference(g.begin(), g.end(), w.begin(), w.end(), std::back_inserter(extra));
  ADD_FAILURE() << missing.size() << " missing, " << extra.size() << " extra (or twice)"
                << (missing.empty() && extra.empty() ? ": the same records out of order" : "");
  for (size_t i = 0; i < std::min<size_t>(3, missing.size()); ++i) ADD_FAILURE() << "missing: " << missing[i];
  for (size_t i = 0; i < std::min<size_t>(3, extra.size()); ++i) ADD_FAILURE() << "extra: " << extra[i];
  for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
    if (got[i] != expected[i]) {
      ADD_FAILURE() << "first difference at " << i << ": " << got[i] << " instead of " << expected[i];
      break;
    }
  }
}

// Issue 16: serve's compactor merges the many small chunks of slow streams
// (300 chunks of 1-5 records, 1-3 h old: settled, their runs closed, their
// offsets committed) into a few, and the query API then answers exactly the
// records sent: each once, newest first, page after page. (With
// compaction.enabled false, the wait for merges times out.)
TEST_F(ServeProcess, CompactionMergesSmallChunksAndQueriesReturnTheSameRecords) {
  // On (the default); settled after 1 s, runs of less than 10 min, a pass every 200 ms.
  store_yaml_ = "compaction: {enabled: true, settle: 1s, max_span: 10m, interval: 200ms, lookback: 2d}\n";
  int port = 0;
  std::string bootstrap;
  auto serve_process = StartEmbedded(&port, &bootstrap, {"--config", Config()});
  Process& serve = *serve_process;
  ASSERT_FALSE(bootstrap.empty()) << serve.Log();
  ASSERT_GT(port, 0) << serve.Log();

  // Apps cmp-a and cmp-b on host h1, cmp-c on h2: 100 chunks each from 3 h
  // ago to 1 h ago, to every partition.
  const std::string topic(kDefaultTopic);
  const char* const apps[] = {"cmp-a", "cmp-b", "cmp-c"};
  SmallChunks w;
  TestProducer producer(bootstrap);
  uint64_t seq = 0;
  ASSERT_TRUE(w.Produce(producer, {{"cmp-a", "h1"}, {"cmp-b", "h1"}, {"cmp-c", "h2"}}, 100,
                        SystemClock::Instance().NowMs() - 3 * 3'600'000, &seq));
  const int64_t chunks = w.chunks;
  const size_t total = w.records;
  auto query = [&](const std::string& filter, int limit, std::vector<std::string>* got,
                   uint64_t* chunks_read = nullptr) { return QueryLines({port}, filter, limit, total, got, chunks_read); };
  auto all_queryable = [&] {
    std::vector<std::string> got;
    for (const char* app : apps) {
      if (!query(std::string("app=") + app, 10'000, &got) || got != w.Lines(app)) return false;
    }
    return true;
  };
  // The compactor merged, and every record is queryable.
  const std::string merges = "logdex_compaction_merges_total", parts = "logdex_compaction_parts_total",
                    passes = "logdex_compaction_passes_total";
  ASSERT_TRUE(WaitFor([&] {
    const double m = MetricOf(port, merges);
    return m > 0 && MetricOf(port, parts) > m && all_queryable();
  }, 120'000)) << "merges " << MetricOf(port, merges) << ", parts " << MetricOf(port, parts) << ", passes "
               << MetricOf(port, passes) << ", indexed records " << MetricOf(port, "logdex_indexer_records_total")
               << " of " << total << " (-1: not exported, compaction is off)\n" << serve.Log();
  EXPECT_EQ(MetricOf(port, "logdex_compaction_active"), 1);
  EXPECT_EQ(MetricOf(port, "logdex_compaction_unavailable"), 0);
  // Every chunk's offset is committed: no part waits for a replay-safe offset.
  ASSERT_TRUE(WaitFor([&] { return testing::Committed(bootstrap, "logdex", topic, 8) == chunks; }, 120'000))
      << "committed " << testing::Committed(bootstrap, "logdex", topic, 8) << " of " << chunks;
  // Then wait for a pass that started after that and merged nothing: no run
  // is left to merge. A pass adds to the passes counter, then to the parts
  // counter; the reference reads parts then passes, each check passes then
  // parts. Once 3 passes more have ended, the second of them started after
  // the reference's parts and its parts are in the check's: the parts
  // counter unchanged, it merged nothing.
  double seen_parts = MetricOf(port, parts), seen_passes = MetricOf(port, passes);
  ASSERT_TRUE(WaitFor([&] {
    const double now_passes = MetricOf(port, passes), now_parts = MetricOf(port, parts);
    if (now_parts != seen_parts) {
      seen_parts = now_parts;
      seen_passes = MetricOf(port, passes);
      return false;
    }
    // and no run waits for late records to stop (or its stream's last merge to settle).
    return now_passes >= seen_passes + 3 && MetricOf(port, "logdex_compaction_growing_runs") == 0;
  }, 120'000)) << "the compactor kept merging: parts " << seen_parts << " at pass " << seen_passes << "\n"
               << serve.Log();
  EXPECT_EQ(MetricOf(port, "logdex_compaction_waiting_parts"), 0);
  EXPECT_EQ(MetricOf(port, "logdex_compaction_runs_left"), 0);
  EXPECT_EQ(MetricOf(port, "logdex_compaction_failures_total"), 0);
  EXPECT_EQ(MetricOf(port, "logdex_compaction_corrupt_parts_total"), 0);
  EXPECT_EQ(MetricOf(port, "logdex_indexer_chunks_total"), chunks);
  // The first pass looked back to every stream's oldest record (and the next
  // ones, until one reached its end with no run older than the lookback
  // left); the passes since, lookback only (deep_interval, 1 h).
  EXPECT_GE(MetricOf(port, "logdex_compaction_deep_passes_total"), 1);
  EXPECT_LT(MetricOf(port, "logdex_compaction_deep_passes_total"), MetricOf(port, passes));
  // Each merge deleted its parts and wrote one chunk: the store holds far
  // fewer chunks than were sent (about 20 runs per app), and the queries read
  // each of them once.
  const double merged = MetricOf(port, merges), merged_parts = MetricOf(port, parts);
  const double stored = static_cast<double>(chunks) - merged_parts + merged;
  EXPECT_LE(stored, chunks / 3.0) << merged_parts << " parts merged into " << merged << " chunks";
  uint64_t chunks_read = 0;
  std::vector<std::string> got;
  for (const char* app : apps) ASSERT_TRUE(query(std::string("app=") + app, 10'000, &got, &chunks_read));
  EXPECT_EQ(static_cast<double>(chunks_read), stored);

  // Page by page (small pages: many end inside a merged chunk), by app and by
  // host: exactly the records sent, none twice, newest first.
  const std::pair<std::string, int> queries[] = {
      {"app=cmp-a", 7}, {"app=cmp-b", 5}, {"app=cmp-c", 13}, {"host=h1", 11}};
  for (const auto& [filter, limit] : queries) {
    SCOPED_TRACE(filter);
    ASSERT_TRUE(query(filter, limit, &got));
    ExpectSameLines(got, w.Lines(filter.substr(filter.find('=') + 1)));
  }
  std::printf("compaction: %lld chunks (%zu records) sent; %.0f merged into %.0f; %.0f stored\n",
              static_cast<long long>(chunks), total, merged_parts, merged, stored);
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << serve.Log();
}

// Two members compact one HBase store (compaction.hbase): one at a time,
// the holder of the lease; the other's queries and cursors stay exact while
// merges land and parts are removed (every member reads the store's epoch
// from the lease row). The holder is SIGKILLed: the other takes the lease
// over after its period, merges what is new, and every record is still there
// once. A member stopped with SIGTERM releases the lease: the next takes it
// at once, not after a period.
TEST_F(ServeProcess, MembersSharingAnHBaseStoreCompactItOneAtATimeAndTakeOverFromAKilledHolder) {
  SharedMembers m;
  // The lease covers 4 write attempts of the client (config rule); a real
  // HBase needs seconds to create a table, so its client waits longer.
  int64_t lease_s = 0;
  StartSharedMembers([&](const TestHBase& hbase) {
    const int rpc_s = hbase.real() ? 20 : 2;
    lease_s = 4 * rpc_s;
    return "    rpc_timeout: " + std::to_string(rpc_s) + "s\n"
           "query: {max_time: 2s}\n"
           "compaction: {enabled: true, hbase: true, settle: 1s, max_span: 10m, interval: 200ms, lookback: 2d, "
           "lease_period: " + std::to_string(lease_s) + "s, removal_delay: 30s}\n";
  }, &m);
  if (IsSkipped() || HasFatalFailure()) return;
  SmallChunks w;
  TestProducer producer(m.kafka->bootstrap());
  uint64_t seq = 0;
  const int64_t start = SystemClock::Instance().NowMs() - 3 * 3'600'000;
  ASSERT_TRUE(w.Produce(producer, {{"cmp-a", "h1"}, {"cmp-b", "h1"}, {"cmp-c", "h2"}}, 60, start, &seq));
  const std::vector<std::string> apps = {"cmp-a", "cmp-b", "cmp-c"};
  auto sum = [&](const std::string& name, const std::vector<int>& ports) {
    double total = 0;
    for (int port : ports) total += std::max(0.0, MetricOf(port, name));
    return total;
  };
  const std::vector<int> both = {m.port_a, m.port_b};
  auto exact = [&](const std::vector<int>& ports, const std::vector<std::string>& of, int limit) {
    std::vector<std::string> got;
    for (const std::string& app : of) {
      if (!QueryLines(ports, "app=" + app, limit, w.records, &got) || got != w.Lines(app)) return false;
    }
    return true;
  };
  // Merged and every part removed (the removal delay after each merge).
  auto settled = [&](const std::vector<int>& ports) {
    const double parts = sum("logdex_compaction_parts_total", ports);
    return parts > 0 && sum("logdex_compaction_removed_parts_total", ports) >= parts &&
           sum("logdex_compaction_runs_left", ports) == 0 && sum("logdex_compaction_growing_runs", ports) == 0;
  };
  auto state = [&](const std::vector<int>& ports) {
    return "merges " + std::to_string(sum("logdex_compaction_merges_total", ports)) + ", parts " +
           std::to_string(sum("logdex_compaction_parts_total", ports)) + ", removed " +
           std::to_string(sum("logdex_compaction_removed_parts_total", ports)) + ", lease held " +
           std::to_string(sum("logdex_compaction_lease_held", ports)) + ", failures " +
           std::to_string(sum("logdex_compaction_failures_total", ports)) + "\n";
  };

  // Once every record is queryable, and while merges land and parts go
  // (compaction.removal_delay after each merge), pages alternate between the
  // members: each answer is every record once, newest first.
  ASSERT_TRUE(WaitFor([&] { return exact(both, apps, 10'000); }, 180'000)) << state(both);
  std::vector<std::string> got;
  const auto paging_until = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  int rounds = 0;
  const double removed_before = sum("logdex_compaction_removed_parts_total", both);
  while (!settled(both) && std::chrono::steady_clock::now() < paging_until) {
    for (const std::string& app : apps) {
      SCOPED_TRACE("round " + std::to_string(rounds) + ", " + app);
      ASSERT_TRUE(QueryLines(both, "app=" + app, 7, w.records, &got));
      ExpectSameLines(got, w.Lines(app));
    }
    ++rounds;
  }
  ASSERT_TRUE(WaitFor([&] { return settled(both); }, 180'000)) << state(both) << m.a->Log() << m.b->Log();
  const double removed_while_paging = sum("logdex_compaction_removed_parts_total", both) - removed_before;
  std::printf("paged through %d rounds while %.0f parts were removed\n", rounds, removed_while_paging);
  // Every record was queryable within seconds of the merges; their parts go
  // 30 s after them.
  EXPECT_GT(rounds, 0);
  EXPECT_GT(removed_while_paging, 0) << "no removal landed while pages were read";
  EXPECT_EQ(sum("logdex_compaction_lease_held", both), 1) << "one member merges";
  EXPECT_EQ(sum("logdex_compaction_failures_total", both), 0) << m.a->Log() << m.b->Log();
  EXPECT_EQ(sum("logdex_query_store_epoch_read_failures_total", both), 0);
  for (int port : both) EXPECT_GT(MetricOf(port, "logdex_query_store_epoch_reads_total"), 0) << "every member reads it";
  EXPECT_LE(sum("logdex_compaction_merges_total", both), w.chunks / 3.0);
  for (const auto& [filter, limit] : std::vector<std::pair<std::string, int>>{
           {"app=cmp-a", 7}, {"app=cmp-b", 5}, {"app=cmp-c", 13}, {"host=h1", 11}}) {
    SCOPED_TRACE(filter);
    ASSERT_TRUE(QueryLines(both, filter, limit, w.records, &got));
    ExpectSameLines(got, w.Lines(filter.substr(filter.find('=') + 1)));
  }

  // The holder is killed; the other takes its partitions and, a period
  // later, the lease, and merges a fourth app's chunks.
  const bool a_holds = MetricOf(m.port_a, "logdex_compaction_lease_held") == 1;
  Process& holder = a_holds ? *m.a : *m.b;
  const int other = a_holds ? m.port_b : m.port_a;
  const double takeovers_before = MetricOf(other, "logdex_compaction_lease_takeovers_total");
  holder.Signal(SIGKILL);
  holder.Wait();
  const double parts_before = MetricOf(other, "logdex_compaction_parts_total");
  ASSERT_TRUE(w.Produce(producer, {{"cmp-d", "h3"}}, 40, start, &seq));
  ASSERT_TRUE(WaitFor([&] { return MetricOf(other, "logdex_compaction_lease_held") == 1; }, (lease_s + 120) * 1000))
      << state({other});
  EXPECT_EQ(MetricOf(other, "logdex_compaction_lease_takeovers_total"), takeovers_before + 1);
  ASSERT_TRUE(WaitFor([&] {
    return MetricOf(other, "logdex_compaction_parts_total") > parts_before &&
           MetricOf(other, "logdex_compaction_removals_waiting") == 0 && settled({other}) &&
           exact({other}, {"cmp-a", "cmp-b", "cmp-c", "cmp-d"}, 10'000);
  }, 180'000)) << state({other}) << (a_holds ? m.b : m.a)->Log();
  for (const auto& [filter, limit] : std::vector<std::pair<std::string, int>>{{"app=cmp-d", 7}, {"host=h1", 11}}) {
    SCOPED_TRACE(filter);
    ASSERT_TRUE(QueryLines({other}, filter, limit, w.records, &got));
    ExpectSameLines(got, w.Lines(filter.substr(filter.find('=') + 1)));
  }
  EXPECT_EQ(MetricOf(other, "logdex_compaction_failures_total"), 0);
  std::printf("compaction on HBase: %lld chunks sent; %.0f merged into %.0f\n", static_cast<long long>(w.chunks),
              MetricOf(other, "logdex_compaction_parts_total"), MetricOf(other, "logdex_compaction_merges_total"));

  // Stopped with SIGTERM, the holder releases the lease: a member started
  // again takes it as released, not by a takeover a period later.
  auto restarted = std::make_unique<Process>(
      std::vector<std::string>{LOGDEX_BINARY, "serve", "--config", dir_.path() + "/shared.yaml", "--http",
                               "127.0.0.1:0", "--brokers", m.kafka->bootstrap(), "--group", "shared"},
      Log("restarted"));
  const int port_r = ListeningPort(*restarted, 180'000);
  ASSERT_GT(port_r, 0) << restarted->Log();
  Process& survivor = a_holds ? *m.b : *m.a;
  survivor.Signal(SIGTERM);
  EXPECT_EQ(survivor.Wait(), 0) << survivor.Log();
  EXPECT_NE(survivor.Log().find("compaction: released the lease"), std::string::npos) << survivor.Log();
  ASSERT_TRUE(WaitFor([&] { return MetricOf(port_r, "logdex_compaction_lease_held") == 1; }, 120'000))
      << restarted->Log();
  EXPECT_EQ(MetricOf(port_r, "logdex_compaction_lease_takeovers_total"), 0);
  restarted->Signal(SIGTERM);
  EXPECT_EQ(restarted->Wait(), 0) << restarted->Log();
}

}  // namespace
}  // namespace logdex
