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
// (LOGDEX_KAFKA_BOOTSTRAP_SERVERS -> bootstrap.servers).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
};

struct StoreConfig {
  std::string backend = "rocksdb";        // rocksdb (embedded) | hbase (Thrift2 gateway)
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
};

struct IndexerConfig {
  int64_t max_chunk_span_ms = 60'000;     // longer chunks are split (fixed for a store's life)
  IngestVerify verify = IngestVerify::kFull;  // full | snappy | header (see ingest_verify.h)
  uint64_t max_uncompressed_bytes = 64ull << 20;  // compression-bomb guard
  TagGuardOptions tags;
};

struct QueryConfig {
  int64_t max_range_ms = 31ll * 24 * 3600 * 1000;
  uint32_t max_limit = 10'000;
};

struct HttpConfig {
  std::string listen = "127.0.0.1:8080";  // host:port of metrics, health and the query API
  std::string auth_token;                 // when set, the API needs "Authorization: Bearer <token>"
  int64_t ready_max_lag = 10'000;         // /readyz: ready when every partition's lag is at most this
};

struct ServeConfig {
  std::map<std::string, std::string> kafka;  // passed to librdkafka as is (SASL, TLS, ...)
  ConsumerConfig consumer;
  StoreConfig store;
  IndexerConfig indexer;
  QueryConfig query;
  HttpConfig http;
  YAML::Node alerting;  // the alerting section, parsed by the alerting module
};

// Loads and validates a YAML file. The error lists every problem found.
Result<ServeConfig> LoadConfig(const std::string& path);
// Parses YAML text; `name` is used in messages.
Result<ServeConfig> ParseConfig(const std::string& yaml, const std::string& name);
// Applies LOGDEX_* overrides from `env` ("KEY=VALUE" strings, e.g. environ).
Status ApplyEnvOverrides(ServeConfig& config, char** env);

// Durations in the file use common/time_parse.h's ParseDuration ("500ms", "30s", "7d").
// Sizes: "512", "64KiB", "32MiB", "1GiB".
Result<uint64_t> ParseBytes(const std::string& text);

}  // namespace logdex
