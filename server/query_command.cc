// `logdex query`: the CLI client of a server's GET /api/v1/query (see
// http/http_server.h). It checks its flags with the same parsers as the
// server (time_parse.h, ParseSeverity), follows cursors until it has --limit
// records or there are no more, and prints a table or one JSON object.
// With --volume it asks GET /api/v1/volume instead (the same filters, plus
// --step and --exact) and prints the buckets as a table, or the answer as is
// with --json.
//
// Exit codes: 0 success; 1 the server refused or failed the query, or could
// not be reached; 2 a flag value is wrong.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/severity.h"
#include "server/commands.h"
#include "common/time_parse.h"

namespace logdex {
namespace {

using nlohmann::json;

// Records asked per request: the server's answer size stays bounded.
constexpr uint64_t kMaxPage = 1000;

struct QueryCommandOptions {
  std::string server;
  std::string app, host, contains;
  std::vector<std::string> severities, tags;
  // The repeatable text filters, by the API's parameter name (word, not_regex, ...).
  std::vector<std::pair<std::string, std::vector<std::string>>> text{
      {"word", {}}, {"phrase", {}}, {"regex", {}}, {"not_contains", {}},
      {"not_word", {}}, {"not_phrase", {}}, {"not_regex", {}}};
  std::string since, from, to;
  uint64_t limit = 100;
  bool json = false;
  bool scan = false;
  std::string token;
  std::string cursor;
  int timeout_seconds = 60;
  bool volume = false;
  std::string step;
  bool exact = false;
  bool follow = false;
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// "http://h:p/prefix" -> ("http://h:p", "/prefix"); a URL without a scheme is http.
struct ServerUrl {
  std::string origin;
  std::string base_path;
};

std::optional<ServerUrl> SplitUrl(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    url = "http://" + url;
  } else {
    const std::string scheme = url.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https") return std::nullopt;
  }
  const size_t host_start = url.find("://") + 3;
  if (host_start >= url.size()) return std::nullopt;
  const size_t slash = url.find('/', host_start);
  ServerUrl out;
  out.origin = url.substr(0, slash);
  if (slash != std::string::npos) out.base_path = url.substr(slash);
  return out;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "logdex query: %s\n", message.c_str());
  return 2;
}

// Checks flag values locally, with the server's own parsers, so that mistakes
// are reported before any request.
int CheckFlags(const QueryCommandOptions& o) {
  for (const std::string& s : o.severities) {
    std::string_view rest = s;
    for (;;) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      if (!ParseSeverity(item)) {
        return Usage("--severity: '" + std::string(item) +
                     "' is not a severity (TRACE, DEBUG, INFO, WARN, ERROR, FATAL, an alias, or syslog 0-7)");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  for (const std::string& t : o.tags) {
    const size_t eq = t.find('=');
    if (eq == std::string::npos || eq == 0) return Usage("--tag: '" + t + "' must be key=value with a non-empty key");
  }
  if (!o.since.empty()) {
    Result<int64_t> d = ParseDuration(o.since);
    if (!d.ok()) return Usage("--since: " + d.error().message);
  }
  if (o.from.empty() != o.to.empty()) return Usage(o.from.empty() ? "--to needs --from" : "--from needs --to");
  if (!o.from.empty()) {
    Result<int64_t> f = ParseTimestamp(o.from);
    if (!f.ok()) return Usage("--from: " + f.error().message);
    Result<int64_t> t = ParseTimestamp(o.to);
    if (!t.ok()) return Usage("--to: " + t.error().message);
    if (*t <= *f) return Usage("--to must be after --from");
  }
  if (o.limit == 0) return Usage("--limit must be at least 1");
  if (!o.step.empty()) {
    const bool digits = std::all_of(o.step.begin(), o.step.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && o.step.find_first_not_of('0') == std::string::npos) return Usage("--step must be at least 1 ms");
    if (!digits) {
      Result<int64_t> d = ParseDuration(o.step);
      if (!d.ok()) return Usage("--step: " + d.error().message + " (or give milliseconds)");
    }
  }
  return 0;
}

// Control characters would break the table's lines.
std::string OneLine(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += ' ';
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

std::string Field(const json& record, const char* key) {
  auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void PrintTable(const json& records) {
  size_t app_w = 3, host_w = 4, sev_w = 8;
  for (const json& r : records) {
    app_w = std::max(app_w, Field(r, "app").size());
    host_w = std::max(host_w, Field(r, "host").size());
  }
  app_w = std::min<size_t>(app_w, 40);
  host_w = std::min<size_t>(host_w, 40);
  std::printf("%-24s  %-*s  %-*s  %-*s  %s\n", "TIME", static_cast<int>(sev_w), "SEVERITY", static_cast<int>(app_w),
              "APP", static_cast<int>(host_w), "HOST", "MESSAGE");
  for (const json& r : records) {
    std::string time = Field(r, "time");
    if (time.empty() && r.contains("ts") && r["ts"].is_number_integer()) time = FormatTimestamp(r["ts"].get<int64_t>());
    std::printf("%-24s  %-*s  %-*s  %-*s  %s\n", time.c_str(), static_cast<int>(sev_w), Field(r, "severity").c_str(),
                static_cast<int>(app_w), OneLine(Field(r, "app")).c_str(), static_cast<int>(host_w),
                OneLine(Field(r, "host")).c_str(), OneLine(Field(r, "message")).c_str());
  }
}

// The buckets of a volume answer: one line each, then the totals.
void PrintVolume(const json& body) {
  static const char* const kNames[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"};
  auto count = [](const json& counts, const char* name) -> uint64_t {
    auto it = counts.find(name);
    return it != counts.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
  };
  auto line = [&](const std::string& start, const json& counts, uint64_t total) {
    std::printf("%-24s  %10llu", start.c_str(), static_cast<unsigned long long>(total));
    for (const char* name : kNames) std::printf("  %8llu", static_cast<unsigned long long>(count(counts, name)));
    std::printf("\n");
  };
  std::printf("%-24s  %10s", "START", "TOTAL");
  for (const char* name : kNames) std::printf("  %8s", name);
  std::printf("\n");
  for (const json& b : body["buckets"]) {
    const json& counts = b.contains("counts") && b["counts"].is_object() ? b["counts"] : json::object();
    line(Field(b, "time"), counts, b.value("total", uint64_t{0}));
  }
  const json& totals = body.contains("totals") && body["totals"].is_object() ? body["totals"] : json::object();
  line("(all)", totals.contains("counts") && totals["counts"].is_object() ? totals["counts"] : json::object(),
       totals.value("total", uint64_t{0}));
}

// One GET of the API whose answer must be an object with the array `field`
// (`what` names it in the error); nullopt after saying on stderr what went wrong.
std::optional<json> GetAnswer(httplib::Client& client, const std::string& path, const std::string& shown,
                              const httplib::Params& params, const char* field, const char* what) {
  httplib::Result res = client.Get(path, params, httplib::Headers{});
  if (!res) {
    std::fprintf(stderr, "logdex query: cannot reach %s: %s\n", shown.c_str(), httplib::to_string(res.error()).c_str());
    return std::nullopt;
  }
  json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status != 200) {
    std::string why = body.is_object() && body.contains("error") && body["error"].is_string()
                          ? body["error"].get<std::string>()
                          : res->body;
    std::fprintf(stderr, "logdex query: %s answered HTTP %d: %s\n", shown.c_str(), res->status, why.c_str());
    return std::nullopt;
  }
  if (!body.is_object() || !body.contains(field) || !body[field].is_array()) {
    std::fprintf(stderr, "logdex query: %s answered something that is not %s\n", shown.c_str(), what);
    return std::nullopt;
  }
  return body;
}

// One GET /api/v1/volume; prints its buckets (or the answer, with --json).
int RunVolume(httplib::Client& client, const std::string& path, const std::string& shown, const httplib::Params& params,
              const QueryCommandOptions& o) {
  std::optional<json> answer = GetAnswer(client, path, shown, params, "buckets", "a volume result");
  if (!answer) return 1;
  json& body = *answer;
  if (o.json) {
    std::printf("%s\n", Dump(body).c_str());
    return 0;
  }
  PrintVolume(body);
  const bool exact = body.value("exact", false);
  std::fprintf(stderr, "%zu buckets of %lld ms; %s\n", body["buckets"].size(),
               static_cast<long long>(body.value("step_ms", int64_t{0})),
               exact ? "exact: counted by reading the records"
                     : ("from the index: a chunk counts in the bucket of its last record (" +
                        std::to_string(body.value("inexact_records", uint64_t{0})) +
                        " records may belong to an earlier bucket); --exact reads the records")
                           .c_str());
  return 0;
}

// --follow: GET /api/v1/tail, its server-sent events printed as they come
// (a table line, or one JSON object per line with --json) until the server
// ends the stream or the connection breaks.
int RunFollow(httplib::Client& client, const std::string& path, const std::string& shown, const httplib::Params& params,
              const QueryCommandOptions& o) {
  int status = 0;
  std::string error_body, pending;
  std::string end_reason;
  bool ended = false;
  auto event = [&](const std::string& block) {
    std::string name = "message", data;
    size_t at = 0;
    while (at < block.size()) {
      size_t nl = block.find('\n', at);
      if (nl == std::string::npos) nl = block.size();
      const std::string line = block.substr(at, nl - at);
      at = nl + 1;
      if (line.rfind("event: ", 0) == 0) name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data += line.substr(6);
    }
    if (data.empty()) return;  // a keep-alive comment
    json body = json::parse(data, nullptr, false);
    if (name == "message") {
      if (o.json) {
        std::printf("%s\n", Dump(body).c_str());
      } else {
        std::string time = Field(body, "time");
        std::printf("%-24s  %-5s  %s  %s  %s\n", time.c_str(), Field(body, "severity").c_str(),
                    OneLine(Field(body, "app")).c_str(), OneLine(Field(body, "host")).c_str(),
                    OneLine(Field(body, "message")).c_str());
      }
      std::fflush(stdout);
    } else if (name == "gap") {
      std::fprintf(stderr, "logdex query: the server skipped %llu written batches for live tail (it fell behind): "
                           "records are missing here\n",
                   static_cast<unsigned long long>(body.value("missed_batches", uint64_t{0})));
    } else if (name == "end") {
      ended = true;
      end_reason = body.value("reason", std::string("no reason given"));
    }
  };
  httplib::Result res = client.Get(
      path, params, httplib::Headers{{"Accept", "text/event-stream"}},
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status != 200) {
          error_body.append(data, std::min<size_t>(n, 4096));
          return true;
        }
        pending.append(data, n);
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
          event(pending.substr(0, end));
          pending.erase(0, end + 2);
        }
        return true;
      });
  if (status != 0 && status != 200) {
    json body = json::parse(error_body, nullptr, false);
    std::string why = body.is_object() && body.contains("error") && body["error"].is_string()
                          ? body["error"].get<std::string>()
                          : error_body;
    std::fprintf(stderr, "logdex query: %s answered HTTP %d: %s\n", shown.c_str(), status, why.c_str());
    return 1;
  }
  if (ended) {
    std::fprintf(stderr, "logdex query: the server ended the live tail: %s\n", end_reason.c_str());
    return 1;
  }
  std::fprintf(stderr, "logdex query: the live tail from %s broke off: %s\n", shown.c_str(),
               res ? "the server closed the connection" : httplib::to_string(res.error()).c_str());
  return 1;
}

int RunQuery(const QueryCommandOptions& o) {
  if (int rc = CheckFlags(o); rc != 0) return rc;
  std::optional<ServerUrl> url = SplitUrl(o.server);
  if (!url) return Usage("--server: '" + o.server + "' is not an http:// or https:// URL");

  httplib::Params base;
  if (!o.app.empty()) base.emplace("app", o.app);
  if (!o.host.empty()) base.emplace("host", o.host);
  if (!o.contains.empty()) base.emplace("contains", o.contains);
  for (const auto& [param, values] : o.text) {
    for (const std::string& v : values) base.emplace(param, v);
  }
  for (const std::string& s : o.severities) base.emplace("severity", s);
  for (const std::string& t : o.tags) base.emplace("tag", t);
  if (o.follow) {
    // Live tail takes filters only.
  } else if (!o.from.empty()) {
    base.emplace("from", o.from);
    base.emplace("to", o.to);
  } else {
    // The server resolves `since` by its clock and pins the range in the cursor.
    base.emplace("since", o.since.empty() ? "1h" : o.since);
  }
  if (o.scan) base.emplace("scan", "true");
  if (o.volume) {
    if (!o.step.empty()) base.emplace("step", o.step);
    if (o.exact) base.emplace("exact", "true");
  }

  try {
    httplib::Client client(url->origin);
    if (!client.is_valid()) return Usage("--server: '" + o.server + "' is not a usable URL");
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(o.timeout_seconds, 0);
    client.set_write_timeout(o.timeout_seconds, 0);
    client.set_keep_alive(true);
    if (!o.token.empty()) client.set_bearer_token_auth(o.token);
    const std::string path = url->base_path + (o.volume ? "/api/v1/volume" : o.follow ? "/api/v1/tail" : "/api/v1/query");
    const std::string shown = url->origin + path;
    if (o.volume) return RunVolume(client, path, shown, base, o);
    if (o.follow) {
      client.set_read_timeout(std::max(o.timeout_seconds, 30), 0);  // the server sends a keep-alive every 10 s
      return RunFollow(client, path, shown, base, o);
    }

    json records = json::array();
    json stats = {{"plan", ""},
                  {"seeks", 0},
                  {"rows_scanned", 0},
                  {"chunks_read", 0},
                  {"main_row_batches", 0},
                  {"main_row_batch_failures", 0},
                  {"chunks_returned", 0},
                  {"bytes_decompressed", 0},
                  {"index_rows_without_main", 0},
                  {"meta_rows", 0},
                  {"token_filters_read", 0},
                  {"chunks_skipped_by_tokens", 0},
                  {"superseded_parts", 0},
                  {"runs", 0},
                  {"pages", 0}};
    std::string cursor = o.cursor;
    bool more = false;
    for (;;) {
      const uint64_t want = o.limit - records.size();
      httplib::Params params = base;
      params.emplace("limit", std::to_string(std::min(want, kMaxPage)));
      if (!cursor.empty()) params.emplace("cursor", cursor);
      std::optional<json> answer = GetAnswer(client, path, shown, params, "records", "a query result");
      if (!answer) return 1;
      json& body = *answer;
      for (json& r : body["records"]) records.push_back(std::move(r));
      if (body.contains("stats") && body["stats"].is_object()) {
        for (auto& [key, value] : body["stats"].items()) {
          if (key == "plan") {
            if (stats["plan"] == "") stats["plan"] = value;
          } else if (value.is_number_unsigned() && stats.contains(key)) {
            stats[key] = stats[key].get<uint64_t>() + value.get<uint64_t>();
          }
        }
      }
      stats["pages"] = stats["pages"].get<uint64_t>() + 1;
      const json& next = body["next_cursor"];
      more = next.is_string() && !next.get<std::string>().empty();
      cursor = more ? next.get<std::string>() : std::string();
      if (!more || records.size() >= o.limit) break;
    }

    if (o.json) {
      json out = {{"records", std::move(records)}, {"stats", std::move(stats)}};
      out["next_cursor"] = more ? json(cursor) : json(nullptr);
      std::printf("%s\n", Dump(out).c_str());
    } else {
      PrintTable(records);
      if (more) {
        std::fprintf(stderr, "%zu records; more match: raise --limit, or continue with --cursor %s\n",
                     records.size(), cursor.c_str());
      } else {
        std::fprintf(stderr, "%zu records\n", records.size());
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "logdex query: %s\n", e.what());
    return 1;
  }
}

}  // namespace

void AddQueryCommand(CLI::App& app, CommandRun& run) {
  auto o = std::make_shared<QueryCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "query",
      "Query a logdex server's HTTP API (GET /api/v1/query) and print the records, newest first.\n"
      "  logdex query --server URL [--app A] [--host H] [--severity S]... [--tag k=v]... [--contains TEXT]\n"
      "               [--word W]... [--phrase P]... [--regex RE]... [--not-contains|--not-word|...]\n"
      "               [--since DURATION | --from T --to T] [--limit N] [--json] [--token T] [--scan]\n"
      "  logdex query --server URL --volume [filters as above] [--step DURATION] [--exact]\n"
      "  logdex query --server URL --follow [filters as above]   # live tail: records as they are written\n"
      "Without --since or --from/--to, the last hour is queried (--since 1h).\n"
      "--volume prints record counts per time bucket and severity (GET /api/v1/volume) instead of records.");
  cmd->footer(
      "Times: RFC 3339 (2026-11-29T10:00:00Z, 2026-11-29T11:00:00+01:00) or milliseconds since the epoch.\n"
      "Durations: 90s, 15m, 72h, 7d, 1h30m (units ms s m h d). --since is resolved by the server's clock.\n"
      "A query needs --app, --host or --tag (or --scan for a full table scan).\n"
      "Text filters (all must pass; case-sensitive): --contains a substring; --word every word (a run of letters,\n"
      "digits, '_') anywhere; --phrase its words in a row; --regex an RE2 pattern; --not-... their negations.\n"
      "--json prints one object: {\"records\": [{ts, time, severity, app, host, message, tags}], \"next_cursor\",\n"
      "\"stats\"} with stats summed over the pages fetched.\n"
      "Exit codes: 0 ok; 1 the server refused or failed the query, or could not be reached; 2 bad flags.\n"
      "Examples:\n"
      "  logdex query --server http://127.0.0.1:8080 --app billing --severity ERROR --since 15m\n"
      "  logdex query --server http://logdex:8080 --tag dc=east --contains timeout --limit 5000 --json | jq .stats\n"
      "  logdex query --server http://127.0.0.1:8080 --volume --app billing --since 6h --step 15m\n"
      "  logdex query --server http://127.0.0.1:8080 --follow --app billing --severity ERROR");
  cmd->add_option("--server", o->server, "Server URL, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--app", o->app, "Application name");
  cmd->add_option("--host", o->host, "Host name");
  cmd->add_option("--severity", o->severities,
                  "Severity to include (repeatable, or comma-separated; any alias: WARNING, CRIT, 3, ...)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--tag", o->tags, "Tag filter key=value (repeatable; all must match)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--contains", o->contains, "Case-sensitive text the message must contain");
  for (auto& [param, values] : o->text) {
    std::string flag = "--" + param;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const bool negate = param.starts_with("not_");
    const std::string kind = negate ? param.substr(4) : param;
    const std::string help =
        kind == "word"       ? "Words (runs of letters, digits, '_') that must all be in the message"
        : kind == "phrase"   ? "Words that must follow each other in the message"
        : kind == "regex"    ? "RE2 regular expression that must match somewhere in the message"
                             : "Text the message must contain";
    cmd->add_option(flag, values, (negate ? "Negated: " : "") + help + " (repeatable)")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  CLI::Option* since = cmd->add_option("--since", o->since, "Look back this far from now (default: 1h)");
  CLI::Option* from = cmd->add_option("--from", o->from, "Start of the time range (inclusive)");
  CLI::Option* to = cmd->add_option("--to", o->to, "End of the time range (exclusive)");
  since->excludes(from)->excludes(to);
  from->needs(to);
  to->needs(from);
  cmd->add_option("--limit", o->limit, "Most records to print; cursors are followed until there are this many")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "Print one JSON object instead of a table");
  cmd->add_option("--token", o->token, "Bearer token, when the server requires one")->envname("LOGDEX_TOKEN");
  cmd->add_flag("--scan", o->scan, "Allow reading every stream (queries without app, host or tag)");
  cmd->add_option("--cursor", o->cursor, "Continue from a previous run's next_cursor (same query flags)");
  cmd->add_option("--timeout", o->timeout_seconds, "Seconds to wait for each answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--volume", o->volume, "Print record counts per time bucket and severity instead of records");
  cmd->add_option("--step", o->step, "With --volume: bucket width (60s, 5m, 1h, or ms; default about range/60)");
  cmd->add_flag("-f,--follow", o->follow,
                "Print records as they are written from now on (GET /api/v1/tail), until the server ends the stream or "
                "Ctrl-C; takes the filters, not a time range, --limit or --cursor");
  cmd->add_flag("--exact", o->exact,
                "With --volume: count by reading the records (exact; --contains implies it) instead of from the index");
  CLI::Option* limit_option = cmd->get_option("--limit");
  CLI::Option* cursor_option = cmd->get_option("--cursor");
  CLI::Option* since_option = cmd->get_option("--since");
  CLI::Option* from_option = cmd->get_option("--from");
  cmd->callback([&run, o, limit_option, cursor_option, since_option, from_option] {
    if (o->follow && (o->volume || o->scan || limit_option->count() > 0 || cursor_option->count() > 0 ||
                      since_option->count() > 0 || from_option->count() > 0)) {
      run = [] {
        return Usage("--follow streams records as they are written: it takes the filters (--app, --host, --severity, "
                     "--tag, the text filters), not --since/--from/--to, --limit, --cursor, --scan or --volume");
      };
      return;
    }
    if (o->volume && (limit_option->count() > 0 || cursor_option->count() > 0)) {
      run = [] { return Usage("--limit and --cursor do not apply to --volume (it answers every bucket at once)"); };
      return;
    }
    if (!o->volume && (!o->step.empty() || o->exact)) {
      run = [] { return Usage("--step and --exact need --volume"); };
      return;
    }
    run = [o] { return RunQuery(*o); };
  });
}

}  // namespace logdex
