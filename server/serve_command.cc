// `logdex serve` and `logdex check-config`: the wiring of the main process.
// This is the one place that builds the components and connects them
// (config -> store -> indexer -> consumer, query engine -> HTTP).
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <set>
#include <thread>

#include "alerting/dispatcher.h"
#include "alerting/sinks.h"
#include "alerting/stager.h"
#include "common/clock.h"
#include "common/files.h"
#include "consumer/batch_processor.h"
#include "consumer/embedded_kafka.h"
#include "consumer/kafka_properties.h"
#include "consumer/group_consumer.h"
#include "indexer/compaction_lease.h"
#include "indexer/compactor.h"
#include "indexer/store_epoch.h"
#include "indexer/indexer.h"
#include "indexer/query.h"
#include "indexer/tables.h"
#include "server/commands.h"
#include "server/compaction_runner.h"
#include "server/config.h"
#include "http/http_server.h"
#include "http/tail.h"
#include "server/ingest_adapters.h"
#include "server/ingest_metrics.h"
#include "server/store_metrics.h"
#include "store/hbase/hbase_store.h"
#include "store/rocksdb_store.h"

extern char** environ;

namespace logdex {
namespace {

// How often queries read the store's longest chunk span again (LongestSpanWatch).
constexpr int64_t kLongestSpanRereadMs = 60'000;

struct ServeFlags {
  std::string config;
  bool embedded_kafka = false;
  int embedded_partitions = 8;
  std::string bootstrap_file;
  std::string store_dir;
  std::string http;
  std::string brokers;
  std::string group;
  std::vector<std::string> topics;
  std::string log_level = "info";
  bool allow_unauthenticated = false;
};

// Which members deliver alerts from the outbox: "" = every member (each has
// its own store), else the topic whose partition 0's owner is the one member
// that delivers (members share one outbox in HBase). An error names the key
// and its line.
Result<std::string> DispatchTopic(const ServeConfig& serve, const alerting::AlertingConfig& alerting) {
  using D = alerting::DeliveryConfig::Dispatch;
  D mode = alerting.delivery.dispatch;
  const bool shared = serve.store.backend == StoreBackend::kHBase;
  if (mode == D::kPartitionZeroOwner && !shared) {
    return Error{Errc::kInvalidArgument,
                 serve.source.Problem("alerting.delivery.dispatch",
                                      "partition_0_owner needs an outbox the members share (store.backend: hbase); "
                                      "with rocksdb each member must deliver its own")};
  }
  if (mode == D::kAuto) mode = shared ? D::kPartitionZeroOwner : D::kEveryMember;
  if (mode == D::kEveryMember || !alerting.enabled || alerting.sinks.empty()) return std::string();
  if (!alerting.delivery.dispatch_topic.empty()) return alerting.delivery.dispatch_topic;
  // A regex replaces the topic list (GroupConsumer subscribes to one or the other).
  if (serve.consumer.topic_regex.empty() && !serve.consumer.topics.empty()) return serve.consumer.topics.front();
  return Error{Errc::kInvalidArgument,
               serve.source.Problem("alerting.delivery.dispatch_topic",
                                    "needed with consumer.topic_regex when the outbox is shared (store.backend: "
                                    "hbase, or dispatch: partition_0_owner): name a topic the regex matches")};
}

// The configured store: embedded RocksDB, or HBase through its Thrift2 gateway
// (connected now, so a wrong address fails at start, not at the first batch).
// `kept_ttls` counts the HBase tables that keep a longer TTL than asked
// (store.hbase.lower_ttl off).
Result<std::unique_ptr<TableStore>> OpenStore(const StoreConfig& c, const std::shared_ptr<std::atomic<int>>& kept_ttls) {
  if (c.backend == StoreBackend::kHBase) {
    HBaseOptions o;
    o.host = c.hbase.host;
    o.port = c.hbase.port;
    o.ns = c.hbase.ns;
    o.transport = c.hbase.framed ? HBaseOptions::Transport::kFramed : HBaseOptions::Transport::kBuffered;
    o.protocol = c.hbase.compact ? HBaseOptions::Protocol::kCompact : HBaseOptions::Protocol::kBinary;
    o.pool_size = c.hbase.pool_size;
    o.rpc_timeout_ms = static_cast<int>(c.hbase.rpc_timeout_ms);
    o.retries = c.hbase.retries;
    o.compression = c.hbase.compression;
    o.durability = c.durability;
    o.lower_ttl = c.hbase.lower_ttl;
    o.on_longer_ttl = [kept_ttls](std::string_view table, int64_t longer_s, int64_t asked_s, bool lowered) {
      auto days = [](int64_t s) { return s == 0 ? std::string("forever") : fmt::format("{:.2f} d", s / 86'400.0); };
      if (lowered) {
        spdlog::warn("store: lowered the TTL of HBase table {} from {} to {} (store.hbase.lower_ttl): HBase "
                     "deletes what is older at its next major compaction; turn the option off again",
                     table, days(longer_s), days(asked_s));
        return;
      }
      ++*kept_ttls;
      spdlog::warn("store: HBase table {} keeps its TTL of {} (set by another member or an earlier configuration, or, "
                   "for a table this start created, the TTL the tables beside it kept); "
                   "this member asks {}, and its queries and alerting see what the table keeps. To lower the "
                   "table's TTL, which deletes data, start one member with store.hbase.lower_ttl: true",
                   table, days(longer_s), days(asked_s));
    };
    auto s = HBaseTableStore::Open(o);
    if (!s.ok()) return s.error();
    spdlog::info("store: hbase through the thrift2 gateway {}:{}, namespace {}", o.host, o.port, o.ns);
    return std::unique_ptr<TableStore>(std::move(*s));
  }
  RocksDbOptions o;
  o.path = c.dir;
  o.durability = c.durability;
  o.block_cache_bytes = c.block_cache_bytes;
  o.memtable_budget_bytes = c.memtable_budget_bytes;
  o.max_wal_bytes = c.max_wal_bytes;
  auto s = RocksDbStore::Open(o);
  if (!s.ok()) return s.error();
  spdlog::info("store: rocksdb in {}", o.path);
  return std::unique_ptr<TableStore>(std::move(*s));
}

// Blocks SIGINT and SIGTERM in every thread; one thread waits for them.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }

  // Sets `stop` on the first signal; if the process is still running
  // `deadline_ms` later, it exits without waiting further.
  void Watch(std::atomic<bool>& stop, int64_t deadline_ms) {
    thread_ = std::thread([this, &stop, deadline_ms] {
      int sig = 0;
      sigwait(&set_, &sig);
      if (finished_) return;
      spdlog::info("serve: {} received: finishing the batch, committing, leaving the group (deadline {} ms)",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", deadline_ms);
      stop = true;
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::milliseconds(deadline_ms), [this] { return finished_.load(); })) {
        spdlog::error("serve: shutdown took longer than {} ms; exiting now (uncommitted work is replayed)",
                      deadline_ms);
        std::_Exit(3);
      }
    });
  }

  void Finish() {
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait if no signal came
      thread_.join();
    }
  }

 private:
  sigset_t set_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> finished_{false};
};

// The configuration serve runs with: the file (if any), then the LOGDEX_*
// environment, then the flags; checked for exposure, with the alerting
// secrets read. An error is the whole message to print.
Result<ServeConfig> MergedConfig(const ServeFlags& flags) {
  ServeConfig config;
  if (!flags.config.empty()) {
    auto loaded = LoadConfig(flags.config);
    if (!loaded.ok()) return loaded.error();
    config = std::move(*loaded);
  }
  if (Status s = ApplyEnvOverrides(config, environ); !s.ok()) {
    return Error{s.code(), "environment: " + s.message()};
  }
  if (!flags.store_dir.empty()) config.store.dir = flags.store_dir;
  if (!flags.http.empty()) config.http.listen = flags.http;
  if (!flags.brokers.empty()) config.kafka["bootstrap.servers"] = flags.brokers;
  if (!flags.group.empty()) config.consumer.group_id = flags.group;
  if (!flags.topics.empty()) config.consumer.topics = flags.topics;
  if (flags.allow_unauthenticated) config.http.allow_unauthenticated = true;
  if (Status s = CheckHttpExposure(config.http); !s.ok()) return s.error();
  if (Status s = ResolveAlertingSecrets(config); !s.ok()) return s.error();
  return config;
}

// The indexer serve runs; `longest_span`: the longest chunk span the store
// may hold (RecordLongestSpan); `merged_check_ms`: MergedCheckMs.
IndexerOptions IndexerOptionsOf(const ServeConfig& config, int64_t merged_check_ms, int64_t longest_span) {
  IndexerOptions io;
  if (merged_check_ms > 0) {
    // A chunk old enough to have been merged (by this process's compactor or
    // an earlier one) is checked against the ledger: a re-send is not stored
    // beside the merged chunk. The window is the longest span a merge may
    // have had.
    io.merged_check_ms = merged_check_ms;
    io.merged_max_span_ms = longest_span;
  }
  io.salt_buckets = config.store.salt_buckets;
  io.max_chunk_span_ms = config.indexer.max_chunk_span_ms;
  io.verify = config.indexer.verify;
  io.retention_ms = config.store.ttl_seconds * 1000;
  io.tags = config.indexer.tags;
  io.decode.max_uncompressed_bytes = config.indexer.max_uncompressed_bytes;
  return io;
}

// The group member's settings from the file (serve adds its callbacks).
GroupConsumerOptions ConsumerOptionsOf(const ServeConfig& config) {
  GroupConsumerOptions go;
  go.kafka = config.kafka;
  go.group_id = config.consumer.group_id;
  go.topics = config.consumer.topics;
  go.topic_regex = config.consumer.topic_regex;
  go.dlq_suffix = config.consumer.dlq_suffix;
  go.batch_max_messages = config.consumer.batch_max_messages;
  go.batch_max_bytes = config.consumer.batch_max_bytes;
  go.batch_max_wait_ms = config.consumer.batch_max_wait_ms;
  go.session_timeout_ms = config.consumer.session_timeout_ms;
  go.retry_backoff_max_ms = config.consumer.retry_backoff_max_ms;
  return go;
}

// The query engine's limits (serve sets store_epoch).
QueryOptions QueryOptionsOf(const ServeConfig& config, int64_t longest_span, const DecodeOptions& decode,
                            const Clock& clock) {
  QueryOptions qo;
  qo.salt_buckets = config.store.salt_buckets;
  qo.max_chunk_span_ms = longest_span;
  qo.index_count_span_ms = config.indexer.max_chunk_span_ms;  // merged chunks are counted by reading them
  qo.max_range_ms = config.query.max_range_ms;
  qo.max_limit = config.query.max_limit;
  qo.max_time_ms = config.query.max_time_ms;
  qo.max_rows_scanned = config.query.max_rows_scanned;
  qo.max_bytes_decompressed = config.query.max_bytes_decompressed;
  qo.clock = &clock;
  qo.decode = decode;
  return qo;
}

// The HTTP server's socket and limits (serve adds the cursor key, tail and alerts).
Result<HttpServerOptions> HttpOptionsOf(const HttpConfig& http) {
  HttpServerOptions ho;
  if (Status s = ParseListenAddress(http.listen, ho); !s.ok()) return s.error();
  ho.bearer_token = http.auth_token;
  ho.worker_threads = http.worker_threads;
  ho.max_concurrent_queries = http.max_concurrent_queries;
  ho.max_body_bytes = http.max_body_bytes;
  ho.read_timeout_seconds = static_cast<int>(std::max<int64_t>(1, http.read_timeout_ms / 1000));
  ho.write_timeout_seconds = static_cast<int>(std::max<int64_t>(1, http.write_timeout_ms / 1000));
  return ho;
}

// Starts the in-process cluster with the configured topics (and their DLQ
// topics) and points the consumer at it.
Result<std::unique_ptr<EmbeddedKafka>> StartEmbeddedKafka(const ServeFlags& flags, ServeConfig& config) {
  auto k = EmbeddedKafka::Start(1);
  if (!k.ok()) return k.error();
  for (const std::string& t : config.consumer.topics) {
    Status a = (*k)->CreateTopic(t, flags.embedded_partitions);
    Status b = (*k)->CreateTopic(t + config.consumer.dlq_suffix, 1);
    if (!a.ok() || !b.ok()) return (a.ok() ? b : a).error();
  }
  config.kafka["bootstrap.servers"] = (*k)->bootstrap();
  // Announced (printed, and the bootstrap file written) only once the
  // consumer owns the partitions: AnnounceOnceAssigned.
  return std::move(*k);
}

// With --embedded-kafka: prints the cluster's address (and writes the
// bootstrap file) once the consumer owns its partitions, after any
// on_assignment `go` already has.
void AnnounceOnceAssigned(const EmbeddedKafka& embedded, const ServeFlags& flags, const ServeConfig& config,
                          GroupConsumerOptions& go) {
  // The in-process cluster keeps only ~5 MiB per partition: what a producer
  // sends before this member fetches is soon gone. So its address is
  // announced only once the consumer owns every partition of the topics
  // it created (with a topic regex: once it owns any), and the topics
  // count as empty at start, so anything deleted before the first fetch
  // is counted as lost.
  go.topics_start_empty = true;
  std::set<TopicPartition> wanted;
  for (const std::string& t : config.consumer.topics) {
    for (int32_t p = 0; p < flags.embedded_partitions; ++p) wanted.emplace(t, p);
  }
  auto announced = std::make_shared<bool>(false);
  const bool by_regex = !config.consumer.topic_regex.empty();
  const std::string bootstrap = embedded.bootstrap(), bootstrap_file = flags.bootstrap_file;
  const std::string first_topic = config.consumer.topics.empty() ? "" : config.consumer.topics.front();
  const int partitions = flags.embedded_partitions;
  go.on_assignment = [previous = go.on_assignment, wanted, announced, by_regex, bootstrap, bootstrap_file,
                      first_topic, partitions](const std::set<TopicPartition>& owned) {
    if (previous) previous(owned);
    if (*announced || owned.empty()) return;
    if (!by_regex && !std::includes(owned.begin(), owned.end(), wanted.begin(), wanted.end())) return;
    *announced = true;
    std::printf("embedded kafka: bootstrap %s, topic %s (%d partitions); it keeps only ~5 MiB or 100,000 batches "
                "per partition: a consumer lagging further loses messages (counted in "
                "logdex_consumer_lost_messages_total)\n",
                bootstrap.c_str(), first_topic.c_str(), partitions);
    std::fflush(stdout);
    if (!bootstrap_file.empty()) {
      if (Status s = WriteFileAtomically(bootstrap_file, bootstrap + "\n"); !s.ok()) {
        spdlog::error("serve: {}", s.message());
      }
    }
  };
}

// The compactor of serve's store: merges each stream's small settled
// chunks. A part is merged only once its offset is committed. On a shared
// store (HBase) it merges while it holds `lease`, in two writes (merged rows
// first), and removes the parts compaction.removal_delay later; the store's
// epoch is then the lease row's (indexer/store_epoch.h), not `local_epoch`.
Result<std::unique_ptr<Compactor>> MakeCompactor(const ServeConfig& config, TableStore& store,
                                                  const IndexerOptions& io, std::atomic<uint64_t>* local_epoch,
                                                  CompactionLease* lease, GroupConsumer& consumer) {
  // io.merge_gate: the consumer's indexer's, so that no merge lands between
  // a batch's ledger checks and its write.
  CompactorOptions co;
  co.settle_ms = config.compaction.settle_ms;
  co.max_span_ms = config.compaction.max_span_ms;
  co.target_records = config.compaction.target_records;
  co.target_bytes = MergedChunkBytes(config);
  co.lookback_ms = config.compaction.lookback_ms;
  co.deep_interval_ms = config.compaction.deep_interval_ms;
  co.max_pass_bytes = config.compaction.max_pass_bytes;
  co.zstd_level = config.compaction.zstd_level;
  co.codec = config.compaction.columns ? proto::CODEC_ZSTD_COLUMNS : proto::CODEC_ZSTD;
  const bool atomic = store.atomic_writes();
  co.store_epoch = atomic ? local_epoch : nullptr;
  co.allow_non_atomic = !atomic;
  co.removal_delay_ms = atomic ? 0 : config.compaction.removal_delay_ms;
  co.lease = lease;
  co.merge_gate = io.merge_gate;
  co.indexer = io;
  co.indexer.merged_check_ms = 0;  // the compactor's own indexer writes merged chunks only
  co.indexer.merge_gate = nullptr;
  co.indexer.token_filter_max_ratio = config.compaction.token_filter_percent / 100.0;
  // A replay can no longer write a committed part again beside the merged
  // chunk. The consumer knows its own partitions' commits; a partition it
  // does not own (any more) is read from the broker, at most every 30 s
  // each: its parts wait meanwhile.
  struct Refreshed {
    std::mutex mu;
    std::map<std::pair<std::string, int32_t>, std::chrono::steady_clock::time_point> at;
  };
  co.replay_safe = [&consumer, refreshed = std::make_shared<Refreshed>()](const proto::ChunkSource& src) {
    auto safe = [&] {
      std::optional<int64_t> next = consumer.CommittedOffset(src.topic(), src.partition());
      return next && src.offset() < *next;
    };
    if (safe()) return true;
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(refreshed->mu);
      auto [it, first] = refreshed->at.try_emplace({src.topic(), src.partition()}, now);
      if (!first && now - it->second < std::chrono::seconds(30)) return false;
      it->second = now;
    }
    if (Status s = consumer.RefreshCommitted({{src.topic(), src.partition()}}, 2'000); !s.ok()) {
      spdlog::warn("compaction: {} (partition {}[{}]); its parts wait", s.message(), src.topic(), src.partition());
      return false;
    }
    return safe();
  };
  return Compactor::Create(store, std::move(co));
}

int Serve(const ServeFlags& flags) {
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  SignalWatcher signals;  // before any thread starts

  auto merged = MergedConfig(flags);
  if (!merged.ok()) {
    std::fprintf(stderr, "logdex serve: %s\n", merged.error().message.c_str());
    return 2;
  }
  ServeConfig& config = *merged;

  const Clock& clock = SystemClock::Instance();

  // Kafka: a real cluster from config, or the embedded one.
  std::unique_ptr<EmbeddedKafka> embedded;
  if (flags.embedded_kafka) {
    auto k = StartEmbeddedKafka(flags, config);
    if (!k.ok()) {
      std::fprintf(stderr, "logdex serve: %s\n", k.error().message.c_str());
      return 1;
    }
    embedded = std::move(*k);
  } else if (!config.kafka.count("bootstrap.servers")) {
    std::fprintf(stderr, "logdex serve: no Kafka: give --brokers, kafka.bootstrap.servers in the config, "
                         "or --embedded-kafka\n");
    return 2;
  }

  // Store and tables.
  auto kept_ttls = std::make_shared<std::atomic<int>>(0);
  auto store = OpenStore(config.store, kept_ttls);
  if (!store.ok()) {
    std::fprintf(stderr, "logdex serve: store: %s\n", store.error().ToString().c_str());
    return 1;
  }
  TableLayout layout;
  layout.ttl_seconds = config.store.ttl_seconds;
  layout.salt_buckets = config.store.salt_buckets;
  if (Status s = CreateTables(**store, layout); !s.ok()) {
    std::fprintf(stderr, "logdex serve: store: %s\n", s.ToString().c_str());
    return 1;
  }

  prometheus::Registry registry;
  ConsumerMetrics metrics(registry);

  // Alerting: rules and sinks from the config's alerting section.
  const alerting::AlertingConfig* alerting_config = &config.alerting;
  if (Status s = alerting::CreateAlertingTables(**store, *alerting_config); !s.ok()) {
    std::fprintf(stderr, "logdex serve: store: %s\n", s.ToString().c_str());
    return 1;
  }
  prometheus::BuildGauge()
      .Name("logdex_store_ttl_kept_tables")
      .Help("HBase tables that kept a longer TTL than this member's configuration asks at its start "
            "(store.hbase.lower_ttl is off; the start's warn lines name them)")
      .Register(registry)
      .Add({})
      .Set(kept_ttls->load());
  alerting::AlertStager stager(*alerting_config, **store, clock, registry);
  alerting::SinkDispatcher dispatcher(*alerting_config, **store, alerting::MakeSinks(*alerting_config, clock), clock,
                                      registry);

  // skip_wal: RocksDB flushes each table's memtable on its own, so a crash
  // could keep a merge's deletes and lose its merged rows (no WAL to replay
  // them, and Kafka no longer has the parts' offsets to replay).
  // A shared store (HBase) is compacted only with compaction.hbase, set once
  // every member runs a version whose queries read the store's epoch.
  const bool shared_store = (*store)->shared();
  const bool compacting =
      config.compaction.enabled &&
      ((*store)->atomic_writes() ? config.store.durability != Durability::kSkipWal
                                 : config.compaction.hbase && shared_store && (*store)->conditional_writes());
  // Compaction is on by default; where it cannot run, the store keeps
  // every chunk as ingest wrote it (more bytes, no token filters): said at
  // start and by the gauge.
  if (config.compaction.enabled && !compacting) {
    if (!(*store)->atomic_writes()) {
      spdlog::warn("compaction: off: on HBase it needs compaction.hbase: true (set it once every member runs this "
                   "version); small chunks stay as ingest stored them");
    } else {
      spdlog::warn("compaction: off: durability skip_wal (compaction needs a store whose writes are logged: async "
                   "or sync); small chunks stay as ingest stored them");
    }
  } else if (!config.compaction.enabled) {
    spdlog::info("compaction: off (compaction.enabled: false)");
  }
  prometheus::BuildGauge()
      .Name("logdex_compaction_active")
      .Help("1 when this member's compactor runs; 0 when compaction is off (compaction.enabled: false) "
            "or cannot run (logdex_compaction_unavailable)")
      .Register(registry)
      .Add({})
      .Set(compacting ? 1 : 0);
  prometheus::BuildGauge()
      .Name("logdex_compaction_unavailable")
      .Help("1 when compaction.enabled is set but cannot run on this store (durability skip_wal; HBase without "
            "compaction.hbase): small chunks stay as ingest stored them; see serve's warn line at start")
      .Register(registry)
      .Add({})
      .Set(config.compaction.enabled && !compacting ? 1 : 0);
  // A member that raises the store's longest span (a longer
  // compaction.max_span) waits until the others pad their queries by it
  // (they read it again every kLongestSpanRereadMs) before it merges.
  int64_t first_pass_delay_ms = 0;
  if (compacting && shared_store) {
    auto stored = StoredLongestSpan(**store);
    if (!stored.ok()) {
      std::fprintf(stderr, "logdex serve: store: %s\n", stored.error().ToString().c_str());
      return 1;
    }
    const int64_t mine = std::max(config.indexer.max_chunk_span_ms, config.compaction.max_span_ms);
    if (*stored && **stored < mine) {
      first_pass_delay_ms = kLongestSpanRereadMs + 10'000;
      spdlog::info("compaction: this member raises the store's longest chunk span; its first pass waits {} s, until "
                   "every member pads its queries by it",
                   first_pass_delay_ms / 1000);
    }
  }

  // Queries pad their ranges by the longest chunk span the store may hold,
  // kept in its meta table across restarts and config changes.
  auto longest_span = RecordLongestSpan(
      **store, std::max(config.indexer.max_chunk_span_ms, compacting ? config.compaction.max_span_ms : int64_t{0}));
  if (!longest_span.ok()) {
    std::fprintf(stderr, "logdex serve: store: %s\n", longest_span.error().ToString().c_str());
    return 1;
  }

  auto merged_check_ms =
      MergedCheckMs(**store, compacting ? std::optional<int64_t>(config.compaction.settle_ms) : std::nullopt);
  if (!merged_check_ms.ok()) {
    std::fprintf(stderr, "logdex serve: store: %s\n", merged_check_ms.error().ToString().c_str());
    return 1;
  }
  MergeGate merge_gate;  // outlives the indexer and the compactor below
  IndexerOptions io = IndexerOptionsOf(config, *merged_check_ms, *longest_span);
  if (compacting) io.merge_gate = &merge_gate;
  Indexer indexer(**store, io);
  if (alerting_config->enabled) {
    // The last link of the chain: notifications join the batch of their chunk.
    indexer.AddObserver(std::make_unique<AlertObserver>(stager, /*shared_store=*/(*store)->shared(),
                                                        [&dispatcher, &metrics](size_t staged) {
                                                          metrics.alerts_staged.Increment(static_cast<double>(staged));
                                                          dispatcher.Wake();
                                                        }));
  }

  BatchProcessorOptions bo;
  bo.decode = io.decode;
  bo.messages_outlive_batch = true;  // GroupConsumer keeps a batch's messages until it is written
  for (const auto& [topic, format] : config.consumer.topic_formats) bo.topic_formats[topic] = *BatchProcessor::ParseFormat(format);
  ShipLineDecoder lines(config.consumer.default_app, config.consumer.default_host, clock);
  BatchProcessor processor(indexer, bo, &lines);

  GroupConsumerOptions go = ConsumerOptionsOf(config);
  if (config.store.durability == Durability::kSkipWal) {
    // Kafka is the write-ahead log: offsets are committed after a flush.
    go.flush = [s = store->get()] { return s->Flush(); };
    go.flush_interval_ms = config.store.flush_interval_ms;
    go.flush_bytes = config.store.flush_bytes;
    spdlog::info("serve: durability skip_wal: offsets are committed after memtable flushes (every {} ms or {} bytes)",
                 go.flush_interval_ms, go.flush_bytes);
  }
  IngestMetrics ingest_metrics(registry, clock);
  // The WAL stays within about its bound (store/rocksdb_store.h); twice it is a degraded mode.
  const uint64_t wal_bound = config.store.max_wal_bytes != 0 ? config.store.max_wal_bytes : config.store.memtable_budget_bytes;
  // With skip_wal there is no WAL, and the consumer flushes on its own cadence.
  const bool wal = config.store.durability != Durability::kSkipWal;
  StoreDiskMetrics disk_metrics(registry, **store, clock, wal ? 2 * wal_bound : 0,
                                wal ? config.store.flush_after_ms : 0);
  disk_metrics.Start(10'000);
  // Live tail (GET /api/v1/tail): fed each batch once it is written.
  // Each client holds an HTTP worker thread: leave some for queries, /metrics and the probes.
  TailOptions tail_options;
  tail_options.max_clients = static_cast<size_t>(std::clamp(
      config.http.worker_threads - config.http.max_concurrent_queries - 4, 1, 16));
  TailHub tail(tail_options, io.decode, registry);
  go.on_written = [&ingest_metrics, &indexer, &lines, &tail](const ProcessedBatch& b) {
    tail.Publish(b.writes);
    ingest_metrics.Update(indexer.counters(), lines.counters(), &indexer);
  };
  auto dispatch_topic = DispatchTopic(config, *alerting_config);
  if (!dispatch_topic.ok()) {
    std::fprintf(stderr, "logdex serve: %s\n", dispatch_topic.error().message.c_str());
    return 2;
  }
  if (!dispatch_topic->empty()) {
    // One outbox shared by the group: only the owner of this partition delivers.
    const TopicPartition decides{*dispatch_topic, 0};
    dispatcher.SetActive(false);
    go.on_assignment = [&dispatcher, decides](const std::set<TopicPartition>& owned) {
      dispatcher.SetActive(owned.count(decides) > 0);
    };
    spdlog::info("alerting: the outbox is shared; the owner of {}[0] delivers from it", decides.topic);
  }
  if (embedded) AnnounceOnceAssigned(*embedded, flags, config, go);
  GroupConsumer consumer(go, **store, processor, metrics, clock);

  // Compaction (indexer/compactor.h): merges the small settled
  // chunks of each stream. The epoch starts at a value of this process, so
  // that no cursor of an earlier process counts as made after the latest merge.
  std::atomic<uint64_t> store_epoch{static_cast<uint64_t>(clock.NowMs()) * 2};
  LocalStoreEpoch local_epoch(store_epoch);
  std::unique_ptr<CompactionLease> lease;  // outlives the compactor and its runner
  std::unique_ptr<Compactor> compactor;
  std::unique_ptr<CompactionRunner> compaction;
  if (compacting && shared_store) {
    CompactionLeaseOptions lo;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    lo.owner = std::string(host) + ":" + std::to_string(::getpid());
    lo.period_ms = config.compaction.lease_period_ms;
    lo.removal_delay_ms = config.compaction.removal_delay_ms;  // queries of every member read it
    auto made = CompactionLease::Create(**store, lo, clock);
    if (!made.ok()) {
      std::fprintf(stderr, "logdex serve: compaction: %s\n", made.error().ToString().c_str());
      return 1;
    }
    lease = std::move(*made);
  }
  if (compacting) {
    auto made = MakeCompactor(config, **store, io, &store_epoch, lease.get(), consumer);
    if (!made.ok()) {
      std::fprintf(stderr, "logdex serve: compaction: %s\n", made.error().ToString().c_str());
      return 1;
    }
    compactor = std::move(*made);
    compaction = std::make_unique<CompactionRunner>(registry, *compactor, clock, config.compaction.interval_ms,
                                                    config.compaction.max_rate_bytes);
    spdlog::info("compaction: on: chunks settled for {} s merge up to {} records or {} bytes, spans up to {} s",
                 config.compaction.settle_ms / 1000, config.compaction.target_records, MergedChunkBytes(config),
                 config.compaction.max_span_ms / 1000);
  }

  QueryOptions qo = QueryOptionsOf(config, *longest_span, io.decode, clock);
  // The layout epoch: this process's compactor's on RocksDB; on a shared
  // store the lease row's, read by every member, compacting or not (another
  // member's merges move the chunks under its cursors).
  prometheus::Counter& epoch_read_failures =
      prometheus::BuildCounter()
          .Name("logdex_query_store_epoch_read_failures_total")
          .Help("Failed reads of the store's layout epoch (the compaction lease row, HBase): cursors then resume by "
                "record, which is slower, never wrong")
          .Register(registry)
          .Add({});
  prometheus::Counter& epoch_reads =
      prometheus::BuildCounter()
          .Name("logdex_query_store_epoch_reads_total")
          .Help("Reads of the store's layout epoch (the compaction lease row, HBase): for first pages at most one a "
                "second (ten while a merge lands), one after each page that resumed a cursor or ran long")
          .Register(registry)
          .Add({});
  std::unique_ptr<LeaseRowEpoch> shared_epoch;
  if (shared_store) {
    shared_epoch = std::make_unique<LeaseRowEpoch>(
        **store, clock, 1'000,
        [&epoch_read_failures, &clock, warned = std::make_shared<std::atomic<int64_t>>(INT64_MIN / 2)](
            const Error& e) {
          epoch_read_failures.Increment();
          // Once a minute at most: a store outage fails every query's read.
          const int64_t now = clock.MonotonicNs() / 1'000'000;
          int64_t last = warned->load();
          if (now - last >= 60'000 && warned->compare_exchange_strong(last, now)) {
            spdlog::warn("query: reading the store's layout epoch failed ({}); cursors resume by record until it "
                         "reads (logdex_query_store_epoch_read_failures_total)",
                         e.ToString());
          }
        },
        [&epoch_reads] { epoch_reads.Increment(); });
    qo.store_epoch = shared_epoch.get();
    // A page that ran this long re-reads it: a merge's parts may be gone
    // (the smaller of this and the lease holder's delay, less a margin).
    qo.recheck_after_ms = config.compaction.removal_delay_ms -
                          std::max<int64_t>(1'000, config.compaction.removal_delay_ms / 100);
  } else {
    qo.store_epoch = compacting ? &local_epoch : nullptr;
  }
  // Members sharing a store (HBase) started later with a longer span raise
  // it: queries read it again every minute.
  prometheus::Counter& span_read_failures =
      prometheus::BuildCounter()
          .Name("logdex_query_longest_span_read_failures_total")
          .Help("Failed re-reads of the longest chunk span of the store (queries pad their ranges by it; until a "
                "re-read succeeds they pad by the last value read, and may miss longer chunks another member wrote)")
          .Register(registry)
          .Add({});
  LongestSpanWatch span_watch(**store, *longest_span, clock, kLongestSpanRereadMs,
                              [&span_read_failures](const Error& e) {
                                span_read_failures.Increment();
                                spdlog::warn("query: the store's longest chunk span could not be read again (queries "
                                             "pad by the last value read until a re-read succeeds): {}",
                                             e.ToString());
                              });
  qo.longest_span_ms = [&span_watch] { return span_watch.Get(); };
  QueryEngine engine(**store, qo);

  auto http_options = HttpOptionsOf(config.http);
  if (!http_options.ok()) {
    std::fprintf(stderr, "logdex serve: http.listen: %s\n", http_options.error().message.c_str());
    return 2;
  }
  HttpServerOptions& ho = *http_options;
  auto cursor_key = LoadOrCreateCursorKey(**store);
  if (!cursor_key.ok()) {
    std::fprintf(stderr, "logdex serve: store: cursor key: %s\n", cursor_key.error().ToString().c_str());
    return 1;
  }
  ho.cursor_key = *cursor_key;
  ho.tail = &tail;
  if (alerting_config->enabled) {
    TableStore& alert_store = **store;
    ho.alerts = [&alert_store](int64_t since_ms, size_t limit) {
      return alerting::AlertStager::RecentJson(alert_store, since_ms, limit);
    };
  }
  ho.loki_version = LOGDEX_VERSION;
  const int64_t max_lag = config.http.ready_max_lag;
  HttpServer http(ho, engine, registry,
                  [&consumer, max_lag] {
                    // A loss does not flip readiness (see ConsumerState) but is
                    // shown in the body, after the reason if there is one.
                    ConsumerState s = consumer.State(max_lag);
                    std::string reason = s.reason;
                    if (s.lost_messages > 0) {
                      reason += (reason.empty() ? "" : "; ") + std::to_string(s.lost_messages) +
                                " messages lost in all, latest: " + s.lost;
                    }
                    return ReadyState{s.ready, reason};
                  },
                  clock);
  if (Status s = http.Start(); !s.ok()) {
    std::fprintf(stderr, "logdex serve: http: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("http: listening on %s:%d (/metrics, /healthz, /readyz, /api/v1/query, /api/v1/tail, /loki/api/v1)\n", ho.host.c_str(), http.port());
  std::fflush(stdout);

  if (Status s = consumer.Start(); !s.ok()) {
    std::fprintf(stderr, "logdex serve: kafka: %s\n", s.message().c_str());
    return 1;
  }
  // With --embedded-kafka, the bootstrap file is written once the consumer
  // owns its partitions (go.on_assignment): then everything is up.

  if (alerting_config->enabled) {
    if (Status s = dispatcher.Start(); !s.ok()) {
      std::fprintf(stderr, "logdex serve: alerting: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("alerting: %zu sinks\n", alerting_config->sinks.size());
    std::fflush(stdout);
  }

  if (compaction) compaction->Start(first_pass_delay_ms);

  std::atomic<bool> stop{false};
  signals.Watch(stop, config.consumer.shutdown_deadline_ms);
  Status run = consumer.Run(stop);
  compaction.reset();  // a pass under way stops before its next stream, or at its next merge
  if (lease) {
    // The next member need not wait out the period, unless a write of this
    // one may still land.
    auto released = lease->Release();
    if (!released.ok()) {
      spdlog::warn("compaction: releasing the lease failed ({}); it expires after compaction.lease_period",
                   released.error().ToString());
    } else if (!*released) {
      spdlog::info("compaction: the lease is left to expire (not held, or a write may still land)");
    } else {
      spdlog::info("compaction: released the lease: the next member takes it at once");
    }
  }
  http.Stop();
  dispatcher.Stop();
  signals.Finish();
  if (!run.ok()) {
    std::fprintf(stderr, "logdex serve: %s\n", run.ToString().c_str());
    return 1;
  }
  spdlog::info("serve: stopped cleanly");
  return 0;
}

int CheckConfig(const std::string& path) {
  auto loaded = LoadConfig(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.error().message.c_str());
    return 1;
  }
  // What serve would run: the environment applies, then the exposure check.
  if (Status s = ApplyEnvOverrides(*loaded, environ); !s.ok()) {
    std::fprintf(stderr, "%s: environment: %s\n", path.c_str(), s.message().c_str());
    return 1;
  }
  if (Status s = CheckHttpExposure(loaded->http); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message().c_str());
    return 1;
  }
  if (Status s = CheckConsumerKafkaProperties(loaded->kafka); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), s.message().c_str());
    return 1;
  }
  if (Status s = ResolveAlertingSecrets(*loaded); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  if (auto t = DispatchTopic(*loaded, loaded->alerting); !t.ok()) {
    std::fprintf(stderr, "%s\n", t.error().message.c_str());
    return 1;
  }
  std::printf("%s: OK\n", path.c_str());
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, CommandRun& run) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Consume log chunks from Kafka as a consumer-group member, index them, serve metrics and queries");
  cmd->add_option("--config", f->config, "YAML configuration file (see deploy/logdex.example.yaml)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--embedded-kafka", f->embedded_kafka,
                "Start an in-process Kafka cluster (librdkafka's mock) and consume from it. It keeps only ~5 MiB "
                "or 100,000 batches per partition (librdkafka 2.0.2) and deletes older data: a consumer that "
                "lags further loses messages (counted in logdex_consumer_lost_messages_total, shown on /readyz)");
  cmd->add_option("--embedded-partitions", f->embedded_partitions, "Partitions of the embedded topic")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--bootstrap-file", f->bootstrap_file,
                  "With --embedded-kafka: write the bootstrap address here once the consumer owns its partitions "
                  "(produce only after it appears)");
  cmd->add_option("--store-dir", f->store_dir, "RocksDB directory (overrides store.dir)");
  cmd->add_option("--http", f->http, "HOST:PORT for metrics, health and the query API (overrides http.listen)");
  cmd->add_flag("--allow-unauthenticated", f->allow_unauthenticated,
                "Serve a non-loopback --http/http.listen without http.auth_token (sets http.allow_unauthenticated)");
  cmd->add_option("--brokers", f->brokers, "Kafka bootstrap servers (overrides kafka.bootstrap.servers)");
  cmd->add_option("--group", f->group, "Consumer group id (overrides consumer.group_id)");
  cmd->add_option("--topic", f->topics, "Topic to consume; repeatable (overrides consumer.topics)");
  cmd->add_option("--log-level", f->log_level, "trace | debug | info | warn | error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  cmd->callback([&run, f] { run = [f] { return Serve(*f); }; });

  auto path = std::make_shared<std::string>();
  CLI::App* check = app.add_subcommand("check-config", "Validate a serve configuration file; name the line and key of each error");
  check->add_option("file", *path, "YAML configuration file")->required();
  check->callback([&run, path] { run = [path] { return CheckConfig(*path); }; });
}

}  // namespace logdex
