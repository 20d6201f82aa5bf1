#include "http/loki_api.h"

#include <re2/re2.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "common/ascii.h"
#include "common/severity.h"
#include "common/time_parse.h"
#include "http/logql.h"
#include "http/record_json.h"

namespace logdex {
namespace {

using nlohmann::json;
using Params = std::multimap<std::string, std::string>;
using Labels = std::map<std::string, std::string>;

constexpr int64_t kNsPerMs = 1'000'000;
// Times beyond about the year 5000 are refused, and ranges and steps over a
// year: every sum and difference below then fits int64 with room to spare.
constexpr int64_t kMaxTimeMs = 100'000'000'000'000;
constexpr int64_t kMaxSpanMs = 366LL * 86'400'000;

LokiReply Text(int status, const std::string& message) {
  return LokiReply{status, "text/plain; charset=utf-8", message + "\n"};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

LokiReply Json(const json& body) { return LokiReply{200, "application/json", Dump(body)}; }

LokiReply JsonText(std::string body) { return LokiReply{200, "application/json", std::move(body)}; }

Error BadRequest(std::string message) { return Error{Errc::kInvalidArgument, std::move(message)}; }

std::optional<std::string> Param(const Params& p, const std::string& key) {
  auto it = p.find(key);
  if (it == p.end()) return std::nullopt;
  return it->second;
}

std::string LevelName(Severity s) { return std::string(SeverityTableSuffix(s)); }

Result<int64_t> LokiTimeMsUnbounded(const std::string& name, std::string_view v);

// Loki's time parameters: integer nanoseconds (seconds when it has at most
// 10 digits, as Loki reads it), float seconds, or RFC 3339; within
// ±kMaxTimeMs.
Result<int64_t> LokiTimeMs(const std::string& name, std::string_view v) {
  auto t = LokiTimeMsUnbounded(name, v);
  if (t.ok() && (*t > kMaxTimeMs || *t < -kMaxTimeMs)) {
    return BadRequest(name + ": '" + std::string(v) + "' is too far from now");
  }
  return t;
}

Result<int64_t> LokiTimeMsUnbounded(const std::string& name, std::string_view v) {
  const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    int64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size()) return BadRequest(name + ": '" + std::string(v) + "' is out of range");
    return v.size() <= 10 ? n * 1000 : n / kNsPerMs;
  }
  if (v.find('.') != std::string_view::npos && v.find('T') == std::string_view::npos &&
      v.find('t') == std::string_view::npos) {
    double seconds = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
    if (ec == std::errc() && p == v.data() + v.size() && std::isfinite(seconds) && std::fabs(seconds) < 9e15) {
      return static_cast<int64_t>(std::floor(seconds * 1000));
    }
  }
  auto t = ParseTimestamp(v);
  if (!t.ok()) {
    return BadRequest(name + ": '" + std::string(v) +
                      "' is not a time (nanoseconds since the epoch, seconds with a fraction, or RFC 3339)");
  }
  return *t;
}

// A step: a duration (60s, 5m) or float seconds; at most a year.
Result<int64_t> LokiStepMs(std::string_view v) {
  int64_t ms = 0;
  if (auto d = ParseDuration(v); d.ok()) {
    ms = *d;
  } else {
    double seconds = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
    if (ec != std::errc() || p != v.data() + v.size() || !(seconds > 0) || seconds >= 1e12) {
      return BadRequest("step: '" + std::string(v) + "' is not a positive duration (60s, 5m) or number of seconds");
    }
    ms = std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000)));
  }
  if (ms > kMaxSpanMs) return BadRequest("step: '" + std::string(v) + "' is over a year");
  return ms;
}

struct TimeRange {
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // inclusive, as Loki's
};

Result<TimeRange> RangeOf(const Params& p, int64_t now_ms) {
  TimeRange r;
  r.end_ms = now_ms;
  if (auto end = Param(p, "end")) {
    auto t = LokiTimeMs("end", *end);
    if (!t.ok()) return t.error();
    r.end_ms = *t;
  }
  r.start_ms = r.end_ms - 3'600'000;
  if (auto start = Param(p, "start")) {
    auto t = LokiTimeMs("start", *start);
    if (!t.ok()) return t.error();
    r.start_ms = *t;
  }
  if (r.start_ms > r.end_ms) return BadRequest("start is after end");
  return r;
}

// A matcher checked on each record (the ones the engine cannot take).
struct RecordCheck {
  std::string label;  // app, host or a tag key
  logql::MatchOp op;
  std::string value;
  std::shared_ptr<RE2> re;  // =~ and !~

  bool Passes(std::string_view v) const {
    switch (op) {
      case logql::MatchOp::kEq: return v == value;
      case logql::MatchOp::kNeq: return v != value;
      case logql::MatchOp::kRe: return RE2::FullMatch(v, *re);
      case logql::MatchOp::kNre: return !RE2::FullMatch(v, *re);
    }
    return false;
  }
};

// A stream selector and its line filters, split into what the engine takes
// and what is checked per record.
struct Selector {
  std::string app, host;  // from =; empty: none
  std::set<Severity> severities{kAllSeverities.begin(), kAllSeverities.end()};
  std::vector<std::pair<std::string, std::string>> tags;  // k="v", v not empty
  std::vector<TextFilter> text;  // the line filters, as the engine's text filters (same meaning)
  TextMatcher lines;             // `text`, compiled
  std::vector<RecordCheck> checks;
  bool nothing = false;  // contradictory matchers: matches no record

  static std::string_view TagValue(const ResultRecord& r, std::string_view key) {
    for (const auto& [k, v] : r.tags) {
      if (k == key) return v;
    }
    return {};
  }
  std::string_view LabelValue(const ResultRecord& r, const std::string& label) const {
    if (label == "app") return r.app;
    if (label == "host") return r.host;
    return TagValue(r, label);
  }
  bool Passes(const ResultRecord& r) const {
    if (!severities.count(r.severity)) return false;
    for (const RecordCheck& c : checks) {
      if (!c.Passes(LabelValue(r, c.label))) return false;
    }
    return lines.Matches(r.message);
  }
  // Whether a catalog stream can hold matching records (app/host/level only).
  bool StreamPasses(const StreamInfo& s) const {
    if (!severities.count(s.severity)) return false;
    if (!app.empty() && s.app != app) return false;
    if (!host.empty() && s.host != host) return false;
    for (const RecordCheck& c : checks) {
      if (c.label == "app" && !c.Passes(s.app)) return false;
      if (c.label == "host" && !c.Passes(s.host)) return false;
    }
    return true;
  }
  bool ChecksOn(std::string_view label) const {
    return std::any_of(checks.begin(), checks.end(), [&](const RecordCheck& c) { return c.label == label; });
  }
  bool ChecksOnTags() const {
    return std::any_of(checks.begin(), checks.end(),
                       [](const RecordCheck& c) { return c.label != "app" && c.label != "host"; });
  }
};

Result<std::shared_ptr<RE2>> Compile(const std::string& pattern, const std::string& where) {
  RE2::Options o;
  o.set_log_errors(false);
  auto re = std::make_shared<RE2>(pattern, o);
  if (!re->ok()) return BadRequest(where + ": invalid regular expression '" + pattern + "': " + re->error());
  return re;
}

Result<Selector> Select(const logql::LogQuery& q) {
  Selector s;
  for (const logql::Matcher& m : q.matchers) {
    const std::string where = m.label + std::string(logql::MatchOpName(m.op)) + "\"" + m.value + "\"";
    std::shared_ptr<RE2> re;
    if (m.op == logql::MatchOp::kRe || m.op == logql::MatchOp::kNre) {
      auto compiled = Compile(m.value, where);
      if (!compiled.ok()) return compiled.error();
      re = *compiled;
    }
    if (m.label == "level") {
      std::set<Severity> keep;
      for (Severity sev : s.severities) {
        const std::string name = LevelName(sev);
        bool match = false;
        switch (m.op) {
          case logql::MatchOp::kEq: match = ParseSeverity(m.value) == sev; break;
          case logql::MatchOp::kNeq: match = ParseSeverity(m.value) != sev; break;
          case logql::MatchOp::kRe:
            match = RE2::FullMatch(name, *re) || RE2::FullMatch(std::string(SeverityName(sev)), *re);
            break;
          case logql::MatchOp::kNre:
            match = !RE2::FullMatch(name, *re) && !RE2::FullMatch(std::string(SeverityName(sev)), *re);
            break;
        }
        if (match) keep.insert(sev);
      }
      s.severities = std::move(keep);
      continue;
    }
    const bool stream_label = m.label == "app" || m.label == "host";
    if (m.op == logql::MatchOp::kEq && (stream_label || !m.value.empty())) {
      std::string& pinned = m.label == "app" ? s.app : s.host;
      if (stream_label) {
        if (!pinned.empty() && pinned != m.value) s.nothing = true;
        pinned = m.value;
        if (m.value.empty()) s.nothing = true;  // every record has an app and a host
      } else {
        s.tags.emplace_back(m.label, m.value);
      }
      continue;
    }
    s.checks.push_back(RecordCheck{m.label, m.op, m.value, re});
  }
  if (s.severities.empty()) s.nothing = true;
  for (const logql::LineFilter& f : q.filters) {
    const bool regex = f.op == logql::FilterOp::kRegex || f.op == logql::FilterOp::kNotRegex;
    const bool negate = f.op == logql::FilterOp::kNotContains || f.op == logql::FilterOp::kNotRegex;
    // An empty |= "" or |~ "" passes every line in Loki (and its negation
    // none); the engine refuses empty filters.
    if (f.text.empty()) {
      if (negate) s.nothing = true;
      continue;
    }
    s.text.push_back(TextFilter{regex ? TextFilterKind::kRegex : TextFilterKind::kContains, negate, f.text});
  }
  auto lines = TextMatcher::Compile(s.text);
  if (!lines.ok()) return BadRequest("line filter " + lines.error().message);
  s.lines = std::move(*lines);
  return s;
}

// The engine queries a selector runs as over [from, to): one, or one per app
// (or per app and host) of the catalog when the engine would need more than
// the selector names, or `by_app`/`by_host` ask for series of their own.
Result<std::vector<Query>> Plan(const QueryEngine& engine, const Selector& sel, int64_t from_ms, int64_t to_ms,
                                bool by_app, bool by_host) {
  Query base;
  base.app = sel.app;
  base.host = sel.host;
  if (sel.severities.size() < kAllSeverities.size()) base.severities.assign(sel.severities.begin(), sel.severities.end());
  base.tags = sel.tags;
  base.text = sel.text;
  base.from_ms = from_ms;
  base.to_ms = to_ms;
  if (sel.nothing) return std::vector<Query>{};
  const bool unplannable = base.app.empty() && base.host.empty() && base.tags.empty();
  const bool fan_app = base.app.empty() && (unplannable || by_app);
  const bool fan_host = base.host.empty() && by_host;
  if (!fan_app && !fan_host) return std::vector<Query>{base};
  auto streams = engine.Streams(from_ms, to_ms);
  if (!streams.ok()) return streams.error();
  std::set<std::pair<std::string, std::string>> targets;
  for (const StreamInfo& s : *streams) {
    if (!sel.StreamPasses(s)) continue;
    targets.emplace(fan_app ? s.app : base.app, fan_host ? s.host : base.host);
  }
  if (targets.size() > LokiApi::kMaxFanOut) {
    return BadRequest("the selector matches " + std::to_string(targets.size()) + (fan_host ? " streams" : " apps") +
                      " in the range; logdex runs a query for each, at most " +
                      std::to_string(LokiApi::kMaxFanOut) + ": name an app, a host or a tag with =");
  }
  std::vector<Query> out;
  for (const auto& [app, host] : targets) {
    Query q = base;
    q.app = app;
    q.host = host;
    out.push_back(std::move(q));
  }
  return out;
}

// Labels of a record's stream: app, host, level and its tags (a tag named
// like one of the three is left out).
Labels StreamLabels(const ResultRecord& r) {
  Labels l{{"app", r.app}, {"host", r.host}, {"level", LevelName(r.severity)}};
  for (const auto& [k, v] : r.tags) l.emplace(k, v);  // emplace: the first wins
  return l;
}

// Loki formats sample values with Go's strconv.FormatFloat(v, 'f', -1, 64).
std::string FormatValue(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf, p);
}

json Sample(int64_t t_ms, double v) {
  return json::array({static_cast<double>(t_ms) / 1000.0, FormatValue(v)});
}

json Success(json data) { return json{{"status", "success"}, {"data", std::move(data)}}; }

// Appends records as Loki's "streams" array: a stream per label set, in the
// order of first appearance, its values in the records' order. Written
// straight into `out` (record_json.h's strings) rather than built as an
// nlohmann object and dumped: the object's nodes and copies per line cost
// several times the writing, on every query_range answer and tail message.
// The bytes are that dump's, keys sorted (tests/server/record_json_test.cc).
void AppendStreams(std::string& out, std::span<const ResultRecord* const> records) {
  std::map<Labels, size_t> stream_of;
  std::vector<std::pair<const Labels*, std::vector<const ResultRecord*>>> streams;
  for (const ResultRecord* r : records) {
    auto [it, added] = stream_of.try_emplace(StreamLabels(*r), streams.size());
    if (added) streams.emplace_back(&it->first, std::vector<const ResultRecord*>());
    streams[it->second].second.push_back(r);
  }
  out += '[';
  for (size_t i = 0; i < streams.size(); ++i) {
    out += i ? ",{\"stream\":{" : "{\"stream\":{";
    bool first = true;
    for (const auto& [k, v] : *streams[i].first) {
      if (!first) out += ',';
      first = false;
      AppendJsonString(out, k);
      out += ':';
      AppendJsonString(out, v);
    }
    out += "},\"values\":[";
    first = true;
    for (const ResultRecord* r : streams[i].second) {
      out += first ? "[\"" : ",[\"";
      first = false;
      out += std::to_string(r->ts_ms * kNsPerMs);
      out += "\",";
      AppendJsonString(out, r->message);
      out += ']';
    }
    out += "]}";
  }
  out += ']';
}

class Handler {
 public:
  Handler(const QueryEngine& engine, const Clock& clock, const std::string& version, const Params& params)
      : engine_(engine), clock_(clock), version_(version), p_(params) {}

  Result<LokiReply> Run(std::string_view endpoint) {
    if (endpoint == "query_range") return QueryRange();
    if (endpoint == "query") return Instant();
    if (endpoint == "labels" || endpoint == "label") return LabelNames();
    if (endpoint.starts_with("label/") && endpoint.ends_with("/values")) {
      return LabelValues(endpoint.substr(6, endpoint.size() - 6 - 7));
    }
    if (endpoint == "series") return Series();
    if (endpoint == "index/stats") return Stats();
    // Loki 3 detects fields in lines; logdex does not (records carry their
    // tags as labels). Grafana's logs panels ask and show none.
    if (endpoint == "detected_fields") return Json(json{{"fields", json::array()}, {"limit", 1000}});
    if (endpoint.starts_with("detected_field/") && endpoint.ends_with("/values")) {
      return Json(json{{"values", json::array()}});
    }
    if (endpoint == "status/buildinfo") {
      return Json(json{{"version", version_}, {"revision", ""}, {"branch", ""}, {"buildUser", ""},
                       {"buildDate", ""}, {"goVersion", ""}});
    }
    if (endpoint == "tail") {
      return BadRequest("/loki/api/v1/tail is a WebSocket: connect with Upgrade: websocket");
    }
    return Text(404, "logdex does not serve /loki/api/v1/" + std::string(endpoint) +
                         " (it serves query_range, query, labels, label/<name>/values, series, index/stats, "
                         "status/buildinfo and tail)");
  }

 private:
  int64_t Now() const { return clock_.NowMs(); }

  Result<logql::Expr> ParsedQuery() const {
    auto text = Param(p_, "query");
    if (!text || text->empty()) return BadRequest("query: missing (a LogQL query)");
    return logql::Parse(*text);
  }

  Result<LokiReply> QueryRange() {
    auto expr = ParsedQuery();
    if (!expr.ok()) return expr.error();
    auto range = RangeOf(p_, Now());
    if (!range.ok()) return range.error();
    if (auto* log = std::get_if<logql::LogQuery>(&*expr)) return LogRange(*log, *range);
    int64_t step = std::max<int64_t>(1000, (range->end_ms - range->start_ms) / 250 / 1000 * 1000);
    if (auto s = Param(p_, "step")) {
      auto parsed = LokiStepMs(*s);
      if (!parsed.ok()) return parsed.error();
      step = *parsed;
    }
    const uint64_t points = static_cast<uint64_t>((range->end_ms - range->start_ms) / step) + 1;
    if (points > LokiApi::kMaxPoints) {
      return BadRequest("the range and step make " + std::to_string(points) + " points, over " +
                        std::to_string(LokiApi::kMaxPoints) + ": raise step");
    }
    std::vector<int64_t> times;
    for (uint64_t i = 0; i < points; ++i) times.push_back(range->start_ms + static_cast<int64_t>(i) * step);
    if (auto* scalar = std::get_if<logql::ScalarQuery>(&*expr)) {
      json values = json::array();
      for (int64_t t : times) values.push_back(Sample(t, scalar->value));
      json series = json::array({json{{"metric", json::object()}, {"values", std::move(values)}}});
      return Json(Success(json{{"resultType", "matrix"}, {"result", std::move(series)}}));
    }
    auto series = Metric(std::get<logql::MetricQuery>(*expr), times, step);
    if (!series.ok()) return series.error();
    json result = json::array();
    for (auto& [labels, values] : *series) {
      json samples = json::array();
      for (size_t i = 0; i < times.size(); ++i) {
        if (values[i] != 0) samples.push_back(Sample(times[i], values[i]));
      }
      if (!samples.empty()) result.push_back(json{{"metric", labels}, {"values", std::move(samples)}});
    }
    return Json(Success(json{{"resultType", "matrix"}, {"result", std::move(result)}}));
  }

  Result<LokiReply> Instant() {
    auto expr = ParsedQuery();
    if (!expr.ok()) return expr.error();
    int64_t t = Now();
    if (auto time = Param(p_, "time")) {
      auto parsed = LokiTimeMs("time", *time);
      if (!parsed.ok()) return parsed.error();
      t = *parsed;
    }
    if (std::holds_alternative<logql::LogQuery>(*expr)) {
      return BadRequest("a log query is answered by /loki/api/v1/query_range, not as an instant query");
    }
    if (auto* scalar = std::get_if<logql::ScalarQuery>(&*expr)) {
      json result = json::array({json{{"metric", json::object()}, {"value", Sample(t, scalar->value)}}});
      return Json(Success(json{{"resultType", "vector"}, {"result", std::move(result)}}));
    }
    const auto& m = std::get<logql::MetricQuery>(*expr);
    auto series = Metric(m, {t}, m.range_ms);
    if (!series.ok()) return series.error();
    json result = json::array();
    for (auto& [labels, values] : *series) {
      if (values[0] != 0) result.push_back(json{{"metric", labels}, {"value", Sample(t, values[0])}});
    }
    return Json(Success(json{{"resultType", "vector"}, {"result", std::move(result)}}));
  }

  Result<LokiReply> LogRange(const logql::LogQuery& log, const TimeRange& range) {
    auto limit = Limit();
    if (!limit.ok()) return limit.error();
    bool forward = false;
    if (auto d = Param(p_, "direction")) {
      // Loki reads it in any case.
      forward = EqualsNoCase(*d, "forward");
      if (!forward && !EqualsNoCase(*d, "backward")) {
        return BadRequest("direction: '" + *d + "' is not forward or backward");
      }
    }
    const int64_t t0 = clock_.MonotonicNs();
    auto found = Find(log, range, *limit, forward);
    if (!found.ok()) return found.error();
    const double seconds = static_cast<double>(clock_.MonotonicNs() - t0) / 1e9;
    json stats = {{"summary",
                   {{"execTime", seconds},
                    {"totalBytesProcessed", found->bytes},
                    {"totalEntriesReturned", found->records.size()},
                    {"totalChunksRead", found->chunks}}}};
    // Success({"resultType": "streams", "result": ..., "stats": ...}) plus
    // "warnings", with keys in the order nlohmann sorts them.
    std::string body = "{\"data\":{\"result\":";
    std::vector<const ResultRecord*> records;
    records.reserve(found->records.size());
    for (const ResultRecord& r : found->records) records.push_back(&r);
    AppendStreams(body, records);
    body += ",\"resultType\":\"streams\",\"stats\":";
    body += Dump(stats);
    body += "},\"status\":\"success\"";
    if (!found->warnings.empty()) {
      body += ",\"warnings\":";
      body += Dump(json(found->warnings));
    }
    body += '}';
    return JsonText(std::move(body));
  }

 public:
  // `limit`: default 100, at most the engine's max_limit.
  Result<uint32_t> Limit() const {
    uint32_t limit = 100;
    if (auto l = Param(p_, "limit")) {
      auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), limit);
      if (ec != std::errc() || p != l->data() + l->size() || limit == 0) {
        return BadRequest("limit: '" + *l + "' is not a positive integer");
      }
    }
    if (limit > engine_.options().max_limit) {
      return BadRequest("limit: " + std::to_string(limit) + " is over the most this server returns (" +
                        std::to_string(engine_.options().max_limit) + ")");
    }
    return limit;
  }

  struct Found {
    std::vector<ResultRecord> records;  // newest first; oldest first when forward
    std::vector<std::string> warnings;
    uint64_t bytes = 0, chunks = 0;
  };

  // The `limit` newest (forward: oldest) records of [range.start, range.end]
  // that pass the query.
  Result<Found> Find(const logql::LogQuery& log, const TimeRange& range, uint32_t limit, bool forward) {
    auto sel = Select(log);
    if (!sel.ok()) return sel.error();
    auto queries = Plan(engine_, *sel, range.start_ms, range.end_ms + 1, false, false);
    if (!queries.ok()) return queries.error();

    // One budget for the whole request, every page of every app: the
    // engine's time budget (else 30 s) and kMaxPages pages.
    const int64_t budget_ms = engine_.options().max_time_ms > 0 ? engine_.options().max_time_ms : 30'000;
    const int64_t deadline = clock_.MonotonicNs() + budget_ms * kNsPerMs;
    size_t pages = 0;
    uint64_t rows = 0;
    Found out;
    std::vector<ResultRecord>& found = out.records;
    for (Query q : *queries) {
      q.limit = forward ? engine_.options().max_limit : std::min(engine_.options().max_limit, std::max(limit, 100u));
      size_t matched = 0;
      for (;;) {
        // The engine's budgets are per page: the request keeps its own
        // totals against them too.
        const QueryOptions& eo = engine_.options();
        const bool over_bytes = eo.max_bytes_decompressed > 0 && out.bytes > eo.max_bytes_decompressed;
        const bool over_rows = eo.max_rows_scanned > 0 && rows > eo.max_rows_scanned;
        if (++pages > LokiApi::kMaxPages || clock_.MonotonicNs() > deadline || over_bytes || over_rows) {
          const std::string why =
              pages > LokiApi::kMaxPages ? "read " + std::to_string(LokiApi::kMaxPages) + " pages"
              : over_bytes ? "decompressed over query.max_bytes_decompressed (" + std::to_string(eo.max_bytes_decompressed) + " bytes)"
              : over_rows  ? "read over query.max_rows_scanned (" + std::to_string(eo.max_rows_scanned) + " rows)"
                           : "used its time budget (" + std::to_string(budget_ms) + " ms)";
          if (forward) {
            return Error{Errc::kResourceExhausted, "direction=forward reads the range to its end, and this request " +
                                                       why + " first: narrow the range or use direction=backward"};
          }
          out.warnings.push_back("logdex " + why + " before finding " + std::to_string(limit) +
                                 " matching records: older ones" +
                                 (queries->size() > 1 ? std::string(", and those of apps not read yet,") : "") +
                                 " may be missing; narrow the query");
          break;
        }
        auto answer = engine_.Run(q);
        if (!answer.ok()) return answer.error();
        met_.corrupt_chunks += answer->stats.corrupt_chunks;
        out.bytes += answer->stats.bytes_decompressed;
        out.chunks += answer->stats.chunks_read;
        rows += answer->stats.rows_scanned;
        for (ResultRecord& r : answer->records) {
          if (!sel->Passes(r)) continue;
          found.push_back(std::move(r));
          ++matched;
        }
        if (answer->next_cursor.empty() || (!forward && matched >= limit)) break;
        if (forward && found.size() > LokiApi::kMaxForwardRecords) {
          return BadRequest("direction=forward reads the range to its end; it holds more than " +
                            std::to_string(LokiApi::kMaxForwardRecords) +
                            " matching records: narrow the range or use direction=backward");
        }
        q.cursor = answer->next_cursor;
      }
      if (!out.warnings.empty()) break;
    }
    // Newest first (stable: one query's order is kept among equal times).
    std::stable_sort(found.begin(), found.end(),
                     [](const ResultRecord& a, const ResultRecord& b) { return a.ts_ms > b.ts_ms; });
    if (forward) {
      if (found.size() > limit) found.erase(found.begin(), found.end() - limit);
      std::reverse(found.begin(), found.end());
    } else if (found.size() > limit) {
      found.resize(limit);
    }
    return out;
  }

 private:
  // Series of a metric query at `times`: labels -> a value per time.
  Result<std::map<Labels, std::vector<double>>> Metric(const logql::MetricQuery& m, const std::vector<int64_t>& times,
                                                      int64_t step_ms) {
    bool by_app = true, by_host = true, by_level = true;  // without sum: a series per stream
    if (m.sum) {
      by_app = by_host = by_level = false;
      for (const std::string& l : m.by) {
        if (l == "app") by_app = true;
        else if (l == "host") by_host = true;
        else if (l == "level" || l == "detected_level") by_level = true;  // Loki detects a level only when none is given
        else return BadRequest("sum by (" + l + "): logdex groups metric queries by app, host and level");
      }
    }
    auto sel = Select(m.log);
    if (!sel.ok()) return sel.error();
    if (sel->ChecksOnTags()) {
      return BadRequest("a metric query takes tag matchers with = only (counts come from the index)");
    }
    // App and host matchers other than = hold by construction: the plan runs
    // one query per app (and host) that passes them.
    const bool app_checks = sel->ChecksOn("app"), host_checks = sel->ChecksOn("host");
    if (app_checks && !sel->app.empty()) return BadRequest("app given with = and another matcher");
    if (host_checks && !sel->host.empty()) return BadRequest("host given with = and another matcher");
    const int64_t range = m.range_ms;
    if (range > kMaxSpanMs) return BadRequest("the range [" + std::to_string(range) + "ms] is over a year");
    const int64_t grid = std::gcd(range, step_ms);
    const int64_t from = times.front() - range, to = times.back();
    if (static_cast<uint64_t>((to - from) / grid) + 2 > engine_.options().max_volume_buckets) {
      return BadRequest("the range [" + std::to_string(range) + "ms] and step " + std::to_string(step_ms) +
                        "ms are counted in buckets of their gcd (" + std::to_string(grid) + " ms): over " +
                        std::to_string(engine_.options().max_volume_buckets) +
                        " of them here; make the step a multiple of the range, or shorten the time range");
    }
    auto queries = Plan(engine_, *sel, from, to, by_app || app_checks, by_host || host_checks);
    if (!queries.ok()) return queries.error();

    std::map<Labels, std::vector<double>> series;
    const double scale = m.func == logql::RangeFunc::kRate ? 1000.0 / static_cast<double>(range) : 1.0;
    for (const Query& q : *queries) {
      VolumeQuery vq;
      vq.filter = q;
      vq.step_ms = grid;
      auto answer = engine_.Volume(vq);
      if (!answer.ok()) return answer.error();
      met_.corrupt_chunks += answer->stats.corrupt_chunks;
      met_.unreadable_minute_counts += answer->stats.unreadable_minute_counts;
      if (answer->buckets.empty()) continue;
      const int64_t b0 = answer->buckets.front().start_ms;
      const size_t n = answer->buckets.size();
      // The first bucket whose counted part starts at or after x (the first
      // bucket counts from `from` on, where it starts before it).
      auto index_at = [&](int64_t x) -> size_t {
        if (x <= std::max(b0, from)) return 0;
        const int64_t i = (x - b0 + grid - 1) / grid;  // bounded times: no overflow
        return static_cast<size_t>(std::clamp<int64_t>(i, 0, static_cast<int64_t>(n)));
      };
      for (Severity sev : kAllSeverities) {
        if (!sel->severities.count(sev)) continue;
        const size_t si = VolumeSeverityIndex(sev);
        std::vector<uint64_t> prefix(n + 1, 0);
        for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + answer->buckets[i].counts.by_severity[si];
        if (prefix[n] == 0) continue;
        Labels labels;
        if (by_app) labels["app"] = q.app;
        if (by_host) labels["host"] = q.host;
        if (by_level) labels["level"] = LevelName(sev);
        std::vector<double>& values = series[labels];
        values.resize(times.size(), 0);
        for (size_t k = 0; k < times.size(); ++k) {
          const size_t lo = index_at(times[k] - range), hi = index_at(times[k]);
          if (hi > lo) values[k] += static_cast<double>(prefix[hi] - prefix[lo]) * scale;
        }
      }
    }
    return series;
  }

  Result<LokiReply> LabelNames() {
    auto keys = engine_.TagKeys();
    if (!keys.ok()) return keys.error();
    std::set<std::string> names{"app", "host", "level"};
    names.insert(keys->begin(), keys->end());
    return Json(Success(json(names)));
  }

  // The catalog streams in the request's range that pass its `query` (or every one).
  Result<std::vector<StreamInfo>> CatalogStreams(const std::string& query_param) {
    auto range = RangeOf(p_, Now());
    if (!range.ok()) return range.error();
    auto streams = engine_.Streams(range->start_ms, range->end_ms + 1);
    if (!streams.ok()) return streams.error();
    auto q = Param(p_, query_param);
    if (!q || q->empty()) return streams;
    auto expr = logql::Parse(*q);
    if (!expr.ok()) return expr.error();
    const logql::LogQuery* log = std::get_if<logql::LogQuery>(&*expr);
    if (!log) return BadRequest(query_param + ": expected a stream selector {...}");
    auto sel = Select(*log);
    if (!sel.ok()) return sel.error();
    std::vector<StreamInfo> out;
    for (StreamInfo& s : *streams) {
      if (!sel->nothing && sel->StreamPasses(s)) out.push_back(std::move(s));
    }
    return out;
  }

  Result<LokiReply> LabelValues(std::string_view name) {
    if (name != "app" && name != "host" && name != "level") {
      json body = Success(json::array());
      body["warnings"] = json::array({"logdex lists the values of app, host and level; tag values are not listed"});
      return Json(body);
    }
    auto streams = CatalogStreams("query");
    if (!streams.ok()) return streams.error();
    std::set<std::string> values;
    for (const StreamInfo& s : *streams) {
      values.insert(name == "app" ? s.app : name == "host" ? s.host : LevelName(s.severity));
    }
    return Json(Success(json(values)));
  }

  Result<LokiReply> Series() {
    auto range = RangeOf(p_, Now());
    if (!range.ok()) return range.error();
    auto streams = engine_.Streams(range->start_ms, range->end_ms + 1);
    if (!streams.ok()) return streams.error();
    std::vector<Selector> selectors;
    for (auto [it, end] = p_.equal_range("match[]"); it != end; ++it) {
      auto expr = logql::Parse(it->second);
      if (!expr.ok()) return expr.error();
      const logql::LogQuery* log = std::get_if<logql::LogQuery>(&*expr);
      if (!log || !log->filters.empty()) return BadRequest("match[]: expected a stream selector {...}");
      auto sel = Select(*log);
      if (!sel.ok()) return sel.error();
      if (!sel->tags.empty() || sel->ChecksOnTags()) {
        return BadRequest("match[]: logdex lists series by app, host and level matchers only");
      }
      selectors.push_back(std::move(*sel));
    }
    if (selectors.empty()) return BadRequest("match[]: missing (a stream selector, repeatable)");
    json result = json::array();
    for (const StreamInfo& s : *streams) {
      const bool match = std::any_of(selectors.begin(), selectors.end(),
                                     [&](const Selector& sel) { return !sel.nothing && sel.StreamPasses(s); });
      if (match) result.push_back(Labels{{"app", s.app}, {"host", s.host}, {"level", LevelName(s.severity)}});
    }
    return Json(Success(std::move(result)));
  }

  Result<LokiReply> Stats() {
    auto expr = ParsedQuery();
    if (!expr.ok()) return expr.error();
    const logql::LogQuery* log = std::get_if<logql::LogQuery>(&*expr);
    if (auto* m = std::get_if<logql::MetricQuery>(&*expr)) log = &m->log;
    if (!log) return BadRequest("query: expected a stream selector {...}");
    auto range = RangeOf(p_, Now());
    if (!range.ok()) return range.error();
    logql::LogQuery selector_only{log->matchers, {}};
    auto sel = Select(selector_only);
    if (!sel.ok()) return sel.error();
    const int64_t to = range->end_ms + 1;
    // App and host matchers other than = hold through one query per app (and host) that passes them.
    auto queries = Plan(engine_, *sel, range->start_ms, to, sel->ChecksOn("app"), sel->ChecksOn("host"));
    if (!queries.ok()) return queries.error();
    uint64_t entries = 0, chunks = 0;
    for (const Query& q : *queries) {
      VolumeQuery vq;
      vq.filter = q;
      vq.step_ms = std::max<int64_t>(1, to - range->start_ms);
      auto answer = engine_.Volume(vq);
      if (!answer.ok()) return answer.error();
      met_.corrupt_chunks += answer->stats.corrupt_chunks;
      met_.unreadable_minute_counts += answer->stats.unreadable_minute_counts;
      entries += answer->totals.total;
      chunks += answer->stats.chunks_returned;
    }
    auto streams = engine_.Streams(range->start_ms, to);
    if (!streams.ok()) return streams.error();
    const uint64_t n = static_cast<uint64_t>(std::count_if(
        streams->begin(), streams->end(), [&](const StreamInfo& s) { return !sel->nothing && sel->StreamPasses(s); }));
    return Json(json{{"streams", n}, {"chunks", chunks}, {"entries", entries}, {"bytes", 0}});
  }

  const QueryEngine& engine_;
  const Clock& clock_;
  const std::string& version_;
  const Params& p_;

 public:
  LokiReply met_;  // its counts only (LokiReply::corrupt_chunks, unreadable_minute_counts)
};

}  // namespace

LokiApi::LokiApi(const QueryEngine& engine, const Clock& clock, std::string version)
    : engine_(engine), clock_(clock), version_(std::move(version)) {}

Result<LokiTail> LokiApi::TailPlan(const Params& params) const {
  auto text = Param(params, "query");
  if (!text || text->empty()) return BadRequest("query: missing (a LogQL log query)");
  auto expr = logql::Parse(*text);
  if (!expr.ok()) return expr.error();
  const auto* log = std::get_if<logql::LogQuery>(&*expr);
  if (log == nullptr) return BadRequest("tail takes a log query (a stream selector and line filters), not a metric query");
  auto sel = Select(*log);
  if (!sel.ok()) return sel.error();
  LokiTail t;
  t.filter.app = sel->app;
  t.filter.host = sel->host;
  if (sel->severities.size() < kAllSeverities.size()) {
    t.filter.severities.assign(sel->severities.begin(), sel->severities.end());
  }
  t.filter.tags = sel->tags;
  t.filter.text = sel->text;
  t.passes = [s = std::make_shared<const Selector>(std::move(*sel))](const ResultRecord& r) {
    return !s->nothing && s->Passes(r);
  };
  if (auto d = Param(params, "delay_for")) {
    int delay = -1;
    auto [p, ec] = std::from_chars(d->data(), d->data() + d->size(), delay);
    if (ec != std::errc() || p != d->data() + d->size() || delay < 0 || delay > 5) {
      return BadRequest("delay_for: '" + *d + "' is not a whole number of seconds from 0 to 5");
    }
  }
  const int64_t now = clock_.NowMs();
  t.start_ms = now - 3'600'000;
  if (auto start = Param(params, "start")) {
    auto parsed = LokiTimeMs("start", *start);
    if (!parsed.ok()) return parsed.error();
    t.start_ms = *parsed;
  }
  Handler h(engine_, clock_, version_, params);
  auto limit = h.Limit();
  if (!limit.ok()) return limit.error();
  t.limit = *limit;
  t.query = std::make_shared<const logql::LogQuery>(*log);
  return t;
}

Result<std::string> LokiApi::TailBackfill(const LokiTail& tail) const {
  const Params none;
  Handler h(engine_, clock_, version_, none);
  const int64_t now = clock_.NowMs();
  if (tail.start_ms > now) return std::string();
  auto found = h.Find(*tail.query, TimeRange{tail.start_ms, now}, tail.limit, false);
  if (!found.ok()) return found.error();
  std::reverse(found->records.begin(), found->records.end());
  return TailMessage(tail, found->records, 0, now);
}

std::string LokiApi::TailMessage(const LokiTail& tail, const std::vector<ResultRecord>& records,
                                 uint64_t missed_batches, int64_t now_ms) {
  std::vector<const ResultRecord*> pass;
  for (const ResultRecord& r : records) {
    if (tail.passes(r)) pass.push_back(&r);
  }
  if (pass.empty() && missed_batches == 0) return {};
  // {"dropped_entries": [...], "streams": [...]}, keys sorted as nlohmann sorts them.
  std::string msg = "{";
  if (missed_batches > 0) {
    msg += "\"dropped_entries\":";
    msg += Dump(json::array({json{{"labels", {{"__logdex_missed_batches__", std::to_string(missed_batches)}}},
                                  {"timestamp", std::to_string(now_ms * kNsPerMs)}}}));
    msg += ',';
  }
  msg += "\"streams\":";
  AppendStreams(msg, pass);
  msg += '}';
  return msg;
}

Result<LokiReply> LokiApi::Handle(std::string_view endpoint, const Params& params) const {
  Handler handler(engine_, clock_, version_, params);
  Result<LokiReply> reply = handler.Run(endpoint);
  if (!reply.ok()) {
    const Error e = reply.error();  // a copy: `reply` is assigned below
    if (e.code == Errc::kInvalidArgument) {
      reply = Text(400, e.message);
    } else if (e.code == Errc::kResourceExhausted) {
      reply = Text(422, e.message);  // what earlier queries of the request met still counts
    } else {
      return reply;
    }
  }
  reply->corrupt_chunks = handler.met_.corrupt_chunks;
  reply->unreadable_minute_counts = handler.met_.unreadable_minute_counts;
  return reply;
}

}  // namespace logdex
