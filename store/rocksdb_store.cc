#include "store/rocksdb_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/table_properties_collectors.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>

#include "common/bytes.h"

namespace logdex {
namespace {

constexpr char kTablesFile[] = "LOGDEX_TABLES.json";
constexpr size_t kStampSize = 8;  // write time prefixed to every value

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  Errc code = s.IsInvalidArgument() ? Errc::kInvalidArgument
              : s.IsNotFound()      ? Errc::kNotFound
              : s.IsCorruption()    ? Errc::kCorruption
              : s.IsBusy() || s.IsTimedOut() || s.IsTryAgain() ? Errc::kUnavailable
                                                               : Errc::kIOError;
  return Status(code, std::string(what) + ": " + s.ToString());
}

rocksdb::CompressionType ToRocks(Compression c) {
  switch (c) {
    case Compression::kNone: return rocksdb::kNoCompression;
    case Compression::kSnappy: return rocksdb::kSnappyCompression;
    case Compression::kLz4: return rocksdb::kLZ4Compression;
    case Compression::kZstd: return rocksdb::kZSTD;
  }
  return rocksdb::kNoCompression;
}

nlohmann::json ToJson(const TableOptions& o) {
  return {{"ttl_seconds", o.ttl_seconds}, {"versions", o.versions},   {"bloom_filter", o.bloom_filter},
          {"block_size", o.block_size},   {"block_cache", o.block_cache}, {"compression", static_cast<int>(o.compression)},
          {"ordered_prefix", o.ordered_prefix}};
}

TableOptions FromJson(const nlohmann::json& j) {
  TableOptions o;
  o.ttl_seconds = j.value("ttl_seconds", o.ttl_seconds);
  o.versions = j.value("versions", o.versions);
  o.bloom_filter = j.value("bloom_filter", o.bloom_filter);
  o.block_size = j.value("block_size", o.block_size);
  o.block_cache = j.value("block_cache", o.block_cache);
  o.compression = static_cast<Compression>(j.value("compression", static_cast<int>(o.compression)));
  o.ordered_prefix = j.value("ordered_prefix", o.ordered_prefix);
  return o;
}

bool Expired(std::string_view stored, int64_t ttl_ms, int64_t now_ms) {
  if (ttl_ms <= 0 || stored.size() < kStampSize) return false;
  int64_t written = static_cast<int64_t>(GetBigEndian64(stored.data()));
  return now_ms - written >= ttl_ms;
}

// Drops expired rows during compaction. The TTL is read at each call, so a
// changed table option takes effect without reopening.
class TtlFilter final : public rocksdb::CompactionFilter {
 public:
  TtlFilter(const std::atomic<int64_t>* ttl_ms, const Clock* clock) : ttl_ms_(ttl_ms), clock_(clock) {}
  bool Filter(int, const rocksdb::Slice&, const rocksdb::Slice& value, std::string*, bool*) const override {
    return Expired(std::string_view(value.data(), value.size()), ttl_ms_->load(), clock_->NowMs());
  }
  const char* Name() const override { return "logdex.TtlFilter"; }

 private:
  const std::atomic<int64_t>* ttl_ms_;
  const Clock* clock_;
};

struct Table {
  std::string name;
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  TableOptions options;
  std::atomic<int64_t> ttl_ms{0};
  std::unique_ptr<TtlFilter> filter;
};

}  // namespace

class RocksDbStore::Impl {
 public:
  explicit Impl(const RocksDbOptions& o) : options_(o) {
    cache_ = rocksdb::NewLRUCache(o.block_cache_bytes);
  }

  ~Impl() {
    if (!db_) return;
    for (auto& [name, t] : tables_) db_->DestroyColumnFamilyHandle(t->handle);
    db_->Close();
  }

  Status Open() {
    std::error_code ec;
    std::filesystem::create_directories(options_.path, ec);
    if (ec) return Status(Errc::kIOError, "cannot create store directory " + options_.path + ": " + ec.message());
    if (Status s = LoadDefinitions(); !s.ok()) return s;

    rocksdb::DBOptions db_options;
    db_options.create_if_missing = true;
    db_options.create_missing_column_families = true;
    db_options.max_background_jobs = options_.background_jobs;
    db_options.db_write_buffer_size = options_.memtable_budget_bytes;
    db_options.max_total_wal_size = options_.max_wal_bytes != 0 ? options_.max_wal_bytes : options_.memtable_budget_bytes;
    // RocksDB's own info log, which otherwise grows for the life of the store.
    db_options.max_log_file_size = 16u << 20;
    db_options.keep_log_file_num = 4;

    std::vector<std::string> existing;
    rocksdb::Status ls = rocksdb::DB::ListColumnFamilies(db_options, options_.path, &existing);
    if (!ls.ok()) existing = {rocksdb::kDefaultColumnFamilyName};  // a new database

    std::vector<std::unique_ptr<Table>> pending;
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : existing) {
      auto t = std::make_unique<Table>();
      t->name = name;
      auto it = definitions_.find(name);
      t->options = it != definitions_.end() ? FromJson(it->second) : TableOptions{};
      t->ttl_ms = t->options.ttl_seconds * 1000;
      t->filter = std::make_unique<TtlFilter>(&t->ttl_ms, options_.clock);
      descriptors.emplace_back(name, FamilyOptions(*t));
      pending.push_back(std::move(t));
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(db_options, options_.path, descriptors, &handles, &db);
    if (!s.ok()) return FromRocks(s, "open " + options_.path);
    db_.reset(db);
    for (size_t i = 0; i < handles.size(); ++i) {
      pending[i]->handle = handles[i];
      std::string name = pending[i]->name;
      tables_.emplace(name, std::move(pending[i]));
    }
    return Status::Ok();
  }

  rocksdb::ColumnFamilyOptions FamilyOptions(const Table& t) const {
    rocksdb::ColumnFamilyOptions cf;
    cf.write_buffer_size = options_.write_buffer_bytes;
    if (t.options.ordered_prefix > 0) {
      // Inserts then start from the last position of their prefix instead
      // of the skiplist's head (measured: +12% end-to-end ingest).
      cf.memtable_insert_with_hint_prefix_extractor.reset(
          rocksdb::NewFixedPrefixTransform(t.options.ordered_prefix));
    }
    cf.compression = ToRocks(t.options.compression);
    cf.compaction_filter = t.filter.get();
    // A table file of many deletes (a merge deleting its parts' rows: the
    // compactor, indexer/compactor.h) is marked for compaction, so that the
    // rows it deletes leave the disk soon, not when enough other files pile
    // up on its level (the peer benchmark's replay with compaction: 0.376
    // bytes on disk per raw byte once settled, 0.126 after RocksDB had
    // compacted the deleted parts away). D deletes among N entries, or half.
    cf.table_properties_collector_factories.push_back(
        rocksdb::NewCompactOnDeletionCollectorFactory(/*sliding_window_size=*/128, /*deletion_trigger=*/64,
                                                      /*deletion_ratio=*/0.5));
    rocksdb::BlockBasedTableOptions bt;
    bt.block_size = t.options.block_size;
    if (t.options.block_cache) {
      bt.block_cache = cache_;
    } else {
      bt.no_block_cache = true;
    }
    if (t.options.bloom_filter) bt.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(bt));
    return cf;
  }

  Status LoadDefinitions() {
    std::filesystem::path file = std::filesystem::path(options_.path) / kTablesFile;
    std::ifstream in(file);
    if (!in) return Status::Ok();
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return Status(Errc::kCorruption, file.string() + " is not a JSON object");
    }
    for (auto& [name, def] : j.items()) definitions_[name] = def;
    return Status::Ok();
  }

  Status SaveDefinitions() {
    nlohmann::json j = nlohmann::json::object();
    for (auto& [name, def] : definitions_) j[name] = def;
    std::filesystem::path file = std::filesystem::path(options_.path) / kTablesFile;
    std::filesystem::path tmp = file;
    tmp += ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << j.dump(2) << "\n";
      if (!out.flush()) return Status(Errc::kIOError, "cannot write " + tmp.string());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
    if (ec) return Status(Errc::kIOError, "cannot rename " + tmp.string() + ": " + ec.message());
    return Status::Ok();
  }

  Status CreateTable(std::string_view name, const TableOptions& o) {
    if (name.empty() || name == rocksdb::kDefaultColumnFamilyName) {
      return Status(Errc::kInvalidArgument, "invalid table name '" + std::string(name) + "'");
    }
    if (o.versions != 1) {
      return Status(Errc::kInvalidArgument, "table " + std::string(name) + ": only versions = 1 is supported");
    }
    if (o.ttl_seconds < 0) return Status(Errc::kInvalidArgument, "table " + std::string(name) + ": negative ttl");
    std::unique_lock lock(mu_);
    definitions_[std::string(name)] = ToJson(o);
    auto it = tables_.find(std::string(name));
    if (it != tables_.end()) {
      // Exists: TTL changes apply now; the others at the next open.
      it->second->options = o;
      it->second->ttl_ms = o.ttl_seconds * 1000;
      return SaveDefinitions();
    }
    auto t = std::make_unique<Table>();
    t->name = std::string(name);
    t->options = o;
    t->ttl_ms = o.ttl_seconds * 1000;
    t->filter = std::make_unique<TtlFilter>(&t->ttl_ms, options_.clock);
    rocksdb::Status s = db_->CreateColumnFamily(FamilyOptions(*t), t->name, &t->handle);
    if (!s.ok()) return FromRocks(s, "create table " + t->name);
    tables_.emplace(t->name, std::move(t));
    return SaveDefinitions();
  }

  Table* Find(std::string_view name) const {
    std::shared_lock lock(mu_);
    auto it = tables_.find(std::string(name));
    return it == tables_.end() || name == rocksdb::kDefaultColumnFamilyName ? nullptr : it->second.get();
  }

  Status NoTable(std::string_view name) const {
    return Status(Errc::kNotFound, "no table '" + std::string(name) + "'");
  }

  Status Write(const WriteBatch& batch) {
    // One batch buffer per writing thread, kept between writes (Clear keeps
    // its capacity): a batch of a few MiB in fresh memory costs a page fault
    // per 4 KiB and, assembled by doubling, copies itself over and over. A
    // buffer grown past 64 MiB is let go after use.
    thread_local rocksdb::WriteBatch wb;
    wb.Clear();
    struct Release {
      ~Release() {
        if (wb.Data().capacity() > (64u << 20)) wb = rocksdb::WriteBatch();
      }
    } release;
    const int64_t now_ms = options_.clock->NowMs();
    char stamp[kStampSize];
    WriteFaultHook hook;
    {
      std::lock_guard lock(hook_mu_);
      hook = hook_;
    }
    size_t index = 0;
    for (const WriteBatch::Entry& e : batch.entries()) {
      if (hook) {
        if (Status s = hook(e, index); !s.ok()) {
          ++write_failures_;
          return s;
        }
      }
      ++index;
      Table* t = Find(e.table);
      if (!t) {
        ++write_failures_;
        return NoTable(e.table);
      }
      rocksdb::Status s;
      if (e.op == WriteBatch::Op::kPut) {
        PutBigEndian64(stamp, static_cast<uint64_t>(e.written_ms > 0 ? e.written_ms : now_ms));
        rocksdb::Slice parts[3] = {rocksdb::Slice(stamp, kStampSize), rocksdb::Slice(e.value),
                                   rocksdb::Slice(e.borrowed.data(), e.borrowed.size())};
        rocksdb::Slice key(e.key);
        s = wb.Put(t->handle, rocksdb::SliceParts(&key, 1), rocksdb::SliceParts(parts, 3));
      } else {
        s = wb.Delete(t->handle, e.key);
      }
      if (!s.ok()) {
        ++write_failures_;
        return FromRocks(s, "assemble write batch");
      }
    }
    rocksdb::WriteOptions wo;
    wo.disableWAL = options_.durability == Durability::kSkipWal;
    wo.sync = options_.durability == Durability::kSync;
    rocksdb::Status s = db_->Write(wo, &wb);
    if (!s.ok()) {
      ++write_failures_;
      return FromRocks(s, "write batch");
    }
    rows_written_ += batch.size();
    bytes_written_ += batch.bytes();
    ++write_batches_;
    return Status::Ok();
  }

  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key,
                                         const rocksdb::Snapshot* snapshot = nullptr) {
    Table* t = Find(table);
    if (!t) return NoTable(table).error();
    rocksdb::PinnableSlice value;
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    rocksdb::Status s = db_->Get(ro, t->handle, rocksdb::Slice(key.data(), key.size()), &value);
    return Unstamped(*t, s, value, options_.clock->NowMs());
  }

  // The rows of `keys` in one rocksdb MultiGet, which reads a block once for
  // the keys it holds (the query engine's read-ahead of main rows).
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table, const std::vector<std::string>& keys,
                                                           const rocksdb::Snapshot* snapshot = nullptr) {
    Table* t = Find(table);
    if (!t) return NoTable(table).error();
    std::vector<rocksdb::Slice> slices(keys.begin(), keys.end());
    std::vector<rocksdb::PinnableSlice> values(keys.size());
    std::vector<rocksdb::Status> statuses(keys.size());
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    ro.fill_cache = t->options.block_cache;
    db_->MultiGet(ro, t->handle, keys.size(), slices.data(), values.data(), statuses.data());
    const int64_t now = options_.clock->NowMs();
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      auto row = Unstamped(*t, statuses[i], values[i], now);
      if (!row.ok()) return row.error();
      out.push_back(std::move(*row));
    }
    return out;
  }

  // A read's row without its write stamp; nullopt when absent or expired.
  static Result<std::optional<std::string>> Unstamped(const Table& t, const rocksdb::Status& s,
                                                      const rocksdb::PinnableSlice& value, int64_t now_ms) {
    if (s.IsNotFound()) return std::optional<std::string>();
    if (!s.ok()) return FromRocks(s, "get from " + t.name).error();
    std::string_view stored(value.data(), value.size());
    if (stored.size() < kStampSize) {
      return Error{Errc::kCorruption, "row in " + t.name + " has no write stamp"};
    }
    if (Expired(stored, t.ttl_ms.load(), now_ms)) return std::optional<std::string>();
    return std::optional<std::string>(std::string(stored.substr(kStampSize)));
  }

  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec, const rocksdb::Snapshot* snapshot = nullptr);

  Status Scan(const ScanSpec& spec, const RowVisitor& visit, const rocksdb::Snapshot* snapshot = nullptr) {
    return ScanRows(*NewIterator(spec, snapshot), spec.limit, visit);
  }

  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit, const rocksdb::Snapshot* snapshot = nullptr) {
    if (Status s = ValidateFuzzySpec(spec); !s.ok()) return s;
    return FuzzyScanRows(*NewIterator(spec.range, snapshot), spec, visit);
  }

  const rocksdb::Snapshot* TakeSnapshot() { return db_->GetSnapshot(); }
  void ReleaseSnapshot(const rocksdb::Snapshot* s) { db_->ReleaseSnapshot(s); }

  StoreCounters counters() const {
    StoreCounters c;
    c.rows_written = rows_written_;
    c.bytes_written = bytes_written_;
    c.rows_examined = rows_examined_;
    c.write_batches = write_batches_;
    c.write_failures = write_failures_;
    return c;
  }

  Status Flush() {
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    {
      std::shared_lock lock(mu_);
      for (auto& [name, t] : tables_) handles.push_back(t->handle);
    }
    return FromRocks(db_->Flush(rocksdb::FlushOptions(), handles), "flush");
  }

  Status Compact(std::string_view name) {
    Table* t = Find(name);
    if (!t) return NoTable(name);
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    return FromRocks(db_->CompactRange(co, t->handle, nullptr, nullptr), "compact " + t->name);
  }

  Result<uint64_t> CountRaw(std::string_view name) {
    Table* t = Find(name);
    if (!t) return NoTable(name).error();
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), t->handle));
    uint64_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
    return n;
  }

  std::map<std::string, uint64_t> TableSstBytes() {
    std::shared_lock lock(mu_);
    std::map<std::string, uint64_t> out;
    for (auto& [name, t] : tables_) {
      if (name == rocksdb::kDefaultColumnFamilyName) continue;  // not a table (Find)
      rocksdb::ColumnFamilyMetaData meta;
      db_->GetColumnFamilyMetaData(t->handle, &meta);
      out[name] = meta.size;
    }
    return out;
  }

  std::atomic<uint64_t>& rows_examined() { return rows_examined_; }
  const std::string& path() const { return options_.path; }

  void SetHook(WriteFaultHook hook) {
    std::lock_guard lock(hook_mu_);
    hook_ = std::move(hook);
  }

 private:
  RocksDbOptions options_;
  std::shared_ptr<rocksdb::Cache> cache_;
  std::unique_ptr<rocksdb::DB> db_;
  mutable std::shared_mutex mu_;  // guards tables_ and definitions_
  std::map<std::string, std::unique_ptr<Table>> tables_;
  std::map<std::string, nlohmann::json> definitions_;
  std::mutex hook_mu_;
  WriteFaultHook hook_;
  std::atomic<uint64_t> rows_written_{0}, bytes_written_{0}, rows_examined_{0}, write_batches_{0},
      write_failures_{0};
};

namespace {

// A RocksDB iterator over one table's range that hides expired rows and
// strips the write stamp; counts every row it lands on as examined.
class RocksRowIterator final : public RowIterator {
 public:
  RocksRowIterator(rocksdb::DB* db, Table* table, const ScanSpec& spec, const Clock* clock,
                   std::atomic<uint64_t>* examined, const rocksdb::Snapshot* snapshot)
      : spec_(spec), lower_(spec_.start), upper_(spec_.stop), examined_(examined) {
    ttl_ms_ = table->ttl_ms.load();
    now_ms_ = clock->NowMs();
    rocksdb::ReadOptions ro;
    ro.snapshot = snapshot;
    if (!spec_.start.empty()) ro.iterate_lower_bound = &lower_;
    if (!spec_.stop.empty()) ro.iterate_upper_bound = &upper_;
    ro.fill_cache = table->options.block_cache;
    it_.reset(db->NewIterator(ro, table->handle));
    if (spec_.reverse) {
      it_->SeekToLast();
    } else {
      it_->SeekToFirst();
    }
    Settle();
  }
  ~RocksRowIterator() override { *examined_ += examined_local_; }

  bool Valid() const override { return it_->Valid(); }
  void Next() override {
    Step();
    Settle();
  }
  void Seek(std::string_view target) override {
    rocksdb::Slice t(target.data(), target.size());
    if (spec_.reverse) {
      it_->SeekForPrev(t);
    } else {
      it_->Seek(t);
    }
    Settle();
  }
  std::string_view key() const override { return {it_->key().data(), it_->key().size()}; }
  std::string_view value() const override {
    return std::string_view(it_->value().data(), it_->value().size()).substr(kStampSize);
  }
  int64_t written_ms() const override { return static_cast<int64_t>(GetBigEndian64(it_->value().data())); }
  Status status() const override { return FromRocks(it_->status(), "scan"); }

 private:
  void Step() {
    if (spec_.reverse) {
      it_->Prev();
    } else {
      it_->Next();
    }
  }
  // Counts the row landed on and moves past expired or stamp-less ones.
  void Settle() {
    while (it_->Valid()) {
      ++examined_local_;
      std::string_view stored(it_->value().data(), it_->value().size());
      if (stored.size() >= kStampSize && !Expired(stored, ttl_ms_, now_ms_)) return;
      Step();
    }
  }

  ScanSpec spec_;
  rocksdb::Slice lower_, upper_;
  std::unique_ptr<rocksdb::Iterator> it_;
  int64_t ttl_ms_ = 0, now_ms_ = 0;
  std::atomic<uint64_t>* examined_;
  uint64_t examined_local_ = 0;
};

}  // namespace

std::unique_ptr<RowIterator> RocksDbStore::Impl::NewIterator(const ScanSpec& spec, const rocksdb::Snapshot* snapshot) {
  Table* t = Find(spec.table);
  if (!t) return ErrorIterator(NoTable(spec.table));
  return std::make_unique<RocksRowIterator>(db_.get(), t, spec, options_.clock, &rows_examined_, snapshot);
}

namespace {

// The store as it was when the view was made (a RocksDB snapshot): every
// read of the view agrees with every other. Writes are refused.
class RocksSnapshotView final : public TableStore {
 public:
  RocksSnapshotView(RocksDbStore::Impl& impl, const RocksDbStore& store)
      : impl_(impl), store_(store), snapshot_(impl.TakeSnapshot()) {}
  ~RocksSnapshotView() override { impl_.ReleaseSnapshot(snapshot_); }

  Status CreateTable(std::string_view, const TableOptions&) override { return ReadOnly(); }
  bool HasTable(std::string_view name) const override { return store_.HasTable(name); }
  Status Write(const WriteBatch&) override { return ReadOnly(); }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    return impl_.Get(table, key, snapshot_);
  }
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override {
    return impl_.MultiGet(table, keys, snapshot_);
  }
  bool batched_gets() const override { return true; }
  Status Scan(const ScanSpec& spec, const RowVisitor& visit) override { return impl_.Scan(spec, visit, snapshot_); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) override {
    return impl_.FuzzyScan(spec, visit, snapshot_);
  }
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec) override { return impl_.NewIterator(spec, snapshot_); }
  StoreCounters counters() const override { return store_.counters(); }

 private:
  static Status ReadOnly() { return Status(Errc::kFailedPrecondition, "a snapshot view of the store is read-only"); }

  RocksDbStore::Impl& impl_;
  const RocksDbStore& store_;
  const rocksdb::Snapshot* snapshot_;
};

}  // namespace

std::unique_ptr<TableStore> RocksDbStore::SnapshotView() { return std::make_unique<RocksSnapshotView>(*impl_, *this); }

Result<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const RocksDbOptions& options) {
  if (options.path.empty()) return Error{Errc::kInvalidArgument, "store path is empty"};
  if (!options.clock) return Error{Errc::kInvalidArgument, "store clock is null"};
  auto impl = std::make_unique<Impl>(options);
  if (Status s = impl->Open(); !s.ok()) return s.error();
  return std::unique_ptr<RocksDbStore>(new RocksDbStore(std::move(impl)));
}

RocksDbStore::RocksDbStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RocksDbStore::~RocksDbStore() = default;

Status RocksDbStore::CreateTable(std::string_view name, const TableOptions& options) {
  return impl_->CreateTable(name, options);
}
bool RocksDbStore::HasTable(std::string_view name) const { return impl_->Find(name) != nullptr; }
Status RocksDbStore::Write(const WriteBatch& batch) { return impl_->Write(batch); }
Result<std::optional<std::string>> RocksDbStore::Get(std::string_view table, std::string_view key) {
  return impl_->Get(table, key);
}
Result<std::vector<std::optional<std::string>>> RocksDbStore::MultiGet(std::string_view table,
                                                                       const std::vector<std::string>& keys) {
  return impl_->MultiGet(table, keys);
}
Status RocksDbStore::Scan(const ScanSpec& spec, const RowVisitor& visit) { return impl_->Scan(spec, visit); }
Status RocksDbStore::FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) {
  return impl_->FuzzyScan(spec, visit);
}
std::unique_ptr<RowIterator> RocksDbStore::NewIterator(const ScanSpec& spec) { return impl_->NewIterator(spec); }
StoreCounters RocksDbStore::counters() const { return impl_->counters(); }

std::optional<StoreDiskUsage> RocksDbStore::disk_usage() const {
  StoreDiskUsage u;
  std::error_code ec;
  auto it = std::filesystem::recursive_directory_iterator(impl_->path(), ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    const uint64_t size = it->file_size(size_ec);
    if (size_ec) continue;  // deleted while listed (a compaction's or a flush's input)
    const std::string ext = it->path().extension().string();
    if (ext == ".sst" || ext == ".blob") u.sst += size;
    else if (ext == ".log") u.wal += size;  // NNNNNN.log (RocksDB's info log is LOG, LOG.old.*)
    else u.other += size;
  }
  if (ec) return std::nullopt;  // a partial sum would under-report
  return u;
}
Status RocksDbStore::Flush() { return impl_->Flush(); }
Status RocksDbStore::CompactTable(std::string_view name) { return impl_->Compact(name); }
Result<uint64_t> RocksDbStore::CountRawRows(std::string_view name) { return impl_->CountRaw(name); }
std::map<std::string, uint64_t> RocksDbStore::TableSstBytes() const { return impl_->TableSstBytes(); }
void RocksDbStore::SetWriteFaultHook(WriteFaultHook hook) { impl_->SetHook(std::move(hook)); }

}  // namespace logdex
