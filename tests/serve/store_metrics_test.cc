// StoreDiskMetrics (server/store_metrics.h): logdex_store_disk_bytes{kind}
// from the store's own accounting, and the WAL over its bound as a degraded
// mode (a counter and a warn line, at most once a minute while it lasts).
#include "server/store_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "store/rocksdb_store.h"
#include "tests/failing_store.h"
#include "tests/test_util.h"

namespace logdex {
namespace {

// A store whose disk usage the test sets (the rest is a RocksDB store's).
class SetUsage final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::optional<StoreDiskUsage> disk_usage() const override { return usage; }
  std::optional<StoreDiskUsage> usage;
};

double ValueOf(prometheus::Registry& registry, const std::string& name, const std::string& kind = "") {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      if (kind.empty()) return m.counter.value;
      for (const auto& label : m.label) {
        if (label.name == "kind" && label.value == kind) return m.gauge.value;
      }
    }
  }
  return -1;
}

class StoreDiskMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RocksDbOptions o;
    o.path = dir_.path();
    auto store = RocksDbStore::Open(o);
    ASSERT_TRUE(store.ok());
    rocks_ = std::move(*store);
  }

  TempDir dir_;
  std::unique_ptr<RocksDbStore> rocks_;
  prometheus::Registry registry;
  ManualClock clock{1'800'000'000'000};
};

TEST_F(StoreDiskMetricsTest, ExportsWhatARocksDbStoreHoldsByKind) {
  ASSERT_TRUE(rocks_->CreateTable("t", TableOptions{}).ok());
  WriteBatch b;
  for (int i = 0; i < 100; ++i) b.Put("t", "k" + std::to_string(i), std::string(1000, 'v'));
  ASSERT_TRUE(rocks_->Write(b).ok());
  StoreDiskMetrics metrics(registry, *rocks_, clock, 1ull << 30);
  auto u = metrics.Sample();
  ASSERT_TRUE(u.has_value());
  EXPECT_GT(u->wal, 100'000u);
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "wal"), static_cast<double>(u->wal));
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "sst"), static_cast<double>(u->sst));
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "other"), static_cast<double>(u->other));
  EXPECT_EQ(ValueOf(registry, "logdex_store_wal_over_bound_total"), 0);
}

TEST_F(StoreDiskMetricsTest, AStoreWithoutLocalFilesExportsNothing) {
  testing::AlwaysFailing hbase_like(Errc::kUnavailable, "remote");
  StoreDiskMetrics metrics(registry, hbase_like, clock, 1000);
  EXPECT_FALSE(metrics.Sample().has_value());
  metrics.Start(10);  // nothing to sample: no thread
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "wal"), -1);
  EXPECT_EQ(ValueOf(registry, "logdex_store_wal_over_bound_total"), -1);
}

TEST_F(StoreDiskMetricsTest, AWalOverItsBoundIsCountedAndWarnedOnceAMinute) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));

  SetUsage store(*rocks_);
  store.usage = StoreDiskUsage{10, 500, 1};
  StoreDiskMetrics metrics(registry, store, clock, 1000);
  metrics.Sample();
  EXPECT_EQ(ValueOf(registry, "logdex_store_wal_over_bound_total"), 0);
  store.usage->wal = 5000;  // over
  metrics.Sample();
  clock.AdvanceMs(10'000);
  metrics.Sample();  // still over, within the minute: counted, not warned again
  EXPECT_EQ(ValueOf(registry, "logdex_store_wal_over_bound_total"), 2);
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "wal"), 5000);
  clock.AdvanceMs(60'000);
  metrics.Sample();  // a minute later: warned again
  store.usage->wal = 400;
  metrics.Sample();  // back within: one info line
  EXPECT_EQ(ValueOf(registry, "logdex_store_wal_over_bound_total"), 3);

  int warned = 0, recovered = 0;
  for (const std::string& line : ring->last_formatted()) {
    if (line.find("the write-ahead log holds 5000 bytes, over its bound of 1000") != std::string::npos) ++warned;
    if (line.find("the write-ahead log is back to 400 bytes") != std::string::npos) ++recovered;
  }
  spdlog::set_default_logger(previous);
  EXPECT_EQ(warned, 2);
  EXPECT_EQ(recovered, 1);
}

TEST_F(StoreDiskMetricsTest, TheSamplerThreadSamplesAtOnceAndStopsWithTheObject) {
  SetUsage store(*rocks_);
  store.usage = StoreDiskUsage{7, 8, 9};
  {
    StoreDiskMetrics metrics(registry, store, clock, 0);
    metrics.Start(3'600'000);  // the first sample is at once; the next would be an hour later
    EXPECT_TRUE(testing::WaitFor([&] { return ValueOf(registry, "logdex_store_disk_bytes", "other") == 9; }, 30'000));
  }  // the destructor wakes and joins the sleeping thread (a hang here fails by ctest's timeout)
  EXPECT_EQ(ValueOf(registry, "logdex_store_disk_bytes", "sst"), 7);
}

}  // namespace
}  // namespace logdex
