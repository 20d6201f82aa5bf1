// A RocksDB store filled through the Indexer with a generated workload, a
// QueryEngine over it, and a real HttpServer on a free loopback port: what
// the HTTP and CLI tests query.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "indexer/indexer.h"
#include "indexer/query.h"
#include "indexer/tables.h"
#include "http/http_server.h"
#include "store/rocksdb_store.h"
#include "tests/indexer/workload.h"
#include "tests/test_util.h"

namespace logdex::testing {

// Messages with bytes that are not UTF-8, in app "utf8app", host "h1".
inline const std::string kInvalidUtf8Message = std::string("bad \xff\xfe bytes \xc3 end");

class ServedStore {
 public:
  // A small workload: 3 apps, 5 hosts, 6000 records over 6 hours.
  static WorkloadSpec SmallSpec() {
    WorkloadSpec spec;
    spec.apps = 3;
    spec.hosts = 5;
    spec.tag_values = 5;
    spec.records = 6000;
    return spec;
  }

  explicit ServedStore(WorkloadSpec spec = SmallSpec()) : workload_(MakeWorkload(spec)) {
    RocksDbOptions o;
    o.path = dir_.path() + "/store";
    o.clock = &clock_;
    o.block_cache_bytes = 8 << 20;
    o.write_buffer_bytes = 8 << 20;
    auto s = RocksDbStore::Open(o);
    if (!s.ok()) {
      ADD_FAILURE() << s.error().ToString();
      return;
    }
    store_ = std::move(s.value());
    EXPECT_TRUE(CreateTables(*store_, TableLayout{}).ok());
    IndexerOptions io;
    io.decode.clock = &clock_;
    Indexer indexer(*store_, io);
    proto::ChunkSource src;
    src.set_topic("t");
    std::vector<std::string> chunks = workload_.chunks;
    chunks.push_back(InvalidUtf8Chunk());
    for (size_t i = 0; i < chunks.size(); i += 500) {
      std::vector<std::string> part(chunks.begin() + i, chunks.begin() + std::min(chunks.size(), i + 500));
      EXPECT_TRUE(indexer.IngestSerialized(part, src).ok());
    }
    QueryOptions qo;
    qo.decode.clock = &clock_;
    engine_ = std::make_unique<QueryEngine>(*store_, qo);
  }

  // Starts a server with `options` (port 0 unless set). Fails the test when it cannot.
  HttpServer& Serve(HttpServerOptions options = {}) {
    server_ = std::make_unique<HttpServer>(std::move(options), *engine_, registry_, [this] { return Readiness(); },
                                           clock_);
    Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *server_;
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_connection_timeout(5, 0);
    c->set_read_timeout(30, 0);
    return c;
  }
  int port() const { return server_->port(); }

  // Starts a server over `engine` (instead of the store's own), e.g. one with
  // budgets. `engine` must outlive the server.
  HttpServer& ServeEngine(const QueryEngine& engine, HttpServerOptions options = {}) {
    server_ = std::make_unique<HttpServer>(std::move(options), engine, registry_, [this] { return Readiness(); },
                                           clock_);
    Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return *server_;
  }

  void SetReady(bool ready, std::string reason) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = ready;
    reason_ = std::move(reason);
  }

  const Workload& workload() const { return workload_; }
  const QueryEngine& engine() const { return *engine_; }
  TableStore& store() { return *store_; }
  prometheus::Registry& registry() { return registry_; }
  ManualClock& clock() { return clock_; }
  HttpServer& server() { return *server_; }
  // Stops the last server Serve() started, if any.
  void StopServing() {
    if (server_) server_->Stop();
  }

  // Every record of `q` through the engine's cursors, page by page.
  std::vector<QueryAnswer> EnginePages(Query q) const {
    std::vector<QueryAnswer> pages;
    for (;;) {
      auto a = engine_->Run(q);
      EXPECT_TRUE(a.ok()) << a.error().ToString();
      if (!a.ok()) break;
      pages.push_back(std::move(a.value()));
      if (pages.back().next_cursor.empty() || pages.size() > 10'000) break;
      q.cursor = pages.back().next_cursor;
    }
    return pages;
  }

 private:
  static std::string InvalidUtf8Chunk() {
    proto::RecordBatch batch;
    for (int i = 0; i < 3; ++i) {
      proto::LogRecord* r = batch.add_records();
      r->set_ts_ms(1'790'000'000'000 + 3'600'000 + i);
      r->set_severity(SeverityCode(Severity::kError));
      r->set_message(kInvalidUtf8Message);
    }
    PackOptions po;
    po.producer_id = 99;
    po.sequence = 1;
    return PackChunk("utf8app", "h1", batch, po).SerializeAsString();
  }

  ReadyState Readiness() {
    std::lock_guard<std::mutex> lock(mu_);
    return ReadyState{ready_, reason_};
  }

  TempDir dir_;
  // One hour after the workload's end (it spans 6 h from 1'790'000'000'000).
  ManualClock clock_{1'790'000'000'000 + 7 * 3'600'000};
  Workload workload_;
  std::unique_ptr<RocksDbStore> store_;
  std::unique_ptr<QueryEngine> engine_;
  prometheus::Registry registry_;
  std::mutex mu_;
  bool ready_ = false;
  std::string reason_ = "partitions not assigned yet";
  std::unique_ptr<HttpServer> server_;  // last: stops before what it serves goes away
};

}  // namespace logdex::testing
