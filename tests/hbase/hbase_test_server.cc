#include "tests/hbase/hbase_test_server.h"

#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <chrono>
#include <climits>
#include <future>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "THBaseService.h"
#include "common/bytes.h"
#include "store/rocksdb_store.h"

namespace logdex {

namespace tt = ::apache::thrift;
namespace h2 = ::logdex::hbase::thrift2;

namespace {

constexpr char kMetaTable[] = "hbase:meta";        // row: "ns:name", value: TTableDescriptor (binary protocol)
constexpr char kNamespaceTable[] = "hbase:namespace";  // row: namespace name
constexpr int64_t kForever = INT32_MAX;

h2::TIOError IOError(const std::string& message, bool can_retry = false) {
  h2::TIOError e;
  e.__set_message(message);
  e.__set_canRetry(can_retry);
  return e;
}

// ---- cells: a row's value in RocksDB is its list of cells ----

struct Cell {
  std::string family, qualifier, value;
  int64_t ts = 0;
};

void AppendU32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}

uint32_t ReadU32(std::string_view& in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(4);
  return v;
}

std::string EncodeCells(const std::vector<Cell>& cells) {
  std::string out;
  for (const Cell& c : cells) {
    AppendU32(out, static_cast<uint32_t>(c.family.size()));
    out += c.family;
    AppendU32(out, static_cast<uint32_t>(c.qualifier.size()));
    out += c.qualifier;
    AppendBigEndian64(out, static_cast<uint64_t>(c.ts));
    AppendU32(out, static_cast<uint32_t>(c.value.size()));
    out += c.value;
  }
  return out;
}

std::vector<Cell> DecodeCells(std::string_view in) {
  std::vector<Cell> cells;
  auto take = [&](std::string& s) {
    uint32_t n = ReadU32(in);
    s.assign(in.substr(0, n));
    in.remove_prefix(n);
  };
  while (!in.empty()) {
    Cell c;
    take(c.family);
    take(c.qualifier);
    c.ts = static_cast<int64_t>(GetBigEndian64(in.data()));
    in.remove_prefix(8);
    take(c.value);
    cells.push_back(std::move(c));
  }
  return cells;
}

// ---- protobuf (proto2) reading, just what hbase.pb.Filter needs ----
// Written independently of the client's encoder so that the two check each other.

struct PbReader {
  std::string_view in;
  bool ok = true;

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (in.empty()) return ok = false;
      uint8_t b = static_cast<uint8_t>(in.front());
      in.remove_prefix(1);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return ok = false;
  }
  // Next field: number and (for length-delimited fields) its bytes; other
  // wire types are skipped. False at the end or on malformed input.
  bool Next(uint32_t* field, std::string_view* bytes, int* wire_type) {
    if (in.empty() || !ok) return false;
    uint64_t tag;
    if (!Varint(&tag)) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<int>(tag & 7);
    uint64_t v;
    switch (*wire_type) {
      case 0: return Varint(&v);
      case 1:
        if (in.size() < 8) return ok = false;
        in.remove_prefix(8);
        return true;
      case 5:
        if (in.size() < 4) return ok = false;
        in.remove_prefix(4);
        return true;
      case 2:
        if (!Varint(&v) || v > in.size()) return ok = false;
        *bytes = in.substr(0, v);
        in.remove_prefix(v);
        return true;
      default: return ok = false;
    }
  }
};

struct FuzzyPair {
  std::string key, mask;  // mask normalized to 0 = fixed, 1 = any
};

// Decodes hbase.pb.Filter{name, serialized_filter = FuzzyRowFilter{repeated
// BytesBytesPair{first, second}}}. Masks may use the wire convention (0/1)
// or HBase's preprocessed one (-1 = fixed, 2 = any), as FuzzyRowFilter does.
std::vector<FuzzyPair> DecodeFuzzyFilter(std::string_view bytes) {
  PbReader filter{bytes};
  std::string name;
  std::string_view serialized;
  bool has_serialized = false;
  uint32_t field;
  std::string_view value;
  int wt;
  while (filter.Next(&field, &value, &wt)) {
    if (field == 1 && wt == 2) name = std::string(value);
    if (field == 2 && wt == 2) serialized = value, has_serialized = true;
  }
  if (!filter.ok) throw IOError("DeserializationException: malformed hbase.pb.Filter");
  if (name != "org.apache.hadoop.hbase.filter.FuzzyRowFilter") {
    throw IOError("DoNotRetryIOException: the test gateway supports only FuzzyRowFilter, got '" + name + "'");
  }
  std::vector<FuzzyPair> pairs;
  PbReader fuzzy{has_serialized ? serialized : std::string_view()};
  while (fuzzy.Next(&field, &value, &wt)) {
    if (field != 1 || wt != 2) continue;
    PbReader pair{value};
    FuzzyPair p;
    uint32_t f;
    std::string_view v;
    int w;
    while (pair.Next(&f, &v, &w)) {
      if (f == 1 && w == 2) p.key = std::string(v);
      if (f == 2 && w == 2) p.mask = std::string(v);
    }
    if (!pair.ok || p.key.size() != p.mask.size()) {
      throw IOError("DeserializationException: fuzzy pair lengths do not match");
    }
    bool preprocessed = !p.mask.empty();
    for (char m : p.mask) preprocessed &= (m == '\xff' || m == 2);
    for (char& m : p.mask) m = preprocessed ? (m == 2 ? 1 : 0) : (m == 0 ? 0 : 1);
    pairs.push_back(std::move(p));
  }
  if (!fuzzy.ok) throw IOError("DeserializationException: malformed FuzzyRowFilter");
  return pairs;
}

// HBase's FuzzyRowFilter match: fixed bytes equal over the first
// min(row, key) bytes.
bool HBaseFuzzyMatch(std::string_view row, const FuzzyPair& p) {
  const size_t n = std::min(row.size(), p.key.size());
  for (size_t i = 0; i < n; ++i) {
    if (!p.mask[i] && row[i] != p.key[i]) return false;
  }
  return true;
}

// ---- table metadata ----

struct TableMeta {
  h2::TTableDescriptor desc;
  std::vector<std::string> splits;
  bool enabled = true;

  const h2::TColumnFamilyDescriptor& family() const { return desc.columns.front(); }
  int64_t ttl_ms() const {
    const auto& f = family();
    return f.__isset.timeToLive && f.timeToLive < kForever ? int64_t{f.timeToLive} * 1000 : 0;
  }
};

template <class T>
std::string Serialize(const T& t) {
  auto buffer = std::make_shared<tt::transport::TMemoryBuffer>();
  tt::protocol::TBinaryProtocol proto(buffer);
  t.write(&proto);
  return buffer->getBufferAsString();
}

template <class T>
T Deserialize(const std::string& bytes) {
  auto buffer = std::make_shared<tt::transport::TMemoryBuffer>();
  buffer->write(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<uint32_t>(bytes.size()));
  tt::protocol::TBinaryProtocol proto(buffer);
  T t;
  t.read(&proto);
  return t;
}

// The RocksDB options of a table's column family. Bloom filters are always
// on: every put reads its row first (to merge cells), mostly for rows that do
// not exist yet, and the family's bloom setting is only recorded.
TableOptions ToStoreOptions(const h2::TColumnFamilyDescriptor& f) {
  TableOptions o;
  o.ttl_seconds = f.__isset.timeToLive && f.timeToLive < kForever ? f.timeToLive : 0;
  o.bloom_filter = true;
  if (f.__isset.blockSize && f.blockSize > 0) o.block_size = static_cast<uint32_t>(f.blockSize);
  o.block_cache = !f.__isset.blockCacheEnabled || f.blockCacheEnabled;
  if (f.__isset.compressionType) {
    switch (f.compressionType) {
      case h2::TCompressionAlgorithm::SNAPPY: o.compression = Compression::kSnappy; break;
      case h2::TCompressionAlgorithm::LZ4: o.compression = Compression::kLz4; break;
      case h2::TCompressionAlgorithm::ZSTD: o.compression = Compression::kZstd; break;
      default: o.compression = Compression::kNone; break;
    }
  }
  return o;
}

std::string NameOf(const h2::TTableName& t) {
  return (t.__isset.ns && !t.ns.empty() ? t.ns : std::string("default")) + ":" + t.qualifier;
}

std::string Qualify(const std::string& table) {
  return table.find(':') == std::string::npos ? "default:" + table : table;
}

// ---- scanners ----

struct Scanner {
  std::string table;
  bool reverse = false;
  // Forward: next row >= fwd_start, < stop. Reverse: next row < rev_stop
  // (empty = no bound), > stop_row (empty = no bound).
  std::string fwd_start, stop, rev_stop, stop_row;
  std::vector<h2::TColumn> columns;
  std::vector<FuzzyPair> fuzzy;
  bool done = false;
};

// A table's rows (row key -> encoded cells), held in memory beside RocksDB.
using Rows = std::map<std::string, std::string, std::less<>>;

// A cursor over Rows within [start, stop) (empty stop: no bound), walking
// down from the top when `reverse`; Seek as TableStore's RowIterator::Seek.
class RowsCursor {
 public:
  RowsCursor(const Rows& rows, std::string_view start, std::string_view stop, bool reverse)
      : rows_(rows), start_(start), reverse_(reverse),
        top_(stop.empty() ? rows.end() : rows.lower_bound(stop)) {
    // A forward range whose start is past its stop is empty.
    pos_ = reverse || (!stop.empty() && start >= stop) ? top_ : rows.lower_bound(start_);
  }
  bool Valid() const {
    if (reverse_) return pos_ != rows_.begin() && std::prev(pos_)->first >= start_;
    return pos_ != top_;
  }
  const std::string& key() const { return Current()->first; }
  const std::string& value() const { return Current()->second; }
  void Next() {
    if (reverse_) {
      --pos_;
    } else {
      ++pos_;
    }
  }
  // Forward: the first row >= target; reverse: the last row <= target.
  void Seek(std::string_view target) {
    if (reverse_) {
      pos_ = rows_.upper_bound(target);
    } else {
      pos_ = rows_.lower_bound(std::max(target, std::string_view(start_)));
    }
    // Never beyond the range's end (top_: its first row at or above stop).
    if (top_ != rows_.end() && (pos_ == rows_.end() || pos_->first > top_->first)) pos_ = top_;
  }

 private:
  Rows::const_iterator Current() const { return reverse_ ? std::prev(pos_) : pos_; }

  const Rows& rows_;
  const std::string start_;
  const bool reverse_;
  const Rows::const_iterator top_;
  Rows::const_iterator pos_;
};

}  // namespace

// ---- the handler ----

class HBaseTestServer::Impl : public h2::THBaseServiceIf, public tt::server::TServerEventHandler {
 public:
  explicit Impl(const HBaseTestServerOptions& o) : options_(o) {}

  ~Impl() override { Stop(); }

  Status Open() {
    RocksDbOptions ro;
    ro.path = options_.dir;
    ro.clock = options_.clock;
    ro.block_cache_bytes = 8 << 20;  // memtables keep RocksDbOptions' default size
    auto db = RocksDbStore::Open(ro);
    if (!db.ok()) return db.error();
    db_ = std::move(db.value());
    for (const char* t : {kMetaTable, kNamespaceTable}) {
      if (Status s = db_->CreateTable(t, TableOptions{}); !s.ok()) return s;
    }
    namespaces_ = {"default", "hbase"};
    Status s = db_->Scan({kNamespaceTable, "", "", false, 0}, [&](std::string_view k, std::string_view) {
      namespaces_.emplace(k);
      return true;
    });
    if (!s.ok()) return s;
    try {
      s = db_->Scan({kMetaTable, "", "", false, 0}, [&](std::string_view k, std::string_view v) {
        TableMeta m;
        m.desc = Deserialize<h2::TTableDescriptor>(std::string(v));
        tables_[std::string(k)] = std::move(m);
        return true;
      });
    } catch (const tt::TException& e) {
      return Status(Errc::kCorruption, std::string("test gateway meta: ") + e.what());
    }
    for (const auto& [name, meta] : tables_) {
      if (!s.ok()) break;
      Rows& rows = rows_[name];
      s = db_->Scan({name, "", "", false, 0}, [&](std::string_view k, std::string_view v) {
        rows.emplace(std::string(k), std::string(v));
        return true;
      });
    }
    return s;
  }

  Status Serve() {
    auto config = std::make_shared<tt::TConfiguration>(INT_MAX, static_cast<int>(options_.max_frame_bytes));
    class Factory final : public tt::transport::TTransportFactory {
     public:
      Factory(bool framed, std::shared_ptr<tt::TConfiguration> c) : framed_(framed), config_(std::move(c)) {}
      std::shared_ptr<tt::transport::TTransport> getTransport(std::shared_ptr<tt::transport::TTransport> t) override {
        if (framed_) return std::make_shared<tt::transport::TFramedTransport>(t, config_);
        return std::make_shared<tt::transport::TBufferedTransport>(t, config_);
      }

     private:
      bool framed_;
      std::shared_ptr<tt::TConfiguration> config_;
    };
    auto transports =
        std::make_shared<Factory>(options_.transport == HBaseOptions::Transport::kFramed, std::move(config));
    std::shared_ptr<tt::protocol::TProtocolFactory> protocols;
    if (options_.protocol == HBaseOptions::Protocol::kCompact) {
      protocols = std::make_shared<tt::protocol::TCompactProtocolFactory>();
    } else {
      protocols = std::make_shared<tt::protocol::TBinaryProtocolFactory>();
    }
    socket_ = std::make_shared<tt::transport::TServerSocket>(options_.host, options_.port);
    // The handler's lifetime is this object's; the processor must not own it.
    std::shared_ptr<h2::THBaseServiceIf> self(std::shared_ptr<void>(), static_cast<h2::THBaseServiceIf*>(this));
    auto processor = std::make_shared<h2::THBaseServiceProcessor>(self);
    server_ = std::make_shared<tt::server::TThreadedServer>(processor, socket_, transports, protocols);
    server_->setServerEventHandler(
        std::shared_ptr<tt::server::TServerEventHandler>(std::shared_ptr<void>(), this));
    std::future<void> listening = listening_.get_future();
    thread_ = std::thread([this] {
      try {
        server_->serve();
      } catch (const std::exception& e) {
        serve_error_ = e.what();
        try {
          listening_.set_value();
        } catch (const std::future_error&) {
          // Already signalled.
        }
      }
    });
    if (listening.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      return Status(Errc::kUnavailable, "test gateway did not start listening within 10 s");
    }
    if (!serve_error_.empty()) return Status(Errc::kUnavailable, "test gateway: " + serve_error_);
    port_ = socket_->getPort();
    return Status::Ok();
  }

  void preServe() override { listening_.set_value(); }

  void Stop() {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    socket_.reset();
    std::lock_guard lock(mu_);
    db_.reset();
  }

  int port() const { return port_; }

  // ---- faults and stats ----

  void FailMutationsFrom(int64_t n, bool can_retry) {
    std::lock_guard lock(mu_);
    fail_from_ = n;
    fail_mutations_seen_ = 0;
    fail_can_retry_ = can_retry;
  }

  void FailNextCalls(const std::string& method, int count, bool can_retry, const std::string& message) {
    std::lock_guard lock(mu_);
    call_faults_[method] = {count, can_retry, message};
  }

  void RefuseNextDeletes(int count) {
    std::lock_guard lock(mu_);
    refuse_deletes_ = count;
  }

  TestServerStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

  std::optional<TestTableInfo> Table(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = tables_.find(name);
    if (it == tables_.end()) return std::nullopt;
    const auto& f = it->second.family();
    TestTableInfo info;
    info.max_versions = f.__isset.maxVersions ? f.maxVersions : 0;
    info.ttl_seconds = f.__isset.timeToLive ? f.timeToLive : 0;
    info.bloom_filter_type = f.__isset.bloomnFilterType ? static_cast<int>(f.bloomnFilterType) : -1;
    info.block_size = f.__isset.blockSize ? f.blockSize : 0;
    info.block_cache = !f.__isset.blockCacheEnabled || f.blockCacheEnabled;
    info.compression = f.__isset.compressionType ? static_cast<int>(f.compressionType) : -1;
    if (f.__isset.attributes) info.attributes = f.attributes;
    info.split_keys = it->second.splits;
    return info;
  }

  void ClearFamilyAttributes(const std::string& name) {
    std::lock_guard lock(mu_);
    TableMeta& m = Meta(name);
    m.desc.columns.front().attributes.clear();
    m.desc.columns.front().__isset.attributes = false;
    SaveMeta(name, m);
  }

  // ---- THBaseServiceIf ----

  void get(h2::TResult& out, const std::string& table, const h2::TGet& g) override {
    std::lock_guard lock(mu_);
    Enter("get");
    const TableMeta& t = Data(table);
    auto row = ReadRow(Qualify(table), t, g.row, g.__isset.columns ? &g.columns : nullptr);
    if (row) out = std::move(*row);
  }

  void getMultiple(std::vector<h2::TResult>& out, const std::string& table,
                   const std::vector<h2::TGet>& gets) override {
    std::lock_guard lock(mu_);
    Enter("getMultiple");
    const TableMeta& t = Data(table);
    for (const h2::TGet& g : gets) {
      auto row = ReadRow(Qualify(table), t, g.row, g.__isset.columns ? &g.columns : nullptr);
      out.push_back(row ? std::move(*row) : h2::TResult());
    }
  }

  void put(const std::string& table, const h2::TPut& p) override {
    std::lock_guard lock(mu_);
    Enter("put");
    Mutate(table, {&p, 1}, {});
  }

  void putMultiple(const std::string& table, const std::vector<h2::TPut>& puts) override {
    std::lock_guard lock(mu_);
    Enter("putMultiple");
    Mutate(table, puts, {});
  }

  // HBase's rule (HRegion's checkAndMutate): an empty comparand matches a
  // missing cell or an empty one; any other matches an equal value.
  bool checkAndPut(const std::string& table, const std::string& row, const std::string& family,
                   const std::string& qualifier, const std::string& value, const h2::TPut& p) override {
    std::lock_guard lock(mu_);
    Enter("checkAndPut");
    const TableMeta& t = Data(table);
    if (p.row != row) throw IOError("org.apache.hadoop.hbase.DoNotRetryIOException: Action's getRow must match");
    h2::TColumn column;
    column.family = family;
    column.__set_qualifier(qualifier);
    const std::vector<h2::TColumn> columns{column};
    auto found = ReadRow(Qualify(table), t, row, &columns);
    const std::string* cell = found && !found->columnValues.empty() ? &found->columnValues[0].value : nullptr;
    const bool matches = value.empty() ? (!cell || cell->empty()) : (cell && *cell == value);
    if (!matches) return false;
    Mutate(table, {&p, 1}, {});
    return true;
  }

  void deleteMultiple(std::vector<h2::TDelete>& failed, const std::string& table,
                      const std::vector<h2::TDelete>& deletes) override {
    std::lock_guard lock(mu_);
    Enter("deleteMultiple");
    if (refuse_deletes_ > 0) {
      --refuse_deletes_;
      failed = deletes;
      return;
    }
    Mutate(table, {}, deletes);
  }

  int32_t openScanner(const std::string& table, const h2::TScan& scan) override {
    std::lock_guard lock(mu_);
    Enter("openScanner");
    return Open(table, scan);
  }

  void getScannerRows(std::vector<h2::TResult>& out, int32_t id, int32_t rows) override {
    std::lock_guard lock(mu_);
    Enter("getScannerRows");
    auto it = scanners_.find(id);
    if (it == scanners_.end()) {
      h2::TIllegalArgument e;
      e.__set_message("Invalid scanner Id");
      throw e;
    }
    Fetch(it->second, std::max(1, rows), out);
  }

  void closeScanner(int32_t id) override {
    std::lock_guard lock(mu_);
    Enter("closeScanner");
    if (scanners_.erase(id) == 0) {
      h2::TIllegalArgument e;
      e.__set_message("Invalid scanner Id");
      throw e;
    }
  }

  void getScannerResults(std::vector<h2::TResult>& out, const std::string& table, const h2::TScan& scan,
                         int32_t rows) override {
    std::lock_guard lock(mu_);
    Enter("getScannerResults");
    int32_t id = Open(table, scan);
    Fetch(scanners_.at(id), std::max(1, rows), out);
    scanners_.erase(id);
  }

  void getTableDescriptor(h2::TTableDescriptor& out, const h2::TTableName& name) override {
    std::lock_guard lock(mu_);
    Enter("getTableDescriptor");
    out = Meta(NameOf(name)).desc;
  }

  bool tableExists(const h2::TTableName& name) override {
    std::lock_guard lock(mu_);
    Enter("tableExists");
    return tables_.count(NameOf(name)) > 0;
  }

  void createTable(const h2::TTableDescriptor& desc, const std::vector<std::string>& splits) override {
    std::lock_guard lock(mu_);
    Enter("createTable");
    const std::string name = NameOf(desc.tableName);
    const std::string ns = name.substr(0, name.find(':'));
    if (!namespaces_.count(ns)) throw IOError("org.apache.hadoop.hbase.NamespaceNotFoundException: " + ns);
    if (tables_.count(name)) throw IOError("org.apache.hadoop.hbase.TableExistsException: " + name);
    if (desc.columns.size() != 1) {
      throw IOError("DoNotRetryIOException: the test gateway supports exactly one column family per table");
    }
    const auto& f = desc.columns.front();
    if (f.__isset.maxVersions && f.maxVersions != 1) {
      throw IOError("DoNotRetryIOException: the test gateway keeps one version per cell");
    }
    std::set<std::string> sorted(splits.begin(), splits.end());
    if (sorted.size() != splits.size() || sorted.count("")) {
      throw IOError("DoNotRetryIOException: split keys must be distinct and non-empty");
    }
    Check(db_->CreateTable(name, ToStoreOptions(f)));
    TableMeta m;
    m.desc = desc;
    m.splits.assign(sorted.begin(), sorted.end());
    SaveMeta(name, m);
    tables_[name] = std::move(m);
  }

  void deleteTable(const h2::TTableName& tname) override {
    std::lock_guard lock(mu_);
    Enter("deleteTable");
    const std::string name = NameOf(tname);
    TableMeta& m = Meta(name);
    if (m.enabled) throw IOError("org.apache.hadoop.hbase.TableNotDisabledException: " + name);
    WriteBatch b;
    for (const auto& [row, cells] : rows_[name]) b.Delete(name, row);
    b.Delete(kMetaTable, name);
    Write(b);
    rows_.erase(name);
    tables_.erase(name);
  }

  void disableTable(const h2::TTableName& tname) override {
    std::lock_guard lock(mu_);
    Enter("disableTable");
    Meta(NameOf(tname)).enabled = false;
  }

  void modifyColumnFamily(const h2::TTableName& tname, const h2::TColumnFamilyDescriptor& f) override {
    std::lock_guard lock(mu_);
    Enter("modifyColumnFamily");
    const std::string name = NameOf(tname);
    TableMeta& m = Meta(name);
    if (f.name != m.family().name) {
      throw IOError("org.apache.hadoop.hbase.InvalidFamilyOperationException: no family " + f.name);
    }
    if (f.__isset.maxVersions && f.maxVersions != 1) {
      throw IOError("DoNotRetryIOException: the test gateway keeps one version per cell");
    }
    m.desc.columns.front() = f;
    Check(db_->CreateTable(name, ToStoreOptions(f)));  // existing: applies the new TTL
    SaveMeta(name, m);
  }

  void createNamespace(const h2::TNamespaceDescriptor& d) override {
    std::lock_guard lock(mu_);
    Enter("createNamespace");
    if (d.name.empty() || d.name.find(':') != std::string::npos) {
      throw IOError("IllegalArgumentException: invalid namespace name '" + d.name + "'");
    }
    if (namespaces_.count(d.name)) throw IOError("org.apache.hadoop.hbase.NamespaceExistException: " + d.name);
    WriteBatch b;
    b.Put(kNamespaceTable, d.name, "");
    Write(b);
    namespaces_.insert(d.name);
  }

  void deleteNamespace(const std::string& name) override {
    std::lock_guard lock(mu_);
    Enter("deleteNamespace");
    if (!namespaces_.count(name)) throw IOError("org.apache.hadoop.hbase.NamespaceNotFoundException: " + name);
    for (const auto& [t, m] : tables_) {
      if (t.rfind(name + ":", 0) == 0) throw IOError("org.apache.hadoop.hbase.constraint.ConstraintException: " + name);
    }
    WriteBatch b;
    b.Delete(kNamespaceTable, name);
    Write(b);
    namespaces_.erase(name);
  }

  void getNamespaceDescriptor(h2::TNamespaceDescriptor& out, const std::string& name) override {
    std::lock_guard lock(mu_);
    Enter("getNamespaceDescriptor");
    if (!namespaces_.count(name)) throw IOError("org.apache.hadoop.hbase.NamespaceNotFoundException: " + name);
    out.name = name;
  }

  void listNamespaces(std::vector<std::string>& out) override {
    std::lock_guard lock(mu_);
    Enter("listNamespaces");
    out.assign(namespaces_.begin(), namespaces_.end());
  }

 private:
  // Counts the call and throws an injected fault for it, if any.
  void Enter(const std::string& method) {
    ++stats_.calls[method];
    for (const std::string& key : {method, std::string("*")}) {
      auto it = call_faults_.find(key);
      if (it != call_faults_.end() && it->second.count > 0) {
        --it->second.count;
        throw IOError(it->second.message.empty() ? "injected failure of " + method : it->second.message,
                      it->second.can_retry);
      }
    }
  }

  void Check(const Status& s) {
    if (!s.ok()) throw IOError("test gateway store: " + s.ToString());
  }

  TableMeta& Meta(const std::string& name) {
    auto it = tables_.find(name);
    if (it == tables_.end()) throw IOError("org.apache.hadoop.hbase.TableNotFoundException: " + name);
    return it->second;
  }

  // A table for a data call ("ns:name" or "name" in "default").
  TableMeta& Data(const std::string& table) {
    TableMeta& m = Meta(Qualify(table));
    if (!m.enabled) throw IOError("org.apache.hadoop.hbase.TableNotEnabledException: " + Qualify(table));
    return m;
  }

  void SaveMeta(const std::string& name, const TableMeta& m) {
    WriteBatch b;
    b.Put(kMetaTable, name, Serialize(m.desc));
    Write(b);
  }

  // The row's live cells (TTL applied), restricted to `columns` when given.
  std::vector<Cell> LiveCells(const TableMeta& t, std::string_view stored, const std::vector<h2::TColumn>* columns) {
    const int64_t ttl = t.ttl_ms(), now = options_.clock->NowMs();
    std::vector<Cell> out;
    for (Cell& c : DecodeCells(stored)) {
      if (ttl > 0 && now - c.ts >= ttl) continue;
      if (columns && !columns->empty()) {
        bool wanted = false;
        for (const h2::TColumn& col : *columns) {
          wanted |= col.family == c.family && (!col.__isset.qualifier || col.qualifier == c.qualifier);
        }
        if (!wanted) continue;
      }
      out.push_back(std::move(c));
    }
    return out;
  }

  h2::TResult ToResult(std::string_view row, std::vector<Cell> cells) {
    h2::TResult r;
    r.__set_row(std::string(row));
    for (Cell& c : cells) {
      h2::TColumnValue cv;
      cv.family = std::move(c.family);
      cv.qualifier = std::move(c.qualifier);
      cv.value = std::move(c.value);
      cv.__set_timestamp(c.ts);
      r.columnValues.push_back(std::move(cv));
    }
    return r;
  }

  std::optional<h2::TResult> ReadRow(const std::string& name, const TableMeta& t, const std::string& row,
                                     const std::vector<h2::TColumn>* columns) {
    if (row.empty()) throw IOError("IllegalArgumentException: Row length is 0");
    const Rows& rows = rows_[name];
    auto stored = rows.find(row);
    if (stored == rows.end()) return std::nullopt;
    std::vector<Cell> cells = LiveCells(t, stored->second, columns);
    if (cells.empty()) return std::nullopt;
    return ToResult(row, std::move(cells));
  }

  // Applies puts or deletes in order, honouring FailMutationsFrom.
  void Mutate(const std::string& table, std::span<const h2::TPut> puts, std::span<const h2::TDelete> deletes) {
    const std::string name = Qualify(table);
    const TableMeta& t = Data(table);
    const std::string& family = t.family().name;
    const size_t total = puts.size() + deletes.size();
    size_t allowed = total;
    if (fail_from_ >= 0) {
      const int64_t left = std::max<int64_t>(0, fail_from_ - fail_mutations_seen_);
      allowed = std::min<size_t>(total, static_cast<size_t>(left));
      fail_mutations_seen_ += static_cast<int64_t>(allowed);
    }
    // Validate everything first, as HBase does before it applies a batch.
    for (const h2::TPut& p : puts) {
      if (p.row.empty()) throw IOError("IllegalArgumentException: Row length is 0");
      for (const auto& cv : p.columnValues) {
        if (cv.family != family) {
          throw IOError("org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException: " + cv.family);
        }
      }
    }
    const int64_t now = options_.clock->NowMs();
    std::map<std::string, std::vector<Cell>> pending;  // rows changed by this call
    auto current = [&](const std::string& row) -> std::vector<Cell>& {
      auto it = pending.find(row);
      if (it != pending.end()) return it->second;
      std::vector<Cell> cells;
      const Rows& rows = rows_[name];
      if (auto stored = rows.find(row); stored != rows.end()) cells = LiveCells(t, stored->second, nullptr);
      return pending[row] = std::move(cells);
    };
    for (size_t i = 0; i < allowed && i < puts.size(); ++i) {
      const h2::TPut& p = puts[i];
      std::vector<Cell>& cells = current(p.row);
      for (const auto& cv : p.columnValues) {
        Cell c{cv.family, cv.qualifier, cv.value,
               cv.__isset.timestamp ? cv.timestamp : p.__isset.timestamp ? p.timestamp : now};
        auto same = std::find_if(cells.begin(), cells.end(), [&](const Cell& x) {
          return x.family == c.family && x.qualifier == c.qualifier;
        });
        if (same != cells.end()) {
          *same = std::move(c);
        } else {
          cells.push_back(std::move(c));
        }
      }
      stats_.last_durability = p.__isset.durability ? static_cast<int>(p.durability) : -1;
    }
    for (size_t i = 0; i < allowed && i < deletes.size(); ++i) {
      const h2::TDelete& d = deletes[i];
      std::vector<Cell>& cells = current(d.row);
      if (!d.__isset.columns || d.columns.empty()) {
        cells.clear();
      } else {
        std::erase_if(cells, [&](const Cell& c) {
          for (const h2::TColumn& col : d.columns) {
            if (col.family == c.family && (!col.__isset.qualifier || col.qualifier == c.qualifier)) return true;
          }
          return false;
        });
      }
      stats_.last_durability = d.__isset.durability ? static_cast<int>(d.durability) : -1;
    }
    WriteBatch b;
    for (auto& [row, cells] : pending) {
      if (cells.empty()) {
        b.Delete(name, row);
      } else {
        b.Put(name, row, EncodeCells(cells));
      }
    }
    Write(b);
    stats_.mutations += allowed;
    if (allowed < total) {
      throw IOError("injected failure at mutation " + std::to_string(fail_from_) + " (" + std::to_string(allowed) +
                        " of " + std::to_string(total) + " in this call applied)",
                    fail_can_retry_);
    }
  }

  int32_t Open(const std::string& table, const h2::TScan& scan) {
    Data(table);
    Scanner s;
    s.table = Qualify(table);
    s.reverse = scan.__isset.reversed && scan.reversed;
    const std::string start = scan.__isset.startRow ? scan.startRow : "";
    const std::string stop = scan.__isset.stopRow ? scan.stopRow : "";
    if (scan.__isset.maxVersions && scan.maxVersions != 1) {
      throw IOError("DoNotRetryIOException: the test gateway keeps one version per cell");
    }
    if (s.reverse) {
      s.rev_stop = start.empty() ? "" : start + '\0';  // startRow is inclusive
      s.stop_row = stop;
    } else {
      s.fwd_start = start;
      s.stop = stop;
      // HBase: equal non-empty start and stop rows make a Get of that row.
      if (!start.empty() && start == stop) s.stop = start + '\0';
    }
    if (scan.__isset.columns) s.columns = scan.columns;
    if (scan.__isset.filterBytes) s.fuzzy = DecodeFuzzyFilter(scan.filterBytes);
    stats_.last_caching = scan.__isset.caching ? scan.caching : 0;
    const int32_t id = next_scanner_++;
    scanners_[id] = std::move(s);
    return id;
  }

  void Fetch(Scanner& s, int32_t rows, std::vector<h2::TResult>& out) {
    if (s.done) return;
    const TableMeta& t = Data(s.table);
    ScanSpec spec;
    spec.table = s.table;
    spec.reverse = s.reverse;
    if (s.reverse) {
      spec.start = s.stop_row.empty() ? "" : s.stop_row + '\0';  // stopRow is exclusive
      spec.stop = s.rev_stop;
    } else {
      spec.start = s.fwd_start;
      spec.stop = s.stop;
    }
    if (!spec.stop.empty() && spec.start >= spec.stop) {
      s.done = true;
      return;
    }
    RowsCursor it(rows_[s.table], spec.start, spec.stop, spec.reverse);
    while (it.Valid() && static_cast<int32_t>(out.size()) < rows) {
      ++stats_.rows_scanned;
      const std::string key(it.key());
      if (!s.fuzzy.empty()) {
        bool match = false;
        for (const FuzzyPair& p : s.fuzzy) match |= HBaseFuzzyMatch(key, p);
        if (!match) {
          // Seek to the nearest next candidate of any pair.
          std::optional<std::string> next;
          for (const FuzzyPair& p : s.fuzzy) {
            auto n = FuzzyNextKey(key, p.key, p.mask, s.reverse);
            if (n && (!next || (s.reverse ? *n > *next : *n < *next))) next = std::move(n);
          }
          if (!next) break;
          it.Seek(*next);
          continue;
        }
      }
      std::vector<Cell> cells = LiveCells(t, it.value(), s.columns.empty() ? nullptr : &s.columns);
      if (!cells.empty()) out.push_back(ToResult(key, std::move(cells)));
      if (s.reverse) {
        s.rev_stop = key;
      } else {
        s.fwd_start = key + '\0';
      }
      it.Next();
    }
    if (!it.Valid() && static_cast<int32_t>(out.size()) < rows) s.done = true;
    stats_.max_rows_per_page = std::max(stats_.max_rows_per_page, static_cast<int32_t>(out.size()));
  }

  // Writes `b` to RocksDB, then to rows_.
  void Write(const WriteBatch& b) {
    Check(db_->Write(b));
    for (const WriteBatch::Entry& e : b.entries()) {
      if (e.op == WriteBatch::Op::kPut) {
        rows_[e.table].insert_or_assign(e.key, e.Value());
      } else if (auto t = rows_.find(e.table); t != rows_.end()) {
        t->second.erase(e.key);
      }
    }
  }

  const HBaseTestServerOptions options_;
  mutable std::mutex mu_;  // serializes every call and guards the state below
  // RocksDB keeps the tables across restarts; rows_ holds their rows as well
  // (every table written since Open, and the user tables' rows from before),
  // and reads come from it. Scanning RocksDB's memtables in reverse costs a
  // skip-list search per step, over every version of a row rewritten in
  // place (most rows here are rewritten per cell): the HBase variants of the
  // indexer tests ran 3-4x slower than RocksDB's, mostly in the gateway.
  std::unique_ptr<RocksDbStore> db_;
  std::map<std::string, Rows> rows_;
  std::set<std::string> namespaces_;
  std::map<std::string, TableMeta> tables_;
  std::map<int32_t, Scanner> scanners_;
  int32_t next_scanner_ = 1;
  int64_t fail_from_ = -1, fail_mutations_seen_ = 0;
  int refuse_deletes_ = 0;
  bool fail_can_retry_ = false;
  struct CallFault {
    int count = 0;
    bool can_retry = false;
    std::string message;  // empty: "injected failure of <method>"
  };
  std::map<std::string, CallFault> call_faults_;
  TestServerStats stats_;

  std::shared_ptr<tt::transport::TServerSocket> socket_;
  std::shared_ptr<tt::server::TThreadedServer> server_;
  std::thread thread_;
  std::promise<void> listening_;
  std::string serve_error_;
  int port_ = 0;
};

// ---- public surface ----

Result<std::unique_ptr<HBaseTestServer>> HBaseTestServer::Start(const HBaseTestServerOptions& options) {
  if (options.dir.empty()) return Error{Errc::kInvalidArgument, "test gateway dir is empty"};
  if (!options.clock) return Error{Errc::kInvalidArgument, "test gateway clock is null"};
  auto impl = std::make_unique<Impl>(options);
  if (Status s = impl->Open(); !s.ok()) return s.error();
  if (Status s = impl->Serve(); !s.ok()) return s.error();
  return std::unique_ptr<HBaseTestServer>(new HBaseTestServer(std::move(impl)));
}

HBaseTestServer::HBaseTestServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HBaseTestServer::~HBaseTestServer() { impl_->Stop(); }
int HBaseTestServer::port() const { return impl_->port(); }
void HBaseTestServer::FailMutationsFrom(int64_t n, bool can_retry) { impl_->FailMutationsFrom(n, can_retry); }
void HBaseTestServer::RefuseNextDeletes(int count) { impl_->RefuseNextDeletes(count); }
void HBaseTestServer::FailNextCalls(const std::string& method, int count, bool can_retry, const std::string& message) {
  impl_->FailNextCalls(method, count, can_retry, message);
}
TestServerStats HBaseTestServer::stats() const { return impl_->stats(); }
std::optional<TestTableInfo> HBaseTestServer::Table(const std::string& name) const { return impl_->Table(name); }
void HBaseTestServer::ClearFamilyAttributes(const std::string& name) { impl_->ClearFamilyAttributes(name); }

}  // namespace logdex
