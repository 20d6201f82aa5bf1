// The subset of HBase's Thrift2 gateway API (THBaseService) that logdex uses.
//
// Written for logdex from the field ids and types of HBase's published
// hbase-thrift/src/main/resources/org/apache/hadoop/hbase/thrift2/hbase.thrift
// (HBase 2.x; TIOError.canRetry came with HBASE-26025). Only field ids, types and method
// names travel on the wire, so this subset talks to a real gateway: fields and
// methods left out here are simply never sent, and fields a server sends that
// are not listed are skipped by the generated code.
//
// Rules when editing: never renumber a field, never change a type; add fields
// with the id the upstream IDL gives them. The C++ namespace is ours (it does
// not go on the wire).

namespace cpp logdex.hbase.thrift2

// ---- cells, rows ----

struct TColumn {
  1: required binary family,
  2: optional binary qualifier,
  3: optional i64 timestamp
}

struct TColumnValue {
  1: required binary family,
  2: required binary qualifier,
  3: required binary value,
  4: optional i64 timestamp
}

// A row: no row and no columnValues when the row was not found.
struct TResult {
  1: optional binary row,
  2: required list<TColumnValue> columnValues,
  3: optional bool stale = false,
  4: optional bool partial = false
}

enum TDeleteType {
  DELETE_COLUMN = 0,
  DELETE_COLUMNS = 1,
  DELETE_FAMILY = 2,
  DELETE_FAMILY_VERSION = 3
}

enum TDurability {
  USE_DEFAULT = 0,
  SKIP_WAL = 1,
  ASYNC_WAL = 2,
  SYNC_WAL = 3,
  FSYNC_WAL = 4
}

struct TGet {
  1: required binary row,
  2: optional list<TColumn> columns,
  5: optional i32 maxVersions,
  15: optional binary filterBytes
}

struct TPut {
  1: required binary row,
  2: required list<TColumnValue> columnValues,
  3: optional i64 timestamp,
  6: optional TDurability durability
}

// No columns: the whole row.
struct TDelete {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  4: optional TDeleteType deleteType = 1,
  7: optional TDurability durability
}

// Forward: rows in [startRow, stopRow). Reversed: rows from startRow
// (inclusive, the upper end) down to stopRow (exclusive, the lower end).
// filterBytes: a protobuf-encoded hbase.pb.Filter.
struct TScan {
  1: optional binary startRow,
  2: optional binary stopRow,
  3: optional list<TColumn> columns,
  4: optional i32 caching,
  5: optional i32 maxVersions = 1,
  8: optional i32 batchSize,
  11: optional bool reversed,
  12: optional bool cacheBlocks,
  15: optional i32 limit,
  18: optional binary filterBytes
}

// ---- schema ----

enum TBloomFilterType {
  NONE = 0,
  ROW = 1,
  ROWCOL = 2,
  ROWPREFIX_FIXED_LENGTH = 3
}

enum TCompressionAlgorithm {
  LZO = 0,
  GZ = 1,
  NONE = 2,
  SNAPPY = 3,
  LZ4 = 4,
  BZIP2 = 5,
  ZSTD = 6
}

struct TTableName {
  1: optional binary ns,
  2: required binary qualifier
}

// timeToLive in seconds (HBase's FOREVER is 2147483647); the field name
// bloomnFilterType is upstream's spelling.
struct TColumnFamilyDescriptor {
  1: required binary name,
  2: optional map<binary, binary> attributes,
  3: optional map<string, string> configuration,
  4: optional i32 blockSize,
  5: optional TBloomFilterType bloomnFilterType,
  6: optional TCompressionAlgorithm compressionType,
  10: optional i32 maxVersions,
  11: optional i32 minVersions,
  13: optional i32 timeToLive,
  14: optional bool blockCacheEnabled,
  20: optional bool inMemory
}

struct TTableDescriptor {
  1: required TTableName tableName,
  2: optional list<TColumnFamilyDescriptor> columns,
  3: optional map<binary, binary> attributes,
  4: optional TDurability durability
}

struct TNamespaceDescriptor {
  1: required string name,
  2: optional map<string, string> configuration
}

// ---- errors ----

// canRetry: set by gateways with HBASE-26025 (false for DoNotRetryIOException);
// older gateways leave it unset.
exception TIOError {
  1: optional string message,
  2: optional bool canRetry
}

exception TIllegalArgument {
  1: optional string message
}

service THBaseService {
  TResult get(1: required binary table, 2: required TGet tget) throws (1: TIOError io)

  list<TResult> getMultiple(1: required binary table, 2: required list<TGet> tgets) throws (1: TIOError io)

  void put(1: required binary table, 2: required TPut tput) throws (1: TIOError io)

  void putMultiple(1: required binary table, 2: required list<TPut> tputs) throws (1: TIOError io)

  list<TDelete> deleteMultiple(1: required binary table, 2: required list<TDelete> tdeletes)
    throws (1: TIOError io)

  // Puts tput when the cell family:qualifier of row holds value; an empty value
  // (the C++ client always sends the field) matches a missing cell, by HBase's
  // region server rule for an empty comparand.
  bool checkAndPut(1: required binary table, 2: required binary row, 3: required binary family,
                   4: required binary qualifier, 5: binary value, 6: required TPut tput)
    throws (1: TIOError io)

  i32 openScanner(1: required binary table, 2: required TScan tscan) throws (1: TIOError io)

  list<TResult> getScannerRows(1: required i32 scannerId, 2: i32 numRows = 1)
    throws (1: TIOError io, 2: TIllegalArgument ia)

  void closeScanner(1: required i32 scannerId) throws (1: TIOError io, 2: TIllegalArgument ia)

  list<TResult> getScannerResults(1: required binary table, 2: required TScan tscan, 3: i32 numRows = 1)
    throws (1: TIOError io)

  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)

  bool tableExists(1: TTableName tableName) throws (1: TIOError io)

  void createTable(1: required TTableDescriptor desc, 2: list<binary> splitKeys)
    throws (1: TIOError io)

  void deleteTable(1: required TTableName tableName) throws (1: TIOError io)

  void disableTable(1: required TTableName tableName) throws (1: TIOError io)

  void modifyColumnFamily(1: required TTableName tableName, 2: required TColumnFamilyDescriptor column)
    throws (1: TIOError io)

  void createNamespace(1: required TNamespaceDescriptor namespaceDesc) throws (1: TIOError io)

  void deleteNamespace(1: required string name) throws (1: TIOError io)

  TNamespaceDescriptor getNamespaceDescriptor(1: required string name) throws (1: TIOError io)

  list<string> listNamespaces() throws (1: TIOError io)
}
