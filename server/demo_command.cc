// `logdex demo`: the main job end to end on one machine, printing what
// happened. It starts `logdex serve --embedded-kafka` (the in-process Kafka
// cluster, RocksDB in a work directory) with alerts going to a webhook
// receiver it runs itself, ships the bundled Loghub samples (moved to
// yesterday, time of day kept) and a generated burst of checkout-service
// lines with errors through `logdex ship`, waits until every record is
// indexed, then runs example queries with `logdex query` and prints them,
// the alerts received, a metrics summary and the commands to try next.
// With --serve it keeps serving until SIGINT/SIGTERM.
//
// Every step runs the real subcommand as a child process of this binary, so
// what the demo prints is what a user typing the same commands would see.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alerting/webhook_receiver.h"
#include "common/child_process.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/time_parse.h"
#include "server/commands.h"

namespace logdex {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where the samples are: the source tree this binary was built from, or
// where the container image and packages put them.
std::string DefaultDataDir() {
  for (const char* dir : {LOGDEX_DEFAULT_DATA_DIR, "/usr/share/logdex/loghub"}) {
    if (fs::exists(fs::path(dir) / "HDFS_2k.log")) return dir;
  }
  return LOGDEX_DEFAULT_DATA_DIR;
}

struct DemoOptions {
  std::string dir;             // work directory; empty = a new temporary one, removed at the end
  std::string data = DefaultDataDir();
  int port = 0;                // serve's HTTP port; 0 = a free one
  bool serve = false;          // keep serving after the walk-through
  int burst_lines = 3000;      // generated checkout-service lines
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs this binary with `args` to its end; its output (stdout and stderr) in `out`.
int RunLogdex(const std::vector<std::string>& args, const std::string& log, std::string* out) {
  std::vector<std::string> full = {"/proc/self/exe"};
  full.insert(full.end(), args.begin(), args.end());
  ChildProcess c(full, log);
  if (!c.started()) return 127;
  const int rc = c.Wait();
  if (out) *out = ReadFile(log);
  return rc;
}

bool WaitUntil(const std::function<bool()>& done, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

std::tm UtcDay(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm;
}

std::string Strftime(const std::tm& tm, const char* format) {
  char buf[64];
  const size_t n = std::strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

// A Loghub sample, and how to move its dates to yesterday: the text that
// replaces `length` bytes at `offset` (counted from the end of the line's
// first word when `after_first_word`) of every line that has a date there.
struct Sample {
  std::string file, app, host, format;
  size_t offset = 0, length = 0;
  std::string replacement;
  bool after_first_word = false;
};

std::vector<Sample> Samples(int64_t now_ms) {
  const std::tm y = UtcDay(now_ms - 24 * 3600 * 1000);
  return {
      // 081109 203615 148 INFO dfs.DataNode$PacketResponder: ...
      {"HDFS_2k.log", "hdfs", "datanode-1", "auto", 0, 6, Strftime(y, "%y%m%d")},
      // nova-api.log.1.2017-05-16_13:53:08 2017-05-16 00:00:00.008 25746 INFO ...
      {"OpenStack_2k.log", "openstack", "nova-1", "auto", 1, 10, Strftime(y, "%Y-%m-%d"), true},
      // [Sun Dec 04 04:47:44 2005] [notice] ... (day and year moved; time kept)
      {"Apache_2k.log", "apache", "web-1", "apache", 1, 10, Strftime(y, "%a %b %d")},
      // 03-17 16:13:38.811  1702  2395 D WindowManager: ...
      {"Android_2k.log", "android", "phone-1", "logcat", 0, 5, Strftime(y, "%m-%d")},
  };
}

// Copies `sample` from `data` to `out` with its dates moved to yesterday.
bool MoveToYesterday(const std::string& data, const Sample& s, const std::string& out, int64_t now_ms) {
  std::ifstream in(fs::path(data) / s.file);
  if (!in) return false;
  std::ofstream o(out);
  const std::string year = Strftime(UtcDay(now_ms - 24 * 3600 * 1000), "%Y");
  std::string line;
  while (std::getline(in, line)) {
    size_t at = s.offset;
    if (s.after_first_word) at += std::min(line.find(' '), line.size());
    if (line.size() >= at + s.length && std::isdigit(static_cast<unsigned char>(line[at + s.length - 1]))) {
      line.replace(at, s.length, s.replacement);
      // Apache's ctime ends with the year: "[Www Mmm dd HH:MM:SS yyyy]".
      if (s.format == "apache" && line.size() > 25 && line[25] == ']') line.replace(21, 4, year);
    }
    o << line << '\n';
  }
  return static_cast<bool>(o);
}

// The generated burst: checkout-service JSON lines over the last ten
// minutes, with tags, slow-gateway warnings and, in the last two minutes,
// payment gateway timeouts (ERROR) and one FATAL.
void WriteBurst(const std::string& path, int lines, int64_t now_ms, uint32_t seed) {
  std::ofstream o(path);
  uint32_t x = seed;
  auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  const int64_t start = now_ms - 10 * 60 * 1000;
  for (int i = 0; i < lines; ++i) {
    const int64_t ts = start + static_cast<int64_t>(i) * (9 * 60 * 1000) / lines;
    const bool late = ts > now_ms - 2 * 60 * 1000;
    const uint32_t r = next() % 1000;
    const int order = 40000 + i;
    json j;
    j["ts"] = FormatTimestamp(ts);
    j["region"] = (next() % 2) ? "eu-west" : "us-east";
    j["version"] = "2.4.1";
    if (late && i == lines - 5) {
      j["level"] = "FATAL";
      j["msg"] = "order store unreachable: connection pool exhausted after 30 s";
    } else if (late && r < 40) {
      j["level"] = "ERROR";
      j["msg"] = "payment gateway timeout after 3000 ms (order " + std::to_string(order) + ")";
      j["region"] = "eu-west";
    } else if (r < 120) {
      j["level"] = "WARN";
      j["msg"] = "payment gateway slow: " + std::to_string(900 + next() % 1500) + " ms (order " + std::to_string(order) + ")";
    } else {
      j["level"] = "INFO";
      j["msg"] = "order " + std::to_string(order) + " placed, " + std::to_string(1 + next() % 5) + " items";
    }
    o << j.dump() << '\n';
  }
}

// "logdex ship: 2000 lines, 2000 records (...)" -> 2000.
uint64_t RecordsShipped(const std::string& output) {
  const size_t at = output.find("lines, ");
  if (at == std::string::npos) return 0;
  return std::strtoull(output.c_str() + at + 7, nullptr, 10);
}

// The value of an unlabelled sample (or the sum over its labels) in a
// Prometheus exposition.
double Metric(const std::string& exposition, const std::string& name) {
  double sum = 0;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

void Section(const std::string& title) { std::printf("\n== %s ==\n", title.c_str()); }

// Prints at most `max_lines` lines of `text`, indented, each cut at 160
// characters.
void Excerpt(const std::string& text, size_t max_lines) {
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    if (n++ == max_lines) {
      std::printf("  ...\n");
      break;
    }
    if (line.size() > 160) line = line.substr(0, 157) + "...";
    std::printf("  %s\n", line.c_str());
  }
}

// Ships the Loghub samples (dates moved to yesterday) and a generated burst
// through `logdex ship`; adds the records shipped to `expected`.
bool ShipAll(const DemoOptions& o, const std::string& work, const std::string& brokers, int64_t now_ms,
             uint64_t* expected) {
  Section("ship: Loghub samples (" + o.data + "/LICENSE), dates moved to yesterday");
  auto ship = [&](const std::string& file, const std::string& app, const std::string& host,
                  const std::string& format) {
    std::string out;
    const int rc = RunLogdex({"ship", "--brokers", brokers, "--app", app, "--host", host, "--format", format,
                              "--no-progress", file},
                             work + "/ship-" + app + "-" + host + ".log", &out);
    const uint64_t records = RecordsShipped(out);
    std::printf("  $ logdex ship --app %s --host %s --format %s %s\n    %s", app.c_str(), host.c_str(),
                format.c_str(), fs::path(file).filename().c_str(), out.c_str());
    if (rc != 0) return false;
    *expected += records;
    return true;
  };
  for (const Sample& s : Samples(now_ms)) {
    const std::string moved = work + "/" + s.app + ".log";
    if (!MoveToYesterday(o.data, s, moved, now_ms) || !ship(moved, s.app, s.host, s.format)) {
      std::fprintf(stderr, "logdex demo: shipping %s failed\n", s.file.c_str());
      return false;
    }
  }
  Section("ship: a generated burst (checkout service, last 10 minutes, payment gateway errors)");
  for (int h = 1; h <= 2; ++h) {
    const std::string host = "web-" + std::to_string(h);
    const std::string file = work + "/checkout-" + host + ".jsonl";
    WriteBurst(file, o.burst_lines / 2, now_ms, static_cast<uint32_t>(h));
    if (!ship(file, "checkout", host, "json")) {
      std::fprintf(stderr, "logdex demo: shipping the burst failed\n");
      return false;
    }
  }

  return true;
}

// Runs `logdex query` against serve for each index and prints the answers;
// false when one failed.
bool RunQueries(const std::string& url, const std::string& work, httplib::Client& http) {
  Section("queries (logdex query --server " + url + " ...)");
  auto query = [&](const std::vector<std::string>& args, const std::string& what) {
    std::vector<std::string> full = {"query", "--server", url};
    full.insert(full.end(), args.begin(), args.end());
    std::string shown = "logdex query";
    for (const std::string& a : args) shown += " " + (a.find(' ') != std::string::npos ? "'" + a + "'" : a);
    std::string out;
    const int rc = RunLogdex(full, work + "/query.log", &out);
    std::printf("\n  # %s\n  $ %s\n", what.c_str(), shown.c_str());
    Excerpt(out, 8);
    return rc == 0;
  };
  bool queries_ok = true;
  queries_ok &= query({"--app", "apache", "--severity", "ERROR", "--since", "72h", "--limit", "4"},
                      "app + time range + severity (the idx_error index)");
  queries_ok &= query({"--host", "datanode-1", "--since", "72h", "--limit", "3"}, "host only (idx_host)");
  queries_ok &= query({"--tag", "region=eu-west", "--severity", "ERROR", "--severity", "FATAL", "--since", "1h",
                       "--limit", "3"},
                      "tag (idx_tag), errors only");
  queries_ok &= query({"--app", "openstack", "--contains", "status: 404", "--since", "72h", "--limit", "3"},
                      "text: contains, filtered next to the data");
  std::printf("\n  records per app (--json, counted):\n");
  for (const char* app : {"hdfs", "openstack", "apache", "android", "checkout"}) {
    auto r = http.Get(std::string("/api/v1/query?app=") + app + "&since=72h&limit=10000");
    size_t n = 0;
    if (r && r->status == 200) {
      auto j = json::parse(r->body, nullptr, false);
      if (!j.is_discarded()) n = j["records"].size();
    }
    std::printf("    %-10s %zu\n", app, n);
  }

  return queries_ok;
}

// Prints the notifications the local webhook received (waiting up to 20 s
// for the first two) and returns their bodies.
std::vector<std::string> ShowAlerts(const alerting::WebhookReceiver& webhook, const std::string& work) {
  Section("alerts received by the local webhook (" + webhook.url("/alerts") + ")");
  WaitUntil([&] { return webhook.bodies().size() >= 2; }, 20'000);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a last notification in flight
  const std::vector<std::string> alerts = webhook.bodies();
  for (const std::string& body : alerts) {
    auto j = json::parse(body, nullptr, false);
    if (j.is_discarded()) continue;
    std::printf("  - [%s] %s/%s x%llu: %s\n", j.value("severity", "").c_str(), j.value("app", "").c_str(),
                j.value("host", "").c_str(), static_cast<unsigned long long>(j.value("count", uint64_t{1})),
                j.value("summary", "").c_str());
  }
  if (alerts.empty()) std::printf("  (none arrived within 20 s; see %s/serve.log)\n", work.c_str());
  for (const std::string& body : alerts) {  // each links to the web UI's view of its records
    auto j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("query_url") || !j["query_url"].is_string()) continue;
    std::printf("  the first one's link: %s\n", j["query_url"].get<std::string>().c_str());
    break;
  }

  return alerts;
}

// Prints serve's main counters and the mean alert latency from /metrics.
void ShowMetrics(const std::string& url, httplib::Client& http) {
  Section("metrics (" + url + "/metrics)");
  auto m = http.Get("/metrics");
  const std::string exposition = m && m->status == 200 ? m->body : "";
  const double latency_n = Metric(exposition, "logdex_alerting_delivery_latency_seconds_count");
  for (const char* name : {"logdex_consumer_messages_total", "logdex_consumer_bytes_total",
                           "logdex_indexer_chunks_total", "logdex_indexer_records_total",
                           "logdex_consumer_dead_lettered_total", "logdex_alerting_alerts_detected_total",
                           "logdex_alerting_notifications_sent_total", "logdex_alerting_notifications_failed_total"}) {
    std::printf("  %-45s %.0f\n", name, Metric(exposition, name));
  }
  if (latency_n > 0) {
    std::printf("  %-45s %.1f ms\n", "alert delivery latency from produce (mean)",
                1000 * Metric(exposition, "logdex_alerting_delivery_latency_seconds_sum") / latency_n);
  }

}

// What to try next.
void PrintNext(const std::string& url, const std::string& brokers, double seconds) {
  Section("done in " + std::to_string(static_cast<int>(seconds + 0.5)) + " s; try next");
  std::printf("  open %s/ in a browser (the web UI; keep it up with --serve)\n", url.c_str());
  std::printf("  logdex query --server %s --app checkout --severity ERROR --since 1h\n", url.c_str());
  std::printf("  curl '%s/api/v1/query?host=web-1&since=1h&limit=5'\n", url.c_str());
  std::printf("  curl %s/metrics | grep ^logdex_consumer\n", url.c_str());
  std::printf("  logdex ship --brokers %s --app myapp --host $(hostname) --format auto /var/log/syslog\n",
              brokers.c_str());
  std::printf("  logdex demo --serve     # keep this running to explore\n");

}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int RunDemo(const DemoOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  const int64_t now_ms = SystemClock::Instance().NowMs();
  if (!fs::exists(fs::path(o.data) / "HDFS_2k.log")) {
    std::fprintf(stderr, "logdex demo: the sample logs are not in %s (give --data DIR: tests/data/loghub)\n",
                 o.data.c_str());
    return 2;
  }
  std::string work = o.dir;
  const bool temporary = work.empty();
  if (temporary) {
    std::string tmpl = (fs::temp_directory_path() / "logdex-demo-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      std::fprintf(stderr, "logdex demo: cannot create a temporary directory\n");
      return 1;
    }
    work = tmpl;
  }
  std::error_code ec;
  fs::create_directories(work, ec);
  struct Cleanup {
    std::string dir;
    bool remove;
    ~Cleanup() {
      std::error_code e;
      if (remove) fs::remove_all(dir, e);
    }
  } cleanup{work, temporary && !o.serve};

  int port = o.port ? o.port : FreeLoopbackPort();
  if (port == 0) port = 8080;  // no free port found: the usual one
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  alerting::WebhookReceiver webhook;

  // serve, with alerts to the local webhook.
  const std::string config = work + "/demo.yaml";
  std::ofstream(config) << "alerting:\n  query_base_url: " << url << "\n  sinks:\n    - name: local-webhook\n"
                        << "      type: webhook\n      url: " << webhook.url("/alerts") << "\n      secret: demo-secret\n";
  const std::string bootstrap_file = work + "/bootstrap";
  fs::remove(bootstrap_file, ec);
  Section("serve: embedded Kafka, RocksDB in " + work + "/store, HTTP on " + url);
  ChildProcess serve({"/proc/self/exe", "serve", "--embedded-kafka", "--bootstrap-file", bootstrap_file, "--store-dir",
               work + "/store", "--http", "127.0.0.1:" + std::to_string(port), "--config", config, "--log-level",
               "warn"},
              work + "/serve.log");
  httplib::Client http("127.0.0.1", port);
  std::string brokers;
  const bool up = WaitUntil(
      [&] {
        if (!serve.running()) return true;
        brokers = ReadFile(bootstrap_file);
        while (!brokers.empty() && (brokers.back() == '\n' || brokers.back() == ' ')) brokers.pop_back();
        auto r = http.Get("/readyz");
        return !brokers.empty() && r && r->status == 200;
      },
      60'000);
  if (!up || !serve.running() || brokers.empty()) {
    std::fprintf(stderr, "logdex demo: serve did not become ready; its log (%s/serve.log):\n", work.c_str());
    Excerpt(ReadFile(work + "/serve.log"), 40);
    return 1;
  }
  std::printf("  kafka bootstrap %s, topic logdex.chunks; alerts -> %s\n", brokers.c_str(), webhook.url("/alerts").c_str());

  uint64_t expected = 0;
  if (!ShipAll(o, work, brokers, now_ms, &expected)) return 1;

  // Wait until everything shipped is indexed.
  double indexed = 0;
  const bool all = WaitUntil(
      [&] {
        auto r = http.Get("/metrics");
        if (r && r->status == 200) indexed = Metric(r->body, "logdex_indexer_records_total");
        return indexed >= static_cast<double>(expected);
      },
      60'000);
  Section("indexed");
  std::printf("  %.0f of %llu records indexed%s\n", indexed, static_cast<unsigned long long>(expected),
              all ? "" : " (timed out waiting for the rest)");
  if (!all) return 1;

  const bool queries_ok = RunQueries(url, work, http);

  const std::vector<std::string> alerts = ShowAlerts(webhook, work);

  ShowMetrics(url, http);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  PrintNext(url, brokers, seconds);

  const bool ok = queries_ok && !alerts.empty();
  if (o.serve) {
    std::printf("\nserving on %s (web UI %s/, Kafka %s, data in %s); Ctrl-C to stop\n", url.c_str(), url.c_str(),
                brokers.c_str(), work.c_str());
    std::fflush(stdout);
    signal(SIGINT, OnSignal);
    signal(SIGTERM, OnSignal);
    while (!g_stop && serve.running()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::fflush(stdout);
  serve.Signal(SIGTERM);
  const int serve_rc = serve.Wait();
  if (serve_rc != 0) {
    std::fprintf(stderr, "logdex demo: serve exited with %d; its log:\n", serve_rc);
    Excerpt(ReadFile(work + "/serve.log"), 40);
    return 1;
  }
  return ok ? 0 : 1;
}

}  // namespace

void AddDemoCommand(CLI::App& app, CommandRun& run) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the main job end to end on this machine and print what happened: serve on an in-process Kafka "
      "cluster with RocksDB, the bundled Loghub samples and a generated error burst shipped to it, example "
      "queries, the alerts a local webhook received, and a metrics summary.");
  cmd->footer(
      "Examples:\n"
      "  logdex demo                      # a temporary directory, removed at the end\n"
      "  logdex demo --serve --port 8080  # then: logdex query --server http://127.0.0.1:8080 --app hdfs --since 72h");
  cmd->add_option("--dir", o->dir, "Work directory (store, configs, logs); default a temporary one, removed at the end");
  cmd->add_option("--data", o->data, "Directory of the Loghub samples")->capture_default_str();
  cmd->add_option("--port", o->port, "serve's HTTP port (default: a free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--burst-lines", o->burst_lines, "Generated checkout-service lines")
      ->check(CLI::Range(100, 1'000'000))
      ->capture_default_str();
  cmd->add_flag("--serve", o->serve, "Keep serving after the walk-through, until Ctrl-C");
  cmd->callback([&run, o] { run = [o] { return RunDemo(*o); }; });
}

}  // namespace logdex
