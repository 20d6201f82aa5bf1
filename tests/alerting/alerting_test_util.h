// Helpers for the alerting tests: chunks and records, a store with the
// alerting tables, a config with webhook sinks, and reading the outbox.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "alerting/config.h"
#include "alerting/notification.h"
#include "alerting/stager.h"
#include "common/clock.h"
#include "common/row_keys.h"
#include "proto/logdex.pb.h"
#include "store/rocksdb_store.h"
#include "store/table_store.h"
#include "tests/test_util.h"

namespace logdex::alerting::testing {

inline constexpr int64_t kT0 = 1'790'000'000'000;  // 2026-09-21T...Z, a fixed "now" for ManualClock

inline proto::LogChunk Chunk(const std::string& app, const std::string& host, Severity s = Severity::kError) {
  proto::LogChunk c;
  c.set_app(app);
  c.set_host(host);
  c.set_severity(SeverityCode(s));
  return c;
}

inline proto::LogRecord* AddRecord(proto::RecordBatch& b, int64_t ts_ms, const std::string& message,
                                   Severity s = Severity::kError) {
  proto::LogRecord* r = b.add_records();
  r->set_ts_ms(ts_ms);
  r->set_severity(SeverityCode(s));
  r->set_message(message);
  return r;
}

// A RocksDB store under `dir` with the alerting tables, reading time from `clock`.
inline std::unique_ptr<RocksDbStore> OpenStore(const std::string& dir, const Clock& clock,
                                               const AlertingConfig& config) {
  RocksDbOptions o;
  o.path = dir;
  o.clock = &clock;
  o.block_cache_bytes = 8 << 20;
  o.write_buffer_bytes = 8 << 20;
  auto s = RocksDbStore::Open(o);
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  if (!s.ok()) return nullptr;
  Status t = CreateAlertingTables(**s, config);
  EXPECT_TRUE(t.ok()) << t.ToString();
  return std::move(s.value());
}

inline SinkConfig WebhookSinkConfig(const std::string& name, const std::string& url) {
  SinkConfig s;
  s.name = name;
  s.type = SinkType::kWebhook;
  s.url = url;
  s.timeout_ms = 2'000;
  return s;
}

// Alerting with one webhook sink, "hook" (nothing listens at its address),
// and no app or global limit: a record a rule takes is an event until its
// group's window is full.
inline AlertingConfig OneSinkNoLimits() {
  AlertingConfig c;
  c.limits.per_app = 0;
  c.limits.global = 0;
  c.sinks.push_back(WebhookSinkConfig("hook", "http://127.0.0.1:9/"));
  return c;
}

// Outbox rows as (key, entry), in key order.
inline std::vector<std::pair<OutboxKey, OutboxEntry>> ReadOutbox(TableStore& store) {
  std::vector<std::pair<OutboxKey, OutboxEntry>> out;
  ScanSpec spec;
  spec.table = std::string(kOutboxTable);
  Status s = store.Scan(spec, [&](std::string_view k, std::string_view v) {
    auto key = OutboxKey::Decode(k);
    auto e = DecodeOutboxEntry(v);
    EXPECT_TRUE(key.has_value());
    EXPECT_TRUE(e.ok());
    if (key && e.ok()) out.emplace_back(*key, e.value());
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// Stages and writes one chunk, numbered `chunk_number` (its ChunkId);
// returns the outbox rows appended.
inline size_t StageAndWrite(AlertStager& stager, TableStore& store, const proto::LogChunk& chunk,
                            uint64_t chunk_number, const proto::RecordBatch& records, int64_t kafka_ts_ms = 0) {
  WriteBatch batch;
  auto n = stager.Stage(chunk, ChunkId(chunk_number), records, kafka_ts_ms, batch);
  EXPECT_TRUE(n.ok()) << n.error().ToString();
  Status s = store.Write(batch);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return n.ok() ? *n : 0;
}

// The value of a counter/gauge series in the registry, or -1 when absent.
inline double MetricValue(prometheus::Registry& registry, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label)
          if (l.name == k && l.value == v) found = true;
        match = match && found;
      }
      if (!match) continue;
      if (family.type == prometheus::MetricType::Counter) return m.counter.value;
      if (family.type == prometheus::MetricType::Gauge) return m.gauge.value;
      if (family.type == prometheus::MetricType::Histogram) return static_cast<double>(m.histogram.sample_count);
    }
  }
  return -1;
}

// Captures what the default spdlog logger writes while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  // Warn lines that contain `text`.
  size_t Warnings(const std::string& text) const {
    size_t n = 0;
    for (const auto& m : sink_->last_raw())
      if (m.level == spdlog::level::warn && std::string_view(m.payload.data(), m.payload.size()).find(text) != std::string_view::npos) ++n;
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

}  // namespace logdex::alerting::testing
