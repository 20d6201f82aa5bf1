#include "server/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace logdex {
namespace {

TEST(Config, DefaultsNeedNoFile) {
  auto c = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->consumer.group_id, "logdex");
  EXPECT_EQ(c->consumer.topics, std::vector<std::string>{std::string(kDefaultTopic)});
  EXPECT_EQ(c->store.durability, Durability::kAsync);
  EXPECT_EQ(c->store.ttl_seconds, 7 * 24 * 3600);
  EXPECT_EQ(c->indexer.tags.max_values_per_hour, 10'000u);
  EXPECT_TRUE(c->compaction.enabled) << "on by default (issue 16)";
}

TEST(Config, TheDocumentedExampleIsValidAndMeansWhatItSays) {
  auto c = LoadConfig(LOGDEX_SOURCE_DIR "/deploy/logdex.example.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kafka.at("bootstrap.servers"), "localhost:9092");
  EXPECT_EQ(c->consumer.batch_max_bytes, 32ull << 20);
  EXPECT_EQ(c->consumer.batch_max_wait_ms, 50);
  EXPECT_EQ(c->consumer.shutdown_deadline_ms, 10'000);
  EXPECT_EQ(c->indexer.max_chunk_span_ms, 60'000);
  EXPECT_EQ(c->query.max_range_ms, 31ll * 86'400'000);
  EXPECT_TRUE(c->compaction.columns);
  EXPECT_TRUE(c->compaction.enabled) << "the example says what the default is";
  auto plain = ParseConfig("compaction: {columns: false}\n", "p.yaml");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_FALSE(plain->compaction.columns);
  auto bad = ParseConfig("compaction: {columns: maybe}\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("b.yaml:1: compaction.columns:"), std::string::npos) << bad.error().message;
  EXPECT_EQ(c->compaction.deep_interval_ms, 3'600'000);
  // Compaction is on by default: a config that lowered
  // indexer.max_uncompressed below target_bytes (4 MiB) before then still
  // starts, merged chunks capped at it; its settings are checked only where
  // it runs, so a config where it cannot (skip_wal) is not refused for them.
  const std::string small = "indexer: {max_uncompressed: 1MiB}\n";
  auto capped = ParseConfig(small, "c.yaml");
  ASSERT_TRUE(capped.ok()) << capped.error().message;
  EXPECT_EQ(MergedChunkBytes(*capped), 1u << 20);
  EXPECT_EQ(MergedChunkBytes(*c), 4u << 20);
  const std::string tiny = "indexer: {max_uncompressed: 32KiB}\ncompaction: {target_bytes: 32KiB}\n";
  auto compacting = ParseConfig(tiny, "c.yaml");
  ASSERT_FALSE(compacting.ok());
  EXPECT_NE(compacting.error().message.find("c.yaml:1: indexer.max_uncompressed: must be at least 64KiB while "
                                            "compaction runs"),
            std::string::npos)
      << compacting.error().message;
  EXPECT_NE(compacting.error().message.find("c.yaml:2: compaction.target_bytes: must be at least 64KiB"),
            std::string::npos)
      << compacting.error().message;
  auto skip_wal = ParseConfig(tiny + "store: {durability: skip_wal, flush_interval: 2s}\n", "s.yaml");
  EXPECT_TRUE(skip_wal.ok()) << skip_wal.error().message;
  auto often = ParseConfig("compaction:\n  enabled: true\n  interval: 1m\n  deep_interval: 30s\n", "d.yaml");
  ASSERT_FALSE(often.ok());
  EXPECT_NE(often.error().message.find("d.yaml:4: compaction.deep_interval: must be at least compaction.interval"),
            std::string::npos)
      << often.error().message;
}

TEST(Config, ErrorsNameTheLineAndTheKey) {
  const std::string yaml =
      "store:\n"
      "  dir: /tmp/x\n"
      "  durability: sometimes\n"
      "consumer:\n"
      "  batch_max_wait: soon\n"
      "  bacth_max_messages: 5\n"
      "http:\n"
      "  ready_max_lag: -3\n";
  auto c = ParseConfig(yaml, "bad.yaml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("bad.yaml:3: store.durability: must be skip_wal, async or sync"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:5: consumer.batch_max_wait:"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:6: consumer.bacth_max_messages: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("bad.yaml:8: http.ready_max_lag: must be between"), std::string::npos) << m;
}

TEST(Config, SkipWalIsForRocksDbWhereCommitsFollowFlushes) {
  auto c = ParseConfig("store:\n  durability: skip_wal\n  flush_interval: 2s\n  flush_bytes: 64MiB\n", "w.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->store.durability, Durability::kSkipWal);
  EXPECT_EQ(c->store.flush_interval_ms, 2000);
  EXPECT_EQ(c->store.flush_bytes, 64ull << 20);
  auto h = ParseConfig("store:\n  durability: skip_wal\n  backend: hbase\n  hbase: {host: hb}\n", "h.yaml");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("skip_wal is for the rocksdb backend only"), std::string::npos)
      << h.error().message;
}

TEST(Config, TheMemtableBudgetAndTheWalBoundParseAndRefuseTooSmall) {
  auto d = ParseConfig("", "d.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->store.memtable_budget_bytes, 256ull << 20);
  EXPECT_EQ(d->store.max_wal_bytes, 0u) << "0: the memtable budget";
  auto c = ParseConfig("store:\n  memtable_budget: 64MiB\n  max_wal: 32MiB\n", "w.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->store.memtable_budget_bytes, 64ull << 20);
  EXPECT_EQ(c->store.max_wal_bytes, 32ull << 20);
  auto small = ParseConfig("store:\n  memtable_budget: 4KiB\n", "s.yaml");
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message.find("store.memtable_budget: must be at least 1MiB"), std::string::npos)
      << small.error().message;
  auto wal = ParseConfig("store:\n  max_wal: 10\n", "s.yaml");
  ASSERT_FALSE(wal.ok());
  EXPECT_NE(wal.error().message.find("store.max_wal:"), std::string::npos) << wal.error().message;
  EXPECT_EQ(d->store.flush_after_ms, 600'000) << "a quiet store's WAL is flushed after 10 minutes";
  for (const char* zero : {"0", "0s", "00ms"}) {
    auto off = ParseConfig(std::string("store:\n  flush_after: ") + zero + "\n", "f.yaml");
    ASSERT_TRUE(off.ok()) << zero << ": " << off.error().message;
    EXPECT_EQ(off->store.flush_after_ms, 0) << zero;
  }
  auto half = ParseConfig("store:\n  flush_after: 30s\n", "f.yaml");
  ASSERT_TRUE(half.ok()) << half.error().message;
  EXPECT_EQ(half->store.flush_after_ms, 30'000);
  auto unit = ParseConfig("store:\n  flush_after: 0x\n", "f.yaml");
  ASSERT_FALSE(unit.ok());
  EXPECT_NE(unit.error().message.find("f.yaml:2: store.flush_after: '0x' is not a duration"), std::string::npos)
      << unit.error().message;
  auto often = ParseConfig("store:\n  memtable_budget: 64MiB\n  flush_after: 5s\n", "f.yaml");
  ASSERT_FALSE(often.ok());
  EXPECT_NE(often.error().message.find("f.yaml:3: store.flush_after: must be 0"), std::string::npos)
      << often.error().message;
  auto verify = ParseConfig("indexer:\n  verify: stream\n", "v.yaml");
  ASSERT_TRUE(verify.ok()) << verify.error().message;
  EXPECT_EQ(verify->indexer.verify, IngestVerify::kSnappy);
}

TEST(Config, ReportsYamlSyntaxErrorsWithTheirLine) {
  auto c = ParseConfig("store:\n  dir: [unclosed\n", "syntax.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("syntax.yaml:"), std::string::npos) << c.error().message;
}

TEST(Config, RejectsABadTopicFormat) {
  auto c = ParseConfig("consumer:\n  topic_formats:\n    syslog: xml\n", "f.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("f.yaml:3: consumer.topic_formats.syslog: format must be chunk, json or text"),
            std::string::npos)
      << c.error().message;
}

TEST(Config, TheHBaseBackendHasItsOwnSectionAndChecksItsValues) {
  auto c = ParseConfig("store:\n  backend: hbase\n  hbase:\n    host: gw\n    port: 9091\n    namespace: ops\n"
                       "    transport: buffered\n    protocol: compact\n    rpc_timeout: 2s\n",
                       "h.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->store.backend, StoreBackend::kHBase);
  EXPECT_EQ(c->store.hbase.host, "gw");
  EXPECT_EQ(c->store.hbase.port, 9091);
  EXPECT_EQ(c->store.hbase.ns, "ops");
  EXPECT_FALSE(c->store.hbase.framed);
  EXPECT_TRUE(c->store.hbase.compact);
  EXPECT_EQ(c->store.hbase.rpc_timeout_ms, 2000);
  EXPECT_TRUE(ParseConfig("", "d.yaml")->store.hbase.framed) << "framed by default, as deploy/hbase runs the gateway";
  EXPECT_FALSE(c->store.hbase.compression.has_value()) << "each table's own codec by default";
  auto none = ParseConfig("store:\n  backend: hbase\n  hbase:\n    compression: none\n", "n.yaml");
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->store.hbase.compression, Compression::kNone);
  auto codec = ParseConfig("store:\n  backend: hbase\n  hbase:\n    compression: gzip\n", "g.yaml");
  ASSERT_FALSE(codec.ok());
  EXPECT_NE(codec.error().message.find("g.yaml:4: store.hbase.compression: must be snappy, lz4, zstd or none"),
            std::string::npos)
      << codec.error().message;

  auto bad = ParseConfig("store:\n  backend: hbase\n  hbase:\n    transport: http\n    port: 70000\n", "h.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("h.yaml:4: store.hbase.transport: must be framed or buffered"), std::string::npos)
      << bad.error().message;
  EXPECT_NE(bad.error().message.find("h.yaml:5: store.hbase.port: must be between"), std::string::npos)
      << bad.error().message;
  auto other = ParseConfig("store:\n  backend: cassandra\n", "b.yaml");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.error().message.find("store.backend: must be rocksdb or hbase"), std::string::npos)
      << other.error().message;
}

TEST(Config, EnvironmentOverridesTheFile) {
  auto c = ParseConfig("store:\n  dir: /from/file\n", "e.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  std::string a = "LOGDEX_STORE_DIR=/from/env", b = "LOGDEX_KAFKA_SASL_USERNAME=alice", d = "PATH=/bin";
  char* env[] = {a.data(), b.data(), d.data(), nullptr};
  ASSERT_TRUE(ApplyEnvOverrides(*c, env).ok());
  EXPECT_EQ(c->store.dir, "/from/env");
  EXPECT_EQ(c->kafka.at("sasl.username"), "alice");
}

TEST(Config, ParsesDurationsAndSizes) {
  auto c = ParseConfig("consumer:\n  batch_max_wait: 1s500ms\n  shutdown_deadline: 7 days\n", "d.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("d.yaml:3: consumer.shutdown_deadline:"), std::string::npos) << c.error().message;
  EXPECT_EQ(ParseConfig("consumer:\n  batch_max_wait: 1s500ms\n", "d.yaml")->consumer.batch_max_wait_ms, 1500);
  EXPECT_EQ(*ParseBytes("64KiB"), 65536u);
  EXPECT_FALSE(ParseBytes("64KB").ok());
}

// Runs ApplyEnvOverrides on these "NAME=value" entries.
Status ApplyEnv(ServeConfig& c, std::vector<std::string> entries) {
  std::vector<char*> env;
  for (std::string& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  return ApplyEnvOverrides(c, env.data());
}

TEST(Config, TheBackendIsAChoiceInTheFileAndInTheEnvironment) {
  ServeConfig c;
  ASSERT_TRUE(ApplyEnv(c, {"LOGDEX_STORE_BACKEND=hbase"}).ok());
  EXPECT_EQ(c.store.backend, StoreBackend::kHBase);
  const Status bad = ApplyEnv(c, {"LOGDEX_STORE_BACKEND=HBase2"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("LOGDEX_STORE_BACKEND: must be rocksdb or hbase"), std::string::npos) << bad.ToString();
  EXPECT_EQ(c.store.backend, StoreBackend::kHBase) << "a refused value changes nothing";
}

// Before the fix an unknown LOGDEX_* variable was ignored: a typo in
// LOGDEX_HTTP_AUTH_TOKEN quietly served without auth.
TEST(Config, AnUnknownLogdexVariableIsAnErrorNamingItAndTheClosestName) {
  ServeConfig c;
  Status s = ApplyEnv(c, {"LOGDEX_HTTP_AUTH_TOKN=s3cret"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown variable LOGDEX_HTTP_AUTH_TOKN"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("did you mean LOGDEX_HTTP_AUTH_TOKEN?"), std::string::npos) << s.message();
  EXPECT_TRUE(c.http.auth_token.empty());
  s = ApplyEnv(c, {"LOGDEX_QUERY_MAX_WHATEVER=1"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LOGDEX_QUERY_MAX_WHATEVER"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("did you mean"), std::string::npos) << s.message();  // nothing close
}

TEST(Config, LogdexVariablesThatAreNotConfigurationAreAllowed) {
  ServeConfig c;
  // Script, test and `logdex query` variables.
  EXPECT_TRUE(ApplyEnv(c, {"LOGDEX_TOKEN=t", "LOGDEX_JOBS=2", "LOGDEX_SKIP_ASAN=1", "LOGDEX_FUZZ_SECONDS=0",
                           "LOGDEX_FUZZ_SEED_DIR=/tmp/x", "LOGDEX_HBASE_THRIFT=h:9090",
                           "LOGDEX_HBASE_TRANSPORT=framed", "LOGDEX_ENGINE_CACHE=/tmp/engines",
                           "LOGDEX_REQUIRE_ENGINES=1", "LOGDEX_HBASE_PROTOCOL=compact", "LOGDEX_HBASE_GATEWAY=auto",
                           "LOGDEX_MAVEN_ARGS=-o", "LOGDEX_HBASE_HEAP=1g", "LOGDEX_HBASE_START_TIMEOUT=60"})
                  .ok());
  // A name the alerting section reads a secret from.
  auto with_alerting = ParseConfig(
      "alerting:\n  sinks:\n    - name: hook\n      type: webhook\n      url: http://127.0.0.1:1/\n"
      "      secret_env: LOGDEX_WEBHOOK_SECRET\n",
      "a.yaml");
  ASSERT_TRUE(with_alerting.ok()) << with_alerting.error().message;
  EXPECT_TRUE(ApplyEnv(*with_alerting, {"LOGDEX_WEBHOOK_SECRET=x"}).ok());
  EXPECT_FALSE(ApplyEnv(c, {"LOGDEX_WEBHOOK_SECRET=x"}).ok());  // without that config it is unknown
  Status s = ApplyEnv(c, {"LOGDEX_HTTP_ALLOW_UNAUTHENTICATED=true"});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(c.http.allow_unauthenticated);
}

// Before the fix serve listened on 0.0.0.0 without a token and served every
// log to anyone who could connect.
TEST(Config, ANonLoopbackListenNeedsATokenOrAnExplicitOptIn) {
  HttpConfig h;
  for (const char* loopback : {"127.0.0.1:8080", "127.3.2.1:80", "localhost:8080", "LocalHost:1", "[::1]:8080",
                               "[::ffff:127.0.0.1]:8080"}) {
    h.listen = loopback;
    EXPECT_TRUE(CheckHttpExposure(h).ok()) << loopback;
  }
  for (const char* open : {"0.0.0.0:8080", "[::]:8080", "10.0.0.5:8080", "logdex-1:8080", "128.0.0.1:80"}) {
    h.listen = open;
    Status s = CheckHttpExposure(h);
    ASSERT_FALSE(s.ok()) << open;
    EXPECT_NE(s.message().find("http.listen"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("http.auth_token"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("http.allow_unauthenticated"), std::string::npos) << s.message();
  }
  h.listen = "0.0.0.0:8080";
  h.auth_token = "t";
  EXPECT_TRUE(CheckHttpExposure(h).ok());
  h.auth_token.clear();
  h.allow_unauthenticated = true;
  EXPECT_TRUE(CheckHttpExposure(h).ok());
  auto c = ParseConfig("http:\n  listen: 0.0.0.0:8080\n  allow_unauthenticated: true\n", "h.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(CheckHttpExposure(c->http).ok());
}

TEST(Config, HttpAndQueryLimitsHaveDefaultsAndParse) {
  auto d = ParseConfig("", "empty.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->http.max_body_bytes, 1u << 20);
  EXPECT_EQ(d->http.worker_threads, 32);
  EXPECT_EQ(d->http.max_concurrent_queries, 4);
  EXPECT_EQ(d->http.read_timeout_ms, 5'000);
  EXPECT_EQ(d->http.write_timeout_ms, 30'000);
  EXPECT_EQ(d->query.max_time_ms, 30'000);
  EXPECT_EQ(d->query.max_rows_scanned, 10'000'000u);
  EXPECT_EQ(d->query.max_bytes_decompressed, 4ull << 30);
  auto c = ParseConfig(
      "http:\n  max_body_bytes: 64KiB\n  worker_threads: 16\n  max_concurrent_queries: 2\n  read_timeout: 2s\n"
      "  write_timeout: 10s\nquery:\n  max_time: 1500ms\n  max_rows_scanned: 1000\n  max_bytes_decompressed: 1GiB\n",
      "l.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->http.max_body_bytes, 65536u);
  EXPECT_EQ(c->http.worker_threads, 16);
  EXPECT_EQ(c->http.max_concurrent_queries, 2);
  EXPECT_EQ(c->http.read_timeout_ms, 2'000);
  EXPECT_EQ(c->http.write_timeout_ms, 10'000);
  EXPECT_EQ(c->query.max_time_ms, 1'500);
  EXPECT_EQ(c->query.max_rows_scanned, 1000u);
  EXPECT_EQ(c->query.max_bytes_decompressed, 1ull << 30);
  auto bad = ParseConfig("http:\n  worker_threads: 4\n  max_concurrent_queries: 4\n", "b.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("http.max_concurrent_queries"), std::string::npos) << bad.error().message;
}

// One walker reads the whole file, the alerting section included: every
// problem of both is reported at once in one format, booleans are spelled
// alike in both, and checks across keys (and against the environment) still
// name the file and the line.
TEST(Config, ServeAndAlertingSectionsAreReadByOneWalkerThatKeepsLinesThroughCrossChecks) {
  const std::string yaml =
      "store:\n"                             // 1
      "  durability: skip_wal\n"             // 2
      "  backend: hbase\n"                   // 3
      "  hbase: {host: hb}\n"                // 4
      "compaction:\n"                        // 5
      "  enabled: no\n"                      // 6
      "alerting:\n"                          // 7
      "  default_rule: no\n"                 // 8
      "  limits:\n"                          // 9
      "    per_grop: 3\n"                    // 10
      "  sinks:\n"                           // 11
      "    - {name: a, type: slack, url: 'https://hooks', timeout: 5}\n";  // 12
  auto c = ParseConfig(yaml, "both.yaml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.error().message;
  EXPECT_NE(m.find("both.yaml:2: store.durability: skip_wal is for the rocksdb backend only"), std::string::npos) << m;
  EXPECT_NE(m.find("both.yaml:10: alerting.limits.per_grop: unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("both.yaml:12: alerting.sinks[0].timeout:"), std::string::npos) << m;

  auto ok = ParseConfig(
      "compaction: {enabled: yes}\n"
      "alerting:\n"
      "  enabled: yes\n"
      "  default_rule: off\n"
      "  sinks:\n"
      "    - name: hook\n"
      "      type: webhook\n"
      "      url: http://127.0.0.1:1/\n"
      "      secret_env: LOGDEX_TEST_UNSET_SECRET_FOR_CONFIG\n",
      "ok.yaml");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->compaction.enabled);
  EXPECT_TRUE(ok->compaction.columns) << "merged chunks by columns unless told";
  EXPECT_TRUE(ok->alerting.enabled);
  EXPECT_FALSE(ok->alerting.default_rule);
  ::unsetenv("LOGDEX_TEST_UNSET_SECRET_FOR_CONFIG");
  Status unset = ResolveAlertingSecrets(*ok);
  ASSERT_FALSE(unset.ok());
  EXPECT_NE(unset.message().find("ok.yaml:9: alerting.sinks[0].secret_env: environment variable "
                                 "LOGDEX_TEST_UNSET_SECRET_FOR_CONFIG is not set"),
            std::string::npos)
      << unset.message();
  ::setenv("LOGDEX_TEST_UNSET_SECRET_FOR_CONFIG", "s3cret", 1);
  ASSERT_TRUE(ResolveAlertingSecrets(*ok).ok());
  EXPECT_EQ(ok->alerting.sinks[0].secret, "s3cret");
  ::unsetenv("LOGDEX_TEST_UNSET_SECRET_FOR_CONFIG");
}

// Compacting a shared HBase store is opt-in (compaction.hbase), and its
// lease and removal delay must fit the client's timeout, the pass interval
// and the longest query.
TEST(Config, CompactionOnHBaseIsOptInWithALeaseAndARemovalDelayThatFitTheClientAndTheQueries) {
  auto defaults = ParseConfig("", "d.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_FALSE(defaults->compaction.hbase);
  EXPECT_EQ(defaults->compaction.lease_period_ms, 10 * 60'000);
  EXPECT_EQ(defaults->compaction.removal_delay_ms, 2 * 60'000);

  auto bad = ParseConfig(
      "store:\n"                                                  // 1
      "  backend: hbase\n"                                        // 2
      "  hbase: {host: hb, rpc_timeout: 60s}\n"                   // 3
      "query: {max_time: 30s}\n"                                  // 4
      "compaction:\n"                                             // 5
      "  enabled: yes\n"                                          // 6
      "  hbase: yes\n"                                            // 7
      "  lease_period: 3m\n"                                      // 8
      "  interval: 90s\n"                                         // 9
      "  removal_delay: 20s\n",                                   // 10
      "h.yaml");
  ASSERT_FALSE(bad.ok());
  const std::string& m = bad.error().message;
  EXPECT_NE(m.find("h.yaml:8: compaction.lease_period: must be at least 4 × store.hbase.rpc_timeout (240000 ms)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("h.yaml:9: compaction.interval: must be at most a third of compaction.lease_period"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("h.yaml:10: compaction.removal_delay: must be at least query.max_time (30000 ms) + 10s"),
            std::string::npos)
      << m;

  auto paced = ParseConfig(
      "store: {backend: hbase, hbase: {host: hb, rpc_timeout: 1s}}\n"
      "compaction: {enabled: yes, hbase: yes, lease_period: 10s, interval: 1s, target_bytes: 4MiB, max_rate: 1MiB}\n",
      "p.yaml");
  ASSERT_FALSE(paced.ok());
  EXPECT_NE(paced.error().message.find("p.yaml:2: compaction.lease_period: must be more than 3 × "
                                       "compaction.target_bytes / compaction.max_rate"),
            std::string::npos)
      << paced.error().message;
  // The pacing counts the target as capped at indexer.max_uncompressed.
  auto capped = ParseConfig(
      "store: {backend: hbase, hbase: {host: hb, rpc_timeout: 1s}}\n"
      "indexer: {max_uncompressed: 1MiB}\n"
      "compaction: {enabled: yes, hbase: yes, lease_period: 10s, interval: 1s, target_bytes: 4MiB, max_rate: 1MiB}\n",
      "q.yaml");
  EXPECT_TRUE(capped.ok()) << capped.error().message;
  auto long_ = ParseConfig(
      "store: {backend: hbase, hbase: {host: hb}}\n"
      "compaction: {enabled: yes, hbase: yes, lease_period: 8d, removal_delay: 8d}\n",
      "l.yaml");
  ASSERT_FALSE(long_.ok());
  EXPECT_NE(long_.error().message.find("compaction.lease_period: at most 7d"), std::string::npos)
      << long_.error().message;
  EXPECT_NE(long_.error().message.find("compaction.removal_delay: at most 7d"), std::string::npos)
      << long_.error().message;

  auto rocksdb = ParseConfig("compaction: {enabled: yes, hbase: yes}\n", "r.yaml");
  ASSERT_FALSE(rocksdb.ok());
  EXPECT_NE(rocksdb.error().message.find("r.yaml:1: compaction.hbase: is for store.backend: hbase only"),
            std::string::npos)
      << rocksdb.error().message;

  // Without the opt-in, an HBase config with compaction enabled is checked
  // as before (serve logs that it does not compact).
  auto without = ParseConfig(
      "store: {backend: hbase, hbase: {host: hb}}\n"
      "compaction: {enabled: yes, lease_period: 1s}\n",
      "w.yaml");
  EXPECT_TRUE(without.ok()) << without.error().message;

  // The process test's settings.
  auto ok = ParseConfig(
      "store: {backend: hbase, hbase: {host: hb, rpc_timeout: 500ms, retries: 0}}\n"
      "query: {max_time: 1s}\n"
      "compaction: {enabled: yes, hbase: yes, lease_period: 4s, removal_delay: 11s, interval: 200ms}\n",
      "ok.yaml");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->compaction.hbase);
  EXPECT_EQ(ok->compaction.lease_period_ms, 4'000);
  EXPECT_EQ(ok->compaction.removal_delay_ms, 11'000);
}

// store.hbase.lower_ttl: off by default (a table keeps a longer TTL), a
// boolean like the others.
TEST(Config, LoweringAnHBaseTablesTtlIsOptIn) {
  auto defaults = ParseConfig("store: {backend: hbase}\n", "d.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_FALSE(defaults->store.hbase.lower_ttl);
  auto on = ParseConfig("store: {backend: hbase, hbase: {lower_ttl: true}}\n", "on.yaml");
  ASSERT_TRUE(on.ok()) << on.error().message;
  EXPECT_TRUE(on->store.hbase.lower_ttl);
  auto bad = ParseConfig("store:\n  hbase:\n    lower_ttl: sometimes\n", "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("bad.yaml:3"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("store.hbase.lower_ttl"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace logdex
