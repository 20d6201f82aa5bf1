// The defaults of TableStore: NewIterator pages through Scan() with a limit,
// resuming each page just past the last row seen; MultiGet is a Get per key;
// CreateTables creates one table after another; CheckAndPut is refused.
#include <deque>

#include "store/table_store.h"

namespace logdex {
namespace {

class PagedIterator final : public RowIterator {
 public:
  PagedIterator(TableStore& store, ScanSpec spec) : store_(store), spec_(std::move(spec)) {
    spec_.limit = kPageRows;
    Fill();
  }

  bool Valid() const override { return !rows_.empty(); }
  void Next() override {
    rows_.pop_front();
    if (rows_.empty() && !exhausted_) Fill();
  }
  void Seek(std::string_view target) override {
    if (spec_.reverse) {
      // Last row <= target: the range's exclusive stop becomes target + "\0".
      std::string stop(target);
      stop.push_back('\0');
      if (stop_ceiling_.empty() || stop < stop_ceiling_) spec_.stop = stop; else spec_.stop = stop_ceiling_;
    } else {
      std::string start(target);
      spec_.start = std::max(start, start_floor_);
    }
    rows_.clear();
    exhausted_ = false;
    Fill();
  }
  std::string_view key() const override { return rows_.front().first; }
  std::string_view value() const override { return rows_.front().second; }
  Status status() const override { return status_; }

 private:
  static constexpr uint64_t kPageRows = 256;

  void Fill() {
    if (!status_.ok()) return;
    size_t n = 0;
    status_ = store_.Scan(spec_, [&](std::string_view k, std::string_view v) {
      rows_.emplace_back(std::string(k), std::string(v));
      ++n;
      return true;
    });
    if (!status_.ok()) {
      rows_.clear();
      return;
    }
    exhausted_ = n < kPageRows;
    if (rows_.empty()) return;
    // The next page resumes just past the last row of this one.
    const std::string& last = rows_.back().first;
    if (spec_.reverse) {
      spec_.stop = last;
    } else {
      spec_.start = last + '\0';
    }
  }

  TableStore& store_;
  ScanSpec spec_;
  const std::string start_floor_ = spec_.start;
  const std::string stop_ceiling_ = spec_.stop;
  std::deque<std::pair<std::string, std::string>> rows_;
  bool exhausted_ = false;
  Status status_;
};

}  // namespace

std::unique_ptr<RowIterator> TableStore::NewIterator(const ScanSpec& spec) {
  return std::make_unique<PagedIterator>(*this, spec);
}

}  // namespace logdex

namespace logdex {
namespace {

class FailedIterator final : public RowIterator {
 public:
  explicit FailedIterator(Status s) : status_(std::move(s)) {}
  bool Valid() const override { return false; }
  void Next() override {}
  void Seek(std::string_view) override {}
  std::string_view key() const override { return {}; }
  std::string_view value() const override { return {}; }
  Status status() const override { return status_; }

 private:
  Status status_;
};

}  // namespace

std::unique_ptr<RowIterator> ErrorIterator(Status status) { return std::make_unique<FailedIterator>(std::move(status)); }

Status ScanRows(RowIterator& it, uint64_t limit, const RowVisitor& visit) {
  uint64_t visited = 0;
  for (; it.Valid(); it.Next()) {
    if (!visit(it.key(), it.value())) break;
    if (limit && ++visited >= limit) break;
  }
  return it.status();
}

Status FuzzyScanRows(RowIterator& it, const FuzzyScanSpec& spec, const RowVisitor& visit) {
  uint64_t visited = 0;
  while (it.Valid()) {
    std::string_view key = it.key();
    if (FuzzyMatches(key, spec.key, spec.mask)) {
      if (!visit(key, it.value())) break;
      if (spec.range.limit && ++visited >= spec.range.limit) break;
      it.Next();
      continue;
    }
    std::optional<std::string> next = FuzzyNextKey(key, spec.key, spec.mask, spec.range.reverse);
    if (!next) break;
    it.Seek(*next);
  }
  return it.status();
}

Result<std::vector<std::optional<std::string>>> TableStore::MultiGet(std::string_view table,
                                                                     const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> rows;
  rows.reserve(keys.size());
  for (const std::string& k : keys) {
    auto row = Get(table, k);
    if (!row.ok()) return row.error();
    rows.push_back(std::move(*row));
  }
  return rows;
}

Status TableStore::CreateTables(const std::vector<NamedTable>& tables) {
  for (const NamedTable& t : tables) {
    if (Status s = CreateTable(t.name, t.options); !s.ok()) return s;
  }
  return Status::Ok();
}

Result<bool> TableStore::CheckAndPut(std::string_view table, std::string_view, const std::optional<std::string>&,
                                     std::string_view) {
  return Error{Errc::kFailedPrecondition, "conditional writes to " + std::string(table) + " are not supported by this store"};
}

}  // namespace logdex
