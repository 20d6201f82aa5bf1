// A TableStore wrapper whose reads of one table fail on demand (writes and
// scans pass through): for tests of what a failed read must not do.
#pragma once

#include <string>

#include "store/table_store.h"

namespace logdex::testing {

class FailingReads final : public TableStore {
 public:
  explicit FailingReads(TableStore& base) : base_(base) {}
  Status CreateTable(std::string_view name, const TableOptions& o) override { return base_.CreateTable(name, o); }
  bool HasTable(std::string_view name) const override { return base_.HasTable(name); }
  Status Write(const WriteBatch& b) override { return base_.Write(b); }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    if (table == fail_table) return Error{Errc::kUnavailable, "injected read failure"};
    return base_.Get(table, key);
  }
  Status Scan(const ScanSpec& spec, const RowVisitor& v) override { return base_.Scan(spec, v); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& v) override { return base_.FuzzyScan(spec, v); }
  StoreCounters counters() const override { return base_.counters(); }
  std::string fail_table;  // reads of this table fail

 private:
  TableStore& base_;
};

}  // namespace logdex::testing
