// The link a notification carries (alerting::QueryLink) opens the records it
// is about on a real HttpServer: the web UI answers it, and the same query
// string on the query API holds the record (it once pointed at <base>/query,
// which is not a route). The browser test (tests/ui/) follows such a link.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "alerting/notification.h"
#include "tests/server/served_store.h"

namespace logdex {
namespace {

TEST(AlertLink, TheNotificationLinkIsAnsweredByTheQueryApiWithItsRecords) {
  testing::ServedStore served;
  HttpServer& server = served.Serve();
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  const auto& records = served.workload().records;
  ASSERT_FALSE(records.empty());
  const auto& r = records.front();
  const std::string url = alerting::QueryLink(base + "/", r.app, r.host, r.sev, r.ts, r.ts);
  ASSERT_EQ(url.rfind(base + "/?app=", 0), 0u) << url;

  httplib::Client client(base);
  auto page = client.Get(url.substr(base.size()));
  ASSERT_TRUE(page) << httplib::to_string(page.error());
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type").rfind("text/html", 0), 0u);
  EXPECT_NE(page->body.find("/ui/app.js"), std::string::npos) << "the web UI";
  auto res = client.Get("/api/v1/query" + url.substr(base.size() + 1));
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << url << ": " << res->body;
  auto body = nlohmann::json::parse(res->body);
  bool found = false;
  for (const auto& rec : body["records"]) {
    found = found || (rec["ts"] == r.ts && rec["message"] == r.message);
  }
  EXPECT_TRUE(found) << "the record the link is about, in " << res->body.substr(0, 500);
}

}  // namespace
}  // namespace logdex
