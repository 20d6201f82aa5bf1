#include "tests/backends.h"

#include <gtest/gtest.h>

#include "store/rocksdb_store.h"
#ifdef LOGDEX_WITH_HBASE_TEST_SERVER
#include "tests/hbase/served_store.h"
#endif

namespace logdex {
namespace {

Backend RocksDbBackend() {
  Backend b;
  b.name = "rocksdb";
  b.open = [](const std::string& dir, const Clock* clock) -> std::unique_ptr<TableStore> {
    RocksDbOptions o;
    o.path = dir;
    o.clock = clock;
    o.block_cache_bytes = 8 << 20;
    o.write_buffer_bytes = 8 << 20;
    auto s = RocksDbStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    return s.ok() ? std::move(s.value()) : nullptr;
  };
  b.fail_writes_at = [](TableStore& store, int at) {
    auto& rocks = static_cast<RocksDbStore&>(store);
    if (at < 0) return rocks.SetWriteFaultHook(nullptr);
    rocks.SetWriteFaultHook([at](const WriteBatch::Entry&, size_t i) {
      return static_cast<int>(i) == at ? Status(Errc::kIOError, "injected write failure") : Status::Ok();
    });
  };
  return b;
}

#ifdef LOGDEX_WITH_HBASE_TEST_SERVER
// HBaseTableStore through the Thrift2 test gateway (tests/hbase/) on a free
// loopback port, with its data under `dir`. Writes are not atomic across
// rows: index rows go first, the main row last.
Backend HBaseBackend() {
  Backend b;
  b.name = "hbase";
  b.open = [](const std::string& dir, const Clock* clock) -> std::unique_ptr<TableStore> {
    auto s = ServedHBaseStore::Open(dir, clock);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    return s.ok() ? std::move(s.value()) : nullptr;
  };
  b.fail_writes_at = [](TableStore& store, int at) {
    // Mutations from the at-th one the gateway receives (in write order) fail.
    static_cast<ServedHBaseStore&>(store).server().FailMutationsFrom(at, /*can_retry=*/false);
  };
  b.atomic_batches = false;
  return b;
}
#endif

}  // namespace

std::vector<Backend> AllBackends() {
#ifdef LOGDEX_WITH_HBASE_TEST_SERVER
  return {RocksDbBackend(), HBaseBackend()};
#else
  return {RocksDbBackend()};
#endif
}

}  // namespace logdex
