#include "alerting/notification.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <ctime>

#include "common/ids.h"

namespace logdex::alerting {

using nlohmann::json;

const char* KindName(NotificationKind k) {
  switch (k) {
    case NotificationKind::kEvent: return "event";
    case NotificationKind::kGroupDigest: return "group_digest";
    case NotificationKind::kAppDigest: return "app_digest";
    case NotificationKind::kStormSummary: return "storm_summary";
  }
  return "unknown";
}

namespace {

std::optional<NotificationKind> KindFromName(std::string_view s) {
  for (auto k : {NotificationKind::kEvent, NotificationKind::kGroupDigest, NotificationKind::kAppDigest,
                 NotificationKind::kStormSummary})
    if (s == KindName(k)) return k;
  return std::nullopt;
}

std::string FirstLine(std::string_view s, size_t max) {
  s = s.substr(0, s.find('\n'));
  if (s.size() <= max) return std::string(s);
  return SanitizeUtf8(s, max) + "...";
}

}  // namespace

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string FormatRfc3339(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  const int frac = static_cast<int>(ms - static_cast<int64_t>(secs) * 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  return buf;
}

std::string FormatClock(int64_t ms) {
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d UTC", tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

std::string SanitizeUtf8(std::string_view in, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(in.size(), max_bytes));
  size_t i = 0;
  while (i < in.size()) {
    const auto c = static_cast<unsigned char>(in[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      len = 1;
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool valid = len > 0 && i + len <= in.size();
    for (size_t k = 1; valid && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(in[i + k]);
      if ((cc & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if (valid && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                  (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      valid = false;
    const std::string_view piece = valid ? in.substr(i, len) : std::string_view("\xEF\xBF\xBD");
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    i += valid ? len : 1;
  }
  return out;
}

uint64_t OutboxAlertId(std::string_view idempotency_key, std::string_view sink) {
  std::string k(idempotency_key);
  k.push_back('\0');
  k.append(sink);
  return Hash64(k);
}

std::string Notification::Summary() const {
  const std::string sev(SeverityName(severity));
  switch (kind) {
    case NotificationKind::kEvent:
      return "[" + sev + "] " + app + "@" + host + ": " + FirstLine(message, 200);
    case NotificationKind::kGroupDigest:
      return "[" + sev + "] " + app + ": " + std::to_string(count) + " more since " + FormatClock(since_ms) + ": " +
             FirstLine(message_template, 160);
    case NotificationKind::kAppDigest:
      return "[" + sev + "] " + app + ": " + std::to_string(count) + " more alerts since " + FormatClock(since_ms) +
             " (per-app rate limit)";
    case NotificationKind::kStormSummary:
      return "[" + sev + "] alert storm: " + std::to_string(count) + " more alerts since " + FormatClock(since_ms) +
             " (global cap); latest from " + app;
  }
  return {};
}

std::string Notification::Description() const {
  std::string d;
  if (kind == NotificationKind::kEvent) {
    d += "Log line (" + FormatRfc3339(ts_ms) + ", " + app + "@" + host + "):\n" + message + "\n";
  } else {
    d += std::to_string(count) + " records from " + FormatRfc3339(since_ms) + " to " + FormatRfc3339(ts_ms) +
         " were folded into this notification.\nLatest (" + app + "@" + host + "):\n" + message + "\n";
  }
  if (!rule.empty()) d += "Rule: " + rule + "\n";
  if (group != 0) d += "Group: " + Hex16(group) + " (" + message_template + ")\n";
  if (!query_url.empty()) d += "Query: " + query_url + "\n";
  return d;
}

std::string EncodeOutboxEntry(const OutboxEntry& e) {
  const Notification& n = e.n;
  json tags = json::array();
  for (const auto& [k, v] : n.tags) tags.push_back(json::array({k, v}));
  json j = {{"sink", e.sink},
            {"attempts", e.attempts},
            {"last_error", e.last_error},
            {"kind", KindName(n.kind)},
            {"key", n.idempotency_key},
            {"rule", n.rule},
            {"app", n.app},
            {"host", n.host},
            {"severity", SeverityCode(n.severity)},
            {"group", n.group},
            {"template", n.message_template},
            {"message", n.message},
            {"tags", std::move(tags)},
            {"ts_ms", n.ts_ms},
            {"kafka_ts_ms", n.kafka_ts_ms},
            {"count", n.count},
            {"since_ms", n.since_ms},
            {"window_end_ms", n.window_end_ms},
            {"staged_ms", n.staged_ms},
            {"query_url", n.query_url}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<OutboxEntry> DecodeOutboxEntry(std::string_view value) {
  try {
    const json j = json::parse(value);
    OutboxEntry e;
    e.sink = j.at("sink").get<std::string>();
    e.attempts = j.at("attempts").get<uint32_t>();
    e.last_error = j.value("last_error", "");
    Notification& n = e.n;
    auto kind = KindFromName(j.at("kind").get<std::string>());
    auto sev = SeverityFromCode(j.at("severity").get<uint32_t>());
    if (!kind || !sev) return Error{Errc::kCorruption, "outbox entry: bad kind or severity"};
    n.kind = *kind;
    n.severity = *sev;
    n.idempotency_key = j.at("key").get<std::string>();
    n.rule = j.value("rule", "");
    n.app = j.value("app", "");
    n.host = j.value("host", "");
    n.group = j.value("group", uint64_t{0});
    n.message_template = j.value("template", "");
    n.message = j.value("message", "");
    for (const auto& t : j.value("tags", json::array()))
      n.tags.emplace_back(t.at(0).get<std::string>(), t.at(1).get<std::string>());
    n.ts_ms = j.value("ts_ms", int64_t{0});
    n.kafka_ts_ms = j.value("kafka_ts_ms", int64_t{0});
    n.count = j.value("count", uint64_t{1});
    n.since_ms = j.value("since_ms", int64_t{0});
    n.window_end_ms = j.value("window_end_ms", int64_t{0});
    n.staged_ms = j.value("staged_ms", int64_t{0});
    n.query_url = j.value("query_url", "");
    return e;
  } catch (const std::exception& ex) {
    return Error{Errc::kCorruption, std::string("outbox entry: ") + ex.what()};
  }
}

namespace {

std::string UrlEncode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

}  // namespace

std::string QueryLink(std::string_view base, std::string_view app, std::string_view host, Severity severity,
                      int64_t from_ms, int64_t to_ms) {
  if (base.empty()) return {};
  while (base.size() > 1 && base.back() == '/') base.remove_suffix(1);
  std::string url = std::string(base) + std::string(kUiPath) + "?app=" + UrlEncode(app);
  if (!host.empty()) url += "&host=" + UrlEncode(host);
  return url + "&severity=" + std::string(SeverityName(severity)) + "&from=" + std::to_string(from_ms - 60'000) +
         "&to=" + std::to_string(to_ms + 60'000);
}

}  // namespace logdex::alerting
