#include "alerting/stager.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <spdlog/spdlog.h>

#include "common/backoff.h"
#include "common/bytes.h"
#include "common/row_keys.h"

namespace logdex::alerting {

using nlohmann::json;

namespace {

constexpr size_t kMaxMessageBytes = 4096;
constexpr size_t kMaxTagBytes = 256;
constexpr size_t kRecentChunks = 4096;
constexpr size_t kCacheEvictAbove = 100'000;
// Stagings of one chunk in a row that may lose their conditional state writes
// to other members before the batch is failed (and retried) instead.
constexpr int kMaxStateAttempts = 16;
// Stagings kept for batches not yet written (AlertStager::staged_), at most,
// and for how many written batches one is kept when its chunk does not come
// again (its message was refused for good, or another member stored it).
constexpr size_t kMaxKeptStagings = 1 << 16;
constexpr uint64_t kKeptForBatches = 1 << 14;

enum StateKind : uint8_t { kGroupState = 1, kAppState = 2, kGlobalState = 3 };

std::string GroupKey(uint64_t fp) {
  std::string k(1, static_cast<char>(kGroupState));
  AppendBigEndian64(k, fp);
  return k;
}
std::string AppKey(AppId app, int64_t slot) {
  std::string k(1, static_cast<char>(kAppState));
  AppendBigEndian64(k, app.value());
  AppendBigEndian64(k, static_cast<uint64_t>(slot));
  return k;
}
std::string GlobalKey(int64_t slot) {
  std::string k(1, static_cast<char>(kGlobalState));
  AppendBigEndian64(k, static_cast<uint64_t>(slot));
  return k;
}
std::string SeenKey(ChunkId id) {
  std::string k;
  AppendBigEndian64(k, id.value());
  return k;
}

}  // namespace

// The latest record folded into a state: what its digest shows.
struct AlertStager::Sample {
  std::string app, host, rule, message_template, message;
  Severity severity = Severity::kError;
  uint64_t group = 0;
  int64_t ts_ms = 0;
  std::vector<std::pair<std::string, std::string>> tags;
};

// A group window or a limit window (see stager.h).
struct AlertStager::State {
  NotificationKind digest_kind = NotificationKind::kGroupDigest;
  std::string idempotency_key;  // of the digest
  int64_t start_ms = 0, end_ms = 0;
  uint32_t sent = 0;            // immediate events sent in this window
  uint64_t suppressed = 0;      // records folded into the digest
  int64_t since_ms = 0;         // ts of the first folded record
  std::set<std::string> sinks;  // union of the folded records' sinks
  Sample sample;
  // A group row's last window before this one that had a digest (it may
  // not be sent yet when the next window starts): RaiseDigestToItsState
  // reads them.
  std::string previous_key;
  uint64_t previous_suppressed = 0;
  int64_t previous_since_ms = 0;
  bool digest_staged = false;  // its outbox rows were written at least once (metrics only)
  // Random per conditional write: two members' rows never have the same
  // bytes (WriteState tells its own write from another's by them).
  uint64_t write_id = 0;
  bool dirty = false;
  // The row as last read or written (nullopt: none, or empty): what a
  // conditional write of it expects on a shared store.
  std::optional<std::string> stored;

  std::string Encode() const {
    json tags = json::array();
    for (const auto& [k, v] : sample.tags) tags.push_back(json::array({k, v}));
    json j = {{"kind", KindName(digest_kind)}, {"key", idempotency_key}, {"start", start_ms}, {"end", end_ms},
              {"sent", sent}, {"suppressed", suppressed}, {"since", since_ms}, {"sinks", sinks}, {"digest_staged", digest_staged}, {"w", write_id},
              {"app", sample.app}, {"host", sample.host}, {"rule", sample.rule},
              {"template", sample.message_template}, {"message", sample.message},
              {"severity", SeverityCode(sample.severity)}, {"group", sample.group}, {"ts", sample.ts_ms},
              {"tags", std::move(tags)}};
    if (!previous_key.empty()) {
      j["prev"] = {{"key", previous_key}, {"suppressed", previous_suppressed}, {"since", previous_since_ms}};
    }
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }

  static std::optional<State> Decode(std::string_view v) {
    try {
      const json j = json::parse(v);
      State s;
      const std::string kind = j.at("kind").get<std::string>();
      s.digest_kind = kind == "app_digest"      ? NotificationKind::kAppDigest
                      : kind == "storm_summary" ? NotificationKind::kStormSummary
                                                : NotificationKind::kGroupDigest;
      s.idempotency_key = j.at("key").get<std::string>();
      s.start_ms = j.at("start").get<int64_t>();
      s.end_ms = j.at("end").get<int64_t>();
      s.sent = j.at("sent").get<uint32_t>();
      s.suppressed = j.at("suppressed").get<uint64_t>();
      s.since_ms = j.at("since").get<int64_t>();
      s.sinks = j.at("sinks").get<std::set<std::string>>();
      s.digest_staged = j.value("digest_staged", false);
      s.write_id = j.value("w", uint64_t{0});
      s.sample.app = j.at("app").get<std::string>();
      s.sample.host = j.at("host").get<std::string>();
      s.sample.rule = j.at("rule").get<std::string>();
      s.sample.message_template = j.at("template").get<std::string>();
      s.sample.message = j.at("message").get<std::string>();
      s.sample.severity = SeverityFromCode(j.at("severity").get<uint32_t>()).value_or(Severity::kError);
      s.sample.group = j.at("group").get<uint64_t>();
      s.sample.ts_ms = j.at("ts").get<int64_t>();
      for (const auto& t : j.at("tags")) s.sample.tags.emplace_back(t.at(0).get<std::string>(), t.at(1).get<std::string>());
      if (const auto prev = j.find("prev"); prev != j.end()) {  // rows of earlier builds have none
        s.previous_key = prev->at("key").get<std::string>();
        s.previous_suppressed = prev->at("suppressed").get<uint64_t>();
        s.previous_since_ms = prev->at("since").get<int64_t>();
      }
      return s;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
};

// What one staging of a chunk changed: the states it touched (written once
// at its end, each with its digest), the outbox rows it appended, and the
// counters it will add once it holds (a staging done again adds them once).
// Its destructor clears the dirty flags, even on an early error return.
struct AlertStager::Staging {
  int64_t now = 0;
  int64_t slot = 0;  // the limit window's start
  AppId app_id;
  std::string app_key, global_key;
  std::vector<std::pair<std::string, State*>> dirty;
  std::vector<std::pair<prometheus::Counter*, double>> counts;
  size_t rows = 0;

  void Touch(const std::string& key, State* s) {
    if (!s->dirty) {
      s->dirty = true;
      dirty.emplace_back(key, s);
    }
  }
  void Count(prometheus::Counter& c, double n = 1) { counts.emplace_back(&c, n); }
  // Clears the dirty flags and forgets the states (before they are freed).
  void Release() {
    for (auto& [k, s] : dirty) s->dirty = false;
    dirty.clear();
  }
  ~Staging() { Release(); }
};

Status CreateAlertingTables(TableStore& store, const AlertingConfig& config) {
  // No TTL: rows leave when delivered or given up. As indexer/tables.cc
  // makes it (serve creates both sets): options that differ would be
  // changed back and forth at every start (on HBase a family change each).
  TableOptions outbox;
  outbox.bloom_filter = true;
  TableOptions state;
  state.ttl_seconds = config.state_ttl_s;
  state.bloom_filter = true;
  TableOptions seen;
  seen.ttl_seconds = config.dedup_ttl_s;
  seen.bloom_filter = true;
  return store.CreateTables({{std::string(kOutboxTable), outbox},
                             {std::string(kStateTable), state},
                             {std::string(kSeenTable), seen}});
}

AlertStager::AlertStager(AlertingConfig config, TableStore& store, const Clock& clock, prometheus::Registry& registry)
    : config_(std::move(config)),
      store_(store),
      clock_(clock),
      conditional_(store.shared() && store.conditional_writes()),
      metrics_(registry),
      detector_(config_) {
  for (const auto& s : config_.sinks) all_sinks_.push_back(s.name);
  if (config_.enabled && all_sinks_.empty())
    spdlog::warn("alerting: no sinks configured; alerts are detected and counted but nobody is notified");
}

AlertStager::~AlertStager() = default;

bool AlertStager::Wants(const proto::LogChunk& chunk) const {
  if (!config_.enabled) return false;
  return chunk.severity() == 0 || chunk.severity() >= SeverityCode(detector_.MinSeverity());
}

void AlertStager::DiscardCache() {
  std::lock_guard lock(mu_);
  cache_.clear();
  recent_chunks_.clear();
  recent_order_.clear();
  prefetched_seen_.clear();
  batch_chunks_.clear();  // not written: their rows stay in staged_ for the retry
}

Status AlertStager::PrefetchSeen(const std::vector<ChunkId>& chunk_ids) {
  std::lock_guard lock(mu_);
  std::vector<ChunkId> ids;
  std::vector<std::string> keys;
  for (ChunkId id : chunk_ids) {
    if (recent_chunks_.contains(id) || prefetched_seen_.contains(id)) continue;
    prefetched_seen_[id] = false;  // listed once
    ids.push_back(id);
    keys.push_back(SeenKey(id));
  }
  if (keys.empty()) return Status::Ok();
  auto rows = store_.MultiGet(kSeenTable, keys);
  if (!rows.ok()) {
    for (ChunkId id : ids) prefetched_seen_.erase(id);
    return rows.error();
  }
  for (size_t i = 0; i < ids.size(); ++i) prefetched_seen_[ids[i]] = (*rows)[i].has_value();
  return Status::Ok();
}

void AlertStager::DiscardPrefetched() {
  std::lock_guard lock(mu_);
  prefetched_seen_.clear();
}

std::string AlertStager::QueryUrl(std::string_view app, std::string_view host, Severity s, int64_t from_ms,
                                  int64_t to_ms) const {
  return QueryLink(config_.query_base_url, app, host, s, from_ms, to_ms);
}

AlertStager::State* AlertStager::Load(const std::string& key, bool* found, Status* error) {
  *found = false;
  if (auto it = cache_.find(key); it != cache_.end()) {
    *found = true;
    return it->second.get();
  }
  auto got = store_.Get(kStateTable, key);
  if (!got.ok()) {
    *error = got.error();
    return nullptr;
  }
  auto state = std::make_unique<State>();
  // An empty row is one a member emptied again (WriteStates): no state.
  if (got->has_value() && !(*got)->empty()) {
    if (auto decoded = State::Decode(**got)) {
      *state = std::move(*decoded);
      *found = true;
    } else {
      spdlog::warn("alerting: unreadable state row in {}; starting that window afresh", kStateTable);
    }
    if (conditional_) state->stored = std::move(**got);
  }
  State* raw = state.get();
  cache_[key] = std::move(state);
  return raw;
}

void AlertStager::PutState(const std::string& key, const State& s, WriteBatch& batch) {
  batch.Put(kStateTable, key, s.Encode());
}

size_t AlertStager::PutDigest(State& s, Staging& st, WriteBatch& batch) {
  if (s.suppressed == 0) return 0;
  if (!s.digest_staged) {
    st.Count(metrics_.Staged(KindName(s.digest_kind)), static_cast<double>(s.sinks.size()));
    s.digest_staged = true;
  }
  OutboxEntry e;
  Notification& n = e.n;
  n.kind = s.digest_kind;
  n.idempotency_key = s.idempotency_key;
  n.rule = s.sample.rule;
  n.app = s.sample.app;
  n.host = s.sample.host;
  n.severity = s.sample.severity;
  n.group = s.digest_kind == NotificationKind::kGroupDigest ? s.sample.group : 0;
  n.message_template = s.sample.message_template;
  n.message = s.sample.message;
  n.tags = s.sample.tags;
  n.ts_ms = s.sample.ts_ms;
  n.count = s.suppressed;
  n.since_ms = s.since_ms;
  n.window_end_ms = s.end_ms;
  n.staged_ms = s.start_ms;
  // Digests span hosts (unless the rule groups by host): link the app-wide range.
  n.query_url = QueryUrl(n.app, "", n.severity, std::min(n.since_ms, n.ts_ms), n.ts_ms);
  const int64_t due = s.end_ms + config_.limits.digest_delay_ms;
  for (const auto& sink : s.sinks) {
    e.sink = sink;
    batch.Put(kOutboxTable, OutboxKey{due, OutboxAlertId(n.idempotency_key, sink)}.Encode(), EncodeOutboxEntry(e));
  }
  return s.sinks.size();
}

size_t AlertStager::PutEvent(const Notification& n, const std::vector<std::string>& sinks, Staging& st,
                             WriteBatch& batch) {
  OutboxEntry e;
  e.n = n;
  for (const auto& sink : sinks) {
    e.sink = sink;
    batch.Put(kOutboxTable, OutboxKey{n.staged_ms, OutboxAlertId(n.idempotency_key, sink)}.Encode(),
              EncodeOutboxEntry(e));
  }
  st.Count(metrics_.Staged(KindName(NotificationKind::kEvent)), static_cast<double>(sinks.size()));
  return sinks.size();
}

void AlertStager::MaybeEvict(int64_t now_ms) {
  if (cache_.size() <= kCacheEvictAbove) return;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (!it->second->dirty && it->second->end_ms + config_.limits.digest_delay_ms < now_ms) {
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<bool> AlertStager::IsReplay(const proto::LogChunk& chunk, ChunkId chunk_id,
                                   const proto::RecordBatch& records) {
  // Staged before: durably, or in a batch not yet written.
  bool seen = recent_chunks_.contains(chunk_id);
  if (!seen) {
    if (auto it = prefetched_seen_.find(chunk_id); it != prefetched_seen_.end()) {
      seen = it->second;
    } else {
      auto got = store_.Get(kSeenTable, SeenKey(chunk_id));
      if (!got.ok()) return got.error();
      seen = got->has_value();
    }
  }
  if (!seen) return false;
  size_t matched = 0;
  for (const auto& rec : records.records()) {
    auto sev = SeverityFromCode(rec.severity() ? rec.severity() : chunk.severity());
    if (sev && detector_.Match(chunk.app(), chunk.host(), *sev, rec)) ++matched;
  }
  if (matched) metrics_.Suppressed("replay").Increment(static_cast<double>(matched));
  return true;
}

AlertStager::Sample AlertStager::SampleOf(const std::string& app, const std::string& host, const CompiledRule& rule,
                                          Severity severity, const proto::LogRecord& rec) {
  Sample sample;
  sample.app = SanitizeUtf8(app, kMaxTagBytes);
  sample.host = SanitizeUtf8(host, kMaxTagBytes);
  sample.rule = rule.config.name;
  sample.severity = severity;
  sample.message = SanitizeUtf8(rec.message(), kMaxMessageBytes);
  sample.message_template = MessageTemplate(sample.message);
  sample.group = GroupFingerprint(app, severity, sample.message_template, host, rule.config.group_by_host);
  sample.ts_ms = rec.ts_ms();
  for (const auto& t : rec.tags()) {
    sample.tags.emplace_back(SanitizeUtf8(t.key(), kMaxTagBytes), SanitizeUtf8(t.value(), kMaxTagBytes));
  }
  return sample;
}

Notification AlertStager::EventOf(const Sample& sample, std::string idempotency_key, int64_t kafka_ts_ms,
                                  int64_t now_ms) {
  Notification n;
  n.kind = NotificationKind::kEvent;
  n.idempotency_key = std::move(idempotency_key);
  n.rule = sample.rule;
  n.app = sample.app;
  n.host = sample.host;
  n.severity = sample.severity;
  n.group = sample.group;
  n.message_template = sample.message_template;
  n.message = sample.message;
  n.tags = sample.tags;
  n.ts_ms = sample.ts_ms;
  n.kafka_ts_ms = kafka_ts_ms;
  n.count = 1;
  n.staged_ms = now_ms;
  return n;
}

namespace {
// Counts a suppressed record into the digest of `s`.
template <class State, class Sample>
void Fold(State* s, const Sample& sample, const std::vector<std::string>& sinks) {
  s->since_ms = s->suppressed == 0 ? sample.ts_ms : std::min(s->since_ms, sample.ts_ms);
  ++s->suppressed;
  s->sample = sample;
  s->sinks.insert(sinks.begin(), sinks.end());
}
}  // namespace

AlertStager::State* AlertStager::LoadLimitWindow(const std::string& key, NotificationKind kind,
                                                 const std::string& key_prefix, const Staging& st, Status* error) {
  bool found = false;
  State* s = Load(key, &found, error);
  if (s && !found) {
    s->digest_kind = kind;
    s->start_ms = st.slot;
    s->end_ms = st.slot + config_.limits.limit_window_ms;
    s->idempotency_key = key_prefix + std::to_string(st.slot);
  }
  return s;
}

Result<bool> AlertStager::Admit(const Sample& sample, const std::vector<std::string>& sinks, Staging& st,
                                WriteBatch& batch) {
  const auto& lim = config_.limits;
  const std::string group_key = GroupKey(sample.group);
  bool found = false;
  Status err;
  State* g = Load(group_key, &found, &err);
  if (!g) return err.error();
  if (!found || st.now >= g->end_ms) {
    // A new window for this group; a dirty old window's digest is written first.
    if (g->dirty) st.rows += PutDigest(*g, st, batch);
    const bool was_dirty = g->dirty;
    std::optional<std::string> stored = std::move(g->stored);
    State previous = std::move(*g);
    *g = State{};
    g->dirty = was_dirty;
    g->stored = std::move(stored);
    if (previous.suppressed > 0) {  // its digest may still be waiting to be sent
      g->previous_key = std::move(previous.idempotency_key);
      g->previous_suppressed = previous.suppressed;
      g->previous_since_ms = previous.since_ms;
    } else {  // no digest: the one before stays the one that may be waiting
      g->previous_key = std::move(previous.previous_key);
      g->previous_suppressed = previous.previous_suppressed;
      g->previous_since_ms = previous.previous_since_ms;
    }
    g->digest_kind = NotificationKind::kGroupDigest;
    g->start_ms = st.now;
    g->end_ms = st.now + lim.group_window_ms;
    g->idempotency_key = "gd:" + Hex16(sample.group) + ":" + std::to_string(st.now);
  }
  st.Touch(group_key, g);
  if (g->sent >= lim.per_group) {
    Fold(g, sample, sinks);
    st.Count(metrics_.Suppressed("group_window"));
    return false;
  }
  State* glob = LoadLimitWindow(st.global_key, NotificationKind::kStormSummary, "st:", st, &err);
  if (!glob) return err.error();
  State* a = LoadLimitWindow(st.app_key, NotificationKind::kAppDigest, "ad:" + Hex16(st.app_id.value()) + ":", st, &err);
  if (!a) return err.error();
  st.Touch(st.global_key, glob);
  st.Touch(st.app_key, a);
  if (lim.global > 0 && glob->sent >= lim.global) {
    Fold(glob, sample, sinks);
    st.Count(metrics_.Suppressed("global_cap"));
    return false;
  }
  if (lim.per_app > 0 && a->sent >= lim.per_app) {
    Fold(a, sample, sinks);
    st.Count(metrics_.Suppressed("app_limit"));
    return false;
  }
  ++g->sent;
  ++a->sent;
  ++glob->sent;
  // The group's latest record, for GET /api/v1/alerts (a digest shows the
  // latest folded record: folds come after a window's events and replace it).
  g->sample = sample;
  return true;
}

namespace {
// The number written in `text` in `base`, all of it; nullopt otherwise.
template <class T>
std::optional<T> ParseWhole(std::string_view text, int base = 10) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// The alert_state key of a digest's window, from its kind and idempotency
// key ("gd:<group>:<start>", "ad:<app id>:<slot>", "st:<slot>", as
// Admit and LoadLimitWindow name them); nullopt for an event or a key of
// another shape.
std::optional<std::string> DigestStateKey(const Notification& n) {
  const std::string_view key = n.idempotency_key;
  switch (n.kind) {
    case NotificationKind::kGroupDigest:
      if (!key.starts_with("gd:")) return std::nullopt;
      return GroupKey(n.group);
    case NotificationKind::kAppDigest: {
      if (!key.starts_with("ad:") || key.size() < 21 || key[19] != ':') return std::nullopt;
      const auto app = ParseWhole<uint64_t>(key.substr(3, 16), 16);
      const auto slot = ParseWhole<int64_t>(key.substr(20));
      if (!app || !slot) return std::nullopt;
      return AppKey(AppId(*app), *slot);
    }
    case NotificationKind::kStormSummary: {
      if (!key.starts_with("st:")) return std::nullopt;
      const auto slot = ParseWhole<int64_t>(key.substr(3));
      if (!slot) return std::nullopt;
      return GlobalKey(*slot);
    }
    default: return std::nullopt;
  }
}
}  // namespace

Result<DigestState> AlertStager::RaiseDigestToItsState(TableStore& store, Notification& n) {
  const std::optional<std::string> key = DigestStateKey(n);
  if (!key) return DigestState::kGone;
  auto row = store.Get(kStateTable, *key);
  if (!row.ok()) return row.error();
  if (!row->has_value() || (*row)->empty()) return DigestState::kGone;  // expired, or put back empty
  const std::optional<State> s = State::Decode(**row);
  if (!s) return DigestState::kGone;
  uint64_t count = 0;
  int64_t since_ms = 0;
  if (s->idempotency_key == n.idempotency_key) {
    count = s->suppressed;
    since_ms = s->since_ms;
  } else if (!s->previous_key.empty() && s->previous_key == n.idempotency_key) {
    count = s->previous_suppressed;
    since_ms = s->previous_since_ms;
  } else {
    return DigestState::kGone;
  }
  if (count <= n.count) return DigestState::kUnchanged;
  n.count = count;
  n.since_ms = std::min(n.since_ms, since_ms);
  return DigestState::kRaised;
}

Result<size_t> AlertStager::Stage(const proto::LogChunk& chunk, ChunkId chunk_id, const proto::RecordBatch& records,
                                  int64_t kafka_ts_ms, WriteBatch& batch) {
  if (!config_.enabled) return size_t{0};
  std::lock_guard lock(mu_);

  auto replay = IsReplay(chunk, chunk_id, records);
  if (!replay.ok()) return replay.error();
  if (*replay) return size_t{0};

  // Other members change the same state rows (a storm's global window, an
  // app's, a group's across hosts): on such a store the rows are written
  // now, each conditional on what this member read, and a chunk that loses
  // is staged again on what is stored (otherwise each member would count
  // alone: caps exceeded N times, digest counts lost). A chunk whose state
  // was written gives the same rows when its batch is staged again
  // (staged_), without counting it twice.
  const size_t mark = batch.size();
  if (conditional_) {
    if (auto it = staged_.find(chunk_id); it != staged_.end()) {
      // A digest row as this process last staged it: a chunk staged since
      // may have counted more into it.
      for (const auto& [table, key, value] : it->second.rows) {
        auto newest = newest_rows_.find(key);
        batch.Put(table, key, newest != newest_rows_.end() ? newest->second.value : value);
      }
      batch_chunks_.push_back(chunk_id);
      return Staged(chunk_id, it->second.seen_value, batch, it->second.rows.size());
    }
  }
  for (int attempt = 1;; ++attempt) {
    Staging st;
    auto touched = StageRecords(chunk, chunk_id, records, kafka_ts_ms, st, batch);
    if (!touched.ok()) {
      Forget(st);
      return touched.error();
    }
    for (auto& [key, s] : st.dirty) st.rows += PutDigest(*s, st, batch);
    if (!conditional_) {
      for (auto& [key, s] : st.dirty) PutState(key, *s, batch);
    } else {
      auto won = WriteStates(st, chunk_id);
      if (!won.ok()) {
        Forget(st);
        return won.error();
      }
      if (!*won) {
        Forget(st);
        batch.Truncate(mark);
        if (attempt == kMaxStateAttempts) {
          metrics_.StateConflicts("gave_up").Increment();
          return Error{Errc::kUnavailable, "alert state rows changed under " + std::to_string(kMaxStateAttempts) +
                                               " conditional writes in a row"};
        }
        metrics_.StateConflicts("restaged").Increment();
        // Members racing for one row: a jittered pause, growing with the losses.
        std::this_thread::sleep_for(std::chrono::milliseconds(
            BackoffPolicy{1, 16}.DelayMs(static_cast<uint32_t>(attempt), write_ids_)));
        continue;
      }
    }
    for (const auto& [counter, n] : st.counts) counter->Increment(n);
    const std::string seen_value = *touched ? std::to_string(st.now) : std::string();
    if (conditional_) {
      if (staged_.size() >= kMaxKeptStagings) ForgetKeptStagings(/*all_but_this_batch=*/true);
      batch_chunks_.push_back(chunk_id);
      if (auto old = staged_.find(chunk_id); old != staged_.end()) Unkeep(old);
      StagedRows& kept = staged_[chunk_id];
      kept.seen_value = seen_value;
      kept.batches_written = batches_written_;
      for (size_t i = mark; i < batch.size(); ++i) {
        const WriteBatch::Entry& e = batch.entries()[i];
        kept.rows.push_back({e.table, e.key, e.Value()});
        NewestRow& newest = newest_rows_[e.key];
        newest.value = e.Value();
        ++newest.refs;
      }
    }
    return Staged(chunk_id, seen_value, batch, st.rows);
  }
}

size_t AlertStager::Staged(ChunkId chunk_id, const std::string& seen_value, WriteBatch& batch, size_t notifications) {
  // The seen row goes last (WriteBatch::WriteLast): on a store without
  // atomic batches (HBase) a failed write never marks a chunk seen without
  // its notifications and group state, even when an earlier chunk of the
  // batch named alert_seen before this one named alert_outbox. A chunk
  // whose records were all ignored writes nothing (its replay changes nothing).
  if (!seen_value.empty()) {
    batch.WriteLast(kSeenTable);
    batch.Put(kSeenTable, SeenKey(chunk_id), seen_value);
  }
  recent_chunks_.insert(chunk_id);
  recent_order_.push_back(chunk_id);
  if (recent_order_.size() > kRecentChunks) {
    recent_chunks_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  return notifications;
}

void AlertStager::Forget(Staging& st) {
  // The states hold this staging's changes; on a shared store what is
  // stored is read again (on another, the caller discards the cache).
  st.Release();
  if (conditional_) cache_.clear();
}

void AlertStager::BatchWritten() {
  std::lock_guard lock(mu_);
  ++batches_written_;
  for (ChunkId id : batch_chunks_) {
    if (auto it = staged_.find(id); it != staged_.end()) Unkeep(it);
  }
  batch_chunks_.clear();
  if (!staged_.empty() && batches_written_ % 256 == 0) ForgetKeptStagings(/*all_but_this_batch=*/false);
}

std::unordered_map<ChunkId, AlertStager::StagedRows>::iterator AlertStager::Unkeep(
    std::unordered_map<ChunkId, StagedRows>::iterator it) {
  for (const StagedRows::Row& row : it->second.rows) {
    auto n = newest_rows_.find(row.key);
    if (n != newest_rows_.end() && --n->second.refs == 0) newest_rows_.erase(n);
  }
  return staged_.erase(it);
}

void AlertStager::ForgetKeptStagings(bool all_but_this_batch) {
  const std::unordered_set<ChunkId> current(batch_chunks_.begin(), batch_chunks_.end());
  size_t forgotten = 0;
  for (auto it = staged_.begin(); it != staged_.end();) {
    const bool old = batches_written_ - it->second.batches_written > kKeptForBatches;
    if (!current.contains(it->first) && (all_but_this_batch || old)) {
      it = Unkeep(it);
      ++forgotten;
    } else {
      ++it;
    }
  }
  if (all_but_this_batch && forgotten > 0) {
    spdlog::warn("alerting: {} chunks kept from batches not yet written; forgot {} of other batches (staged again, "
                 "they would count twice)",
                 staged_.size() + forgotten, forgotten);
  }
}

Result<bool> AlertStager::StageRecords(const proto::LogChunk& chunk, ChunkId chunk_id,
                                       const proto::RecordBatch& records, int64_t kafka_ts_ms, Staging& st,
                                       WriteBatch& batch) {
  const std::string& app = chunk.app();
  const std::string& host = chunk.host();
  st.now = clock_.NowMs();
  st.slot = st.now - st.now % config_.limits.limit_window_ms;
  st.app_id = AppIdOf(app);
  st.app_key = AppKey(st.app_id, st.slot);
  st.global_key = GlobalKey(st.slot);
  MaybeEvict(st.now);
  bool touched = false;  // some record reached grouping
  for (int i = 0; i < records.records_size(); ++i) {
    const proto::LogRecord& rec = records.records(i);
    auto sev = SeverityFromCode(rec.severity() ? rec.severity() : chunk.severity());
    if (!sev) continue;
    const CompiledRule* rule = detector_.Match(app, host, *sev, rec);
    if (!rule) continue;
    st.Count(metrics_.Detected(*sev));
    if (rule->config.suppress) {
      st.Count(metrics_.Suppressed("rule"));
      continue;
    }
    touched = true;
    const Sample sample = SampleOf(app, host, *rule, *sev, rec);
    const std::vector<std::string>& sinks = rule->config.sinks.empty() ? all_sinks_ : rule->config.sinks;
    auto admitted = Admit(sample, sinks, st, batch);
    if (!admitted.ok()) return admitted.error();
    if (!*admitted) continue;
    Notification n = EventOf(sample, "ev:" + Hex16(chunk_id.value()) + ":" + std::to_string(i), kafka_ts_ms, st.now);
    n.query_url = QueryUrl(app, host, *sev, sample.ts_ms, sample.ts_ms);
    st.rows += PutEvent(n, sinks, st, batch);
  }
  return touched;
}

Result<bool> AlertStager::WriteState(const std::string& key, const std::optional<std::string>& expected,
                                     const std::string& value) {
  auto wrote = store_.CheckAndPut(kStateTable, key, expected, value);
  if (!wrote.ok()) return wrote.error();
  if (*wrote) return true;
  // A false answer may follow this call's own write (a retry after a lost
  // answer saw it): read the row and decide.
  auto now = store_.Get(kStateTable, key);
  if (!now.ok()) return now.error();
  return now->has_value() && **now == value;
}

Result<bool> AlertStager::WriteStates(Staging& st, ChunkId chunk_id) {
  // The rows most members touch first (the storm window, the app's, then
  // the groups'), so that a lost race most often loses before anything was
  // written.
  std::stable_sort(st.dirty.begin(), st.dirty.end(),
                   [](const auto& a, const auto& b) { return a.first[0] > b.first[0]; });
  std::vector<std::pair<size_t, std::string>> written;  // index in st.dirty, its bytes
  // Puts back what this staging wrote (an empty row where there was none:
  // Load reads it as none), each row only where it still holds this
  // member's write (its write id makes the bytes this member's alone).
  auto put_back = [&](size_t failed_at, const std::string* failed_value) {
    bool all_back = true;
    for (const auto& [j, bytes] : written) {
      auto& [k, w] = st.dirty[j];
      auto back = WriteState(k, bytes, w->stored.value_or(""));
      all_back = all_back && back.ok() && *back;
    }
    // A write whose answer was lost may have landed: put it back too where
    // it did (a false answer: it did not, or another member wrote since).
    if (failed_value) {
      auto& [k, w] = st.dirty[failed_at];
      auto back = WriteState(k, *failed_value, w->stored.value_or(""));
      all_back = all_back && back.ok();  // unknown again: it may count twice
    }
    if (!all_back) {
      metrics_.StateConflicts("overcounted").Increment();
      spdlog::warn("alerting: a staging of chunk {} could not put back an alert state row it wrote: its records "
                   "count twice in one window",
                   Hex16(chunk_id.value()));
    }
  };
  for (size_t i = 0; i < st.dirty.size(); ++i) {
    auto& [key, s] = st.dirty[i];
    // A row touched but left as it was (the app's, once the storm cap is
    // reached) is not written: a write would make other members' reads stale.
    std::string value = s->Encode();
    if (s->stored && value == *s->stored) continue;
    s->write_id = write_ids_();
    value = s->Encode();
    auto won = WriteState(key, s->stored, value);
    if (!won.ok()) {
      put_back(i, &value);
      return won.error();
    }
    if (!*won) {
      put_back(i, nullptr);
      return false;
    }
    written.emplace_back(i, std::move(value));
  }
  for (auto& [i, bytes] : written) st.dirty[i].second->stored = std::move(bytes);
  return true;
}

Result<std::string> AlertStager::RecentJson(TableStore& store, int64_t since_ms, size_t limit) {
  struct Group {
    int64_t ts;
    json j;
  };
  // The newest `limit` groups: a min-heap on their latest record's time.
  std::vector<Group> groups;
  auto newer = [](const Group& a, const Group& b) { return a.ts > b.ts; };
  bool truncated = false;
  const std::string prefix = GroupKey(0).substr(0, 1);
  std::string stop = prefix;
  stop[0] = static_cast<char>(kGroupState + 1);
  Status s = store.Scan(ScanSpec{std::string(kStateTable), prefix, stop, false, 0},
                        [&](std::string_view, std::string_view v) {
                          std::optional<State> st = State::Decode(v);
                          if (!st || st->sample.ts_ms < since_ms) return true;
                          if (groups.size() == limit) {
                            truncated = true;
                            if (st->sample.ts_ms <= groups.front().ts) return true;
                            std::pop_heap(groups.begin(), groups.end(), newer);
                            groups.pop_back();
                          }
                          groups.push_back(Group{st->sample.ts_ms,
                                                 {{"app", st->sample.app},
                                                  {"host", st->sample.host},
                                                  {"severity", std::string(SeverityName(st->sample.severity))},
                                                  {"rule", st->sample.rule},
                                                  {"group", Hex16(st->sample.group)},
                                                  {"template", st->sample.message_template},
                                                  {"message", st->sample.message},
                                                  {"ts", st->sample.ts_ms},
                                                  {"time", FormatRfc3339(st->sample.ts_ms)},
                                                  {"window_start", st->start_ms},
                                                  {"window_end", st->end_ms},
                                                  {"sent", st->sent},
                                                  {"suppressed", st->suppressed}}});
                          std::push_heap(groups.begin(), groups.end(), newer);
                          return true;
                        });
  if (!s.ok()) return s.error();
  std::sort_heap(groups.begin(), groups.end(), newer);  // newest first
  json out_groups = json::array();
  for (Group& g : groups) out_groups.push_back(std::move(g.j));
  json pending = json::array();
  s = store.Scan(ScanSpec{std::string(kOutboxTable), "", "", false, 0}, [&](std::string_view, std::string_view v) {
    if (pending.size() >= limit) {
      truncated = true;
      return false;
    }
    auto e = DecodeOutboxEntry(v);
    if (!e.ok()) return true;
    const Notification& n = e->n;
    pending.push_back({{"kind", KindName(n.kind)},
                       {"sink", e->sink},
                       {"attempts", e->attempts},
                       {"last_error", e->last_error},
                       {"app", n.app},
                       {"host", n.host},
                       {"severity", std::string(SeverityName(n.severity))},
                       {"count", n.count},
                       {"ts", n.ts_ms},
                       {"time", FormatRfc3339(n.ts_ms)},
                       {"summary", n.Summary()},
                       {"query_url", n.query_url}});
    return true;
  });
  if (!s.ok()) return s.error();
  json out = {{"groups", std::move(out_groups)}, {"pending", std::move(pending)}, {"truncated", truncated}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace logdex::alerting
