// HBaseTableStore: the TableStore on HBase, through the Thrift2 gateway
// (THBaseService, store/hbase/hbase.thrift).
//
// Mapping:
// - A logdex table `t` is the HBase table `<namespace>:t` with one column
//   family "d"; a row's value is the cell d:v. CreateTable creates the
//   namespace when missing and maps TableOptions to the family descriptor:
//   VERSIONS 1, TTL (seconds; 0 = HBase's FOREVER), ROW bloom filter when
//   bloom_filter is set (NONE otherwise), block size, block cache flag,
//   compression. A table with TableOptions::pre_split > 1 (the main table,
//   on its salt byte) is created with split keys 0x01 .. pre_split-1.
//   CreateTable on an existing table applies changed family settings
//   (modifyColumnFamily). The store knows no logdex table by name.
// - Write() is NOT atomic across rows (HBase has no cross-row transactions).
//   It sends the tables the batch did not mark first, in the order the batch
//   first names them, then those it marked with WriteBatch::WriteLast, in the
//   order marked; a marked table whose entries are all deletes goes first
//   instead (docs/ARCHITECTURE.md, "Delivery and consistency"). The indexer
//   marks the main table, so a failed Write() can leave index rows without
//   their main row, never a main row without its index rows; alert staging
//   marks alert_seen. Within a table the batch's order is kept; puts go out with
//   putMultiple, deletes with deleteMultiple, split so that each call stays
//   under `max_call_bytes` (the gateway's framed transport rejects frames
//   over 2 MB by default). Every table the batch names is checked to exist
//   before anything is sent. Durability (skip_wal / async / sync) maps to
//   TDurability SKIP_WAL / SYNC_WAL / FSYNC_WAL on every mutation (not
//   ASYNC_WAL: HBase acknowledges those before its WAL holds them). SKIP_WAL through HBase is
//   at-most-once on a region server crash: HBase gives no flush signal
//   through Thrift.
// - Reads: Get() is a TGet; Scan/NewIterator open gateway scanners and page
//   with getScannerRows(`scanner_caching` rows). Reverse scans map the
//   interface's [start, stop) onto HBase's reversed scan (startRow = the
//   inclusive upper end, stopRow = the exclusive lower end) and drop the row
//   equal to `stop`. A forward FuzzyScan sends a protobuf-encoded FuzzyRowFilter
//   in TScan.filterBytes and re-checks every row with FuzzyMatches (HBase also
//   matches rows longer or shorter than the fuzzy key by prefix). A reversed one
//   sends no filter and matches every row of the range here: HBase 2.6's
//   FuzzyRowFilter never completes a reversed scan (the call times out).
//   A gateway numbers its scanners from 1 again after a restart, so a
//   scanner id is used only while the pool made no connection since it was
//   opened; otherwise (and after a failed page) the scan reopens past the
//   last row it returned, closing the old scanner when that is still safe.
// - CheckAndPut is checkAndPut on d:v (an absent `expected` is sent as an
//   empty value, which HBase matches against a missing cell).
// - Errors: Thrift exceptions never leave this class; they become Status.
//   TIOError with canRetry = true and transport failures (the connection is
//   rebuilt) are retried up to `retries` times with exponential backoff
//   (common/backoff.h);
//   TIOError naming TableNotFoundException becomes kNotFound.
// - Counters: rows_examined counts rows the gateway's scanners returned
//   (before the fuzzy re-check); rows_written/bytes_written count entries
//   of successful Write() calls and CheckAndPut() calls that wrote;
//   write_failures counts failed Write() and CheckAndPut() calls.
//
// Thread-safety: all methods may be called concurrently; each call borrows a
// connection from a pool of `pool_size` connections for the duration of one
// RPC. An iterator is used by one thread at a time and must not outlive the
// store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/ids.h"
#include "store/table_store.h"

namespace logdex {

struct HBaseOptions {
  // The Thrift2 gateway (hbase thrift -threadpool ...). Default port 9090.
  std::string host = "127.0.0.1";
  int port = 9090;
  // HBase namespace that holds every logdex table; created when missing.
  std::string ns = "logdex";

  // Must match the gateway: framed when it runs with -f (deploy/hbase does),
  // buffered otherwise (the gateway's default). Default framed.
  enum class Transport { kFramed, kBuffered };
  Transport transport = Transport::kFramed;
  // Must match the gateway: binary (default) or compact (-c).
  enum class Protocol { kBinary, kCompact };
  Protocol protocol = Protocol::kBinary;

  // Connections kept open to the gateway. Default 4.
  int pool_size = 4;
  // TCP connect timeout and per-RPC send/receive timeout, in ms.
  int connect_timeout_ms = 5'000;
  int rpc_timeout_ms = 60'000;
  // Longest wait for a free pooled connection, in ms.
  int pool_wait_ms = 60'000;
  // Retries of one RPC after a retryable failure (TIOError with canRetry,
  // or a broken connection). Default 3.
  int retries = 3;
  // Backoff before the first retry, in ms, doubled for each next one up to
  // 10 s, with equal jitter (common/backoff.h: each delay is drawn from its
  // upper half). Default 100.
  int retry_backoff_ms = 100;
  // Sleeps between retries (a seam for tests); default sleeps the thread.
  // Called from several threads at once (CreateTables among them).
  std::function<void(int ms)> sleep;
  // Monotonic time in ns for batches' send deadlines
  // (WriteBatch::set_send_within_ms; a seam for tests); default steady_clock.
  std::function<int64_t()> monotonic_ns;

  Durability durability = Durability::kAsync;

  // A table that exists with a longer TTL than CreateTable asks keeps it,
  // unless this is true: members sharing the store may run different
  // configurations for a while (a rolling change, a host left behind), and
  // a shorter TTL deletes data for good at HBase's next major compaction.
  // A longer TTL is always applied. Default false.
  bool lower_ttl = false;
  // Called once per table, when CreateTable (or CreateTables) has left a
  // table with a longer TTL than asked, or lowered one (lower_ttl): its
  // name, that longer TTL and the one asked, in seconds (0: forever), and
  // whether it was lowered. The longer TTL is the table's own (it existed,
  // or another writer created it first) or its peers' (a table CreateTables
  // created; see there). May be null; called from CreateTables' threads at
  // once: must be thread-safe.
  std::function<void(std::string_view table, int64_t longer_s, int64_t asked_s, bool lowered)> on_longer_ttl;

  // The codec of every table logdex asks to compress (index, meta and merged:
  // snappy by design); unset keeps each table's. For a cluster that lacks the
  // codec: HBase on Hadoop 2 without its native library refuses SNAPPY tables.
  std::optional<Compression> compression;

  // Upper bound of one putMultiple/deleteMultiple request body (row keys,
  // values and per-cell overhead). Default 1.5 MiB, under the gateway's
  // default 2 MB frame. A single row larger than this fails the Write()
  // before anything is sent (kInvalidArgument).
  uint32_t max_call_bytes = 1536u * 1024;
  // Rows per getScannerRows call and TScan.caching. Default 256.
  int scanner_caching = 256;
  // Rows per getMultiple call (MultiGet). Default 64: 4 MiB of 64 KiB chunks.
  int multi_get_rows = 64;
};

class HBaseTableStore final : public TableStore {
 public:
  // Connects one connection (fails fast when the gateway is unreachable).
  static Result<std::unique_ptr<HBaseTableStore>> Open(const HBaseOptions& options);
  ~HBaseTableStore() override;

  Status CreateTable(std::string_view name, const TableOptions& options) override;
  // Up to pool_size tables at once: those that exist first, then the others,
  // which without lower_ttl take the longest TTL the existing ones asked for
  // the same TTL kept.
  Status CreateTables(const std::vector<NamedTable>& tables) override;
  // True when the table exists (cached once seen); false also when the
  // gateway cannot be asked.
  bool HasTable(std::string_view name) const override;
  Status Write(const WriteBatch& batch) override;
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override;
  // getMultiple calls of at most `multi_get_rows` rows each.
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override;
  bool batched_gets() const override { return true; }
  bool shared() const override { return true; }
  // checkAndPut on the value cell d:v, with the store's durability.
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override;
  bool conditional_writes() const override { return true; }
  // Writes are durable when Write() returns, except with durability
  // skip_wal, which HBase cannot flush on request through Thrift: then an
  // error (serve's configuration refuses that pair before this).
  Status Flush() override;
  Status Scan(const ScanSpec& spec, const RowVisitor& visit) override;
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) override;
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec) override;
  StoreCounters counters() const override;

  // "<namespace>:<name>", the HBase table name of a logdex table.
  std::string HBaseName(std::string_view name) const;

  class Impl;

 private:
  explicit HBaseTableStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The protobuf bytes of an hbase.pb.Filter holding a FuzzyRowFilter with one
// (key, mask) pair, for TScan.filterBytes. `mask` uses the interface's (and
// the wire's) convention: 0 = fixed byte, 1 = any byte.
std::string EncodeFuzzyRowFilter(std::string_view key, std::string_view mask);

}  // namespace logdex
