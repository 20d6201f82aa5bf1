// The tables logdex keeps (docs/ARCHITECTURE.md, "Tables and row keys") and
// their options, which mirror the HBase tuning of the original system:
// VERSIONS 1, a TTL, no store-side compression and no block cache for the
// main table (its payload is already snappy and it is read sequentially),
// row bloom filters on index tables.
#pragma once

#include <string>
#include <vector>

#include "common/ids.h"
#include "common/result.h"
#include "store/table_store.h"

namespace logdex {

struct TableLayout {
  // Retention of every table. Default 7 days.
  int64_t ttl_seconds = 7 * 24 * 3600;
  // Block size of the main table. Default 16 KiB: a query reads a chunk by
  // its key (the index says which), and reads its whole block (no block
  // cache: rows are large and read once); 64 KiB made a read 1.3-1.4x slower
  // (`logdex bench query`), 4 KiB pins 4x more index in memory.
  uint32_t main_block_size = 16 * 1024;
  // Block size of index and meta tables. Default 16 KiB.
  uint32_t index_block_size = 16 * 1024;
  // Salt buckets of the main table's keys (common/ids.h); a store that
  // partitions by key range pre-splits it into as many parts.
  uint32_t salt_buckets = kDefaultSaltBuckets;
};

// Every index table (idx_<level> for each level, idx_host, idx_tag) and meta.
std::vector<std::string> IndexTableNames();

// Creates (or opens) logs, the index tables, meta and alert_outbox.
Status CreateTables(TableStore& store, const TableLayout& layout);

}  // namespace logdex
