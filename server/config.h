// logdex serve's configuration: one YAML file (see deploy/logdex.example.yaml),
// then environment overrides, then command-line flags.
//
// Every key has a default; LoadConfig() reports every error at once, each
// naming the file, line and key ("logdex.yaml:12: store.durability: ...").
// Unknown keys are errors (a typo must not silently fall back to a default).
//
// Environment overrides: LOGDEX_<SECTION>_<KEY>, upper case, dots and dashes
// as underscores, e.g. LOGDEX_STORE_DIR, LOGDEX_CONSUMER_GROUP_ID. The kafka
// section takes LOGDEX_KAFKA_<PROPERTY> with underscores for dots
// (LOGDEX_KAFKA_BOOTSTRAP_SERVERS -> bootstrap.servers). Any other LOGDEX_*
// variable is an error naming it and the closest known name (a typo in
// LOGDEX_HTTP_AUTH_TOKEN must not quietly disable auth), except:
//   - the variables of logdex's other commands, scripts and tests, which are
//     not serve configuration (kNonConfigEnvVars in config.cc: LOGDEX_TOKEN of
//     `logdex query`, LOGDEX_JOBS, LOGDEX_SKIP_ASAN, LOGDEX_FUZZ_SECONDS,
//     LOGDEX_FUZZ_SEED_DIR, LOGDEX_HBASE_THRIFT, LOGDEX_HBASE_TRANSPORT,
//     LOGDEX_ENGINE_CACHE of scripts/engines/);
//   - names the alerting section reads secrets from (`secret_env: LOGDEX_...`,
//     `routing_key_env`).
//
// Exposure: CheckHttpExposure() refuses a non-loopback http.listen without
// http.auth_token unless http.allow_unauthenticated is true; serve and
// check-config call it after the environment (and flags) are applied.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alerting/config.h"
#include "common/config_source.h"
#include "common/defaults.h"
#include "common/result.h"
#include "indexer/ingest_verify.h"
#include "indexer/tag_guard.h"
#include "store/table_store.h"

namespace logdex {

struct ConsumerConfig {
  std::string group_id = "logdex";                          // Kafka consumer group
  std::vector<std::string> topics{std::string(kDefaultTopic)};  // topics to consume
  std::string topic_regex;                                  // instead of topics, e.g. "^logs\\..*"
  std::string dlq_suffix{kDeadLetterSuffix};                // dead-letter topic = topic + suffix
  std::map<std::string, std::string> topic_formats;         // topic -> chunk | json | text
  std::string default_app;                                  // for json/text lines without an app
  std::string default_host;                                 // for json/text lines without a host
  uint32_t batch_max_messages = 2000;                       // a batch closes at this many messages,
  uint64_t batch_max_bytes = 32ull << 20;                   // or this many bytes,
  int64_t batch_max_wait_ms = 50;                           // or after this long
  int64_t shutdown_deadline_ms = 10'000;                    // SIGTERM: finish, commit, leave within this
  int64_t session_timeout_ms = 10'000;                      // group session timeout
  int64_t retry_backoff_max_ms = 5'000;                     // store/DLQ retry backoff cap
};

// The HBase Thrift2 gateway (store.backend: hbase).
struct HBaseConfig {
  std::string host = "127.0.0.1";
  int port = 9090;
  std::string ns = "logdex";              // HBase namespace of every logdex table
  bool framed = true;                     // transport: framed (gateway -f) | buffered
  bool compact = false;                   // protocol: binary | compact (gateway -c)
  int pool_size = 4;                      // connections to the gateway
  int64_t rpc_timeout_ms = 60'000;        // per-RPC send/receive timeout
  int retries = 3;                        // retries of a retryable failure
  // Lower an existing table's longer TTL to store.ttl (HBaseOptions::lower_ttl);
  // off: it keeps the longer one and serve warns.
  bool lower_ttl = false;
  // Codec of the tables logdex compresses (snappy by design); unset keeps it.
  std::optional<Compression> compression;
};

enum class StoreBackend {
  kRocksDb,  // embedded, one machine
  kHBase,    // through its Thrift2 gateway; the members of a group share it
};

struct StoreConfig {
  StoreBackend backend = StoreBackend::kRocksDb;
  std::string dir = "logdex-data";        // RocksDB directory
  HBaseConfig hbase;
  Durability durability = Durability::kAsync;
  // With durability skip_wal (RocksDB), Kafka is the write-ahead log: serve
  // flushes the memtables this often (or after this many message bytes) and
  // only then commits the offsets of what the flush persisted.
  int64_t flush_interval_ms = 5'000;
  uint64_t flush_bytes = 256ull << 20;
  int64_t ttl_seconds = 7 * 24 * 3600;    // retention
  uint32_t salt_buckets = 16;             // main-table salt buckets (fixed for a store's life)
  uint64_t block_cache_bytes = 128ull << 20;
  // RocksDB: all memtables together (store.memtable_budget), and the bound of
  // the write-ahead log (store.max_wal; 0 = the memtable budget). See
  // store/rocksdb_store.h.
  uint64_t memtable_budget_bytes = 256ull << 20;
  uint64_t max_wal_bytes = 0;
  // RocksDB with a WAL (async, sync): flush every table's memtables once the
  // WAL has not shrunk for this long (0 = only when they fill or the WAL
  // reaches max_wal), so that a quiet store does not keep days of logs in
  // its WAL (server/store_metrics.h).
  int64_t flush_after_ms = 10 * 60'000;
};

struct IndexerConfig {
  int64_t max_chunk_span_ms = 60'000;     // longer chunks are split (fixed for a store's life: replays split alike)
  IngestVerify verify = IngestVerify::kFull;  // full | snappy | header (see ingest_verify.h)
  uint64_t max_uncompressed_bytes = 64ull << 20;  // compression-bomb guard
  TagGuardOptions tags;
};

// The compactor (indexer/compactor.h): merges a stream's small settled
// chunks. Runs on rocksdb with durability async or sync (with skip_wal
// RocksDB flushes tables one by one), and on HBase with `hbase` (below).
struct CompactionConfig {
  // On by default (issue 16): a store of small chunks is several times the
  // size of a compacted one, and only merged chunks carry token filters;
  // merged chunks' counts per minute (`cnt`) keep the volume histogram from
  // reading them. Where it cannot run (durability skip_wal; HBase without
  // compaction.hbase) serve warns and logdex_compaction_unavailable is 1.
  bool enabled = true;
  int64_t settle_ms = 10 * 60'000;           // chunks younger than this are left alone
  int64_t max_span_ms = 3 * 3600'000;        // longest span of a merged chunk (queries look this far past a range)
  uint32_t target_records = 8192;            // records of a merged chunk, at most
  // Its uncompressed bytes, at most; capped at indexer.max_uncompressed
  // (MergedChunkBytes), so that a merged chunk still reads and a config
  // that lowered max_uncompressed before compaction was on by default
  // still starts.
  uint64_t target_bytes = 4ull << 20;
  int64_t lookback_ms = 24 * 3600'000;       // how far back a pass looks
  int64_t deep_interval_ms = 3600'000;       // a pass to each stream's oldest record this often
  int64_t interval_ms = 60'000;              // between passes
  uint64_t max_rate_bytes = 32ull << 20;     // uncompressed bytes merged per second, at most
  uint64_t max_pass_bytes = 256ull << 20;    // per pass; the rest waits (logdex_compaction_runs_left)
  int zstd_level = 3;                        // merged chunks are zstd at this level
  // Merged chunks lay their records out by columns (CODEC_ZSTD_COLUMNS):
  // smaller; false: plain zstd, for a store that builds before it must read.
  bool columns = true;                       // compaction.columns
  // A merged chunk's token filter takes at most this percentage of its
  // stored bytes (common/token_bloom.h); 0: no token filters.
  uint32_t token_filter_percent = 5;
  // HBase (store.backend: hbase) only. Opt-in: a member that compacts a
  // shared store changes the layout under every member's cursors, so every
  // member must read the epoch of this version first (indexer/store_epoch.h).
  bool hbase = false;                        // compaction.hbase
  // One member merges at a time: the one holding the lease
  // (indexer/compaction_lease.h). At least 4 × store.hbase.rpc_timeout.
  int64_t lease_period_ms = 10 * 60'000;     // compaction.lease_period
  // A merge's parts stay this long after its merged chunk landed, for the
  // queries that began before (HBase has no snapshots): longer than
  // query.max_time. Equal on every member.
  int64_t removal_delay_ms = 2 * 60'000;     // compaction.removal_delay
};

struct QueryConfig {
  int64_t max_range_ms = 31ll * 24 * 3600 * 1000;
  uint32_t max_limit = 10'000;
  // Per-query budget (indexer/query.h); over it the API answers 422 naming it.
  int64_t max_time_ms = 30'000;                    // query.max_time
  uint64_t max_rows_scanned = 10'000'000;          // query.max_rows_scanned (index rows, or main rows on scan)
  uint64_t max_bytes_decompressed = 4ull << 30;    // query.max_bytes_decompressed
};

struct HttpConfig {
  std::string listen = "127.0.0.1:8080";  // host:port of metrics, health and the query API
  std::string auth_token;                 // when set, the API needs "Authorization: Bearer <token>"
  int64_t ready_max_lag = 10'000;         // /readyz: ready when every partition's lag is at most this
  bool allow_unauthenticated = false;     // serve a non-loopback listen without auth_token, on purpose
  uint64_t max_body_bytes = 1ull << 20;   // larger request bodies get a 413 unread (no endpoint takes one)
  int worker_threads = 32;                // connection threads (see http/http_server.h)
  int max_concurrent_queries = 4;         // one more query gets a 503 busy with Retry-After
  int64_t read_timeout_ms = 5'000;        // each socket read; slow-header clients let go of a thread
  int64_t write_timeout_ms = 30'000;      // each socket write
};

struct ServeConfig {
  std::map<std::string, std::string> kafka;  // passed to librdkafka as is (SASL, TLS, ...)
  ConsumerConfig consumer;
  StoreConfig store;
  IndexerConfig indexer;
  CompactionConfig compaction;
  QueryConfig query;
  HttpConfig http;
  alerting::AlertingConfig alerting;  // walked by the alerting module (alerting/config.h); secrets: ResolveAlertingSecrets
  ConfigSource source;  // the file and the line of each key, for checks after the walk
};

// Loads and validates a YAML file. The error lists every problem found.
Result<ServeConfig> LoadConfig(const std::string& path);
// Parses YAML text; `name` is used in messages.
Result<ServeConfig> ParseConfig(const std::string& yaml, const std::string& name);
// Applies LOGDEX_* overrides from `env` ("KEY=VALUE" strings, e.g. environ).
// Errors: kInvalidArgument for an unknown LOGDEX_* variable or a bad value.
Status ApplyEnvOverrides(ServeConfig& config, char** env);
// Reads the alerting sinks' secrets from the environment (secret_env,
// routing_key_env) and validates the alerting section; problems name the
// file's line. Run once the environment is final.
Status ResolveAlertingSecrets(ServeConfig& config);

// A merged chunk's uncompressed bytes, at most: compaction.target_bytes,
// capped at indexer.max_uncompressed.
inline uint64_t MergedChunkBytes(const ServeConfig& c) {
  return std::min(c.compaction.target_bytes, c.indexer.max_uncompressed_bytes);
}

// True for "localhost", 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104.
bool IsLoopbackHost(std::string_view host);
// kInvalidArgument naming http.listen when it is not loopback, auth_token is
// empty and allow_unauthenticated is false.
Status CheckHttpExposure(const HttpConfig& http);

// Durations in the file use common/time_parse.h's ParseDuration ("500ms",
// "30s", "7d"); sizes, common/config_source.h's ParseBytes ("64KiB", "32MiB").

}  // namespace logdex
