#include "tests/backends.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>

#include "store/rocksdb_store.h"
#ifdef LOGDEX_WITH_HBASE_TEST_SERVER
#include "store/hbase/hbase_store.h"
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

// The options for the real gateway named by LOGDEX_HBASE_THRIFT, if set.
std::optional<HBaseOptions> RealGatewayOptions() {
  const char* addr = std::getenv("LOGDEX_HBASE_THRIFT");
  if (!addr || !*addr) return std::nullopt;
  std::string a(addr);
  auto colon = a.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  HBaseOptions o;
  o.host = a.substr(0, colon);
  o.port = std::atoi(a.c_str() + colon + 1);
  const char* transport = std::getenv("LOGDEX_HBASE_TRANSPORT");
  if (transport && std::string_view(transport) == "buffered") o.transport = HBaseOptions::Transport::kBuffered;
  const char* protocol = std::getenv("LOGDEX_HBASE_PROTOCOL");
  if (protocol && std::string_view(protocol) == "compact") o.protocol = HBaseOptions::Protocol::kCompact;
  return o;
}

// HBaseTableStore on a real HBase through its gateway (tests/engines/ starts one). Each
// `dir` maps to its own namespace, so a reopen sees the same tables and tests do not
// share any. No fault injection; TTLs follow HBase's wall clock.
Backend RealHBaseBackend(const HBaseOptions& base) {
  Backend b;
  b.name = "hbase_real";
  b.open = [base](const std::string& dir, const Clock*) -> std::unique_ptr<TableStore> {
    HBaseOptions o = base;
    std::ostringstream ns;
    ns << "logdex_t" << std::hex << std::setw(16) << std::setfill('0') << std::hash<std::string>{}(dir);
    o.ns = ns.str();
    auto s = HBaseTableStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    return s.ok() ? std::move(s.value()) : nullptr;
  };
  b.fail_writes_at = [](TableStore&, int) { ADD_FAILURE() << "hbase_real has no fault injection"; };
  b.fault_injection = false;
  b.atomic_batches = false;
  b.clock_drives_ttl = false;
  return b;
}
#endif

}  // namespace

std::vector<Backend> AllBackends() {
#ifdef LOGDEX_WITH_HBASE_TEST_SERVER
  std::vector<Backend> all{RocksDbBackend(), HBaseBackend()};
  if (auto real = RealGatewayOptions()) all.push_back(RealHBaseBackend(*real));
  return all;
#else
  return {RocksDbBackend()};
#endif
}

}  // namespace logdex
