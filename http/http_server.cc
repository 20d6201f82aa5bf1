#include "http/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <variant>

#include "common/ascii.h"
#include "common/base64url.h"
#include "common/row_keys.h"
#include "common/severity.h"
#include "common/time_parse.h"
#include "http/bounded_head_server.h"
#include "http/loki_api.h"
#include "http/record_json.h"
#include "http/tail.h"
#include "http/ui_assets.h"
#include "http/websocket.h"

namespace logdex {
namespace {

using nlohmann::json;

constexpr const char* kQueryPath = "/api/v1/query";
constexpr const char* kVolumePath = "/api/v1/volume";
constexpr std::string_view kLokiPrefix = "/loki/api/v1/";
constexpr const char* kJsonType = "application/json";
constexpr const char* kTextType = "text/plain; charset=utf-8";
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";

// The parameters an endpoint takes: the query's filters (app, host,
// severity, tag, the text filters, from, to, since, scan) and its own.
struct EndpointParams {
  const char* known;                // every parameter, for "unknown parameter" answers
  bool paging;                      // limit and cursor (/api/v1/query)
  std::vector<std::string> extra;   // single-valued parameters of its own, returned as given
  bool range = true;                // from, to, since (required) and scan
};

// Filters every endpoint takes; the text ones are TextFilterOf's and contains.
const EndpointParams kQueryParams{
    "app, host, severity, tag, contains, word, phrase, regex, not_contains, not_word, not_phrase, not_regex, from, to, "
    "since, limit, cursor, scan",
    true, {}};
const EndpointParams kVolumeParams{
    "app, host, severity, tag, contains, word, phrase, regex, not_contains, not_word, not_phrase, not_regex, from, to, "
    "since, scan, step, exact",
    false, {"step", "exact"}};
const EndpointParams kTailParams{
    "app, host, severity, tag, contains, word, phrase, regex, not_contains, not_word, not_phrase, not_regex", false, {},
    false};

// The text filters other than `contains` (which is given once), each of
// which may be given more than once (all must pass).
std::optional<TextFilter> TextFilterOf(const std::string& param, const std::string& value) {
  std::string_view name = param;
  TextFilter f;
  f.text = value;
  f.negate = name.starts_with("not_");
  if (f.negate) name.remove_prefix(4);
  if (name == "contains" && f.negate) f.kind = TextFilterKind::kContains;
  else if (name == "word") f.kind = TextFilterKind::kWord;
  else if (name == "phrase") f.kind = TextFilterKind::kPhrase;
  else if (name == "regex") f.kind = TextFilterKind::kRegex;
  else return std::nullopt;
  return f;
}
constexpr const char* kTailPath = "/api/v1/tail";

// Log text may hold any bytes: invalid UTF-8 becomes U+FFFD instead of an exception.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ErrorBody(const std::string& message, const std::string& parameter = {}) {
  json j = {{"error", message}};
  if (!parameter.empty()) j["parameter"] = parameter;
  return j;
}

void SetJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), kJsonType);
}

// The metrics label of a path: a fixed set, never the raw path.
const char* EndpointOf(const std::string& path) {
  if (path == "/metrics") return "metrics";
  if (path == "/healthz") return "healthz";
  if (path == "/readyz") return "readyz";
  if (path == kQueryPath) return "query";
  if (path == kVolumePath) return "volume";
  if (path == kTailPath) return "tail";
  if (path == "/api/v1/alerts") return "alerts";
  if (path == "/" || path.starts_with("/ui/")) return "ui";
  if (path.starts_with(kLokiPrefix)) return "loki";
  return "other";
}

// Equality whose time depends only on the length of `want`, not on where
// `got` first differs.
bool ConstantTimeEquals(std::string_view got, std::string_view want) {
  unsigned diff = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? static_cast<unsigned char>(got[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A request the API refuses: which parameter (if one), and why.
struct BadRequest {
  std::string parameter;
  std::string message;
};

// Cursor signatures: "<payload>.<mac>", mac = base64url(first 16 bytes of
// HMAC-SHA256(key, "logdex cursor v1\n" + payload)). The payload itself may hold '.'.
constexpr size_t kCursorMacBytes = 16;

std::string CursorMac(const std::string& key, std::string_view payload) {
  const std::string data = "logdex cursor v1\n" + std::string(payload);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &mac_size);
  LOGDEX_CHECK(ok != nullptr && mac_size >= kCursorMacBytes);
  return EncodeBase64Url(std::string_view(reinterpret_cast<const char*>(mac), kCursorMacBytes));
}

std::string SignCursor(const std::string& key, const std::string& payload) {
  return payload + "." + CursorMac(key, payload);
}

// The payload of a cursor whose mac verifies; nullopt for anything else.
std::optional<std::string> VerifyCursor(const std::string& key, std::string_view cursor) {
  const size_t dot = cursor.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view payload = cursor.substr(0, dot);
  const std::string_view mac = cursor.substr(dot + 1);
  const std::string want = CursorMac(key, payload);
  if (mac.size() != want.size() || CRYPTO_memcmp(mac.data(), want.data(), want.size()) != 0) return std::nullopt;
  return std::string(payload);
}

// A cursor of a `since` query carries the range the first page resolved to:
// "r.<from_ms>.<to_ms>.<engine cursor>" ('.' is not in the engine's base64url).
constexpr std::string_view kRangeCursorPrefix = "r.";

std::string WrapCursor(int64_t from_ms, int64_t to_ms, const std::string& inner) {
  return std::string(kRangeCursorPrefix) + std::to_string(from_ms) + "." + std::to_string(to_ms) + "." + inner;
}

bool ParseInt64(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

struct RangeCursor {
  int64_t from_ms = 0, to_ms = 0;
  std::string inner;
};

std::optional<RangeCursor> UnwrapCursor(std::string_view c) {
  c.remove_prefix(kRangeCursorPrefix.size());
  const size_t a = c.find('.');
  if (a == std::string_view::npos) return std::nullopt;
  const size_t b = c.find('.', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  RangeCursor r;
  if (!ParseInt64(c.substr(0, a), r.from_ms) || !ParseInt64(c.substr(a + 1, b - a - 1), r.to_ms)) return std::nullopt;
  r.inner = std::string(c.substr(b + 1));
  return r;
}

// A parsed request: the engine query plus how its range was given.
struct ParsedQuery {
  Query query;
  bool since = false;  // the range came from `since` (next_cursor pins it)
  std::map<std::string, std::string> extra;  // the endpoint's own parameters that were given
};

// Adds the severities of one `severity` value ("ERROR,FATAL") to `q`.
std::optional<BadRequest> AddSeverities(const std::string& value, Query& q) {
  std::string_view rest = value;
  for (;;) {
    const size_t comma = rest.find(',');
    const std::string_view item = Trim(rest.substr(0, comma));
    if (item.empty()) return BadRequest{"severity", "parameter 'severity' has an empty item in '" + value + "'"};
    std::optional<Severity> s = ParseSeverity(item);
    if (!s) {
      return BadRequest{"severity", "parameter 'severity': '" + std::string(item) +
                                        "' is not a severity (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, an alias such "
                                        "as WARNING or CRIT, or a syslog number 0-7)"};
    }
    if (std::find(q.severities.begin(), q.severities.end(), *s) == q.severities.end()) q.severities.push_back(*s);
    if (comma == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(comma + 1);
  }
}

// Verifies a `cursor` and sets q.cursor; a cursor of a `since` query also
// gives the range its first page resolved to (`pinned`). Nothing in a cursor
// is used before its signature verifies.
std::optional<BadRequest> ApplyCursor(const std::string& value, const std::string& cursor_key, Query& q,
                                      std::optional<RangeCursor>* pinned) {
  std::optional<std::string> payload = VerifyCursor(cursor_key, value);
  if (!payload) {
    return BadRequest{"cursor",
                      "parameter 'cursor': invalid cursor: it was changed, or it is not a next_cursor of this "
                      "store's servers (give the next_cursor of the previous page as is)"};
  }
  if (!payload->starts_with(kRangeCursorPrefix)) {
    q.cursor = *payload;
    return std::nullopt;
  }
  *pinned = UnwrapCursor(*payload);
  if (!*pinned) return BadRequest{"cursor", "parameter 'cursor': invalid cursor: not a cursor from this server"};
  q.cursor = (*pinned)->inner;
  return std::nullopt;
}

// The query's range: `since` (a later page continues the range its cursor
// pinned), or `from` and `to`.
std::optional<BadRequest> ResolveRange(const std::string* from, const std::string* to, const std::string* since,
                                       const std::optional<RangeCursor>& pinned, const Clock& clock,
                                       ParsedQuery& out) {
  if (since && (from || to)) {
    return BadRequest("since", std::string("parameter 'since' cannot be combined with '") + (from ? "from" : "to") +
                                   "': give since, or from and to");
  }
  if (since) {
    Result<int64_t> d = ParseDuration(*since);
    if (!d.ok()) return BadRequest("since", "parameter 'since': " + d.error().message);
    out.since = true;
    if (pinned) {
      // Later pages continue the range of the first page.
      out.query.from_ms = pinned->from_ms;
      out.query.to_ms = pinned->to_ms;
    } else {
      // A huge duration must not overflow (undefined behaviour) into a short range.
      const int64_t now = clock.NowMs();
      if (__builtin_sub_overflow(now, *d, &out.query.from_ms) ||
          __builtin_add_overflow(now, int64_t{1}, &out.query.to_ms)) {
        return BadRequest("since", "parameter 'since': '" + *since +
                                       "' is too long (the range would start before the earliest representable time)");
      }
    }
  } else if (from || to) {
    if (!from) return BadRequest("from", "parameter 'from' is missing: 'to' needs 'from'");
    if (!to) return BadRequest("to", "parameter 'to' is missing: 'from' needs 'to'");
    // An unencoded '+' in a query string decodes to a space: "10:00:00 01:00"
    // can only have meant the offset "+01:00".
    auto time_of = [&](const char* key, std::string text) -> std::variant<int64_t, BadRequest> {
      if (const size_t sp = text.find(' '); sp != std::string::npos && sp >= 19) text[sp] = '+';
      Result<int64_t> t = ParseTimestamp(text);
      if (!t.ok()) return BadRequest(key, std::string("parameter '") + key + "': " + t.error().message);
      return *t;
    };
    auto f = time_of("from", *from);
    if (auto* e = std::get_if<BadRequest>(&f)) return *e;
    auto t = time_of("to", *to);
    if (auto* e = std::get_if<BadRequest>(&t)) return *e;
    out.query.from_ms = std::get<int64_t>(f);
    out.query.to_ms = std::get<int64_t>(t);
    if (out.query.to_ms <= out.query.from_ms) {
      return BadRequest("to", "parameter 'to' must be after 'from' (the range [from, to) is empty)");
    }
  } else {
    return BadRequest("", "missing time range: give 'since' (e.g. since=1h) or 'from' and 'to'");
  }
  return std::nullopt;
}

// Turns the query string into a Query, or says which parameter is wrong.
// One parser for every endpoint that takes the query's filters (`endpoint`
// names what else it takes).
std::variant<ParsedQuery, BadRequest> ParseQueryParams(const httplib::Params& params, const Clock& clock,
                                                       const std::string& cursor_key,
                                                       const EndpointParams& endpoint = kQueryParams) {
  auto bad = [](std::string parameter, std::string message) -> BadRequest {
    return BadRequest{std::move(parameter), std::move(message)};
  };
  ParsedQuery out;
  Query& q = out.query;
  std::map<std::string, std::string> single;  // parameters given once
  static const char* const kSingle[] = {"app", "host", "contains", "from", "to", "since", "scan"};
  auto is_single = [&](const std::string& key) {
    if (!endpoint.range && (key == "from" || key == "to" || key == "since" || key == "scan")) return false;
    return std::find(std::begin(kSingle), std::end(kSingle), key) != std::end(kSingle) ||
           (endpoint.paging && (key == "limit" || key == "cursor")) ||
           std::find(endpoint.extra.begin(), endpoint.extra.end(), key) != endpoint.extra.end();
  };
  for (const auto& [key, value] : params) {
    if (key == "severity") {
      if (auto e = AddSeverities(value, q)) return *e;
    } else if (key == "tag") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) {
        return bad("tag", "parameter 'tag': '" + value + "' must be key=value with a non-empty key");
      }
      q.tags.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (std::optional<TextFilter> f = TextFilterOf(key, value)) {
      if (auto compiled = TextMatcher::Compile({*f}); !compiled.ok()) {
        // The error starts with the parameter's name.
        return bad(key, "parameter '" + key + "'" + compiled.error().message.substr(key.size()));
      }
      q.text.push_back(std::move(*f));
    } else if (is_single(key)) {
      if (!single.emplace(key, value).second) {
        return bad(key, "parameter '" + key + "' is given more than once; give it once");
      }
    } else {
      return bad(key, "unknown parameter '" + key + "' (known: " + endpoint.known + ")");
    }
  }
  if (q.text.size() > TextMatcher::kMaxFilters) {
    const std::string key = TextFilterParam(q.text.back());
    return bad(key, "parameter '" + key + "': at most " + std::to_string(TextMatcher::kMaxFilters) +
                        " text filters in one query (" + std::to_string(q.text.size()) + " given)");
  }
  auto get = [&](const char* key) -> const std::string* {
    auto it = single.find(key);
    return it == single.end() ? nullptr : &it->second;
  };
  for (const char* key : {"app", "host", "contains"}) {
    if (const std::string* v = get(key)) {
      if (v->empty()) return bad(key, std::string("parameter '") + key + "' is empty; leave it out to match any");
    }
  }
  for (const std::string& key : endpoint.extra) {
    if (const std::string* v = get(key.c_str())) out.extra[key] = *v;
  }
  if (const std::string* v = get("app")) q.app = *v;
  if (const std::string* v = get("host")) q.host = *v;
  if (const std::string* v = get("contains")) q.contains = *v;
  if (const std::string* v = get("limit")) {
    uint32_t limit = 0;
    auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), limit);
    if (v->empty() || ec != std::errc() || p != v->data() + v->size()) {
      return bad("limit", "parameter 'limit': '" + *v + "' is not a whole number of records");
    }
    if (limit == 0) return bad("limit", "parameter 'limit' must be at least 1");
    q.limit = limit;
  }
  if (const std::string* v = get("scan")) {
    if (*v == "true" || *v == "1") {
      q.scan = true;
    } else if (*v == "false" || *v == "0") {
      q.scan = false;
    } else {
      return bad("scan", "parameter 'scan': '" + *v + "' is not true or false");
    }
  }
  std::optional<RangeCursor> pinned;
  if (const std::string* v = get("cursor")) {
    if (auto e = ApplyCursor(*v, cursor_key, q, &pinned)) return *e;
  }
  if (!endpoint.range) return out;
  if (auto e = ResolveRange(get("from"), get("to"), get("since"), pinned, clock, out)) return *e;
  return out;
}

json StatsToJson(const QueryStats& s) {
  return {{"plan", s.plan},
          {"seeks", s.seeks},
          {"rows_scanned", s.rows_scanned},
          {"chunks_read", s.chunks_read},
          {"main_row_batches", s.main_row_batches},
          {"main_row_batch_failures", s.main_row_batch_failures},
          {"chunks_returned", s.chunks_returned},
          {"bytes_decompressed", s.bytes_decompressed},
          {"index_rows_without_main", s.index_rows_without_main},
          {"meta_rows", s.meta_rows},
          {"token_filters_read", s.token_filters_read},
          {"chunks_skipped_by_tokens", s.chunks_skipped_by_tokens},
          {"superseded_parts", s.superseded_parts},
          {"runs", s.runs}};
}

json CountsToJson(const VolumeCounts& c) {
  json by = json::object();
  for (size_t i = 0; i < kAllSeverities.size(); ++i) {
    by[std::string(SeverityName(kAllSeverities[i]))] = c.by_severity[i];
  }
  return by;
}

json VolumeToJson(const VolumeAnswer& a, const Query& q) {
  json buckets = json::array();
  for (const VolumeBucket& b : a.buckets) {
    buckets.push_back({{"start", b.start_ms},
                       {"time", FormatTimestamp(b.start_ms)},
                       {"counts", CountsToJson(b.counts)},
                       {"total", b.counts.total}});
  }
  json stats = StatsToJson(a.stats);
  stats["corrupt_chunks"] = a.stats.corrupt_chunks;
  stats["minute_counts_read"] = a.stats.minute_counts_read;
  stats["unreadable_minute_counts"] = a.stats.unreadable_minute_counts;
  return {{"from", q.from_ms},
          {"to", q.to_ms},
          {"step_ms", a.step_ms},
          {"exact", a.read_records},
          {"buckets", std::move(buckets)},
          {"totals", {{"counts", CountsToJson(a.totals)}, {"total", a.totals.total}}},
          {"inexact_records", a.inexact_records},
          {"stats", std::move(stats)}};
}

// The volume endpoint's own parameters, `step` and `exact`, into `vq`.
std::optional<BadRequest> ParseVolumeParams(const ParsedQuery& pq, uint64_t max_buckets, VolumeQuery& vq) {
  const Query& q = pq.query;
  if (auto it = pq.extra.find("exact"); it != pq.extra.end()) {
    if (it->second == "true" || it->second == "1") {
      vq.read_records = true;
    } else if (it->second != "false" && it->second != "0") {
      return BadRequest{"exact", "parameter 'exact': '" + it->second + "' is not true or false"};
    }
  }
  if (q.tags.size() > 1 && !vq.read_records && q.contains.empty() && q.text.empty() && !q.scan) {
    return BadRequest{"tag", "parameter 'tag': counting from the index takes one tag (the tag index is per chunk); "
                             "add exact=true to count the records that carry all " +
                                 std::to_string(q.tags.size())};
  }
  if (auto it = pq.extra.find("step"); it != pq.extra.end()) {
    const std::string& v = it->second;
    int64_t ms = 0;
    if (!v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      if (!ParseInt64(v, ms) || ms < 1) {
        return BadRequest{"step", "parameter 'step': '" + v + "' ms is not a width of at least 1 ms"};
      }
    } else {
      Result<int64_t> d = ParseDuration(v);
      if (!d.ok()) return BadRequest{"step", "parameter 'step': " + d.error().message + " (or give milliseconds)"};
      if (*d < 1) return BadRequest{"step", "parameter 'step': '" + v + "' is not a width of at least 1 ms"};
      ms = *d;
    }
    vq.step_ms = ms;
  } else {
    vq.step_ms = DefaultVolumeStep(q.from_ms, q.to_ms);
  }
  std::optional<uint64_t> n = VolumeBucketCount(q.from_ms, q.to_ms, vq.step_ms);
  if (!n) return BadRequest{"step", "parameter 'step': the buckets of this range do not fit in int64 ms"};
  if (*n > max_buckets) {
    return BadRequest{"step", "parameter 'step': " + std::to_string(vq.step_ms) + " ms makes " + std::to_string(*n) +
                                  " buckets over the range, over the maximum of " + std::to_string(max_buckets) +
                                  "; give a longer step or a shorter range"};
  }
  return std::nullopt;
}

// The answer's body: {"next_cursor":..,"records":[..],"stats":{..},
// "stopped_early":..}, the keys in nlohmann's order, the records written
// straight (http/record_json.h).
std::string AnswerBody(const QueryAnswer& a, const std::string& next_cursor) {
  std::string out = "{\"next_cursor\":";
  out += next_cursor.empty() ? std::string("null") : Dump(json(next_cursor));
  out += ",\"records\":[";
  for (size_t i = 0; i < a.records.size(); ++i) {
    if (i > 0) out += ',';
    AppendRecordJson(out, a.records[i]);
  }
  out += "],\"stats\":";
  out += Dump(StatsToJson(a.stats));
  // The budget that ended the page early: next_cursor continues it.
  out += ",\"stopped_early\":";
  out += a.stopped_early.empty() ? std::string("null") : Dump(json(a.stopped_early));
  out += '}';
  return out;
}

}  // namespace

Result<std::string> LoadOrCreateCursorKey(TableStore& store) {
  constexpr std::string_view kRow = kCursorKeyRow;
  constexpr size_t kSize = 32;
  auto stored = store.Get(kMetaTable, kRow);
  if (!stored.ok()) return stored.error();
  if (stored->has_value() && (*stored)->size() == kSize) return **stored;
  unsigned char bytes[kSize];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return Error{Errc::kUnavailable, "cannot draw random bytes for the cursor key"};
  }
  const std::string key(reinterpret_cast<const char*>(bytes), sizeof bytes);
  if (store.conditional_writes()) {
    // Members of a shared store that start together all find no key: only
    // the first write may land, and every member reads back the one that
    // did (a plain write would leave each with its own key, and a cursor of
    // one refused by the others).
    auto wrote = store.CheckAndPut(kMetaTable, kRow, *stored, key);
    if (!wrote.ok()) return wrote.error();
  } else {
    WriteBatch batch;
    batch.Put(kMetaTable, std::string(kRow), key);
    if (Status s = store.Write(batch); !s.ok()) return s.error();
  }
  auto again = store.Get(kMetaTable, kRow);
  if (!again.ok()) return again.error();
  if (!again->has_value() || (*again)->size() != kSize) {
    return Error{Errc::kIOError, "the cursor key written to the meta table does not read back"};
  }
  if (**again == key) {
    spdlog::info("http: created the query cursor key in the store's meta table");
  } else {
    spdlog::info("http: another member created the query cursor key at the same time; using its key");
  }
  return **again;
}

Status ParseListenAddress(std::string_view text, HttpServerOptions& options) {
  auto bad = [&](const std::string& why) {
    return Status(Errc::kInvalidArgument, "listen address '" + std::string(text) + "': " + why);
  };
  std::string host;
  std::string_view port_text;
  if (text.starts_with("[")) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("want [IPv6]:PORT");
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("want HOST:PORT");
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("put an IPv6 address in brackets: [::1]:PORT");
  }
  if (host.empty()) return bad("the host is empty (use 0.0.0.0 for every interface)");
  int port = -1;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  options.host = std::move(host);
  options.port = port;
  return Status::Ok();
}

class HttpServer::Impl {
 public:
  Impl(HttpServerOptions options, const QueryEngine& engine, prometheus::Registry& registry,
       ReadinessCheck readiness, const Clock& clock)
      : options_(WithCursorKey(std::move(options))),
        engine_(engine),
        loki_(engine, clock, options_.loki_version),
        registry_(registry),
        readiness_(std::move(readiness)),
        clock_(clock),
        requests_(prometheus::BuildCounter()
                      .Name("logdex_http_requests_total")
                      .Help("HTTP requests answered, by endpoint (metrics, healthz, readyz, query, other) and "
                            "status code")
                      .Register(registry)),
        query_seconds_(prometheus::BuildHistogram()
                           .Name("logdex_http_query_duration_seconds")
                           .Help("Time to answer GET /api/v1/query, from request to response body, in seconds")
                           .Register(registry)
                           .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                             0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})),
        corrupt_chunks_(prometheus::BuildCounter()
                            .Name("logdex_query_corrupt_chunks_total")
                            .Help("Stored chunks a query skipped because they no longer decode (corrupt on disk, "
                                  "or a payload that passed ingest's header check but is not valid snappy)")
                            .Register(registry)
                            .Add({})),
        unreadable_minute_counts_(
            prometheus::BuildCounter()
                .Name("logdex_query_unreadable_minute_counts_total")
                .Help("Merged chunks a volume count read because their record counts per minute (table cnt) were "
                      "missing or did not decode: counted by reading them, at a chunk read's cost")
                .Register(registry)
                .Add({})),
        queries_rejected_(prometheus::BuildCounter()
                              .Name("logdex_http_queries_rejected_total")
                              .Help("Queries answered 503 busy because http.max_concurrent_queries queries were "
                                    "already running")
                              .Register(registry)
                              .Add({})),
        refused_(prometheus::BuildCounter()
                     .Name("logdex_http_requests_refused_total")
                     .Help("Requests refused before any body was read, by reason (body_too_large: 413, "
                           "unauthorized: 401; head_too_large: 431 and head_timeout: 408, request line and "
                           "headers over http's head limits, the connection closed unread)")
                     .Register(registry)),
        budget_exhausted_(prometheus::BuildCounter()
                              .Name("logdex_query_budget_exhausted_total")
                              .Help("Queries or pages stopped over their budget, by budget: time, rows_scanned, "
                                    "bytes_decompressed, scan_records (a page with a cursor to continue, or a 422 "
                                    "where the query cannot continue)")
                              .Register(registry)),
        internal_errors_(prometheus::BuildCounter()
                             .Name("logdex_http_internal_errors_total")
                             .Help("Answers 500 (and 503 for an unavailable store) whose error text was logged with "
                                   "an error id instead of being sent")
                             .Register(registry)
                             .Add({})),
        error_id_seed_(std::random_device{}()),
        server_(RequestHeadLimits{options_.max_head_bytes, options_.head_timeout_ms},
                [this](HeadRefusal why, const std::string& peer) { HeadRefused(why, peer); }) {
    for (const char* budget : {"time", "rows_scanned", "bytes_decompressed", "scan_records"}) {
      budget_exhausted_.Add({{"budget", budget}});
    }
    for (const char* reason : {"body_too_large", "unauthorized", "head_too_large", "head_timeout"}) {
      refused_.Add({{"reason", reason}});
    }
    Routes();
  }

  Status Start() {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (started_) return Status(Errc::kFailedPrecondition, "the HTTP server was already started");
    const int threads = std::max(2, options_.worker_threads);
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_.set_read_timeout(std::max(1, options_.read_timeout_seconds), 0);
    server_.set_write_timeout(std::max(1, options_.write_timeout_seconds), 0);
    // Backs up the pre-routing check (which refuses such bodies unread).
    server_.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
    // SO_REUSEADDR only: no SO_REUSEPORT, so a second server on a busy port
    // fails to start instead of silently sharing it.
    server_.set_socket_options([this](auto sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd_ = static_cast<int>(sock);  // the last one given is the one bound
    });
    // An idle keep-alive connection holds a worker (and Stop()) for at most this long.
    server_.set_keep_alive_timeout(1);
    int port = -1;
    if (options_.port == 0) {
      port = server_.bind_to_any_port(options_.host);
    } else if (server_.bind_to_port(options_.host, options_.port)) {
      port = options_.port;
    }
    if (port <= 0) {
      return Status(Errc::kUnavailable, "cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                                            " (address in use, or not an address of this machine)");
    }
    // Debian's cpp-httplib (a compiled 0.11) listens with a backlog of 5
    // (CPPHTTPLIB_LISTEN_BACKLOG, fixed in the library): under a connection
    // flood the kernel dropped new connections' SYNs, and a /healthz probe
    // waited out a 1 s SYN retransmit (a kubelet's default probe timeout).
    // Listening again sets the queue to the kernel's limit.
    if (::listen(listen_fd_, SOMAXCONN) != 0) {
      spdlog::warn("http: could not raise the listen backlog to {}: {}; new connections may wait under a flood",
                   SOMAXCONN, std::strerror(errno));
    }
    started_ = true;
    port_ = port;
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      std::lock_guard<std::mutex> l(done_mu_);
      listen_returned_ = true;
      done_cv_.notify_all();
    });
    spdlog::info("http: serving on {}:{} ({} threads, at most {} queries at once)", options_.host, port, threads,
                 options_.max_concurrent_queries);
    return Status::Ok();
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;  // live-tail streams end within their next wait (250 ms)
    // Let them send their end event before the server stops writing
    // (httplib stops calling content providers once it shuts down).
    for (int i = 0; i < 300 && tail_streams_.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // httplib's stop() acts only once the listen loop runs; until then, wait
    // for it (it starts at once: the socket is already bound).
    std::unique_lock<std::mutex> l(done_mu_);
    while (!listen_returned_) {
      if (server_.is_running()) {
        server_.stop();
        break;
      }
      done_cv_.wait_for(l, std::chrono::milliseconds(1));
    }
    l.unlock();
    thread_.join();
  }

  int port() const { return port_.load(); }

 private:
  // Without a configured key, a random one of this process.
  static HttpServerOptions WithCursorKey(HttpServerOptions o) {
    if (o.cursor_key.empty()) {
      unsigned char key[32];
      LOGDEX_CHECK(RAND_bytes(key, sizeof key) == 1);
      o.cursor_key.assign(reinterpret_cast<const char*>(key), sizeof key);
    }
    return o;
  }

  void Count(const httplib::Request& req, const httplib::Response& res) {
    requests_.Add({{"endpoint", EndpointOf(req.path)}, {"code", std::to_string(res.status)}}).Increment();
  }

  // A fresh id for an error whose text is logged, not sent: 16 hex digits.
  std::string NewErrorId() {
    uint64_t x = error_id_seed_ + 0x9e3779b97f4a7c15ull * ++error_ids_;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
    return buf;
  }

  // Logs `detail` with a new error id and answers `status` with `public_message` and the id.
  void InternalError(const httplib::Request& req, httplib::Response& res, int status, const std::string& public_message,
                     const std::string& detail) {
    const std::string id = NewErrorId();
    internal_errors_.Increment();
    spdlog::warn("http: {} {} failed (error id {}): {}", req.method, req.path, id, detail);
    json body = ErrorBody(public_message + " (error id " + id + "; the server log has the details)");
    body["error_id"] = id;
    SetJson(res, status, body);
  }

  // Runs `handler`, turns exceptions into 500s, and counts the answer. Auth
  // was checked before (PreRouting).
  template <class F>
  httplib::Server::Handler Wrap(F handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        handler(req, res);
      } catch (const std::exception& e) {
        InternalError(req, res, 500, "internal error", e.what());
      }
      Count(req, res);
    };
  }

  // The UI's files hold no data: the page must load to ask for the token.
  static bool NeedsAuth(const std::string& path) {
    return path != "/healthz" && path != "/readyz" && path != "/" && !path.starts_with("/ui/");
  }

  // True when no token is configured or the request carries it; otherwise fills a 401.
  bool Authorized(const httplib::Request& req, httplib::Response& res) const {
    if (options_.bearer_token.empty()) return true;
    const std::string header = req.get_header_value("Authorization");
    constexpr std::string_view kScheme = "Bearer ";
    std::string why;
    if (header.empty()) {
      why = "missing Authorization header: this server needs 'Authorization: Bearer <token>'";
    } else if (!StartsWithNoCase(header, kScheme)) {
      why = "the Authorization header must use the Bearer scheme";
    } else if (!ConstantTimeEquals(std::string_view(header).substr(kScheme.size()), options_.bearer_token)) {
      why = "wrong bearer token";
    } else {
      return true;
    }
    res.set_header("WWW-Authenticate", "Bearer realm=\"logdex\"");
    SetJson(res, 401, ErrorBody(why));
    return false;
  }

  // Runs once the headers are read, before httplib reads a body: auth, then
  // the body's size. Handled = answered here, the body left unread.
  httplib::Server::HandlerResponse PreRouting(const httplib::Request& req, httplib::Response& res) {
    const char* refused = nullptr;
    if (NeedsAuth(req.path) && !Authorized(req, res)) {
      refused = "unauthorized";
    } else if (const std::string te = req.get_header_value("Transfer-Encoding"); !te.empty()) {
      SetJson(res, 413, ErrorBody("request bodies of unknown length (Transfer-Encoding: " + te +
                                  ") are not accepted: no endpoint takes a body"));
      refused = "body_too_large";
    } else if (req.get_header_value_count("Content-Length") > 1) {
      SetJson(res, 400, ErrorBody("more than one Content-Length header"));
      res.set_header("Connection", "close");
      refused = "body_too_large";
    } else if (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0" &&
               !(req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" ||
                 req.method == "PRI")) {
      // httplib reads no body for these methods: its bytes would be taken for
      // the next request on the connection.
      SetJson(res, 413, ErrorBody("a " + req.method + " request must not carry a body: no endpoint takes one"));
      refused = "body_too_large";
    } else if (req.has_header("Content-Length")) {
      uint64_t length = 0;
      const std::string v = req.get_header_value("Content-Length");
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
      if (ec != std::errc() || p != v.data() + v.size() || length > options_.max_body_bytes) {
        SetJson(res, 413, ErrorBody("request body of " + v + " bytes is over the limit of " +
                                    std::to_string(options_.max_body_bytes) + " bytes (http.max_body_bytes)"));
        refused = "body_too_large";
      }
    }
    if (!refused) return httplib::Server::HandlerResponse::Unhandled;
    // A body left unread: the connection cannot carry another request.
    const bool has_body = req.has_header("Transfer-Encoding") ||
                          (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
    if (has_body) {
      res.set_header("Connection", "close");
    }
    refused_.Add({{"reason", refused}}).Increment();
    Count(req, res);
    return httplib::Server::HandlerResponse::Handled;
  }

  void Routes() {
    server_.set_pre_routing_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) { return PreRouting(req, res); }));
    server_.Get("/healthz", Wrap([](const httplib::Request&, httplib::Response& res) {
                  res.status = 200;
                  res.set_content("ok\n", kTextType);
                }));
    server_.Get("/readyz", Wrap([this](const httplib::Request&, httplib::Response& res) {
                  ReadyState state = readiness_ ? readiness_() : ReadyState{true, ""};
                  res.status = state.ready ? 200 : 503;
                  res.set_content(state.ready ? (state.reason.empty() ? "ready\n" : "ready: " + state.reason + "\n")
                                              : "not ready: " + state.reason + "\n",
                                  kTextType);
                }));
    server_.Get("/metrics", Wrap([this](const httplib::Request&, httplib::Response& res) {
                  std::string body = prometheus::TextSerializer().Serialize(registry_.Collect());
                  if (body.empty() || body.back() != '\n') body += '\n';
                  res.status = 200;
                  res.set_content(std::move(body), kMetricsType);
                }));
    server_.Get(kQueryPath, Wrap([this](const httplib::Request& req, httplib::Response& res) {
                  const int64_t start_ns = clock_.MonotonicNs();
                  HandleQuery(req, res);
                  query_seconds_.Observe(static_cast<double>(clock_.MonotonicNs() - start_ns) / 1e9);
                }));
    server_.Get(kVolumePath,
                Wrap([this](const httplib::Request& req, httplib::Response& res) { HandleVolume(req, res); }));
    for (const UiAsset& asset : UiAssets()) {
      auto serve = Wrap([&asset](const httplib::Request&, httplib::Response& res) {
        res.status = 200;
        res.set_header("Content-Security-Policy",
                       "default-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                       "base-uri 'none'; form-action 'self'");
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("Cache-Control", "no-cache");
        res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type).c_str());
      });
      server_.Get(std::string(asset.path), serve);
      if (asset.path == "/ui/index.html") server_.Get("/", serve);
    }
    server_.Get(kTailPath, Wrap([this](const httplib::Request& req, httplib::Response& res) { HandleTail(req, res); }));
    server_.Get("/api/v1/alerts",
                Wrap([this](const httplib::Request& req, httplib::Response& res) { HandleAlerts(req, res); }));
    server_.Get(std::string(kLokiPrefix) + "tail",
                Wrap([this](const httplib::Request& req, httplib::Response& res) { HandleLokiTail(req, res); }));
    server_.Get(R"(/loki/api/v1/(.*))",
                Wrap([this](const httplib::Request& req, httplib::Response& res) { HandleLoki(req, res); }));
    // Paths with no handler (and requests httplib itself refuses): a JSON
    // error (auth was checked before routing). Handlers above set a body, so
    // this only fills the empty ones.
    server_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                                  httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (!NeedsAuth(req.path) || Authorized(req, res)) {
        SetJson(res, res.status, ErrorBody(res.status == 404 ? "no such endpoint: " + req.path
                                                             : "request refused (HTTP " + std::to_string(res.status) +
                                                                   ")"));
      }
      Count(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }));
    server_.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      InternalError(req, res, 500, "internal error", what);
    });
  }

  // Holds one of max_concurrent_queries slots, or none when all are taken.
  class QuerySlot {
   public:
    explicit QuerySlot(std::atomic<int>& running, int limit) : running_(running) {
      int n = running_.load();
      while (n < limit) {
        if (running_.compare_exchange_weak(n, n + 1)) {
          held_ = true;
          return;
        }
      }
    }
    ~QuerySlot() {
      if (held_) running_.fetch_sub(1);
    }
    QuerySlot(const QuerySlot&) = delete;
    QuerySlot& operator=(const QuerySlot&) = delete;
    bool held() const { return held_; }

   private:
    std::atomic<int>& running_;
    bool held_ = false;
  };

  // A request head cut off by BoundedHeadServer: counted, and logged once
  // every 10 s at most (a flood of them must not flood the log).
  void HeadRefused(HeadRefusal why, const std::string& peer) {
    const bool large = why == HeadRefusal::kTooLarge;
    refused_.Add({{"reason", large ? "head_too_large" : "head_timeout"}}).Increment();
    const uint64_t refused = ++heads_refused_;
    const int64_t now_ns = clock_.MonotonicNs();
    int64_t last = last_head_log_ns_.load();
    if ((last == 0 || now_ns - last >= 10'000'000'000) && last_head_log_ns_.compare_exchange_strong(last, now_ns)) {
      spdlog::warn("http: refused the request head of {} ({}); {} heads refused so far "
                   "(logdex_http_requests_refused_total{{reason=\"head_too_large|head_timeout\"}})",
                   peer,
                   large ? "over " + std::to_string(options_.max_head_bytes) + " bytes, answered 431"
                         : "not complete within " + std::to_string(options_.head_timeout_ms) + " ms, answered 408",
                   refused);
    }
  }

  // Answers the 503 busy of a query that found no slot.
  void Busy(httplib::Response& res) {
    queries_rejected_.Increment();
    // Once per busy spell (at most every 10 s), not per refused query.
    const int64_t now_ns = clock_.MonotonicNs();
    int64_t last = last_busy_log_ns_.load();
    if ((last == 0 || now_ns - last >= 10'000'000'000) && last_busy_log_ns_.compare_exchange_strong(last, now_ns)) {
      spdlog::warn("http: {} queries are running (http.max_concurrent_queries); refusing more with 503 busy "
                   "(logdex_http_queries_rejected_total counts them)",
                   options_.max_concurrent_queries);
    }
    res.set_header("Retry-After", "1");
    json body = ErrorBody("busy: " + std::to_string(options_.max_concurrent_queries) +
                          " queries are already running (http.max_concurrent_queries); retry after 1 s");
    body["reason"] = "busy";
    SetJson(res, 503, body);
  }

  // Answers an engine error: 400, 422 (budget), 503 or 500.
  void EngineError(const httplib::Request& req, httplib::Response& res, const Error& err, const QueryStats& stats) {
    if (err.code == Errc::kInvalidArgument) {
      SetJson(res, 400, ErrorBody(err.message));
    } else if (err.code == Errc::kResourceExhausted && !stats.budget_exhausted.empty()) {
      budget_exhausted_.Add({{"budget", stats.budget_exhausted}}).Increment();
      spdlog::info("http: query over its {} budget: {}", stats.budget_exhausted, err.message);
      json body = ErrorBody(err.message);
      body["budget"] = stats.budget_exhausted;
      SetJson(res, 422, body);
    } else if (err.code == Errc::kUnavailable) {
      InternalError(req, res, 503, "the store is unavailable; retry later", err.ToString());
    } else {
      InternalError(req, res, 500, "internal error", err.ToString());
    }
  }

  void HandleQuery(const httplib::Request& req, httplib::Response& res) {
    QuerySlot slot(running_queries_, std::max(1, options_.max_concurrent_queries));
    if (!slot.held()) return Busy(res);
    auto parsed = ParseQueryParams(req.params, clock_, options_.cursor_key);
    if (auto* e = std::get_if<BadRequest>(&parsed)) {
      SetJson(res, 400, ErrorBody(e->message, e->parameter));
      return;
    }
    const ParsedQuery& pq = std::get<ParsedQuery>(parsed);
    QueryStats stats;
    Result<QueryAnswer> answer = engine_.Run(pq.query, &stats);
    if (!answer.ok()) return EngineError(req, res, answer.error(), stats);
    CountCorruptChunks("query", answer->stats.corrupt_chunks);
    if (!answer->stopped_early.empty()) {
      budget_exhausted_.Add({{"budget", answer->stopped_early}}).Increment();
      spdlog::debug("http: a query page stopped early at its {} budget, with a cursor to continue",
                    answer->stopped_early);
    }
    std::string next = answer->next_cursor;
    if (pq.since && !next.empty()) next = WrapCursor(pq.query.from_ms, pq.query.to_ms, next);
    if (!next.empty()) next = SignCursor(options_.cursor_key, next);
    res.status = 200;
    res.set_content(AnswerBody(*answer, next), kJsonType);
  }

  // GET /api/v1/volume: the query's filters (same parser), step and exact.
  void HandleVolume(const httplib::Request& req, httplib::Response& res) {
    QuerySlot slot(running_queries_, std::max(1, options_.max_concurrent_queries));
    if (!slot.held()) return Busy(res);
    auto parsed = ParseQueryParams(req.params, clock_, options_.cursor_key, kVolumeParams);
    if (auto* e = std::get_if<BadRequest>(&parsed)) {
      SetJson(res, 400, ErrorBody(e->message, e->parameter));
      return;
    }
    const ParsedQuery& pq = std::get<ParsedQuery>(parsed);
    VolumeQuery vq;
    vq.filter = pq.query;
    if (std::optional<BadRequest> e = ParseVolumeParams(pq, engine_.options().max_volume_buckets, vq)) {
      SetJson(res, 400, ErrorBody(e->message, e->parameter));
      return;
    }
    QueryStats stats;
    Result<VolumeAnswer> answer = engine_.Volume(vq, &stats);
    if (!answer.ok()) return EngineError(req, res, answer.error(), stats);
    CountCorruptChunks("volume query", answer->stats.corrupt_chunks);
    CountUnreadableMinuteCounts(answer->stats.unreadable_minute_counts);
    SetJson(res, 200, VolumeToJson(*answer, vq.filter));
  }

  // GET /api/v1/tail: server-sent events of the records written from now
  // on that pass the filters (http/tail.h). Each record is an event
  // `data: {record}`; `event: gap` says batches were missed; `event: end`
  // says why the stream ended; a comment line every 10 s keeps idle
  // connections open and finds clients that left.
  void HandleTail(const httplib::Request& req, httplib::Response& res) {
    if (options_.tail == nullptr) {
      SetJson(res, 404, ErrorBody("live tail is not served here (no ingest in this process)"));
      return;
    }
    auto parsed = ParseQueryParams(req.params, clock_, options_.cursor_key, kTailParams);
    if (auto* e = std::get_if<BadRequest>(&parsed)) {
      SetJson(res, 400, ErrorBody(e->message, e->parameter));
      return;
    }
    auto sub = options_.tail->Subscribe(std::get<ParsedQuery>(parsed).query);
    if (!sub.ok()) {
      res.set_header("Retry-After", "5");
      json body = ErrorBody(sub.error().message);
      body["reason"] = sub.error().code == Errc::kResourceExhausted ? "busy" : "stopping";
      SetJson(res, 503, body);
      return;
    }
    std::shared_ptr<TailSubscription> s = std::move(*sub);
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto idle_since = std::make_shared<int64_t>(clock_.MonotonicNs());
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, s, idle_since](size_t, httplib::DataSink& sink) {
          TailBatch b = s->Next(250);
          const bool stopping = stopping_.load();  // once: the end event and done() go together
          std::string out;
          for (const ResultRecord& r : b.records) {
            out += "data: ";
            AppendRecordJson(out, r);
            out += "\n\n";
          }
          if (b.missed_batches > 0) {
            out += "event: gap\ndata: " + Dump(json{{"missed_batches", b.missed_batches}}) + "\n\n";
          }
          if (b.ended || stopping) {
            out += "event: end\ndata: " +
                   Dump(json{{"reason", b.ended ? b.end_reason : std::string("the server is stopping")}}) + "\n\n";
          }
          const int64_t now = clock_.MonotonicNs();
          if (out.empty() && now - *idle_since >= 10'000'000'000) out = ": keep-alive\n\n";
          if (!out.empty()) {
            *idle_since = now;
            if (!sink.write(out.data(), out.size())) return false;  // the client left
          }
          if (b.ended || stopping) sink.done();
          return true;
        },
        [this, s](bool) {
          s->Close();
          tail_streams_.fetch_sub(1);
        });
    tail_streams_.fetch_add(1);
  }

  // GET /api/v1/alerts?since=24h&limit=100: the web UI's alerts panel.
  void HandleAlerts(const httplib::Request& req, httplib::Response& res) {
    if (!options_.alerts) {
      SetJson(res, 404, ErrorBody("alerting is not enabled on this server"));
      return;
    }
    int64_t since = 24 * 3'600'000;
    size_t limit = 100;
    for (const auto& [key, value] : req.params) {
      if (key == "since") {
        auto d = ParseDuration(value);
        if (!d.ok()) return SetJson(res, 400, ErrorBody("parameter 'since': " + d.error().message, "since"));
        since = *d;
      } else if (key == "limit") {
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), limit);
        if (ec != std::errc() || p != value.data() + value.size() || limit == 0 || limit > 1000) {
          return SetJson(res, 400, ErrorBody("parameter 'limit': '" + value + "' is not a number from 1 to 1000", "limit"));
        }
      } else {
        return SetJson(res, 400, ErrorBody("unknown parameter '" + key + "' (known: since, limit)", key));
      }
    }
    QuerySlot slot(running_queries_, std::max(1, options_.max_concurrent_queries));
    if (!slot.held()) return Busy(res);
    auto body = options_.alerts(clock_.NowMs() - since, limit);
    if (!body.ok()) return EngineError(req, res, body.error(), QueryStats{});
    res.status = 200;
    res.set_content(std::move(*body), kJsonType);
  }

  // GET /loki/api/v1/...: LokiApi, under the query API's slots.
  void HandleLoki(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = req.path.substr(kLokiPrefix.size());
    const bool cheap = endpoint == "status/buildinfo";
    QuerySlot slot(running_queries_, cheap ? INT32_MAX : std::max(1, options_.max_concurrent_queries));
    if (!slot.held()) return Busy(res);
    Result<LokiReply> reply = loki_.Handle(endpoint, req.params);
    if (!reply.ok()) return EngineError(req, res, reply.error(), QueryStats{});
    CountCorruptChunks("loki query", reply->corrupt_chunks);
    CountUnreadableMinuteCounts(reply->unreadable_minute_counts);
    res.status = reply->status;
    res.set_content(std::move(reply->body), reply->content_type);
  }

  // A degraded mode: stored chunks a query (`what`) skipped because they do
  // not decode.
  void CountCorruptChunks(std::string_view what, uint64_t n) const {
    if (n == 0) return;
    corrupt_chunks_.Increment(static_cast<double>(n));
    spdlog::warn("http: {} skipped {} stored chunks that do not decode", what, n);
  }

  // A degraded mode: merged chunks read because their `cnt` rows were
  // missing or did not decode (indexer/minute_counts.h).
  void CountUnreadableMinuteCounts(uint64_t n) const {
    if (n == 0) return;
    unreadable_minute_counts_.Increment(static_cast<double>(n));
    spdlog::warn("http: volume count read {} merged chunks whose record counts per minute are missing or unreadable",
                 n);
  }

  static void SetText(httplib::Response& res, int status, const std::string& text) {
    res.status = status;
    res.set_content(text + "\n", "text/plain; charset=utf-8");
  }

  // GET /loki/api/v1/tail: Loki's live tail, a WebSocket (http/loki_api.h
  // says what it sends, http/websocket.h why by hand). The request is
  // checked and its first message read here, answering errors in plain
  // HTTP; then the connection is taken over (RunLokiTail) on this worker
  // thread, which it holds while the client listens, as /api/v1/tail does.
  void HandleLokiTail(const httplib::Request& req, httplib::Response& res) {
    if (options_.tail == nullptr) return SetText(res, 404, "live tail is not served here (no ingest in this process)");
    const auto has_token = [](std::string_view list, std::string_view token) {
      while (!list.empty()) {
        const size_t comma = list.find(',');
        std::string_view item = list.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (item.size() == token.size() && StartsWithNoCase(item, token)) return true;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
      return false;
    };
    if (!has_token(req.get_header_value("Upgrade"), "websocket") ||
        !has_token(req.get_header_value("Connection"), "upgrade")) {
      return SetText(res, 400,
                     "/loki/api/v1/tail is a WebSocket: connect with 'Connection: Upgrade' and 'Upgrade: websocket' "
                     "(or use /api/v1/tail, server-sent events)");
    }
    if (req.get_header_value("Sec-WebSocket-Version") != "13") {
      res.set_header("Sec-WebSocket-Version", "13");
      return SetText(res, 426, "Sec-WebSocket-Version must be 13");
    }
    // Browsers let any page open a WebSocket to any server (no CORS for
    // them): without a token, a page elsewhere could read the logs. A
    // browser always sends Origin; its host must be this server's (Grafana's
    // Go client and other programs send none). Host names only, without
    // ports and case: a proxy in front may drop or change the port.
    if (req.has_header("Origin")) {
      const std::string origin_header = req.get_header_value("Origin");
      const std::string host_header = req.get_header_value("Host");
      const auto host_of = [](std::string_view authority) {
        if (const size_t scheme = authority.find("://"); scheme != std::string_view::npos) {
          authority.remove_prefix(scheme + 3);
        }
        authority = authority.substr(0, authority.find('/'));
        // [v6]:port, or name:port
        const size_t end = authority.starts_with('[') ? authority.find(']') + 1 : authority.rfind(':');
        std::string h(authority.substr(0, std::min(end, authority.size())));
        for (char& c : h) c = AsciiLower(c);
        return h;
      };
      if (host_of(origin_header).empty() || host_of(origin_header) != host_of(host_header)) {
        return SetText(res, 403, "Origin '" + origin_header + "' is not this server: a WebSocket from another site's page is refused");
      }
    }
    const std::string key = req.get_header_value("Sec-WebSocket-Key");
    if (!websocket::ValidClientKey(key)) {
      return SetText(res, 400, "Sec-WebSocket-Key must be the base64 of 16 bytes");
    }
    auto plan = loki_.TailPlan(req.params);
    if (!plan.ok()) return SetText(res, 400, plan.error().message);
    auto sub = options_.tail->Subscribe(plan->filter);
    if (!sub.ok()) {
      res.set_header("Retry-After", "5");
      return SetText(res, 503, sub.error().message);
    }
    std::shared_ptr<TailSubscription> s = std::move(*sub);
    // Subscribed first, then the records so far: a record written in between
    // can come twice, never not at all.
    Result<std::string> first = std::string();
    {
      QuerySlot slot(running_queries_, std::max(1, options_.max_concurrent_queries));
      if (!slot.held()) {
        s->Close();
        return Busy(res);
      }
      first = loki_.TailBackfill(*plan);
    }
    if (!first.ok()) {
      s->Close();
      const Error& e = first.error();
      if (e.code == Errc::kInvalidArgument) return SetText(res, 400, e.message);
      if (e.code == Errc::kResourceExhausted) return SetText(res, 422, e.message);
      return EngineError(req, res, e, QueryStats{});
    }
    tail_streams_.fetch_add(1);
    auto run = [this, s, tail = std::move(*plan), first = std::move(*first), key](int sock,
                                                                                  std::string already_read) mutable {
      struct Done {  // whatever way RunLokiTail leaves
        Impl* self;
        TailSubscription* sub;
        ~Done() {
          sub->Close();
          self->tail_streams_.fetch_sub(1);
        }
      } done{this, s.get()};
      RunLokiTail(sock, std::move(already_read), key, *s, tail, std::move(first));
    };
    if (!BoundedHeadServer::TakeOver(std::move(run))) {
      s->Close();
      tail_streams_.fetch_sub(1);
      return InternalError(req, res, 500, "internal error", "WebSocket takeover outside a BoundedHeadServer request");
    }
    res.status = 101;  // written by RunLokiTail; counted as such
  }

  void RunLokiTail(int sock, std::string already_read, const std::string& key, TailSubscription& s,
                   const LokiTail& tail, std::string first) {
    websocket::ServerConnection ws(sock, std::move(already_read), std::max(1, options_.write_timeout_seconds) * 1000);
    if (!ws.SendRaw("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: " + websocket::AcceptKey(key) + "\r\n\r\n")) {
      return;
    }
    if (!first.empty() && !ws.SendText(first)) return;
    std::string().swap(first);  // not held for the connection's life
    auto last_ping = std::chrono::steady_clock::time_point{};
    auto last_data = std::chrono::steady_clock::now();
    for (;;) {
      TailBatch b = s.Next(250);
      if (!ws.Poll(0)) break;  // the client closed, went away or broke the protocol
      const std::string msg = LokiApi::TailMessage(tail, b.records, b.missed_batches, clock_.NowMs());
      if (!msg.empty() && !ws.SendText(msg)) break;
      if (b.ended) {
        const bool slow = b.end_reason.starts_with("the client did not keep up");
        ws.Close(slow ? websocket::kTryAgainLater : websocket::kGoingAway, b.end_reason);
        break;
      }
      if (stopping_.load()) {
        ws.Close(websocket::kGoingAway, "the server is stopping");
        break;
      }
      // A client silent for 10 s gets a ping (which also keeps proxies from
      // closing an idle connection). One that answers nothing, not even a
      // pong, for 15 s more while nothing else was sent to it (a pong may
      // wait behind records a slow reader has not read yet) is gone without
      // a reset (a lost network) and is closed.
      const auto now = std::chrono::steady_clock::now();
      if (!msg.empty()) last_data = now;
      if (ws.MsSinceHeard() > 25'000 && now - last_data > std::chrono::seconds(15)) {
        ws.Close(websocket::kGoingAway, "no answer to a ping for 15 s", 0);
        break;
      }
      if (ws.MsSinceHeard() >= 10'000 && now - last_ping >= std::chrono::seconds(10)) {
        if (!ws.SendPing()) break;
        last_ping = now;
      }
    }
    if (!ws.open()) spdlog::debug("http: a Loki tail ended: {}", ws.ended_why());
  }

  const HttpServerOptions options_;
  const QueryEngine& engine_;
  const LokiApi loki_;
  prometheus::Registry& registry_;
  const ReadinessCheck readiness_;
  const Clock& clock_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Histogram& query_seconds_;
  prometheus::Counter& corrupt_chunks_;
  prometheus::Counter& unreadable_minute_counts_;
  prometheus::Counter& queries_rejected_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Family<prometheus::Counter>& budget_exhausted_;
  prometheus::Counter& internal_errors_;
  const uint64_t error_id_seed_;
  std::atomic<uint64_t> error_ids_{0};
  std::atomic<int> running_queries_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> tail_streams_{0};  // live-tail responses under way
  std::atomic<int64_t> last_busy_log_ns_{0};
  std::atomic<uint64_t> heads_refused_{0};
  std::atomic<int64_t> last_head_log_ns_{0};

  BoundedHeadServer server_;
  std::mutex lifecycle_mu_;  // serializes Start() and Stop()
  bool started_ = false;
  std::atomic<int> port_{0};
  int listen_fd_ = -1;  // the listening socket (httplib's), seen by set_socket_options
  std::thread thread_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool listen_returned_ = false;  // guarded by done_mu_
};

HttpServer::HttpServer(HttpServerOptions options, const QueryEngine& engine, prometheus::Registry& registry,
                       ReadinessCheck readiness, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(options), engine, registry, std::move(readiness), clock)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() { return impl_->Start(); }

void HttpServer::Stop() { impl_->Stop(); }

int HttpServer::port() const { return impl_->port(); }

}  // namespace logdex
