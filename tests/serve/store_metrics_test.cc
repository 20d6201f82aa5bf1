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

// A store whose disk usage the test sets, and which counts its flushes (the
// rest is a RocksDB store's).
class SetUsage final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::optional<StoreDiskUsage> disk_usage() const override { return usage; }
  Status Flush() override {
    ++flushes;
    return flush_status;
  }
  std::optional<StoreDiskUsage> usage;
  int flushes = 0;
  Status flush_status = Status::Ok();
};

double FlushesOf(prometheus::Registry& registry, const std::string& outcome) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "logdex_store_age_flushes_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        if (label.name == "outcome" && label.value == outcome) return m.counter.value;
      }
    }
  }
  return -1;
}

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

TEST_F(StoreDiskMetricsTest, AWalThatHasNotShrunkForFlushAfterIsFlushedAndAFailedFlushIsTriedAgainLater) {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", ring));

  SetUsage store(*rocks_);
  store.usage = StoreDiskUsage{0, 2 << 20, 0};
  StoreDiskMetrics metrics(registry, store, clock, 0, 600'000);
  metrics.Sample();  // the WAL is first seen now
  clock.AdvanceMs(599'999);
  store.usage->wal += 1000;  // grew: still unflushed since the first sample
  metrics.Sample();
  EXPECT_EQ(store.flushes, 0);
  clock.AdvanceMs(1);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 1);
  EXPECT_EQ(FlushesOf(registry, "ok"), 1);
  clock.AdvanceMs(599'000);
  metrics.Sample();  // within flush_after of that flush, though the WAL did not shrink
  EXPECT_EQ(store.flushes, 1);

  // A WAL that shrank (RocksDB flushed on its own) starts its wait again.
  store.usage->wal = 1500 << 10;
  metrics.Sample();
  clock.AdvanceMs(599'999);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 1);
  // A WAL under kMinAgeFlushWalBytes is not worth a flush, however old.
  store.usage->wal = kMinAgeFlushWalBytes - 1;
  metrics.Sample();
  clock.AdvanceMs(3'600'000);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 1);

  // A failed flush: counted, warned, tried again flush_after later.
  store.usage->wal = 3 << 20;
  store.flush_status = Status(Errc::kIOError, "disk full");
  metrics.Sample();  // grew since the small WAL's samples: its wait began at their first, an hour ago
  EXPECT_EQ(store.flushes, 2);
  EXPECT_EQ(FlushesOf(registry, "failed"), 1);
  clock.AdvanceMs(10'000);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 2);
  store.flush_status = Status::Ok();
  clock.AdvanceMs(590'000);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 3);
  EXPECT_EQ(FlushesOf(registry, "ok"), 2);

  int flushed = 0, failed = 0;
  for (const std::string& line : ring->last_formatted()) {
    if (line.find("flushed the memtables: the write-ahead log held 2098152 bytes and had not shrunk for 600000 ms") !=
        std::string::npos) {
      ++flushed;
    }
    if (line.find("flushing the memtables failed (disk full); the write-ahead log keeps 3145728 bytes") !=
        std::string::npos) {
      ++failed;
    }
  }
  spdlog::set_default_logger(previous);
  EXPECT_EQ(flushed, 1);
  EXPECT_EQ(failed, 1);
}

TEST_F(StoreDiskMetricsTest, AWalOverItsBoundIsLeftToRocksDbsOwnFlushes) {
  SetUsage store(*rocks_);
  store.usage = StoreDiskUsage{0, 4 << 20, 0};  // at its bound, half the warning's
  StoreDiskMetrics metrics(registry, store, clock, 8 << 20, 600'000);
  metrics.Sample();
  clock.AdvanceMs(600'000);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 0) << "a flush asked for now could wait out a write stall on the sampler thread";
  store.usage->wal = (4 << 20) - 1;  // under its bound (shrunk: the wait starts again)
  metrics.Sample();
  clock.AdvanceMs(600'000);
  metrics.Sample();
  EXPECT_EQ(store.flushes, 1);
}

TEST_F(StoreDiskMetricsTest, AnOldWalOfARealRocksDbStoreIsFlushedIntoTableFilesAndDeleted) {
  ASSERT_TRUE(rocks_->CreateTable("t", TableOptions{}).ok());
  WriteBatch b;
  for (int i = 0; i < 3000; ++i) b.Put("t", "k" + std::to_string(i), std::string(1000, 'v'));
  ASSERT_TRUE(rocks_->Write(b).ok());
  StoreDiskMetrics metrics(registry, *rocks_, clock, 0, 600'000);
  auto before = metrics.Sample();
  ASSERT_TRUE(before.has_value());
  ASSERT_GE(before->wal, kMinAgeFlushWalBytes);
  EXPECT_EQ(before->sst, 0u) << "nothing flushed yet";
  clock.AdvanceMs(600'000);
  metrics.Sample();  // flushes
  EXPECT_EQ(FlushesOf(registry, "ok"), 1);
  // RocksDB deletes the obsolete WAL file in the background, after the flush returns.
  std::optional<StoreDiskUsage> after;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        after = rocks_->disk_usage();
        return after && after->wal < kMinAgeFlushWalBytes;
      },
      30'000));
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(after->sst, 3000u * 1000) << "the rows are in table files now";
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
