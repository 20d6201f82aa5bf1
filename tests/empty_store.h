// A TableStore with no rows that accepts every write and answers every read
// with "absent": for tests and fuzz targets whose code under test needs a
// store but whose assertions are elsewhere.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "store/table_store.h"

namespace logdex::testing {

class EmptyStore final : public TableStore {
 public:
  Status CreateTable(std::string_view, const TableOptions&) override { return Status::Ok(); }
  bool HasTable(std::string_view) const override { return true; }
  Status Write(const WriteBatch&) override { return Status::Ok(); }
  Result<std::optional<std::string>> Get(std::string_view, std::string_view) override {
    return std::optional<std::string>();
  }
  Status Scan(const ScanSpec&, const RowVisitor&) override { return Status::Ok(); }
  Status FuzzyScan(const FuzzyScanSpec&, const RowVisitor&) override { return Status::Ok(); }
  StoreCounters counters() const override { return {}; }
};

}  // namespace logdex::testing
