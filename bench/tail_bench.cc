// `logdex bench tail`: live tail's latency from a batch's commit (its store
// write returned, where serve calls TailHub::Publish) to the client, while
// INFO lines are written at 100,000 lines/s (scaled by --scale): batches of
// 1,000 records every 10 ms, 10 chunks of 100 records each (10 hosts), staged
// by the indexer and written to RocksDB as serve does.
//
// Three clients in the same run, each subscribed to every record:
//   - GET /api/v1/tail through HttpServer and a real HTTP client (server-sent
//     events): what `logdex query --follow` and the web UI see;
//   - /loki/api/v1/tail, the WebSocket Grafana's live mode dials, read by
//     websocket::LoopbackClient: Loki's messages, one per batch;
//   - a TailSubscription read in-process (the baseline: the hub's own
//     hand-over, no HTTP).
// Latency per record: the client's receive time minus its batch's commit
// time, one monotonic clock. Reported: p50, p99, max per client, the lines/s
// actually written, and the records each client received (none may be lost).
#include <httplib.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "common/chunk_codec.h"
#include "common/severity.h"
#include "indexer/indexer.h"
#include "http/http_server.h"
#include "http/tail.h"
#include "http/websocket_client.h"

namespace logdex {
namespace {

using nlohmann::json;

// "b<batch> r<record> <text>": the batch number leads the message.
uint64_t BatchOf(std::string_view message) {
  uint64_t b = 0;
  for (size_t i = 1; i < message.size() && message[i] >= '0' && message[i] <= '9'; ++i) b = b * 10 + (message[i] - '0');
  return b;
}

struct Latencies {
  std::vector<double> ms;
  json Summary() {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))]; };
    return {{"records", ms.size()},
            {"p50_ms", bench::Round2(at(0.5))},
            {"p99_ms", bench::Round2(at(0.99))},
            {"max_ms", bench::Round2(ms.empty() ? 0 : ms.back())}};
  }
};

}  // namespace

json BenchTail(const BenchOptions& o) {
  constexpr int kBatchRecords = 1000, kChunks = 10, kTickMs = 10;
  const double lines_per_s = 100'000 * o.scale;
  const int batches = std::max(20, static_cast<int>(5 * lines_per_s / kBatchRecords));  // about 5 s
  const int tick_ms = std::max(1, static_cast<int>(kTickMs * 100'000 / lines_per_s));
  bench::ScratchDir dir(o.dir, "tail");
  auto store = bench::OpenStoreWithTables(dir.str() + "/store");
  const Clock& clock = SystemClock::Instance();
  IndexerOptions io;
  io.decode.clock = &clock;
  Indexer indexer(*store, io);
  bench::DecompressAlertLevels(indexer);  // as serve's alert observer has it do
  prometheus::Registry registry;
  TailHub hub(TailOptions{}, io.decode, registry);
  QueryOptions qo;
  qo.decode = io.decode;
  QueryEngine engine(*store, qo);
  HttpServerOptions ho;
  ho.tail = &hub;
  HttpServer server(ho, engine, registry, [] { return ReadyState{true, ""}; }, clock);
  LOGDEX_CHECK(server.Start().ok());

  std::vector<int64_t> committed_ns(static_cast<size_t>(batches), 0);
  std::atomic<int> committed{0};  // batches whose commit time is set
  std::mutex mu;
  Latencies http_lat, hub_lat;

  // The HTTP client: SSE events, parsed as they arrive.
  std::atomic<bool> http_subscribed{false};
  std::atomic<size_t> http_records{0};
  std::thread http_client([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    std::string pending;
    c.Get("/api/v1/tail", httplib::Params{}, httplib::Headers{},
          [&](const httplib::Response&) {
            http_subscribed = true;
            return true;
          },
          [&](const char* data, size_t n) {
            const int64_t now = bench::NowNs();
            pending.append(data, n);
            // The events read are dropped once per read, not once per event:
            // a read holds hundreds of them when the client is behind, and
            // erasing each from the front moved the rest every time
            // (quadratic; it made this client, not the server, fall behind).
            size_t start = 0;
            std::lock_guard<std::mutex> l(mu);
            for (size_t end; (end = pending.find("\n\n", start)) != std::string::npos; start = end + 2) {
              const std::string_view block(pending.data() + start, end - start);
              if (!block.starts_with("data: ")) continue;
              const size_t m = block.find("\"message\":\"b");
              if (m == std::string::npos) continue;
              const uint64_t b = BatchOf(block.substr(m + 11));
              http_lat.ms.push_back((now - committed_ns[b]) / 1e6);
              ++http_records;
            }
            pending.erase(0, start);
            return true;
          });
  });
  // The Loki tail WebSocket: a message per batch, streams of ["<ns>", "<line>"].
  std::atomic<bool> loki_subscribed{false};
  std::atomic<size_t> loki_records{0};
  std::atomic<bool> loki_done{false};
  Latencies loki_lat;
  std::thread loki_client([&] {
    websocket::LoopbackClient ws(server.port());
    const std::string head = ws.Upgrade("/loki/api/v1/tail?query=" + httplib::detail::encode_query_param(R"({app="tail-bench"})"));
    LOGDEX_CHECK(head.rfind("HTTP/1.1 101 ", 0) == 0);
    loki_subscribed = true;
    while (!loki_done) {
      auto frame = ws.Next(200);
      if (!frame) continue;
      const int64_t now = bench::NowNs();
      if (frame->opcode == websocket::kClose) return;
      if (frame->opcode != websocket::kText) continue;
      const json msg = json::parse(frame->payload);
      std::lock_guard<std::mutex> l(mu);
      for (const json& stream : msg["streams"]) {
        for (const json& v : stream["values"]) {
          loki_lat.ms.push_back((now - committed_ns[BatchOf(v[1].get<std::string>())]) / 1e6);
          ++loki_records;
        }
      }
    }
  });
  // The in-process baseline.
  auto sub = hub.Subscribe(Query{});
  LOGDEX_CHECK(sub.ok());
  std::atomic<bool> producing{true};
  std::thread hub_client([&] {
    for (;;) {
      TailBatch b = (*sub)->Next(50);
      const int64_t now = bench::NowNs();
      {
        std::lock_guard<std::mutex> l(mu);
        for (const ResultRecord& r : b.records) hub_lat.ms.push_back((now - committed_ns[BatchOf(r.message)]) / 1e6);
      }
      if (b.ended || (!producing && b.records.empty())) return;
    }
  });
  for (int i = 0; i < 2000 && !(http_subscribed && loki_subscribed && hub.subscribers() == 3); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  LOGDEX_CHECK(hub.subscribers() == 3);

  // The writer: a batch per tick.
  proto::ChunkSource src;
  src.set_topic("bench.tail");
  const int64_t t0 = bench::NowNs();
  uint64_t seq = 0;
  for (int b = 0; b < batches; ++b) {
    const int64_t due = t0 + static_cast<int64_t>(b) * tick_ms * 1'000'000;
    while (bench::NowNs() < due) std::this_thread::sleep_for(std::chrono::microseconds(200));
    WriteBatch batch;
    const int64_t ts = clock.NowMs();
    for (int c = 0; c < kChunks; ++c) {
      proto::RecordBatch records;
      for (int r = 0; r < kBatchRecords / kChunks; ++r) {
        proto::LogRecord* rec = records.add_records();
        rec->set_ts_ms(ts);
        rec->set_severity(SeverityCode(Severity::kInfo));
        rec->set_message("b" + std::to_string(b) + " r" + std::to_string(c * 100 + r) +
                         " INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 "
                         "terminating");
      }
      PackOptions po;
      po.codec = kDefaultCodec;
      po.producer_id = 1;
      po.sequence = ++seq;
      proto::LogChunk chunk = PackChunk("tail-bench", "h" + std::to_string(c), records, po);
      const std::string bytes = chunk.SerializeAsString();
      LOGDEX_CHECK(indexer.Stage(chunk, bytes, src, batch).ok());
    }
    LOGDEX_CHECK(store->Write(batch).ok());
    indexer.Settle(true);
    committed_ns[static_cast<size_t>(b)] = bench::NowNs();
    hub.Publish(batch);
  }
  const double wall_s = (bench::NowNs() - t0) / 1e9;
  const size_t total = static_cast<size_t>(batches) * kBatchRecords;
  for (int i = 0; i < 6000 && (http_records < total || loki_records < total); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  producing = false;
  loki_done = true;
  server.Stop();
  http_client.join();
  loki_client.join();
  hub_client.join();
  hub.Stop();
  std::lock_guard<std::mutex> l(mu);
  json http = http_lat.Summary(), loki = loki_lat.Summary(), direct = hub_lat.Summary();
  return {{"benchmark", "tail_latency"},
          {"target_lines_per_s", lines_per_s},
          {"written_lines_per_s", bench::Round2(total / wall_s)},
          {"lines", total},
          {"http_sse", http},
          {"loki_websocket", loki},
          {"baseline_in_process", direct},
          {"ratio_http_p99_to_in_process_p99",
           direct["p99_ms"].get<double>() > 0 ? bench::Round2(http["p99_ms"].get<double>() / direct["p99_ms"].get<double>()) : 0.0},
          {"ratio_loki_p99_to_in_process_p99",
           direct["p99_ms"].get<double>() > 0 ? bench::Round2(loki["p99_ms"].get<double>() / direct["p99_ms"].get<double>()) : 0.0},
          {"note", "ms from a batch's store write returning (TailHub::Publish) to the client's receipt, per record; "
                   "1,000 INFO lines per batch, 10 chunks; http_sse = GET /api/v1/tail through a real HTTP client, "
                   "loki_websocket = /loki/api/v1/tail {app=\"tail-bench\"} (Loki's messages), "
                   "in_process = a TailSubscription read directly"}};
}

}  // namespace logdex
