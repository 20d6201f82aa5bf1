// HBaseTestServer: a THBaseService (HBase Thrift2 gateway) test fixture.
//
// Serves the subset in store/hbase/hbase.thrift on a loopback port (0 =
// any free port) over an embedded RocksDbStore in `dir` (reads are answered
// from an in-memory copy of its tables, kept as it writes), so that
// HBaseTableStore can be tested without HBase. It is a test fixture, not a
// product feature. What it honours, as HBase does:
// - namespaces ("default" and "hbase" always exist) and tables "ns:name"
//   with their descriptors and split keys (persisted in `dir`, so a server
//   restarted on the same dir sees the same tables and rows);
// - one version per cell; cells carry a timestamp (the put's, or the
//   clock's now) and expire when now - timestamp >= the family's TTL;
// - scanners: startRow/stopRow, reversed scans (startRow = inclusive upper
//   end, stopRow = exclusive lower end), caching and numRows per
//   getScannerRows, columns, scanner ids (TIllegalArgument when unknown);
// - TScan.filterBytes holding a protobuf hbase.pb.Filter with a
//   FuzzyRowFilter (decoded here independently of the client's encoder):
//   HBase's matching (fixed bytes compared over the first min(row, key)
//   bytes, so rows of other lengths can match) with seeking ahead;
//   other filters fail with TIOError;
// - framed transport frames over `max_frame_bytes` (2 MB, the gateway's
//   default) are refused, so oversized putMultiple calls fail;
// - injected TIOError (with canRetry as asked): per method, or from the
//   n-th mutation on (the call that reaches it applies the mutations before
//   it, then fails, as HBase's non-atomic putMultiple can).
// Fixture limits: tables have exactly one column family; maxVersions other
// than 1 is refused; TScan.batchSize and limit are ignored (the client pages
// with numRows).
//
// Thread-safety: the server runs one thread per connection and serializes
// every call on one lock; the fault and stats methods may be called from any
// thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/hbase/hbase_store.h"

namespace logdex {

struct HBaseTestServerOptions {
  // Data directory (created when missing). Required.
  std::string dir;
  // Cell timestamps and TTL read this clock; never null.
  const Clock* clock = &SystemClock::Instance();
  HBaseOptions::Transport transport = HBaseOptions::Transport::kFramed;
  HBaseOptions::Protocol protocol = HBaseOptions::Protocol::kBinary;
  // Largest accepted frame (framed transport only). Default 2 MiB.
  uint32_t max_frame_bytes = 2u << 20;
  std::string host = "127.0.0.1";
  // 0 = a free port, see port().
  int port = 0;
};

// A table as the server knows it (thrift enum values as ints).
struct TestTableInfo {
  int32_t max_versions = 0;
  int32_t ttl_seconds = 0;
  int bloom_filter_type = -1;  // TBloomFilterType: NONE 0, ROW 1
  int32_t block_size = 0;
  bool block_cache = true;
  int compression = -1;  // TCompressionAlgorithm: NONE 2, SNAPPY 3, LZ4 4, ZSTD 6
  std::map<std::string, std::string> attributes;  // the family's
  std::vector<std::string> split_keys;
};

struct TestServerStats {
  std::map<std::string, uint64_t> calls;  // per method name
  uint64_t mutations = 0;                 // puts and deletes applied
  int last_durability = -1;               // TDurability of the last mutation (-1: unset)
  int32_t last_caching = 0;               // TScan.caching of the last openScanner
  int32_t max_rows_per_page = 0;          // most rows one getScannerRows returned
  uint64_t rows_scanned = 0;              // rows the server's cursors landed on
};

class HBaseTestServer {
 public:
  static Result<std::unique_ptr<HBaseTestServer>> Start(const HBaseTestServerOptions& options);
  // Stops serving and closes the store.
  ~HBaseTestServer();

  int port() const;

  // Mutations counted from this call on: the one numbered `n` (0-based) and
  // every later one fail with TIOError(canRetry). n < 0 clears.
  void FailMutationsFrom(int64_t n, bool can_retry);
  // The next `count` calls of `method` ("putMultiple", "getScannerRows", ...
  // or "*" for any) fail with TIOError(canRetry) before doing anything, with
  // `message` (default "injected failure of <method>").
  void FailNextCalls(const std::string& method, int count, bool can_retry, const std::string& message = "");
  // The next `count` deleteMultiple calls apply none of their deletes and
  // answer them all as failed (the call itself succeeds), as a gateway does
  // for deletes its region servers refused.
  void RefuseNextDeletes(int count);

  TestServerStats stats() const;
  // "ns:name"; nullopt when the table does not exist.
  std::optional<TestTableInfo> Table(const std::string& hbase_name) const;
  // Drops the family's attributes, as a table an older build created has none.
  void ClearFamilyAttributes(const std::string& hbase_name);

  class Impl;

 private:
  explicit HBaseTestServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex
