// TableStore: the storage interface every logdex table lives behind.
//
// A store holds named tables of (key, value) rows, sorted by key bytes
// (unsigned lexicographic), one version per row. Backends: RocksDbStore
// (embedded, default; rocksdb_store.h) and HBaseTableStore (HBase through
// the Thrift2 gateway; hbase/hbase_store.h). tests/store_conformance_test.cc
// pins the semantics every backend must have.
//
// Thread-safety: every method is safe to call concurrently.
// Visitors run on the calling thread and must not call back into the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace logdex {

// How a write reaches disk before Write() returns.
enum class Durability {
  kSkipWal,  // no write-ahead log: a crash loses unflushed writes (Kafka replays them)
  kAsync,    // WAL written, not fsynced: survives a process crash (default)
  kSync,     // WAL fsynced: survives a machine crash
};

enum class Compression { kNone, kSnappy, kLz4, kZstd };

// Per-table options (the HBase column-family settings; the values logdex
// uses per table: docs/ARCHITECTURE.md, "Tables and row keys").
struct TableOptions {
  // Rows older than this (by write time) are invisible to reads at once and
  // removed by compaction later. 0 = keep forever.
  int64_t ttl_seconds = 0;
  // Versions kept per row. Only 1 is supported: logdex never reads old versions.
  int versions = 1;
  // Row bloom filter (point gets and prefix seeks skip files without the key).
  bool bloom_filter = false;
  // Data block size in bytes. Default 16 KiB.
  uint32_t block_size = 16 * 1024;
  // Cache data blocks in memory. Off for tables read only sequentially.
  bool block_cache = true;
  // Store-side compression of blocks. None for already-compressed payloads.
  Compression compression = Compression::kNone;
  // Keys that share their first `ordered_prefix` bytes mostly arrive in
  // increasing order (a stream's rows, by time): the store may remember
  // where it last inserted each prefix (RocksDB: memtable insert hints).
  // 0 = no such pattern. A performance hint only; results never depend on it.
  uint32_t ordered_prefix = 0;
  // The table's keys begin with a salt byte below this (the main table's
  // hash salt): a store that partitions tables by key range may split it at
  // 0x01 .. pre_split - 1 when it creates it (HBase: one region per bucket,
  // so that writes spread over region servers from the start). 0 or 1: no
  // pre-split.
  uint32_t pre_split = 0;

  bool operator==(const TableOptions&) const = default;
};

// A set of puts and deletes, across tables, applied atomically by Write()
// (all or nothing) on backends that can; see the backend's header.
class WriteBatch {
 public:
  enum class Op { kPut, kDelete };
  struct Entry {
    Op op;
    std::string table;
    std::string key;
    // The row's value is `value` followed by `borrowed` (bytes the batch
    // does not own; see PutBorrowing).
    std::string value;
    std::string_view borrowed;
    // A put's write time for its table's TTL, ms since the epoch; 0: when it
    // is written. RocksDB honours it; HBase writes with the server's time
    // (the compactor, which sets it, runs on RocksDB only).
    int64_t written_ms = 0;

    size_t value_size() const { return value.size() + borrowed.size(); }
    std::string Value() const { return borrowed.empty() ? value : value + std::string(borrowed); }
  };

  void Put(std::string_view table, std::string key, std::string value) {
    bytes_ += key.size() + value.size();
    entries_.push_back(Entry{Op::kPut, std::string(table), std::move(key), std::move(value), {}});
  }
  // A row whose value is `head` followed by `tail`, without copying `tail`:
  // it must stay valid until the batch is written or discarded (the
  // consumer's message buffers, for main rows).
  void PutBorrowing(std::string_view table, std::string key, std::string head, std::string_view tail) {
    bytes_ += key.size() + head.size() + tail.size();
    entries_.push_back(Entry{Op::kPut, std::string(table), std::move(key), std::move(head), tail});
  }
  void Delete(std::string_view table, std::string key) {
    bytes_ += key.size();
    entries_.push_back(Entry{Op::kDelete, std::string(table), std::move(key), {}, {}});
  }
  // Gives the puts from entry `first` on the write time `written_ms` (see
  // Entry::written_ms): rows that replace older ones (a merged chunk's) keep
  // their age.
  void Restamp(size_t first, int64_t written_ms) {
    for (size_t i = first; i < entries_.size(); ++i) {
      if (entries_[i].op == Op::kPut) entries_[i].written_ms = written_ms;
    }
  }
  // Drops the entries from index `size` on (a staging undone), keeping
  // the tables marked WriteLast.
  void Truncate(size_t size) {
    while (entries_.size() > size) {
      const Entry& e = entries_.back();
      bytes_ -= e.key.size() + e.value_size();
      entries_.pop_back();
    }
  }
  void Clear() {
    entries_.clear();
    last_.clear();
    bytes_ = 0;
    send_within_ms_.reset();
  }

  // Marks a table whose rows stand for others in the batch (the indexer's
  // main table: a chunk whose main row exists has its index rows; alert
  // staging's alert_seen: a chunk marked seen has its notifications). A
  // store that may apply a batch row by row (TableStore::atomic_writes()
  // false) sends the other tables first, in the order the batch first names
  // them, then the marked ones in the order they were marked; a marked table
  // whose rows in the batch are all deletes goes first instead. So a failure
  // part-way never leaves a marked row without the rows that go with it.
  // Atomic stores ignore it.
  void WriteLast(std::string_view table) {
    for (const std::string& t : last_) {
      if (t == table) return;
    }
    last_.emplace_back(table);
  }
  const std::vector<std::string>& last_tables() const { return last_; }

  // A store whose calls may be retried for long (HBase) starts no attempt
  // of this batch's calls once `ms` have passed since Write() was called,
  // and fails the write instead (kUnavailable): a compactor's writes must
  // land within its lease (indexer/compaction_lease.h). Other stores
  // ignore it. Unset: no deadline.
  void set_send_within_ms(int64_t ms) { send_within_ms_ = ms; }
  std::optional<int64_t> send_within_ms() const { return send_within_ms_; }

  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  // Key and value bytes in the batch.
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> last_;
  uint64_t bytes_ = 0;
  std::optional<int64_t> send_within_ms_;
};

// Visits one row; return false to stop the scan.
using RowVisitor = std::function<bool(std::string_view key, std::string_view value)>;

// A range scan over [start, stop) in key order, or in reverse key order when
// `reverse` is set (the range is the same; only the direction changes).
// An empty `stop` means "to the end of the table".
struct ScanSpec {
  std::string table;
  std::string start;
  std::string stop;
  bool reverse = false;
  // At most this many rows are visited; 0 = no limit.
  uint64_t limit = 0;
};

// A fuzzy row scan (HBase's FuzzyRowFilter): rows of exactly `key.size()`
// bytes whose bytes equal `key` wherever mask[i] == 0 (fixed); bytes where
// mask[i] == 1 may be anything. The store seeks ahead to the next key that
// can match instead of examining every row.
struct FuzzyScanSpec {
  ScanSpec range;
  std::string key;
  std::string mask;  // same length as key; each byte 0 (fixed) or 1 (any)
};

// Monotonic counters since the store was opened.
struct StoreCounters {
  uint64_t rows_written = 0;   // puts and deletes applied
  uint64_t bytes_written = 0;  // key + value bytes applied
  uint64_t rows_examined = 0;  // rows a scan's iterator landed on, matching or not
  uint64_t write_batches = 0;
  uint64_t write_failures = 0;
};

// Bytes a store holds on this machine's disk, by kind of file.
struct StoreDiskUsage {
  uint64_t sst = 0;    // table files (RocksDB *.sst, *.blob)
  uint64_t wal = 0;    // write-ahead log (RocksDB *.log)
  uint64_t other = 0;  // everything else: MANIFEST, OPTIONS, info logs, definitions
  uint64_t total() const { return sst + wal + other; }
};

// A pull-style cursor over one ScanSpec's range, in the spec's direction.
// Not thread-safe; it must not outlive its store. Expired rows are skipped.
class RowIterator {
 public:
  virtual ~RowIterator() = default;
  // True while positioned on a row; false at the end or on error (see status()).
  virtual bool Valid() const = 0;
  virtual void Next() = 0;
  // Forward: moves to the first row >= target; reverse: the last row <= target
  // (always within the spec's range).
  virtual void Seek(std::string_view target) = 0;
  // The current row; valid until the next move.
  virtual std::string_view key() const = 0;
  virtual std::string_view value() const = 0;
  virtual Status status() const = 0;
  // When the current row was written (where its TTL counts from), ms since
  // the epoch; 0 on a store that does not keep it.
  virtual int64_t written_ms() const { return 0; }
};

class TableStore {
 public:
  virtual ~TableStore() = default;

  // Creates the table, or opens it if it exists, with `options`.
  virtual Status CreateTable(std::string_view name, const TableOptions& options) = 0;
  // CreateTable() of each; the first error (in the list's order) is
  // returned, and which of the others were made is then unspecified. The
  // default creates them one after another and stops at an error; a backend
  // where each creation is a slow round trip creates them concurrently
  // (HBase: a master procedure of about 0.35 s per table, 13 tables for
  // indexer/tables.h's layout).
  struct NamedTable {
    std::string name;
    TableOptions options;
  };
  virtual Status CreateTables(const std::vector<NamedTable>& tables);
  virtual bool HasTable(std::string_view name) const = 0;

  // Applies every entry of the batch with the store's durability.
  virtual Status Write(const WriteBatch& batch) = 0;

  // The row's value, nullopt when it does not exist (or has expired).
  virtual Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) = 0;

  // The rows of `keys`, in their order (nullopt: no such row). The default
  // calls Get() per key; a backend where each Get() is a round trip reads
  // them in as few calls as it can (HBase: getMultiple).
  virtual Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                                   const std::vector<std::string>& keys);
  // True when MultiGet is cheaper than a Get per key (HBase: fewer round
  // trips; RocksDB: a block read once for the keys it holds): the query
  // engine then reads main rows ahead in batches instead of one Get per chunk.
  virtual bool batched_gets() const { return false; }

  // Visits rows of the range in order (see ScanSpec).
  virtual Status Scan(const ScanSpec& spec, const RowVisitor& visit) = 0;

  // Visits the rows of the range that match the fuzzy key (see FuzzyScanSpec).
  virtual Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) = 0;

  // A cursor over the spec's range (the spec's limit is ignored). The default
  // implementation pages through Scan(); backends override it with a native one.
  virtual std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec);

  virtual StoreCounters counters() const = 0;

  // True when Write() applies a whole batch or nothing, across tables and
  // rows, and readers see it at once (RocksDB); false when a batch may land
  // row by row (HBase). The compactor (indexer/compactor.h) needs true.
  virtual bool atomic_writes() const { return false; }

  // Makes every write so far durable, when the store's durability left some
  // in memory (RocksDB with skip_wal: its memtables); a store whose writes
  // are durable when Write() returns has nothing to do. RocksDB flushes its
  // memtables whatever its durability: with a WAL, that lets it delete the
  // WAL files they pinned (serve's store.flush_after, server/store_metrics.h).
  virtual Status Flush() { return Status::Ok(); }

  // Writes `value` under `key` only when the row holds `expected` now
  // (nullopt: only when there is no such row), atomically against every
  // other writer of the row; true when it wrote. For state that members of
  // a shared store widen concurrently (stream extents in indexer/indexer.cc,
  // the longest chunk span in indexer/compactor.cc).
  // A false answer may also follow this very call's own write, when a retry
  // after a lost answer saw it: callers read the row again and decide.
  // An empty `expected` matches an empty value or no row (HBase's rule).
  // kFailedPrecondition where conditional_writes() is false.
  virtual Result<bool> CheckAndPut(std::string_view table, std::string_view key,
                                   const std::optional<std::string>& expected, std::string_view value);
  virtual bool conditional_writes() const { return false; }

  // True when other processes write the same tables (HBase: every member of
  // a consumer group), so that state they share, such as alert staging's
  // replay guard and the alert outbox, is read back from the store rather
  // than cached; false for a store one process owns (RocksDB).
  virtual bool shared() const { return false; }

  // A read-only view of the store as it is now: every read through it agrees
  // with every other (a query's index rows with its main rows, while the
  // compactor replaces chunks). Must not outlive the store. Null when the
  // backend has no snapshots (HBase): then read the store itself.
  virtual std::unique_ptr<TableStore> SnapshotView() { return nullptr; }

  // What the store holds on local disk; nullopt for a store whose files are
  // not local (HBase: its disks are HBase's and HDFS's).
  virtual std::optional<StoreDiskUsage> disk_usage() const { return std::nullopt; }
};

// Scan() in terms of an iterator: visits up to `limit` rows (0 = all).
Status ScanRows(RowIterator& it, uint64_t limit, const RowVisitor& visit);
// FuzzyScan() in terms of an iterator over spec.range: visits matching rows
// and seeks ahead past the rest. The spec must be valid (ValidateFuzzySpec).
Status FuzzyScanRows(RowIterator& it, const FuzzyScanSpec& spec, const RowVisitor& visit);
// An iterator that is at its end and reports `status`.
std::unique_ptr<RowIterator> ErrorIterator(Status status);

// Computes where a fuzzy scan must seek next from a row key `row` that does
// not match. Forward: the smallest key > row that can match. Reverse: the
// largest key < row that can match. nullopt when no key in that direction
// can match. Shared by every backend (and by the HBase test server).
std::optional<std::string> FuzzyNextKey(std::string_view row, std::string_view key, std::string_view mask,
                                        bool reverse);

// True when `row` matches the fuzzy key and mask.
bool FuzzyMatches(std::string_view row, std::string_view key, std::string_view mask);

// Checks a FuzzyScanSpec's key and mask (same length, mask bytes 0 or 1).
Status ValidateFuzzySpec(const FuzzyScanSpec& spec);

}  // namespace logdex
