#include "indexer/tables.h"

#include "common/row_keys.h"

namespace logdex {

std::vector<std::string> IndexTableNames() {
  std::vector<std::string> names;
  for (Severity s : kAllSeverities) names.push_back(LevelIndexTable(s));
  names.emplace_back(kHostIndexTable);
  names.emplace_back(kTagIndexTable);
  names.emplace_back(kMetaTable);
  return names;
}

Status CreateTables(TableStore& store, const TableLayout& layout) {
  std::vector<TableStore::NamedTable> tables;
  TableOptions main;
  main.ttl_seconds = layout.ttl_seconds;
  main.block_size = layout.main_block_size;
  main.block_cache = false;
  main.compression = Compression::kNone;
  main.ordered_prefix = 10;  // salt · app · severity: a stream's chunks arrive in time order
  main.pre_split = layout.salt_buckets;
  tables.push_back({std::string(kMainTable), main});

  TableOptions index;
  index.ttl_seconds = layout.ttl_seconds;
  index.block_size = layout.index_block_size;
  index.bloom_filter = true;
  index.compression = Compression::kSnappy;
  for (const std::string& name : IndexTableNames()) {
    // meta holds names and stream extents: tiny, and needed as long as any data lives.
    TableOptions o = index;
    if (name == kMetaTable) o.ttl_seconds = 0;
    // Time-ordered within: app (idx_<level>), host · app (idx_host), tag (idx_tag).
    if (name == kHostIndexTable) {
      o.ordered_prefix = 16;
    } else if (name != kMetaTable) {
      o.ordered_prefix = 8;
    }
    tables.push_back({name, o});
  }

  // The compactor's ledger: one row per merged chunk, as long as the data.
  TableOptions merged = index;
  merged.ordered_prefix = 17;  // host · app · severity (a memtable insert hint)
  tables.push_back({std::string(kMergedTable), merged});

  // Token filters of merged chunks, read by queries with text filters before
  // the main row: near the other small rows of a query. The filters are
  // random bits: no compression.
  TableOptions tokens = index;
  tokens.compression = Compression::kNone;
  tokens.ordered_prefix = 10;  // as the main table's
  tables.push_back({std::string(kTokenTable), tokens});

  // Record counts per minute of merged chunks, read by Volume() for those
  // that cross a bucket edge (indexer/minute_counts.h): small varints.
  TableOptions minute_counts = index;
  minute_counts.ordered_prefix = 10;  // as the main table's
  tables.push_back({std::string(kMinuteCountsTable), minute_counts});

  TableOptions outbox;  // pending notifications: small, hot, kept until delivered
  outbox.bloom_filter = true;
  tables.push_back({std::string(kOutboxTable), outbox});
  return store.CreateTables(tables);
}

}  // namespace logdex
