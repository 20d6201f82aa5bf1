// One GET through a real HTTP client, its answer kept whole (status,
// content type, body, and the body parsed when it is JSON): for the HTTP
// tests of tests/server/.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

namespace logdex::testing {

struct Answer {
  int status = 0;
  std::string content_type;
  std::string body;
  nlohmann::json j;  // the body parsed, or discarded when it is not JSON
};

inline Answer Get(httplib::Client& c, const std::string& path, const httplib::Params& params = {},
                  const httplib::Headers& headers = {}) {
  Answer a;
  httplib::Result r = c.Get(path, params, headers);
  if (!r) {
    ADD_FAILURE() << "GET " << path << ": " << httplib::to_string(r.error());
    return a;
  }
  a.status = r->status;
  a.content_type = r->get_header_value("Content-Type");
  a.body = r->body;
  a.j = nlohmann::json::parse(a.body, nullptr, false);
  return a;
}

}  // namespace logdex::testing
