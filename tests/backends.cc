#include "tests/backends.h"

#include <gtest/gtest.h>

#include "store/rocksdb_store.h"

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

}  // namespace

std::vector<Backend> AllBackends() { return {RocksDbBackend()}; }

}  // namespace logdex
