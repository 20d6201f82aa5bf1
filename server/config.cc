#include "server/config.h"

#include "common/ascii.h"
#include "common/time_parse.h"
#include "common/yaml_walker.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

namespace logdex {
namespace {

std::string CheckFormat(const std::string& f) {
  return f == "chunk" || f == "json" || f == "text" ? "" : "format must be chunk, json or text";
}

// Checks across keys. Each problem goes to `problem` with the key whose line
// the message is shown on.
using Problem = std::function<void(const std::string& key, const std::string& message)>;

void Validate(const ServeConfig& c, const Problem& problem) {
  if (c.consumer.topics.empty() && c.consumer.topic_regex.empty()) problem("consumer", "give topics or topic_regex");
  if (c.store.durability == Durability::kSkipWal && c.store.backend == StoreBackend::kHBase) {
    // HBase's SKIP_WAL gives no flush signal through Thrift: offsets would be
    // committed for writes a region server crash can still lose.
    problem("store.durability",
            "skip_wal is for the rocksdb backend only (with hbase it would be at-most-once; use async or sync)");
  }
  if (c.store.backend == StoreBackend::kHBase && c.store.hbase.host.empty()) {
    problem("store.hbase.host", "must not be empty with store.backend: hbase");
  }
  if (c.store.memtable_budget_bytes < (1ull << 20)) problem("store.memtable_budget", "must be at least 1MiB");
  if (c.store.max_wal_bytes != 0 && c.store.max_wal_bytes < (1ull << 20)) {
    problem("store.max_wal", "must be 0 (the memtable budget) or at least 1MiB");
  }
  const bool hbase = c.store.backend == StoreBackend::kHBase;
  if (c.compaction.hbase && !hbase) problem("compaction.hbase", "is for store.backend: hbase only");
  if (c.compaction.enabled && hbase && c.compaction.hbase) {
    const CompactionConfig& x = c.compaction;
    if (x.lease_period_ms < 4 * c.store.hbase.rpc_timeout_ms) {
      problem("compaction.lease_period",
              "must be at least 4 × store.hbase.rpc_timeout (" + std::to_string(4 * c.store.hbase.rpc_timeout_ms) +
                  " ms): half the period must cover one write attempt's send and receive");
    }
    if (x.interval_ms * 3 > x.lease_period_ms) {
      problem("compaction.interval", "must be at most a third of compaction.lease_period (passes renew the lease)");
    }
    // The pacing wait after a merge (target_bytes at max_rate) renews nothing.
    if (x.max_rate_bytes > 0 &&
        static_cast<double>(MergedChunkBytes(c)) / x.max_rate_bytes * 1000 * 3 > x.lease_period_ms) {
      problem("compaction.lease_period", "must be more than 3 × compaction.target_bytes / compaction.max_rate (the "
                                         "target capped at indexer.max_uncompressed: a merge's pacing wait must "
                                         "leave the lease renewed in time)");
    }
    constexpr int64_t kWeek = 7ll * 24 * 3600 * 1000;
    if (x.lease_period_ms > kWeek) problem("compaction.lease_period", "at most 7d");
    if (x.removal_delay_ms > kWeek) problem("compaction.removal_delay", "at most 7d");
    if (c.query.max_time_ms <= 0 || x.removal_delay_ms < c.query.max_time_ms + 10'000) {
      problem("compaction.removal_delay", "must be at least query.max_time (" + std::to_string(c.query.max_time_ms) +
                                              " ms) + 10s: a merge's parts stay for the queries begun before it");
    }
  }
  // Checked where compaction runs (serve_command.cc): on by default, its
  // settings must not fail a config where it cannot run (skip_wal; HBase
  // without compaction.hbase).
  const bool compacts =
      c.compaction.enabled && (hbase ? c.compaction.hbase : c.store.durability != Durability::kSkipWal);
  if (compacts) {
    constexpr int64_t kWeek = 7ll * 24 * 3600 * 1000;
    for (const auto& [key, ms] : {std::pair{"compaction.settle", c.compaction.settle_ms},
                                  std::pair{"compaction.max_span", c.compaction.max_span_ms},
                                  std::pair{"compaction.interval", c.compaction.interval_ms},
                                  std::pair{"compaction.deep_interval", c.compaction.deep_interval_ms}}) {
      if (ms > kWeek) problem(key, "at most 7d");
    }
    if (c.compaction.deep_interval_ms < c.compaction.interval_ms) {
      problem("compaction.deep_interval", "must be at least compaction.interval (a deep pass reads every index row)");
    }
    // Above indexer.max_uncompressed it is capped there (MergedChunkBytes).
    if (c.compaction.target_bytes < (64u << 10)) problem("compaction.target_bytes", "must be at least 64KiB");
    if (c.indexer.max_uncompressed_bytes < (64u << 10)) {
      problem("indexer.max_uncompressed", "must be at least 64KiB while compaction runs (merged chunks are up to "
                                          "compaction.target_bytes; or set compaction.enabled: false)");
    }
    if (c.compaction.max_rate_bytes < (1u << 20)) problem("compaction.max_rate", "must be at least 1MiB");
    if (c.compaction.max_pass_bytes < (1u << 20)) problem("compaction.max_pass_bytes", "must be at least 1MiB");
    if (c.compaction.lookback_ms <= c.compaction.settle_ms + c.compaction.max_span_ms) {
      problem("compaction.lookback",
              "must be longer than compaction.settle + compaction.max_span, or closed runs fall out of its window "
              "before they can be merged");
    }
  }
  if (c.http.listen.find(':') == std::string::npos) problem("http.listen", "must be host:port");
  if (c.http.max_concurrent_queries >= c.http.worker_threads) {
    problem("http.max_concurrent_queries", "must be below http.worker_threads (" +
                                               std::to_string(c.http.worker_threads) +
                                               "), or queries can take every thread from /healthz");
  }
}

// Validate(), each problem with its line in `c.source` ("line 3: key: ..."),
// all in one status. The callers name the file.
Status ValidateWithLines(const ServeConfig& c) {
  ConfigSource lines_only = c.source;
  lines_only.name.clear();
  std::vector<std::string> problems;
  Validate(c, [&](const std::string& key, const std::string& message) {
    problems.push_back(lines_only.Problem(key, message));
  });
  return ProblemsStatus(problems);
}

// LOGDEX_* variables that are not serve configuration: other commands'
// (LOGDEX_TOKEN: `logdex query --token`), scripts' (scripts/build.sh,
// test.sh, fuzz.sh, engines/*.sh) and tests'. ApplyEnvOverrides ignores them.
constexpr std::string_view kNonConfigEnvVars[] = {
    "LOGDEX_TOKEN",         "LOGDEX_JOBS",         "LOGDEX_SKIP_ASAN",       "LOGDEX_FUZZ_SECONDS",
    "LOGDEX_FUZZ_SEED_DIR", "LOGDEX_HBASE_THRIFT", "LOGDEX_HBASE_TRANSPORT", "LOGDEX_ENGINE_CACHE",
    "LOGDEX_REQUIRE_ENGINES", "LOGDEX_HBASE_PROTOCOL", "LOGDEX_HBASE_GATEWAY", "LOGDEX_MAVEN_ARGS",
    "LOGDEX_HBASE_HEAP",     "LOGDEX_HBASE_START_TIMEOUT",
};

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

Result<ServeConfig> ParseConfig(const std::string& yaml, const std::string& name) {
  ServeConfig c;
  YamlWalker w(name);
  using F = YamlWalker::Field;
  Status walked = WalkYaml(yaml, w, [&](const YAML::Node& root) {
    w.Map(root, "",
          {
              {"kafka", w.StringMap(c.kafka)},
              {"consumer", F([&](const YAML::Node& n, const std::string& p) {
                 auto& k = c.consumer;
                 w.Map(n, p,
                       {{"group_id", w.String(k.group_id)},
                        {"topics", w.StringList(k.topics)},
                        {"topic_regex", w.String(k.topic_regex)},
                        {"dlq_suffix", w.String(k.dlq_suffix)},
                        {"topic_formats", w.StringMap(k.topic_formats, CheckFormat)},
                        {"default_app", w.String(k.default_app)},
                        {"default_host", w.String(k.default_host)},
                        {"batch_max_messages", w.Number<uint32_t>(k.batch_max_messages, 1, 1'000'000)},
                        {"batch_max_bytes", w.Bytes(k.batch_max_bytes)},
                        {"batch_max_wait", w.Duration(k.batch_max_wait_ms, 1)},
                        {"shutdown_deadline", w.Duration(k.shutdown_deadline_ms, 100)},
                        {"session_timeout", w.Duration(k.session_timeout_ms, 1000)},
                        {"retry_backoff_max", w.Duration(k.retry_backoff_max_ms, 10)}});
               })},
              {"store", F([&](const YAML::Node& n, const std::string& p) {
                 auto& s = c.store;
                 w.Map(n, p,
                       {{"backend", w.Choice(s.backend, {{"rocksdb", StoreBackend::kRocksDb}, {"hbase", StoreBackend::kHBase}})},
                        {"dir", w.String(s.dir)},
                        {"durability", w.Choice(s.durability, {{"skip_wal", Durability::kSkipWal},
                                                                 {"async", Durability::kAsync},
                                                                 {"sync", Durability::kSync}})},
                        {"flush_interval", w.Duration(s.flush_interval_ms, 10)},
                        {"flush_bytes", w.Bytes(s.flush_bytes)},
                        {"ttl", F([&](const YAML::Node& v, const std::string& key) {
                           int64_t ms = 0;
                           w.Duration(ms, 1000)(v, key);
                           s.ttl_seconds = ms / 1000;
                         })},
                        {"salt_buckets", w.Number<uint32_t>(s.salt_buckets, 1, 256)},
                        {"block_cache", w.Bytes(s.block_cache_bytes)},
                        {"memtable_budget", w.Bytes(s.memtable_budget_bytes)},
                        {"max_wal", w.Bytes(s.max_wal_bytes)},
                        {"flush_after", F([&](const YAML::Node& v, const std::string& key) {
                           // 0 (or 0 with a unit): off; durations are otherwise more than zero.
                           auto zero = [](const std::string& t) {
                             const size_t digits = t.find_first_not_of('0');
                             if (digits == 0) return false;
                             const std::string unit = digits == std::string::npos ? "" : t.substr(digits);
                             return unit.empty() || unit == "ms" || unit == "s" || unit == "m" || unit == "h" ||
                                    unit == "d";
                           };
                           if (v.IsScalar() && zero(v.as<std::string>())) {
                             s.flush_after_ms = 0;
                             return;
                           }
                           int64_t ms = s.flush_after_ms;
                           w.Duration(ms, 1)(v, key);
                           if (ms < 10'000) {
                             return w.Fail(v, key, "must be 0 (flush only when the memtables fill) or at least 10s "
                                                   "(the WAL is sampled every 10 s)");
                           }
                           s.flush_after_ms = ms;
                         })},
                        {"hbase", F([&](const YAML::Node& h, const std::string& hp) {
                           auto& b = s.hbase;
                           w.Map(h, hp,
                                 {{"host", w.String(b.host)},
                                  {"port", w.Number<int>(b.port, 1, 65535)},
                                  {"namespace", w.String(b.ns)},
                                  {"transport", w.Choice(b.framed, {{"framed", true}, {"buffered", false}})},
                                  {"protocol", w.Choice(b.compact, {{"compact", true}, {"binary", false}})},
                                  {"pool_size", w.Number<int>(b.pool_size, 1, 256)},
                                  {"rpc_timeout", w.Duration(b.rpc_timeout_ms, 100)},
                                  {"retries", w.Number<int>(b.retries, 0, 100)},
                                  {"lower_ttl", w.Bool(b.lower_ttl)},
                                  {"compression",
                                   w.Choice(b.compression, {{"snappy", std::optional(Compression::kSnappy)},
                                                            {"lz4", std::optional(Compression::kLz4)},
                                                            {"zstd", std::optional(Compression::kZstd)},
                                                            {"none", std::optional(Compression::kNone)}})}});
                         })}});
               })},
              {"indexer", F([&](const YAML::Node& n, const std::string& p) {
                 auto& x = c.indexer;
                 w.Map(n, p,
                       {{"max_chunk_span", w.Duration(x.max_chunk_span_ms, 1000)},
                        {"verify", w.Choice(x.verify, {{"header", IngestVerify::kHeader},
                                                         {"stream", IngestVerify::kSnappy},
                                                         {"snappy", IngestVerify::kSnappy},
                                                         {"full", IngestVerify::kFull}})},
                        {"max_uncompressed", w.Bytes(x.max_uncompressed_bytes)},
                        {"tags", F([&](const YAML::Node& t, const std::string& tp) {
                           w.Map(t, tp,
                                 {{"allow", w.StringList(x.tags.allow)},
                                  {"deny", w.StringList(x.tags.deny)},
                                  {"max_values_per_hour", w.Number<uint32_t>(x.tags.max_values_per_hour, 1, 10'000'000)},
                                  {"max_keys_per_hour", w.Number<uint32_t>(x.tags.max_keys_per_hour, 1, 1'000'000)}});
                         })}});
               })},
              {"compaction", F([&](const YAML::Node& n, const std::string& p) {
                 auto& x = c.compaction;
                 w.Map(n, p,
                       {{"enabled", w.Bool(x.enabled)},
                        {"settle", w.Duration(x.settle_ms, 0)},
                        {"max_span", w.Duration(x.max_span_ms, 1000)},
                        {"target_records", w.Number<uint32_t>(x.target_records, 2, 10'000'000)},
                        {"target_bytes", w.Bytes(x.target_bytes)},
                        {"lookback", w.Duration(x.lookback_ms, 60'000)},
                        {"deep_interval", w.Duration(x.deep_interval_ms, 0)},
                        {"interval", w.Duration(x.interval_ms, 100)},
                        {"max_rate", w.Bytes(x.max_rate_bytes)},
                        {"max_pass_bytes", w.Bytes(x.max_pass_bytes)},
                        {"zstd_level", w.Number<int>(x.zstd_level, 1, 19)},
                        {"columns", w.Bool(x.columns)},
                        {"token_filter_percent", w.Number<uint32_t>(x.token_filter_percent, 0, 50)},
                        {"hbase", w.Bool(x.hbase)},
                        {"lease_period", w.Duration(x.lease_period_ms, 1000)},
                        {"removal_delay", w.Duration(x.removal_delay_ms, 1000)}});
               })},
              {"query", F([&](const YAML::Node& n, const std::string& p) {
                 w.Map(n, p,
                       {{"max_range", w.Duration(c.query.max_range_ms, 1000)},
                        {"max_limit", w.Number<uint32_t>(c.query.max_limit, 1, 1'000'000)},
                        {"max_time", w.Duration(c.query.max_time_ms, 10)},
                        {"max_rows_scanned", w.Number<uint64_t>(c.query.max_rows_scanned, 1, INT64_MAX)},
                        {"max_bytes_decompressed", w.Bytes(c.query.max_bytes_decompressed)}});
               })},
              {"http", F([&](const YAML::Node& n, const std::string& p) {
                 w.Map(n, p,
                       {{"listen", w.String(c.http.listen)},
                        {"auth_token", w.String(c.http.auth_token)},
                        {"ready_max_lag", w.Number<int64_t>(c.http.ready_max_lag, 0, INT64_MAX / 2)},
                        {"allow_unauthenticated", w.Bool(c.http.allow_unauthenticated)},
                        {"max_body_bytes", w.Bytes(c.http.max_body_bytes)},
                        {"worker_threads", w.Number<int>(c.http.worker_threads, 2, 1024)},
                        {"max_concurrent_queries", w.Number<int>(c.http.max_concurrent_queries, 1, 1024)},
                        {"read_timeout", w.Duration(c.http.read_timeout_ms, 1000)},
                        {"write_timeout", w.Duration(c.http.write_timeout_ms, 1000)}});
               })},
              {"alerting", F([&](const YAML::Node& n, const std::string&) { alerting::WalkAlertingConfig(w, n, c.alerting); })},
          });
    Validate(c, [&](const std::string& key, const std::string& message) { w.Fail(key, message); });
  });
  c.source = w.source();
  if (!walked.ok()) return walked.error();
  return c;
}

Result<ServeConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{Errc::kNotFound, "cannot read config file " + path};
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path);
}

bool IsLoopbackHost(std::string_view host) {
  const std::string h = AsciiLower(host);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Status CheckHttpExposure(const HttpConfig& http) {
  if (!http.auth_token.empty() || http.allow_unauthenticated) return Status::Ok();
  std::string_view listen = http.listen;
  std::string_view host;
  if (listen.starts_with("[")) {
    host = listen.substr(1, listen.find(']') == std::string_view::npos ? 0 : listen.find(']') - 1);
  } else {
    host = listen.substr(0, listen.rfind(':'));
  }
  if (IsLoopbackHost(host)) return Status::Ok();
  return Status(Errc::kInvalidArgument,
                "http.listen: " + http.listen +
                    " is reachable from other machines and http.auth_token is empty, so anyone who can connect "
                    "could read every log: set http.auth_token (or LOGDEX_HTTP_AUTH_TOKEN), listen on 127.0.0.1, "
                    "or set http.allow_unauthenticated: true (serve --allow-unauthenticated) to serve without auth "
                    "on purpose");
}

Status ApplyEnvOverrides(ServeConfig& c, char** env) {
  const std::string prefix = "LOGDEX_";
  std::map<std::string, std::function<Status(const std::string&)>> setters = {
      {"STORE_DIR", [&](const std::string& v) { c.store.dir = v; return Status::Ok(); }},
      {"STORE_BACKEND", [&](const std::string& v) {
         if (v != "rocksdb" && v != "hbase") return Status(Errc::kInvalidArgument, "LOGDEX_STORE_BACKEND: must be rocksdb or hbase");
         c.store.backend = v == "hbase" ? StoreBackend::kHBase : StoreBackend::kRocksDb;
         return Status::Ok();
       }},
      {"STORE_HBASE_HOST", [&](const std::string& v) { c.store.hbase.host = v; return Status::Ok(); }},
      {"COMPACTION_ENABLED", [&](const std::string& v) {
         if (v != "true" && v != "1" && v != "false" && v != "0") {
           return Status(Errc::kInvalidArgument, "LOGDEX_COMPACTION_ENABLED: must be true or false");
         }
         c.compaction.enabled = v == "true" || v == "1";
         return Status::Ok();
       }},
      {"CONSUMER_GROUP_ID", [&](const std::string& v) { c.consumer.group_id = v; return Status::Ok(); }},
      {"HTTP_LISTEN", [&](const std::string& v) { c.http.listen = v; return Status::Ok(); }},
      {"HTTP_AUTH_TOKEN", [&](const std::string& v) { c.http.auth_token = v; return Status::Ok(); }},
      {"HTTP_ALLOW_UNAUTHENTICATED", [&](const std::string& v) {
         if (v == "true" || v == "1") {
           c.http.allow_unauthenticated = true;
         } else if (v == "false" || v == "0") {
           c.http.allow_unauthenticated = false;
         } else {
           return Status(Errc::kInvalidArgument, "LOGDEX_HTTP_ALLOW_UNAUTHENTICATED: must be true or false");
         }
         return Status::Ok();
       }},
  };
  const std::vector<std::string> secret_envs = alerting::SecretEnvNames(c.alerting);
  for (char** e = env; e && *e; ++e) {
    std::string entry(*e);
    if (entry.rfind(prefix, 0) != 0) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(prefix.size(), eq - prefix.size());
    const std::string value = entry.substr(eq + 1);
    if (name.rfind("KAFKA_", 0) == 0) {
      std::string prop = name.substr(6);
      for (char& ch : prop) ch = ch == '_' ? '.' : AsciiLower(ch);
      c.kafka[prop] = value;
      continue;
    }
    auto it = setters.find(name);
    if (it == setters.end()) {
      const std::string full = entry.substr(0, eq);
      if (std::find(std::begin(kNonConfigEnvVars), std::end(kNonConfigEnvVars), full) != std::end(kNonConfigEnvVars) ||
          std::find(secret_envs.begin(), secret_envs.end(), full) != secret_envs.end()) {
        continue;
      }
      std::string closest;
      size_t best = SIZE_MAX;
      for (const auto& [known, setter] : setters) {
        if (size_t d = EditDistance(name, known); d < best) {
          best = d;
          closest = prefix + known;
        }
      }
      std::string message = "unknown variable " + full + " (it sets no configuration key";
      if (best <= 3) message += "; did you mean " + closest + "?";
      message += " Known: LOGDEX_<SECTION>_<KEY> for ";
      bool first = true;
      for (const auto& [known, setter] : setters) {
        message += (first ? "" : ", ") + prefix + known;
        first = false;
      }
      return Status(Errc::kInvalidArgument, message + ", and LOGDEX_KAFKA_<PROPERTY>)");
    }
    if (Status s = it->second(value); !s.ok()) return s;
  }
  return ValidateWithLines(c);
}

Status ResolveAlertingSecrets(ServeConfig& c) {
  std::vector<std::string> problems;
  alerting::ResolveAlertingSecrets(c.alerting, c.source, &problems);
  if (problems.empty()) {
    if (Status s = alerting::ValidateAlertingConfig(c.alerting); !s.ok()) {
      problems.push_back(c.source.name.empty() ? s.message() : c.source.name + ": " + s.message());
    }
  }
  return ProblemsStatus(problems);
}

}  // namespace logdex
