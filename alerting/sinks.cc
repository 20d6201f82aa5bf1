#include "alerting/sinks.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>

namespace logdex::alerting {

using nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json TagsObject(const Notification& n) {
  json tags = json::object();
  for (const auto& [k, v] : n.tags) tags[k] = v;
  return tags;
}

size_t CollectBody(char* data, size_t size, size_t nmemb, void* user) {
  auto* out = static_cast<std::string*>(user);
  const size_t n = size * nmemb;
  if (out->size() < 2048) out->append(data, std::min(n, 2048 - out->size()));
  return n;
}

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// ---- the four sinks ----

class WebhookSink final : public HttpSink {
 public:
  using HttpSink::HttpSink;
  HttpRequest BuildRequest(const Notification& n) const override {
    HttpRequest r = Start(config_.url, n);
    r.body = WebhookBody(n);
    const std::string ts = std::to_string(clock_.NowMs());
    r.headers.emplace_back("X-Logdex-Timestamp", ts);
    if (!config_.secret.empty())
      r.headers.emplace_back("X-Logdex-Signature", "sha256=" + HmacSha256Hex(config_.secret, ts + "." + r.body));
    return r;
  }
};

class AlertmanagerSink final : public HttpSink {
 public:
  using HttpSink::HttpSink;
  HttpRequest BuildRequest(const Notification& n) const override {
    std::string base = config_.url;
    while (!base.empty() && base.back() == '/') base.pop_back();
    HttpRequest r = Start(base + "/api/v2/alerts", n);
    json labels = {{"alertname", "logdex_" + n.rule},
                   {"severity", std::string(SeverityTableSuffix(n.severity))},
                   {"kind", KindName(n.kind)}};
    // Alertmanager treats an empty label value as an absent label: leave those out.
    if (!n.app.empty()) labels["app"] = n.app;
    if (!n.host.empty() && n.kind != NotificationKind::kStormSummary && n.kind != NotificationKind::kAppDigest)
      labels["host"] = n.host;
    if (n.group != 0) labels["group"] = Hex16(n.group);
    json annotations = {{"summary", n.Summary()},
                        {"description", n.Description()},
                        {"idempotency_key", n.idempotency_key},
                        {"count", std::to_string(n.count)}};
    if (!n.query_url.empty()) annotations["query"] = n.query_url;
    const int64_t starts = n.kind == NotificationKind::kEvent ? n.ts_ms : n.since_ms;
    const int64_t ends = std::max({n.ts_ms, starts, clock_.NowMs()}) + config_.event_duration_ms;
    json alert = {{"labels", labels},
                  {"annotations", annotations},
                  {"startsAt", FormatRfc3339(starts)},
                  {"endsAt", FormatRfc3339(ends)}};
    if (!n.query_url.empty()) alert["generatorURL"] = n.query_url;
    r.body = Dump(json::array({alert}));
    return r;
  }
};

std::string SlackEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out.push_back(c);
  }
  return out;
}

class SlackSink final : public HttpSink {
 public:
  using HttpSink::HttpSink;
  HttpRequest BuildRequest(const Notification& n) const override {
    HttpRequest r = Start(config_.url, n);
    std::string text = "*" + SlackEscape(n.Summary()) + "*\n```" + SlackEscape(SanitizeUtf8(n.message, 2000)) + "```";
    if (n.count > 1) text += "\n" + std::to_string(n.count) + " records since " + FormatClock(n.since_ms);
    if (!n.query_url.empty()) text += "\n<" + n.query_url + "|Open in logdex>";
    text += "\n_rule " + SlackEscape(n.rule) + " · key " + n.idempotency_key + "_";
    r.body = Dump(json{{"text", text}});
    return r;
  }
};

const char* PagerDutySeverity(Severity s) {
  if (s >= Severity::kFatal) return "critical";
  if (s >= Severity::kError) return "error";
  if (s >= Severity::kWarn) return "warning";
  return "info";
}

class PagerDutySink final : public HttpSink {
 public:
  using HttpSink::HttpSink;
  HttpRequest BuildRequest(const Notification& n) const override {
    HttpRequest r = Start(config_.url, n);
    std::string summary = n.Summary();
    if (summary.size() > 1024) summary = SanitizeUtf8(summary, 1021) + "...";
    json details = {{"count", n.count},           {"message", n.message},
                    {"template", n.message_template}, {"rule", n.rule},
                    {"idempotency_key", n.idempotency_key}, {"tags", TagsObject(n)}};
    if (n.kind != NotificationKind::kEvent) details["since"] = FormatRfc3339(n.since_ms);
    json payload = {{"summary", summary},
                    {"source", n.host.empty() ? n.app : n.host},
                    {"severity", PagerDutySeverity(n.severity)},
                    {"timestamp", FormatRfc3339(n.ts_ms)},
                    {"component", n.app},
                    {"class", KindName(n.kind)},
                    {"custom_details", details}};
    json body = {{"routing_key", config_.routing_key},
                 {"event_action", "trigger"},
                 {"dedup_key", n.group != 0 ? Hex16(n.group) : n.idempotency_key},
                 {"client", "logdex"},
                 {"payload", payload}};
    if (!n.query_url.empty()) body["links"] = json::array({{{"href", n.query_url}, {"text", "logdex query"}}});
    r.body = Dump(body);
    return r;
  }
};

}  // namespace

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[mac[i] >> 4]);
    out.push_back(hex[mac[i] & 15]);
  }
  return out;
}

std::string WebhookBody(const Notification& n) {
  json j = {{"idempotency_key", n.idempotency_key},
            {"kind", KindName(n.kind)},
            {"summary", n.Summary()},
            {"description", n.Description()},
            {"rule", n.rule},
            {"app", n.app},
            {"host", n.host},
            {"severity", SeverityName(n.severity)},
            {"group", n.group != 0 ? Hex16(n.group) : ""},
            {"template", n.message_template},
            {"message", n.message},
            {"tags", TagsObject(n)},
            {"ts", FormatRfc3339(n.ts_ms)},
            {"ts_ms", n.ts_ms},
            {"count", n.count},
            {"query_url", n.query_url}};
  if (n.kind != NotificationKind::kEvent) {
    j["since_ms"] = n.since_ms;
    j["window_end_ms"] = n.window_end_ms;
  }
  return Dump(j);
}

HttpSink::HttpSink(SinkConfig config, const Clock& clock) : config_(std::move(config)), clock_(clock) {
  GlobalInitOnce();
}

HttpRequest HttpSink::Start(std::string url, const Notification& n) const {
  HttpRequest r;
  r.url = std::move(url);
  r.headers.emplace_back("Content-Type", "application/json");
  r.headers.emplace_back("Idempotency-Key", n.idempotency_key);
  r.headers.emplace_back("User-Agent", "logdex-alerting");
  for (const auto& [k, v] : config_.headers) r.headers.emplace_back(k, v);
  return r;
}

DeliveryResult HttpSink::Deliver(const Notification& n) {
  const HttpRequest req = BuildRequest(n);
  DeliveryResult res;
  CURL* curl = curl_easy_init();
  if (!curl) {
    res.reason = "other";
    res.error = "curl_easy_init failed";
    return res;
  }
  curl_slist* headers = nullptr;
  for (const auto& [k, v] : req.headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
  std::string response;
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req.body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(config_.timeout_ms));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(config_.timeout_ms));
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, config_.tls_verify ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, config_.tls_verify ? 2L : 0L);
  if (!config_.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, config_.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, CollectBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  const CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    res.error = std::string(curl_easy_strerror(rc));
    switch (rc) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_SEND_ERROR:
      case CURLE_RECV_ERROR:
      case CURLE_GOT_NOTHING:
        res.reason = "connect";
        break;
      case CURLE_OPERATION_TIMEDOUT:
        res.reason = "timeout";
        break;
      case CURLE_SSL_CONNECT_ERROR:
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
        res.reason = "tls";
        break;
      default:
        res.reason = "other";
    }
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &res.http_status);
    const long s = res.http_status;
    if (s >= 200 && s < 300) {
      res.ok = true;
    } else {
      res.error = "HTTP " + std::to_string(s) + ": " + SanitizeUtf8(response, 512);
      if (s == 429) {
        res.reason = "http_429";
      } else if (s >= 500 || s == 408) {
        res.reason = "http_5xx";
      } else {
        res.reason = "http_4xx";
        res.retryable = false;
      }
    }
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return res;
}

std::unique_ptr<HttpSink> MakeSink(const SinkConfig& config, const Clock& clock) {
  switch (config.type) {
    case SinkType::kWebhook: return std::make_unique<WebhookSink>(config, clock);
    case SinkType::kAlertmanager: return std::make_unique<AlertmanagerSink>(config, clock);
    case SinkType::kSlack: return std::make_unique<SlackSink>(config, clock);
    case SinkType::kPagerDuty: return std::make_unique<PagerDutySink>(config, clock);
  }
  return nullptr;
}

std::vector<std::unique_ptr<AlertSink>> MakeSinks(const AlertingConfig& config, const Clock& clock) {
  std::vector<std::unique_ptr<AlertSink>> out;
  for (const auto& s : config.sinks) out.push_back(MakeSink(s, clock));
  return out;
}

}  // namespace logdex::alerting
