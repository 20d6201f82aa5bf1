// TableStore wrappers for tests: one that passes every call through (the
// ground of the others), one whose reads of a table fail on demand, and one
// that fails every call.
#pragma once

#include <optional>
#include <string>

#include "store/table_store.h"

namespace logdex::testing {

// Passes tables, writes, Gets, scans and counters to `base`. MultiGet,
// batched_gets() and CreateTables stay TableStore's defaults (a Get or a
// CreateTable per item, through this wrapper), so a wrapper that changes Get
// changes every read, and one that changes CreateTable every creation.
class ForwardingStore : public TableStore {
 public:
  explicit ForwardingStore(TableStore& base) : base_(base) {}
  Status CreateTable(std::string_view name, const TableOptions& o) override { return base_.CreateTable(name, o); }
  bool HasTable(std::string_view name) const override { return base_.HasTable(name); }
  Status Write(const WriteBatch& b) override { return base_.Write(b); }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    return base_.Get(table, key);
  }
  Status Scan(const ScanSpec& spec, const RowVisitor& v) override { return base_.Scan(spec, v); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& v) override { return base_.FuzzyScan(spec, v); }
  StoreCounters counters() const override { return base_.counters(); }

 protected:
  TableStore& base_;
};

// A ForwardingStore that also passes conditional writes and shared(): a
// view of a store several members write (HBase), as the compaction lease
// needs it.
class SharedForwardingStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override {
    return base_.CheckAndPut(table, key, expected, value);
  }
  bool conditional_writes() const override { return base_.conditional_writes(); }
  bool shared() const override { return base_.shared(); }
};

// Reads of `fail_table` fail (writes and scans pass through): for tests of
// what a failed read must not do.
class FailingReads final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    if (table == fail_table) return Error{Errc::kUnavailable, "injected read failure"};
    return base_.Get(table, key);
  }
  std::string fail_table;  // reads of this table fail
};

// Drops every delete of a batch; the puts land. A compactor writing through
// it stops each merge where an HBase merge's writes are half done: the
// merged chunk's rows are written and its parts' rows are still there.
// Claims atomic writes whatever the base (the compactor refuses a store
// without them), so that the state can be made on every backend.
class DropsDeletes final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Status Write(const WriteBatch& b) override {
    WriteBatch kept;
    for (const std::string& t : b.last_tables()) kept.WriteLast(t);
    for (const WriteBatch::Entry& e : b.entries()) {
      if (e.op == WriteBatch::Op::kDelete) continue;
      kept.Put(e.table, e.key, e.Value());
      if (e.written_ms != 0) kept.Restamp(kept.size() - 1, e.written_ms);
    }
    return base_.Write(kept);
  }
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec) override { return base_.NewIterator(spec); }
  bool atomic_writes() const override { return true; }
};

// A store every call of which fails with `code` and `message` (HasTable
// answers yes): what a query or a server does when its store is down.
class AlwaysFailing final : public TableStore {
 public:
  AlwaysFailing(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  Status CreateTable(std::string_view, const TableOptions&) override { return Fail(); }
  bool HasTable(std::string_view) const override { return true; }
  Status Write(const WriteBatch&) override { return Fail(); }
  Result<std::optional<std::string>> Get(std::string_view, std::string_view) override { return Fail().error(); }
  Status Scan(const ScanSpec&, const RowVisitor&) override { return Fail(); }
  Status FuzzyScan(const FuzzyScanSpec&, const RowVisitor&) override { return Fail(); }
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec&) override { return ErrorIterator(Fail()); }
  StoreCounters counters() const override { return {}; }

 private:
  Status Fail() const { return Status(code_, message_); }
  Errc code_;
  std::string message_;
};

}  // namespace logdex::testing
