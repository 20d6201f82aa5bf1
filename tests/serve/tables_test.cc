// The tables serve creates at every start (indexer/tables.h's layout, then
// alerting's): a table both create must get the same options from each, or
// every start changes it twice (on HBase, two column family changes, each
// a master procedure that reopens the table's regions).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "alerting/stager.h"
#include "indexer/tables.h"
#include "tests/empty_store.h"
#include "tests/failing_store.h"

namespace logdex {
namespace {

// Records every table's options, creation by creation (the rest is an
// EmptyStore's).
class RecordsCreations final : public testing::ForwardingStore {
 public:
  RecordsCreations() : ForwardingStore(empty_) {}
  Status CreateTable(std::string_view name, const TableOptions& o) override {
    made[std::string(name)].push_back(o);
    return Status::Ok();
  }
  std::map<std::string, std::vector<TableOptions>> made;

 private:
  testing::EmptyStore empty_;
};

TEST(ServeTables, ATableTheLayoutAndAlertingBothCreateGetsTheSameOptionsFromEach) {
  RecordsCreations store;
  TableLayout layout;
  layout.ttl_seconds = 7 * 86'400;
  ASSERT_TRUE(CreateTables(store, layout).ok());
  alerting::AlertingConfig config;
  ASSERT_TRUE(alerting::CreateAlertingTables(store, config).ok());
  int shared = 0;
  for (const auto& [name, options] : store.made) {
    for (const TableOptions& o : options) EXPECT_TRUE(o == options.front()) << name << " is created with other options";
    shared += options.size() > 1;
  }
  EXPECT_GE(shared, 1) << "the outbox is created by both";
}

}  // namespace
}  // namespace logdex
