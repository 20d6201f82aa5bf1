#include "store/hbase/hbase_store.h"

#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "THBaseService.h"
#include "common/backoff.h"
#include "hbase_filter.pb.h"

namespace logdex {

namespace tt = ::apache::thrift;
namespace h2 = ::logdex::hbase::thrift2;

namespace {

constexpr char kFamily[] = "d";
constexpr char kQualifier[] = "v";
// Per-cell overhead of a TPut on the wire (struct/list headers, family,
// qualifier, durability), rounded up, for sizing putMultiple calls.
constexpr uint32_t kPutOverheadBytes = 64;
// Largest response the client accepts (scanner pages of big rows).
constexpr int kMaxResponseBytes = 1 << 30;
// HBase's HConstants.FOREVER.
constexpr int64_t kForeverSeconds = INT32_MAX;

// ---- key helpers ----

// The exclusive lower bound HBase's reversed scan needs so that `start`
// (inclusive) is the last row returned: a key X < start such that every key
// in (X, start) has X as a proper prefix. Exact when start ends in 0x00.
// Empty = no bound.
std::string ReverseStopRow(const std::string& start) {
  if (start.empty()) return {};
  if (start.back() == '\0') return start.substr(0, start.size() - 1);
  std::string x = start;
  x.back() = static_cast<char>(static_cast<unsigned char>(x.back()) - 1);
  x.append(8, '\xff');
  return x;
}

// logdex's durabilities name what survives, not HBase's words: `async` survives
// a crash of the store's process (RocksDB: the WAL written, not fsynced), which
// on HBase is SYNC_WAL (the edit flushed to the file system, on HDFS to the
// DataNodes, before the put returns). HBase's ASYNC_WAL acknowledges before
// the WAL is written (it syncs every hbase.regionserver.optionallogflushinterval,
// 1 s): a region server killed in that second lost rows whose offsets logdex
// had committed (tests/serve: HBaseGatewayAndHBaseKilledWhileServeWritesLoseNothing
// on a real HBase). `sync` survives a machine crash: FSYNC_WAL.
h2::TDurability::type ToThrift(Durability d) {
  switch (d) {
    case Durability::kSkipWal: return h2::TDurability::SKIP_WAL;
    case Durability::kAsync: return h2::TDurability::SYNC_WAL;
    case Durability::kSync: return h2::TDurability::FSYNC_WAL;
  }
  return h2::TDurability::SYNC_WAL;
}

h2::TCompressionAlgorithm::type ToThrift(Compression c) {
  switch (c) {
    case Compression::kNone: return h2::TCompressionAlgorithm::NONE;
    case Compression::kSnappy: return h2::TCompressionAlgorithm::SNAPPY;
    case Compression::kLz4: return h2::TCompressionAlgorithm::LZ4;
    case Compression::kZstd: return h2::TCompressionAlgorithm::ZSTD;
  }
  return h2::TCompressionAlgorithm::NONE;
}

constexpr const char* kNewVersionBehavior = "NEW_VERSION_BEHAVIOR";

// True when `have` holds every attribute `want` sets, with its value.
bool HasAttributes(const h2::TColumnFamilyDescriptor& have, const h2::TColumnFamilyDescriptor& want) {
  for (const auto& [key, value] : want.attributes) {
    auto it = have.attributes.find(key);
    if (it == have.attributes.end() || it->second != value) return false;
  }
  return true;
}

h2::TColumnFamilyDescriptor FamilyFor(const TableOptions& o) {
  h2::TColumnFamilyDescriptor f;
  f.name = kFamily;
  f.__set_maxVersions(1);
  f.__set_timeToLive(static_cast<int32_t>(o.ttl_seconds > 0 ? o.ttl_seconds : kForeverSeconds));
  f.__set_bloomnFilterType(o.bloom_filter ? h2::TBloomFilterType::ROW : h2::TBloomFilterType::NONE);
  f.__set_blockSize(static_cast<int32_t>(o.block_size));
  f.__set_blockCacheEnabled(o.block_cache);
  f.__set_compressionType(ToThrift(o.compression));
  // By default HBase lets a delete hide every later write stamped with the
  // same ms (cells take the region server's clock): a row deleted and written
  // again at once (a lease row, a part re-sent beside its merge's removal)
  // would answer ok and never be seen. With this (HBase 2.0, HBASE-15968) a
  // delete hides only the writes made before it.
  f.__set_attributes({{kNewVersionBehavior, "true"}});
  return f;
}

// True when the gateway's family already has what `want` asks for.
bool SameFamily(const h2::TColumnFamilyDescriptor& have, const h2::TColumnFamilyDescriptor& want) {
  return have.__isset.maxVersions && have.maxVersions == want.maxVersions && have.__isset.timeToLive &&
         have.timeToLive == want.timeToLive && have.__isset.bloomnFilterType &&
         have.bloomnFilterType == want.bloomnFilterType && have.__isset.blockSize &&
         have.blockSize == want.blockSize && have.__isset.blockCacheEnabled &&
         have.blockCacheEnabled == want.blockCacheEnabled && have.__isset.compressionType &&
         have.compressionType == want.compressionType && HasAttributes(have, want);
}

std::vector<h2::TColumn> ValueColumn() {
  h2::TColumn c;
  c.family = kFamily;
  c.__set_qualifier(kQualifier);
  return {c};
}

// The d:v cell of a result, or nullptr.
template <class R>
auto ValueOf(R& r) -> decltype(&r.columnValues[0].value) {
  for (auto& cv : r.columnValues) {
    if (cv.family == kFamily && cv.qualifier == kQualifier) return &cv.value;
  }
  return nullptr;
}

// The outcome of one RPC attempt.
struct Attempt {
  Status status;
  bool retryable = false;
  bool stale_scanner = false;  // not sent: the scanner predates a connection (Pool::connects)
};

}  // namespace

std::string EncodeFuzzyRowFilter(std::string_view key, std::string_view mask) {
  hbase_pb::FuzzyRowFilter fuzzy;
  hbase_pb::BytesBytesPair* pair = fuzzy.add_fuzzy_keys_data();
  pair->set_first(std::string(key));
  pair->set_second(std::string(mask));
  hbase_pb::Filter filter;
  filter.set_name("org.apache.hadoop.hbase.filter.FuzzyRowFilter");
  filter.set_serialized_filter(fuzzy.SerializeAsString());
  return filter.SerializeAsString();
}

// ---- connection pool ----

namespace {

struct Connection {
  std::shared_ptr<tt::transport::TTransport> transport;
  std::unique_ptr<h2::THBaseServiceClient> client;
};

class Pool {
 public:
  explicit Pool(const HBaseOptions& o) : options_(o) {
    for (int i = 0; i < std::max(1, o.pool_size); ++i) idle_.push_back(std::make_unique<Connection>());
  }

  ~Pool() {
    for (auto& c : idle_) Close(*c);
  }

  // Connections made so far. A gateway restarted on the same address numbers
  // its scanners afresh, and one of its scanners may get the id one of ours
  // had: a scanner id is used only while no connection was made since it
  // was opened (a restart breaks every connection, so none is reused).
  uint64_t connects() const { return connects_.load(); }

  // A borrowed connection, returned to the pool on destruction.
  class Lease {
   public:
    Lease(Pool* pool, std::unique_ptr<Connection> conn) : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (conn_) pool_->Return(std::move(conn_), broken_);
    }
    h2::THBaseServiceClient& client() { return *conn_->client; }
    // The connection is out of sync or dead: rebuild it before the next use.
    void MarkBroken() { broken_ = true; }

   private:
    Pool* pool_;
    std::unique_ptr<Connection> conn_;
    bool broken_ = false;
  };

  Result<Lease> Borrow() {
    std::unique_ptr<Connection> conn;
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::milliseconds(options_.pool_wait_ms), [&] { return !idle_.empty(); })) {
        return Error{Errc::kResourceExhausted, "no free HBase connection within " +
                                                   std::to_string(options_.pool_wait_ms) + " ms"};
      }
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
    if (!conn->client) {
      if (Status s = Connect(*conn); !s.ok()) {
        Return(std::move(conn), true);
        return s.error();
      }
    }
    return Lease(this, std::move(conn));
  }

 private:
  Status Connect(Connection& c) {
    auto config = std::make_shared<tt::TConfiguration>(kMaxResponseBytes, kMaxResponseBytes);
    auto socket = std::make_shared<tt::transport::TSocket>(options_.host, options_.port, config);
    socket->setConnTimeout(options_.connect_timeout_ms);
    socket->setRecvTimeout(options_.rpc_timeout_ms);
    socket->setSendTimeout(options_.rpc_timeout_ms);
    socket->setNoDelay(true);
    std::shared_ptr<tt::transport::TTransport> transport;
    if (options_.transport == HBaseOptions::Transport::kFramed) {
      transport = std::make_shared<tt::transport::TFramedTransport>(socket, config);
    } else {
      transport = std::make_shared<tt::transport::TBufferedTransport>(socket, config);
    }
    std::shared_ptr<tt::protocol::TProtocol> protocol;
    if (options_.protocol == HBaseOptions::Protocol::kCompact) {
      protocol = std::make_shared<tt::protocol::TCompactProtocol>(transport);
    } else {
      protocol = std::make_shared<tt::protocol::TBinaryProtocol>(transport);
    }
    try {
      transport->open();
    } catch (const tt::TException& e) {
      return Status(Errc::kUnavailable, "cannot connect to HBase Thrift2 gateway " + options_.host + ":" +
                                            std::to_string(options_.port) + ": " + e.what());
    }
    c.transport = std::move(transport);
    c.client = std::make_unique<h2::THBaseServiceClient>(protocol);
    ++connects_;
    return Status::Ok();
  }

  static void Close(Connection& c) {
    if (!c.transport) return;
    try {
      c.transport->close();
    } catch (const tt::TException&) {
      // Closing a dead socket: nothing to do.
    }
    c.client.reset();
    c.transport.reset();
  }

  void Return(std::unique_ptr<Connection> conn, bool broken) {
    if (broken) Close(*conn);
    {
      std::lock_guard lock(mu_);
      idle_.push_back(std::move(conn));
    }
    cv_.notify_one();
  }

  const HBaseOptions& options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  std::atomic<uint64_t> connects_{0};
};

}  // namespace

// ---- the store ----

class HBaseTableStore::Impl {
 public:
  explicit Impl(const HBaseOptions& o) : options_(o), pool_(options_) {
    if (!options_.sleep) {
      options_.sleep = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
    }
    if (!options_.monotonic_ns) {
      options_.monotonic_ns = [] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
      };
    }
  }

  Status Ping() {
    auto lease = pool_.Borrow();
    return lease.ok() ? Status::Ok() : Status(lease.error());
  }

  std::string HBaseName(std::string_view name) const { return options_.ns + ":" + std::string(name); }

  h2::TTableName ThriftName(std::string_view name) const {
    h2::TTableName t;
    t.__set_ns(options_.ns);
    t.qualifier = std::string(name);
    return t;
  }

  // One attempt of `fn(client)`, Thrift exceptions turned into a Status.
  // `scanner_connects`: for a call on a scanner, Pool::connects() when it
  // was opened; if a connection was made since, the call is not sent
  // (stale_scanner: the caller reopens the scan).
  // `deadline_ns` (options_.monotonic_ns time): no attempt starts past it
  // (checked once a connection is at hand: waiting for one, or connecting,
  // sends nothing).
  template <class Fn>
  Attempt Once(std::string_view what, Fn&& fn, std::optional<uint64_t> scanner_connects = std::nullopt,
               std::optional<int64_t> deadline_ns = std::nullopt) {
    auto lease = pool_.Borrow();
    if (!lease.ok()) return {Status(lease.error()), lease.error().code == Errc::kUnavailable};
    if (deadline_ns && options_.monotonic_ns() > *deadline_ns) {
      return {Status(Errc::kUnavailable, std::string(what) + ": not sent: the batch's send deadline has passed"), false};
    }
    if (scanner_connects && *scanner_connects != pool_.connects()) {
      return {Status(Errc::kUnavailable, std::string(what) + ": scanner opened before a connection was made"), true,
              true};
    }
    try {
      fn(lease->client());
      return {};
    } catch (const h2::TIOError& e) {
      const bool retry = e.__isset.canRetry && e.canRetry;
      Errc code = e.message.find("TableNotFoundException") != std::string::npos ? Errc::kNotFound
                  : retry                                                        ? Errc::kUnavailable
                                                                                 : Errc::kIOError;
      return {Status(code, std::string(what) + ": HBase TIOError: " + e.message), retry};
    } catch (const h2::TIllegalArgument& e) {
      return {Status(Errc::kInvalidArgument, std::string(what) + ": HBase TIllegalArgument: " + e.message), false};
    } catch (const tt::transport::TTransportException& e) {
      lease->MarkBroken();
      return {Status(Errc::kUnavailable, std::string(what) + ": Thrift transport: " + e.what()), true};
    } catch (const tt::TApplicationException& e) {
      // The gateway could not run the call (e.g. unknown method), or the
      // reply did not fit the call: rebuild the connection to be safe.
      lease->MarkBroken();
      return {Status(Errc::kFailedPrecondition, std::string(what) + ": gateway: " + e.what()), false};
    } catch (const tt::TException& e) {
      lease->MarkBroken();
      return {Status(Errc::kCorruption, std::string(what) + ": Thrift: " + e.what()), false};
    } catch (const std::exception& e) {
      lease->MarkBroken();
      return {Status(Errc::kInternal, std::string(what) + ": " + e.what()), false};
    }
  }

  // `fn` with retries on retryable failures.
  template <class Fn>
  Status Rpc(std::string_view what, Fn&& fn, std::optional<int64_t> deadline_ns = std::nullopt) {
    for (int attempt = 0;; ++attempt) {
      Attempt a = Once(what, fn, std::nullopt, deadline_ns);
      if (a.status.ok() || !a.retryable || attempt >= options_.retries) return a.status;
      ++retries_;
      Sleep(attempt);
    }
  }

  // Before retry attempt + 1: common/backoff.h's schedule from
  // retry_backoff_ms, capped at 10 s.
  void Sleep(int attempt) {
    int64_t ms;
    {
      std::lock_guard lock(rng_mu_);
      ms = BackoffPolicy{options_.retry_backoff_ms, 10'000}.DelayMs(static_cast<uint32_t>(attempt) + 1, rng_);
    }
    options_.sleep(static_cast<int>(ms));
  }

  // ---- tables ----

  Status EnsureNamespace() {
    if (namespace_ready_) return Status::Ok();
    std::vector<std::string> names;
    if (Status s = Rpc("list namespaces", [&](auto& c) { c.listNamespaces(names); }); !s.ok()) return s;
    if (std::find(names.begin(), names.end(), options_.ns) == names.end()) {
      h2::TNamespaceDescriptor d;
      d.name = options_.ns;
      Status s = Rpc("create namespace " + options_.ns, [&](auto& c) { c.createNamespace(d); });
      // Another writer may have created it meanwhile.
      if (!s.ok() && s.message().find("NamespaceExistException") == std::string::npos) return s;
    }
    namespace_ready_ = true;
    return Status::Ok();
  }

  // `*kept_ttl_s`, when given: the table's TTL in seconds once created or
  // modified (0: forever), as `TableOptions::ttl_seconds` says it.
  // `peers_ttl_s`: a longer TTL than `o` asks (0: forever) that the table
  // takes instead (CreateTables: the one its peers kept); told through
  // on_longer_ttl against the TTL `o` asks, once, whoever created the table.
  // `raced`: called again after another writer created the table first.
  Status CreateTable(std::string_view name, const TableOptions& o, int64_t* kept_ttl_s = nullptr,
                     std::optional<int64_t> peers_ttl_s = std::nullopt, bool raced = false) {
    auto seconds = [](int32_t ttl) { return ttl >= kForeverSeconds ? int64_t{0} : int64_t{ttl}; };
    if (name.empty() || name.find(':') != std::string_view::npos) {
      return Status(Errc::kInvalidArgument, "invalid table name '" + std::string(name) + "'");
    }
    if (o.versions != 1) {
      return Status(Errc::kInvalidArgument, "table " + std::string(name) + ": only versions = 1 is supported");
    }
    if (o.ttl_seconds < 0 || o.ttl_seconds >= kForeverSeconds) {
      return Status(Errc::kInvalidArgument, "table " + std::string(name) + ": ttl must be in [0, 2^31-1) s");
    }
    if (o.block_size == 0 || o.block_size > INT32_MAX) {
      return Status(Errc::kInvalidArgument, "table " + std::string(name) + ": invalid block size");
    }
    if (Status s = EnsureNamespace(); !s.ok()) return s;
    const h2::TTableName tname = ThriftName(name);
    TableOptions wanted = o;
    if (wanted.compression != Compression::kNone && options_.compression) wanted.compression = *options_.compression;
    const int32_t asked_ttl = FamilyFor(wanted).timeToLive;
    if (peers_ttl_s) wanted.ttl_seconds = *peers_ttl_s;
    const h2::TColumnFamilyDescriptor family = FamilyFor(wanted);
    // Tells on_longer_ttl when the table ends with a longer TTL than asked,
    // or was lowered to it.
    auto tell = [&](int32_t ttl, bool lowered) {
      if (ttl > asked_ttl && options_.on_longer_ttl) {
        options_.on_longer_ttl(name, seconds(ttl), seconds(asked_ttl), lowered);
      }
    };
    bool exists = false;
    if (Status s = Rpc("table exists " + HBaseName(name), [&](auto& c) { exists = c.tableExists(tname); }); !s.ok()) {
      return s;
    }
    if (exists) {
      // Members starting together may modify one family at once: HBase's
      // master refuses the second (ConcurrentTableModificationException,
      // "Please retry"), which is read again, and modified again if it still
      // differs, up to store.hbase.retries times.
      for (int attempt = 0;; ++attempt) {
        h2::TTableDescriptor have;
        Status s = Rpc("describe " + HBaseName(name), [&](auto& c) { c.getTableDescriptor(have, tname); });
        if (!s.ok()) return s;
        const h2::TColumnFamilyDescriptor* current = nullptr;
        for (const auto& f : have.columns) {
          if (f.name == kFamily) current = &f;
        }
        if (!current) {
          return Status(Errc::kFailedPrecondition,
                        "HBase table " + HBaseName(name) + " exists without column family '" + kFamily + "'");
        }
        // A TTL longer than asked (unknown: as long as can be) stays
        // unless lower_ttl.
        h2::TColumnFamilyDescriptor want = family;
        const int32_t have_ttl = current->__isset.timeToLive ? current->timeToLive : INT32_MAX;
        const bool longer = have_ttl > family.timeToLive;
        if (longer && !options_.lower_ttl) want.__set_timeToLive(have_ttl);
        if (!SameFamily(*current, want)) {
          s = Rpc("modify family of " + HBaseName(name), [&](auto& c) { c.modifyColumnFamily(tname, want); });
          if (!s.ok() && s.message().find("ConcurrentTableModificationException") != std::string::npos &&
              attempt < options_.retries) {
            ++retries_;
            Sleep(attempt);
            continue;
          }
          if (!s.ok()) return s;
        }
        if (kept_ttl_s) *kept_ttl_s = seconds(want.timeToLive);
        tell(longer && options_.lower_ttl ? have_ttl : want.timeToLive, longer && options_.lower_ttl);
        Remember(name);
        return Status::Ok();
      }
    }
    h2::TTableDescriptor desc;
    desc.tableName = tname;
    desc.__set_columns({family});
    std::vector<std::string> splits;
    for (uint32_t b = 1; b < std::min<uint32_t>(wanted.pre_split, 256); ++b) splits.emplace_back(1, static_cast<char>(b));
    Status s = Rpc("create table " + HBaseName(name), [&](auto& c) { c.createTable(desc, splits); });
    if (!s.ok() && s.message().find("TableExistsException") == std::string::npos) {
      // HBase's sanity check of the family's codec (TableDescriptorChecker.checkCompression).
      if (wanted.compression != Compression::kNone && s.message().find("checkCompression") != std::string::npos) {
        return Status(s.code(), "HBase cannot compress table " + HBaseName(name) + " with " +
                                    h2::to_string(family.compressionType) +
                                    " (its region servers lack the codec; on Hadoop 2 it needs the native library): "
                                    "set store.hbase.compression to a codec it has, or none; HBase said: " +
                                    s.message().substr(0, 300));
      }
      return s;
    }
    // Created meanwhile by another writer (TableExistsException): with its
    // options, which are read and changed as an existing table's are. Once:
    // refused again (the table exists and does not), it is taken as made.
    if (!s.ok() && !raced) return CreateTable(name, o, kept_ttl_s, peers_ttl_s, /*raced=*/true);
    if (kept_ttl_s) *kept_ttl_s = seconds(family.timeToLive);
    if (s.ok()) tell(family.timeToLive, false);
    Remember(name);
    return Status::Ok();
  }

  void Remember(std::string_view name) {
    std::lock_guard lock(tables_mu_);
    tables_.emplace(name);
  }

  bool Known(std::string_view name) const {
    std::lock_guard lock(tables_mu_);
    return tables_.count(std::string(name)) > 0;
  }

  Result<bool> Exists(std::string_view name) {
    if (Known(name)) return true;
    bool exists = false;
    const h2::TTableName tname = ThriftName(name);
    if (Status s = Rpc("table exists " + HBaseName(name), [&](auto& c) { exists = c.tableExists(tname); }); !s.ok()) {
      return s.error();
    }
    if (exists) Remember(name);
    return exists;
  }

  Status NoTable(std::string_view name) const {
    return Status(Errc::kNotFound, "no table '" + std::string(name) + "' (HBase " + HBaseName(name) + ")");
  }

  // ---- writes ----

  Status Write(const WriteBatch& batch) {
    std::optional<int64_t> deadline_ns;
    if (auto within = batch.send_within_ms()) deadline_ns = options_.monotonic_ns() + *within * 1'000'000;
    Status s = WriteOrdered(batch, deadline_ns);
    if (s.ok()) {
      ++write_batches_;
    } else {
      ++write_failures_;
    }
    return s;
  }

  Status WriteOrdered(const WriteBatch& batch, std::optional<int64_t> deadline_ns) {
    if (batch.empty()) return Status::Ok();
    // Tables in order of first appearance; every one must exist before
    // anything is sent.
    std::vector<std::string> order;
    for (const WriteBatch::Entry& e : batch.entries()) {
      if (std::find(order.begin(), order.end(), e.table) == order.end()) order.push_back(e.table);
      const uint64_t size = e.key.size() + e.value_size() + kPutOverheadBytes;
      if (size > options_.max_call_bytes) {
        return Status(Errc::kInvalidArgument, "row of " + std::to_string(size) + " bytes in " + e.table +
                                                  " exceeds max_call_bytes " +
                                                  std::to_string(options_.max_call_bytes));
      }
      if (e.key.empty()) return Status(Errc::kInvalidArgument, "empty row key in " + e.table);
    }
    for (const std::string& t : order) {
      auto exists = Exists(t);
      if (!exists.ok()) return exists.error();
      if (!*exists) return NoTable(t);
    }
    // Tables the batch marks go last, in the order marked, or first when
    // they only delete (WriteBatch::WriteLast).
    std::vector<std::string> first, last;
    for (const std::string& marked : batch.last_tables()) {
      auto at = std::find(order.begin(), order.end(), marked);
      if (at == order.end()) continue;
      order.erase(at);
      bool only_deletes = true;
      for (const WriteBatch::Entry& e : batch.entries()) {
        if (e.table == marked && e.op == WriteBatch::Op::kPut) only_deletes = false;
      }
      (only_deletes ? first : last).push_back(marked);
    }
    order.insert(order.begin(), first.begin(), first.end());
    order.insert(order.end(), last.begin(), last.end());
    for (const std::string& t : order) {
      if (Status s = WriteTable(batch, t, deadline_ns); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // Sends the batch's entries for one table, in order: runs of puts as
  // putMultiple calls, runs of deletes as deleteMultiple calls, each under
  // max_call_bytes.
  Status WriteTable(const WriteBatch& batch, const std::string& table, std::optional<int64_t> deadline_ns) {
    const std::string hname = HBaseName(table);
    const h2::TDurability::type durability = ToThrift(options_.durability);
    std::vector<h2::TPut> puts;
    std::vector<h2::TDelete> deletes;
    uint64_t call_bytes = 0, call_payload = 0;
    auto flush = [&]() -> Status {
      if (puts.empty() && deletes.empty()) return Status::Ok();
      Status s;
      const uint64_t rows = puts.size() + deletes.size();
      if (!puts.empty()) {
        s = Rpc("putMultiple " + hname, [&](auto& c) { c.putMultiple(hname, puts); }, deadline_ns);
      } else {
        size_t not_deleted = 0;
        s = Rpc("deleteMultiple " + hname, [&](auto& c) {
          std::vector<h2::TDelete> failed;
          c.deleteMultiple(failed, hname, deletes);
          not_deleted = failed.size();
        }, deadline_ns);
        // The gateway answers the deletes it could not apply instead of
        // failing the call; ignoring them would report rows gone that are not.
        if (s.ok() && not_deleted > 0) {
          s = Status(Errc::kUnavailable, "deleteMultiple " + hname + ": " + std::to_string(not_deleted) + " of " +
                                             std::to_string(deletes.size()) + " deletes were not applied");
        }
      }
      puts.clear();
      deletes.clear();
      if (s.ok()) {
        rows_written_ += rows;
        bytes_written_ += call_payload;
      }
      call_bytes = call_payload = 0;
      return s;
    };
    for (const WriteBatch::Entry& e : batch.entries()) {
      if (e.table != table) continue;
      const bool put = e.op == WriteBatch::Op::kPut;
      const uint64_t size = e.key.size() + e.value_size() + kPutOverheadBytes;
      if ((put && !deletes.empty()) || (!put && !puts.empty()) || call_bytes + size > options_.max_call_bytes) {
        if (Status s = flush(); !s.ok()) return s;
      }
      call_bytes += size;
      call_payload += e.key.size() + e.value_size();
      if (put) {
        h2::TPut p;
        p.row = e.key;
        h2::TColumnValue cv;
        cv.family = kFamily;
        cv.qualifier = kQualifier;
        cv.value = e.Value();
        p.columnValues.push_back(std::move(cv));
        p.__set_durability(durability);
        puts.push_back(std::move(p));
      } else {
        h2::TDelete d;
        d.row = e.key;
        d.__set_durability(durability);
        deletes.push_back(std::move(d));
      }
    }
    return flush();
  }

  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) {
    if (key.empty()) return Error{Errc::kInvalidArgument, "HBase has no empty row key"};
    const std::string hname = HBaseName(table);
    h2::TPut p;
    p.row = std::string(key);
    h2::TColumnValue cv;
    cv.family = kFamily;
    cv.qualifier = kQualifier;
    cv.value = std::string(value);
    p.columnValues.push_back(std::move(cv));
    p.__set_durability(ToThrift(options_.durability));
    bool written = false;
    // An absent `expected` goes as an empty value: the C++ client always
    // sends the field, and HBase's region server matches an empty comparand
    // against a missing cell (HRegion's checkAndMutate).
    Status s = Rpc("checkAndPut " + hname, [&](auto& c) {
      written = c.checkAndPut(hname, p.row, kFamily, kQualifier, expected.value_or(std::string()), p);
    });
    if (!s.ok()) {
      ++write_failures_;
      return s.error();
    }
    if (written) {
      ++rows_written_;
      bytes_written_ += key.size() + value.size();
    }
    return written;
  }

  // ---- reads ----

  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) {
    if (key.empty()) return std::optional<std::string>();  // HBase has no empty row key
    h2::TGet g;
    g.row = std::string(key);
    g.__set_columns(ValueColumn());
    g.__set_maxVersions(1);
    h2::TResult r;
    const std::string hname = HBaseName(table);
    Status s = Rpc("get from " + hname, [&](auto& c) { c.get(r, hname, g); });
    if (!s.ok()) return s.error();
    const std::string* v = ValueOf(r);
    if (!v) return std::optional<std::string>();
    return std::optional<std::string>(*v);
  }

  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) {
    std::vector<std::optional<std::string>> rows(keys.size());
    const std::string hname = HBaseName(table);
    const size_t per_call = static_cast<size_t>(std::max(1, options_.multi_get_rows));
    for (size_t from = 0; from < keys.size(); from += per_call) {
      const size_t to = std::min(keys.size(), from + per_call);
      std::vector<h2::TGet> gets;
      std::vector<size_t> index;  // gets[j] is keys[index[j]]; empty keys are no row
      for (size_t i = from; i < to; ++i) {
        if (keys[i].empty()) continue;
        h2::TGet& g = gets.emplace_back();
        g.row = keys[i];
        g.__set_columns(ValueColumn());
        g.__set_maxVersions(1);
        index.push_back(i);
      }
      if (gets.empty()) continue;
      std::vector<h2::TResult> results;
      Status s = Rpc("getMultiple from " + hname, [&](auto& c) {
        results.clear();
        c.getMultiple(results, hname, gets);
      });
      if (!s.ok()) return s.error();
      // One result per get, in order (an empty one for a missing row).
      if (results.size() != gets.size()) {
        return Error{Errc::kInternal, "getMultiple from " + hname + ": " + std::to_string(results.size()) +
                                          " results for " + std::to_string(gets.size()) + " gets"};
      }
      for (size_t j = 0; j < results.size(); ++j) {
        if (const std::string* v = ValueOf(results[j])) rows[index[j]] = *v;
      }
    }
    return rows;
  }

  std::atomic<uint64_t> rows_written_{0}, bytes_written_{0}, rows_examined_{0}, write_batches_{0},
      write_failures_{0}, retries_{0};
  HBaseOptions options_;

  uint64_t connects() const { return pool_.connects(); }

 private:
  Pool pool_;
  std::atomic<bool> namespace_ready_{false};
  std::mutex rng_mu_;  // retries' jitter (calls come from many threads)
  std::mt19937_64 rng_{std::random_device{}()};
  mutable std::mutex tables_mu_;
  std::set<std::string, std::less<>> tables_;
};

// ---- scanners ----

namespace {

// A cursor over a gateway scanner. Pages rows with getScannerRows; after a
// failure it reopens the scanner just past the last row it saw (forward:
// last + "\0"; reverse: startRow = last, dropping the row equal to it).
class ScannerIterator final : public RowIterator {
 public:
  ScannerIterator(HBaseTableStore::Impl& store, ScanSpec spec, std::string filter_bytes)
      : store_(store),
        spec_(std::move(spec)),
        hname_(store.HBaseName(spec_.table)),
        filter_bytes_(std::move(filter_bytes)) {
    if (spec_.reverse) {
      upper_ = spec_.stop;
      skip_equal_ = !spec_.stop.empty();
    } else {
      from_ = spec_.start;
    }
  }

  ~ScannerIterator() override { CloseScanner(); }

  // At most this many rows will be consumed (sizes the pages); 0 = unknown.
  void SetWanted(uint64_t rows) { wanted_ = rows; }
  // Fetches the first page (the constructor does not, so that SetWanted applies).
  void Start() { Fill(); }

  bool Valid() const override { return !rows_.empty(); }

  void Next() override {
    if (rows_.empty()) return;
    rows_.pop_front();
    ++consumed_;
    if (rows_.empty()) Fill();
  }

  void Seek(std::string_view target) override {
    CloseScanner();
    rows_.clear();
    done_ = false;
    first_page_done_ = false;
    if (!status_.ok()) return;
    if (spec_.reverse) {
      if (!spec_.stop.empty() && target >= spec_.stop) {
        upper_ = spec_.stop;
        skip_equal_ = true;
      } else {
        upper_ = std::string(target);
        skip_equal_ = false;
      }
    } else {
      from_ = std::max(std::string(target), spec_.start);
    }
    Fill();
  }

  std::string_view key() const override { return rows_.front().first; }
  std::string_view value() const override { return rows_.front().second; }
  Status status() const override { return status_; }

 private:
  // True when the remaining range is empty (no RPC needed).
  bool RangeEmpty() const {
    if (spec_.reverse) {
      return !upper_.empty() && !spec_.start.empty() && (upper_ < spec_.start || (skip_equal_ && upper_ == spec_.start));
    }
    return !spec_.stop.empty() && from_ >= spec_.stop;
  }

  int32_t PageRows() const {
    uint64_t n = static_cast<uint64_t>(std::max(1, store_.options_.scanner_caching));
    if (wanted_) {
      uint64_t left = wanted_ > consumed_ ? wanted_ - consumed_ : 1;
      n = std::min(n, left + (skip_equal_ ? 1 : 0));
    }
    return static_cast<int32_t>(n);
  }

  h2::TScan MakeScan() const {
    h2::TScan s;
    if (spec_.reverse) {
      if (!upper_.empty()) s.__set_startRow(upper_);
      std::string lower = ReverseStopRow(spec_.start);
      if (!lower.empty()) s.__set_stopRow(lower);
      s.__set_reversed(true);
    } else {
      if (!from_.empty()) s.__set_startRow(from_);
      if (!spec_.stop.empty()) s.__set_stopRow(spec_.stop);
    }
    s.__set_columns(ValueColumn());
    s.__set_caching(PageRows());
    s.__set_maxVersions(1);
    if (!filter_bytes_.empty()) s.__set_filterBytes(filter_bytes_);
    return s;
  }

  // Best effort: the gateway may expire idle scanners, the repo's bridge
  // does not. Not once a connection was made since it opened (the id may be
  // another scan's now): such a scanner is left to the gateway.
  void CloseScanner() {
    if (!scanner_) return;
    const int32_t id = *scanner_;
    scanner_.reset();
    (void)store_.Once("closeScanner", [&](auto& c) { c.closeScanner(id); }, scanner_connects_);
  }

  // Fetches pages until a row is buffered or the range is exhausted. The
  // first page comes from getScannerResults (open, fetch and close in one
  // call: most scans end there); later pages from a scanner opened just past
  // it. A page shorter than asked for is the last one: the gateway's
  // ResultScanner.next(n) only returns fewer than n rows at the end.
  void Fill() {
    int failures = 0, stale_reopens = 0;
    while (rows_.empty() && !done_ && status_.ok()) {
      if (RangeEmpty()) {
        done_ = true;
        break;
      }
      Attempt a;
      std::vector<h2::TResult> page;
      const int32_t n = PageRows();
      if (!scanner_ && !first_page_done_) {
        const h2::TScan scan = MakeScan();
        a = store_.Once("getScannerResults " + hname_,
                        [&](auto& c) { c.getScannerResults(page, hname_, scan, n); });
        if (a.status.ok()) first_page_done_ = true;
      } else {
        if (!scanner_) {
          const h2::TScan scan = MakeScan();
          int32_t id = 0;
          // Read before the call: a connection made during it (by this call
          // or another thread) may have met a restarted gateway, so the
          // scanner is then reopened once rather than trusted.
          const uint64_t connects = store_.connects();
          a = store_.Once("openScanner " + hname_, [&](auto& c) { id = c.openScanner(hname_, scan); });
          if (a.status.ok()) {
            scanner_ = id;
            scanner_connects_ = connects;
          }
        }
        if (a.status.ok()) {
          const int32_t id = *scanner_;
          a = store_.Once("getScannerRows " + hname_, [&](auto& c) { c.getScannerRows(page, id, n); },
                          scanner_connects_);
          // An unknown scanner id (gateway restarted, lease expired): reopen.
          if (!a.status.ok() && a.status.code() == Errc::kInvalidArgument) a.retryable = true;
        }
      }
      if (a.stale_scanner && ++stale_reopens < 8) {
        // Not a failure (any connection made since it opened, a first one
        // too, voids it): reopen past the last row seen, at once.
        scanner_.reset();
        continue;
      }
      if (!a.status.ok()) {
        CloseScanner();  // its state is unknown: reopen past the last row seen
        if (!a.retryable || failures >= store_.options_.retries) {
          status_ = a.status;
          break;
        }
        store_.Sleep(failures++);
        ++store_.retries_;
        continue;
      }
      const bool last = static_cast<int32_t>(page.size()) < n;
      Accept(page);
      if (last && !done_) {
        CloseScanner();
        done_ = true;
      }
    }
  }

  void Accept(std::vector<h2::TResult>& page) {
    store_.rows_examined_ += page.size();
    for (h2::TResult& r : page) {
      if (!r.__isset.row) continue;
      std::string& key = r.row;
      if (spec_.reverse) {
        if (skip_equal_ && key == upper_) continue;
        if (!spec_.start.empty() && key < spec_.start) {
          done_ = true;
          break;
        }
        upper_ = key;
        skip_equal_ = true;
      } else {
        if (!spec_.stop.empty() && key >= spec_.stop) {
          done_ = true;
          break;
        }
        from_ = key;
        from_.push_back('\0');
      }
      std::string* v = ValueOf(r);
      if (!v) continue;
      rows_.emplace_back(std::move(key), std::move(*v));
    }
    if (done_) CloseScanner();
  }

  HBaseTableStore::Impl& store_;
  const ScanSpec spec_;
  const std::string hname_;
  const std::string filter_bytes_;
  // Resume position. Forward: the next scan starts at from_ (inclusive).
  // Reverse: at upper_ (inclusive; empty = the end), skipping a row equal to
  // upper_ when skip_equal_.
  std::string from_, upper_;
  bool skip_equal_ = false;
  std::optional<int32_t> scanner_;
  uint64_t scanner_connects_ = 0;  // Pool::connects() when scanner_ was opened
  bool first_page_done_ = false;
  std::deque<std::pair<std::string, std::string>> rows_;
  bool done_ = false;
  uint64_t wanted_ = 0, consumed_ = 0;
  Status status_;
};

}  // namespace

// ---- public surface ----

Result<std::unique_ptr<HBaseTableStore>> HBaseTableStore::Open(const HBaseOptions& options) {
  if (options.host.empty()) return Error{Errc::kInvalidArgument, "HBase gateway host is empty"};
  if (options.port <= 0 || options.port > 65535) return Error{Errc::kInvalidArgument, "HBase gateway port is invalid"};
  if (options.ns.empty()) return Error{Errc::kInvalidArgument, "HBase namespace is empty"};
  if (options.max_call_bytes < 4096) return Error{Errc::kInvalidArgument, "max_call_bytes is below 4096"};
  auto impl = std::make_unique<Impl>(options);
  if (Status s = impl->Ping(); !s.ok()) return s.error();
  return std::unique_ptr<HBaseTableStore>(new HBaseTableStore(std::move(impl)));
}

HBaseTableStore::HBaseTableStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HBaseTableStore::~HBaseTableStore() = default;

std::string HBaseTableStore::HBaseName(std::string_view name) const { return impl_->HBaseName(name); }

Status HBaseTableStore::CreateTable(std::string_view name, const TableOptions& options) {
  return impl_->CreateTable(name, options);
}

// Each creation is a master procedure the gateway waits for (about 0.35 s
// on HBase 2.6, one after another): up to pool_size at once, on as many
// pooled connections.
//
// Tables asked for one TTL keep one TTL: without lower_ttl, a table this
// call creates takes the longest TTL kept by the tables that exist and are
// asked for the same TTL. A table a newer build adds (`cnt` beside the index
// tables) would otherwise expire its rows before the rows they describe when
// an earlier configuration left the others a longer TTL; so the existing
// tables go first, then the new ones, each told like a kept TTL. Tables
// asked for equal TTLs in one call are peers (serve asks store.ttl of the
// data tables, and alerting its two TTLs in a call of its own). The first
// failure is returned; a failure among the existing tables leaves the new
// ones uncreated.
Status HBaseTableStore::CreateTables(const std::vector<NamedTable>& tables) {
  if (Status s = impl_->EnsureNamespace(); !s.ok()) return s;
  // Runs run(i) for each i of `which`, up to pool_size at once; the first failure.
  auto on_pool = [&](const std::vector<size_t>& which, const std::function<Status(size_t)>& run) {
    const size_t n = which.size();
    const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, impl_->options_.pool_size)));
    std::vector<Status> results(n);
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        const size_t i = which[k];
        try {  // nothing may escape a helper thread (std::terminate)
          results[k] = run(i);
        } catch (const std::exception& e) {
          results[k] = Status(Errc::kInternal, "create or check table " + tables[i].name + ": " + e.what());
        } catch (...) {
          results[k] = Status(Errc::kInternal, "create or check table " + tables[i].name + ": an unknown exception");
        }
      }
    };
    std::vector<std::thread> helpers;
    try {
      for (size_t w = 1; w < workers; ++w) helpers.emplace_back(work);
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one share the rest.
    }
    work();
    for (std::thread& t : helpers) t.join();
    for (Status& s : results) {
      if (!s.ok()) return s;
    }
    return Status::Ok();
  };
  std::vector<int64_t> kept(tables.size(), -1);  // -1: not created yet
  std::vector<size_t> all(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) all[i] = i;
  if (Status s = on_pool(all,
                         [&](size_t i) {
                           auto exists = impl_->Exists(tables[i].name);
                           if (!exists.ok()) return Status(exists.error());
                           return *exists ? impl_->CreateTable(tables[i].name, tables[i].options, &kept[i])
                                          : Status::Ok();
                         });
      !s.ok()) {
    return s;
  }
  std::vector<size_t> missing;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (kept[i] < 0) missing.push_back(i);
  }
  auto longer = [](int64_t a, int64_t b) { return a == 0 ? b != 0 : b != 0 && a > b; };  // 0: forever
  // Per TTL asked, the longest one the existing tables asked for it kept.
  std::map<int64_t, int64_t> kept_by_asked;
  for (size_t i = 0; i < tables.size() && !impl_->options_.lower_ttl; ++i) {
    if (kept[i] < 0) continue;
    auto [at, fresh] = kept_by_asked.emplace(tables[i].options.ttl_seconds, kept[i]);
    if (!fresh && longer(kept[i], at->second)) at->second = kept[i];
  }
  return on_pool(missing, [&](size_t m) {
    const NamedTable& t = tables[m];
    std::optional<int64_t> peers;
    if (auto at = kept_by_asked.find(t.options.ttl_seconds);
        at != kept_by_asked.end() && longer(at->second, t.options.ttl_seconds)) {
      peers = at->second;
    }
    return impl_->CreateTable(t.name, t.options, nullptr, peers);
  });
}

bool HBaseTableStore::HasTable(std::string_view name) const {
  auto exists = impl_->Exists(name);
  return exists.ok() && *exists;
}

Status HBaseTableStore::Flush() {
  if (impl_->options_.durability == Durability::kSkipWal) {
    return Status(Errc::kFailedPrecondition,
                  "HBase with durability skip_wal cannot be flushed through Thrift: its writes may be lost");
  }
  return Status::Ok();
}

Status HBaseTableStore::Write(const WriteBatch& batch) { return impl_->Write(batch); }

Result<bool> HBaseTableStore::CheckAndPut(std::string_view table, std::string_view key,
                                          const std::optional<std::string>& expected, std::string_view value) {
  return impl_->CheckAndPut(table, key, expected, value);
}

Result<std::optional<std::string>> HBaseTableStore::Get(std::string_view table, std::string_view key) {
  return impl_->Get(table, key);
}

Result<std::vector<std::optional<std::string>>> HBaseTableStore::MultiGet(std::string_view table,
                                                                          const std::vector<std::string>& keys) {
  return impl_->MultiGet(table, keys);
}

std::unique_ptr<RowIterator> HBaseTableStore::NewIterator(const ScanSpec& spec) {
  auto it = std::make_unique<ScannerIterator>(*impl_, spec, std::string());
  it->Start();
  return it;
}

Status HBaseTableStore::Scan(const ScanSpec& spec, const RowVisitor& visit) {
  ScannerIterator it(*impl_, spec, std::string());
  it.SetWanted(spec.limit);
  it.Start();
  return ScanRows(it, spec.limit, visit);
}

Status HBaseTableStore::FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) {
  if (Status s = ValidateFuzzySpec(spec); !s.ok()) return s;
  // HBase 2.6's FuzzyRowFilter does not finish a reversed scan (a region server
  // call runs into the RPC timeout, seen with HBase's own Java client too), so a
  // reversed fuzzy scan reads the range unfiltered and matches rows here, in
  // full pages.
  const bool server_filter = !spec.range.reverse;
  ScannerIterator it(*impl_, spec.range, server_filter ? EncodeFuzzyRowFilter(spec.key, spec.mask) : "");
  if (server_filter) it.SetWanted(spec.range.limit);
  it.Start();
  // The gateway filters and seeks; rows it lets through that FuzzyMatches
  // rejects (other lengths) are dropped here.
  uint64_t visited = 0;
  for (; it.Valid(); it.Next()) {
    if (!FuzzyMatches(it.key(), spec.key, spec.mask)) continue;
    if (!visit(it.key(), it.value())) break;
    if (spec.range.limit && ++visited >= spec.range.limit) break;
  }
  return it.status();
}

StoreCounters HBaseTableStore::counters() const {
  StoreCounters c;
  c.rows_written = impl_->rows_written_;
  c.bytes_written = impl_->bytes_written_;
  c.rows_examined = impl_->rows_examined_;
  c.write_batches = impl_->write_batches_;
  c.write_failures = impl_->write_failures_;
  return c;
}

}  // namespace logdex
