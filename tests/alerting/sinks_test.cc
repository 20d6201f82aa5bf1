#include "alerting/sinks.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <atomic>

#include "tests/alerting/alerting_test_util.h"
#include "tests/alerting/alertmanager_process.h"
#include "alerting/webhook_receiver.h"

namespace logdex::alerting {
namespace {

using nlohmann::json;
using testing::kT0;

Notification Event() {
  Notification n;
  n.kind = NotificationKind::kEvent;
  n.idempotency_key = "ev:00000000000000aa:3";
  n.rule = "default";
  n.app = "checkout";
  n.host = "web-7";
  n.severity = Severity::kFatal;
  n.group = 0x1234abcdULL;
  n.message_template = "order <num> failed";
  n.message = "order 981 failed <&>";
  n.tags = {{"region", "eu"}};
  n.ts_ms = kT0 - 100;
  n.kafka_ts_ms = kT0 - 90;
  n.staged_ms = kT0;
  n.query_url = "http://logdex:8080/query?app=checkout";
  return n;
}

std::string Header(const HttpRequest& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return {};
}

// HMAC-SHA256 computed here with OpenSSL directly, independent of the sink's helper.
std::string ReferenceHmac(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &len);
  char hex[3];
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", mac[i]);
    out += hex;
  }
  return out;
}

TEST(HmacSha256Hex, MatchesRfc4231TestCase2) {
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(WebhookSink, PostsSignedJsonWithIdempotencyKeyAndConfiguredHeaders) {
  WebhookReceiver receiver;
  ManualClock clock(kT0);
  SinkConfig c = testing::WebhookSinkConfig("hook", receiver.url("/in"));
  c.secret = "topsecret";
  c.headers = {{"X-Team", "payments"}};
  auto sink = MakeSink(c, clock);
  const Notification n = Event();
  DeliveryResult r = sink->Deliver(n);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(receiver.requests().size(), 1u);
  const auto req = receiver.requests()[0];
  EXPECT_EQ(req.path, "/in");
  EXPECT_EQ(req.Header("Content-Type"), "application/json");
  EXPECT_EQ(req.Header("Idempotency-Key"), n.idempotency_key);
  EXPECT_EQ(req.Header("X-Team"), "payments");
  EXPECT_EQ(req.Header("X-Logdex-Timestamp"), std::to_string(kT0));
  EXPECT_EQ(req.Header("X-Logdex-Signature"), "sha256=" + ReferenceHmac("topsecret", std::to_string(kT0) + "." + req.body));
  EXPECT_NE(req.Header("X-Logdex-Signature"), "sha256=" + ReferenceHmac("wrong", std::to_string(kT0) + "." + req.body));
  const json body = json::parse(req.body);
  EXPECT_EQ(body["idempotency_key"], n.idempotency_key);
  EXPECT_EQ(body["kind"], "event");
  EXPECT_EQ(body["app"], "checkout");
  EXPECT_EQ(body["host"], "web-7");
  EXPECT_EQ(body["severity"], "FATAL");
  EXPECT_EQ(body["message"], "order 981 failed <&>");
  EXPECT_EQ(body["template"], "order <num> failed");
  EXPECT_EQ(body["count"], 1);
  EXPECT_EQ(body["tags"]["region"], "eu");
  EXPECT_EQ(body["group"], "000000001234abcd");
  EXPECT_EQ(body["query_url"], n.query_url);
  EXPECT_EQ(body["ts"], FormatRfc3339(n.ts_ms));
}

TEST(WebhookSink, NoSecretMeansNoSignatureHeader) {
  ManualClock clock(kT0);
  auto sink = MakeSink(testing::WebhookSinkConfig("hook", "http://127.0.0.1:9/x"), clock);
  EXPECT_EQ(Header(sink->BuildRequest(Event()), "X-Logdex-Signature"), "");
}

TEST(AlertmanagerSink, PostsOneAlertWithLabelsAnnotationsAndEndsAt) {
  ManualClock clock(kT0);
  SinkConfig c;
  c.name = "am";
  c.type = SinkType::kAlertmanager;
  c.url = "http://127.0.0.1:9093/";
  c.event_duration_ms = 300'000;
  const HttpRequest r = MakeSink(c, clock)->BuildRequest(Event());
  EXPECT_EQ(r.url, "http://127.0.0.1:9093/api/v2/alerts");
  const json body = json::parse(r.body);
  ASSERT_TRUE(body.is_array());
  ASSERT_EQ(body.size(), 1u);
  const json& a = body[0];
  EXPECT_EQ(a["labels"]["alertname"], "logdex_default");
  EXPECT_EQ(a["labels"]["app"], "checkout");
  EXPECT_EQ(a["labels"]["host"], "web-7");
  EXPECT_EQ(a["labels"]["severity"], "fatal");
  EXPECT_NE(a["annotations"]["summary"].get<std::string>().find("order 981 failed"), std::string::npos);
  const std::string description = a["annotations"]["description"];
  EXPECT_NE(description.find("order 981 failed <&>"), std::string::npos) << description;
  EXPECT_NE(description.find("http://logdex:8080/query?app=checkout"), std::string::npos) << description;
  EXPECT_EQ(a["annotations"]["idempotency_key"], "ev:00000000000000aa:3");
  EXPECT_EQ(a["startsAt"], FormatRfc3339(kT0 - 100));
  EXPECT_EQ(a["endsAt"], FormatRfc3339(kT0 + 300'000));
  EXPECT_EQ(a["generatorURL"], "http://logdex:8080/query?app=checkout");
}

TEST(SlackSink, PostsEscapedTextWithTheQueryLink) {
  ManualClock clock(kT0);
  SinkConfig c;
  c.name = "slack";
  c.type = SinkType::kSlack;
  c.url = "https://hooks.slack.invalid/services/x";
  const HttpRequest r = MakeSink(c, clock)->BuildRequest(Event());
  const json body = json::parse(r.body);
  const std::string text = body["text"];
  EXPECT_NE(text.find("order 981 failed &lt;&amp;&gt;"), std::string::npos) << text;
  EXPECT_NE(text.find("<http://logdex:8080/query?app=checkout|Open in logdex>"), std::string::npos) << text;
  EXPECT_EQ(Header(r, "Idempotency-Key"), "ev:00000000000000aa:3");
}

TEST(PagerDutySink, TriggersWithRoutingKeyAndTheGroupAsDedupKey) {
  ManualClock clock(kT0);
  SinkConfig c;
  c.name = "pd";
  c.type = SinkType::kPagerDuty;
  c.url = "https://events.pagerduty.com/v2/enqueue";
  c.routing_key = "R0UTING";
  const HttpRequest r = MakeSink(c, clock)->BuildRequest(Event());
  EXPECT_EQ(r.url, "https://events.pagerduty.com/v2/enqueue");
  const json body = json::parse(r.body);
  EXPECT_EQ(body["routing_key"], "R0UTING");
  EXPECT_EQ(body["event_action"], "trigger");
  EXPECT_EQ(body["dedup_key"], "000000001234abcd");
  EXPECT_EQ(body["payload"]["severity"], "critical");
  EXPECT_EQ(body["payload"]["source"], "web-7");
  EXPECT_EQ(body["payload"]["component"], "checkout");
  EXPECT_EQ(body["payload"]["timestamp"], FormatRfc3339(kT0 - 100));
  EXPECT_LE(body["payload"]["summary"].get<std::string>().size(), 1024u);
  EXPECT_EQ(body["payload"]["custom_details"]["idempotency_key"], "ev:00000000000000aa:3");
  EXPECT_EQ(body["links"][0]["href"], "http://logdex:8080/query?app=checkout");
}

TEST(HttpSink, ServerErrorsAreRetryableAndClientErrorsAreNot) {
  WebhookReceiver receiver;
  ManualClock clock(kT0);
  auto sink = MakeSink(testing::WebhookSinkConfig("hook", receiver.url()), clock);
  receiver.set_status(503);
  DeliveryResult r = sink->Deliver(Event());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.reason, "http_5xx");
  EXPECT_EQ(r.http_status, 503);
  receiver.set_status(429);
  r = sink->Deliver(Event());
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.reason, "http_429");
  receiver.set_status(400);
  r = sink->Deliver(Event());
  EXPECT_FALSE(r.retryable);
  EXPECT_EQ(r.reason, "http_4xx");
}

TEST(HttpSink, RefusedConnectionIsARetryableConnectFailure) {
  const int port = FreeLoopbackPort();  // nothing listens there
  ManualClock clock(kT0);
  auto sink = MakeSink(testing::WebhookSinkConfig("hook", "http://127.0.0.1:" + std::to_string(port) + "/x"), clock);
  DeliveryResult r = sink->Deliver(Event());
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.reason, "connect");
}

TEST(HttpSink, SlowReceiverHitsTheSinkTimeout) {
  httplib::Server slow;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  slow.Post("/slow", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return release; });
    res.set_content("late", "text/plain");
  });
  const int port = slow.bind_to_any_port("127.0.0.1");
  std::thread t([&] { slow.listen_after_bind(); });
  ManualClock clock(kT0);
  SinkConfig c = testing::WebhookSinkConfig("hook", "http://127.0.0.1:" + std::to_string(port) + "/slow");
  c.timeout_ms = 150;
  DeliveryResult r = MakeSink(c, clock)->Deliver(Event());
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  slow.stop();
  t.join();
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.reason, "timeout");
}

}  // namespace
}  // namespace logdex::alerting

// ---- TLS: verification is on by default ----

namespace logdex::alerting {
namespace {

// A self-signed certificate for IP 127.0.0.1 and its key, as PEM files in `dir`.
void WriteSelfSignedCert(const std::string& dir, std::string* cert_path, std::string* key_path) {
  *cert_path = dir + "/cert.pem";
  *key_path = dir + "/key.pem";
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1");
  ASSERT_NE(san, nullptr);
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  ASSERT_GT(X509_sign(x, key, EVP_sha256()), 0);
  FILE* f = std::fopen(cert_path->c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(key_path->c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
}

class TlsReceiver {
 public:
  TlsReceiver(const std::string& cert, const std::string& key) : server_(cert.c_str(), key.c_str()) {
    server_.Post("/hook", [this](const httplib::Request&, httplib::Response& res) {
      ++hits_;
      res.set_content("ok", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(logdex::testing::WaitFor([&] { return server_.is_running(); }, 30'000)) << "the TLS receiver never listened";
  }
  ~TlsReceiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_) + "/hook"; }
  int hits() const { return hits_.load(); }

 private:
  httplib::SSLServer server_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<int> hits_{0};
};

TEST(HttpSink, VerifiesTlsPeersByDefault) {
  TempDir dir;
  std::string cert, key;
  WriteSelfSignedCert(dir.path(), &cert, &key);
  TlsReceiver server(cert, key);
  ManualClock clock(kT0);
  SinkConfig c = testing::WebhookSinkConfig("tls", server.url());
  ASSERT_TRUE(c.tls_verify);  // the default

  DeliveryResult r = MakeSink(c, clock)->Deliver(Event());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, "tls") << r.error;
  EXPECT_EQ(server.hits(), 0);

  c.ca_file = cert;  // trusting the certificate makes the same endpoint work, host name checked
  r = MakeSink(c, clock)->Deliver(Event());
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(server.hits(), 1);

  c.ca_file.clear();
  c.tls_verify = false;  // the explicit opt-out
  r = MakeSink(c, clock)->Deliver(Event());
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(server.hits(), 2);
}

}  // namespace
}  // namespace logdex::alerting
