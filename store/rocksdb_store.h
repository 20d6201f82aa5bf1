// RocksDbStore: the embedded TableStore (the default backend).
//
// Each table is a RocksDB column family; TableOptions map to column-family
// options (block size, bloom filter, block cache, compression). Table
// definitions persist in LOGDEX_TABLES.json in the store directory, so a
// reopened store opens every table with the options it was created with.
//
// TTL: each stored value is prefixed with its write time (u64 ms, big
// endian). Reads hide rows older than the table's TTL at once; a compaction
// filter removes them later. Write() applies a batch atomically across
// tables (one RocksDB WriteBatch).
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "store/table_store.h"

namespace logdex {

struct RocksDbOptions {
  // Directory of the database; created when missing.
  std::string path;
  Durability durability = Durability::kAsync;
  // Reads hide expired rows by this clock; never null.
  const Clock* clock = &SystemClock::Instance();
  // Shared LRU block cache for tables with block_cache on. Default 128 MiB.
  size_t block_cache_bytes = 128u << 20;
  // Memtable size per column family. Default 64 MiB.
  size_t write_buffer_bytes = 64u << 20;
  // The memtables of all tables together (RocksDB's db_write_buffer_size):
  // past it, a table's memtable is flushed. Default 256 MiB.
  size_t memtable_budget_bytes = 256u << 20;
  // The write-ahead log is kept under about this (RocksDB's
  // max_total_wal_size): past it, the tables whose unflushed rows hold the
  // oldest log file are flushed so that the file can go. Without it a table
  // written rarely (meta, alert state) pins every log file since its last
  // write: the WAL then grew to half the size of the data. 0: the memtable
  // budget. The WAL therefore stays within about twice the memtable budget.
  size_t max_wal_bytes = 0;
  // Background flush and compaction threads. Default 2.
  int background_jobs = 2;
};

class RocksDbStore final : public TableStore {
 public:
  static Result<std::unique_ptr<RocksDbStore>> Open(const RocksDbOptions& options);
  ~RocksDbStore() override;

  Status CreateTable(std::string_view name, const TableOptions& options) override;
  bool HasTable(std::string_view name) const override;
  Status Write(const WriteBatch& batch) override;
  bool atomic_writes() const override { return true; }
  std::unique_ptr<TableStore> SnapshotView() override;
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override;
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override;
  bool batched_gets() const override { return true; }
  Status Scan(const ScanSpec& spec, const RowVisitor& visit) override;
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) override;
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec) override;
  StoreCounters counters() const override;
  // Sizes of the files in the store directory, by kind (file sizes, not
  // allocated blocks: RocksDB may preallocate the live WAL beyond its size).
  // A file that vanishes while it is listed is not counted; nullopt when the
  // directory cannot be listed.
  std::optional<StoreDiskUsage> disk_usage() const override;

  // Flushes every memtable to disk.
  Status Flush() override;
  // Runs a full compaction of one table (tests use it to check that
  // compaction removes expired rows).
  Status CompactTable(std::string_view name);
  // Rows physically present in a table, expired or not (tests only).
  Result<uint64_t> CountRawRows(std::string_view name);
  // Bytes of each table's SST files, as RocksDB's metadata gives them
  // (benchmarks' breakdown of disk_usage().sst).
  std::map<std::string, uint64_t> TableSstBytes() const;

  // Test seam: called for each entry while a batch is assembled, before
  // anything is applied. A non-OK status fails the whole batch.
  using WriteFaultHook = std::function<Status(const WriteBatch::Entry& entry, size_t index)>;
  void SetWriteFaultHook(WriteFaultHook hook);

  class Impl;

 private:
  explicit RocksDbStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace logdex
