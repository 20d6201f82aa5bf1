// YamlWalker: reads a YAML document into typed fields, collecting every
// problem (not only the first) with its file, line and key:
//   "logdex.yaml:12: store.durability: must be skip_wal, async or sync".
// Unknown keys are problems too (a typo must not fall back to a default).
// serve's configuration (server/config.cc) and its alerting section
// (alerting/config.cc) are both read with it, so both spell booleans,
// durations, sizes and errors alike.
//
// Only .cc files include this header: the modules' public config headers
// stay free of yaml-cpp. Not thread-safe; one walker per document.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/config_source.h"
#include "common/result.h"

namespace logdex {

class YamlWalker {
 public:
  explicit YamlWalker(std::string name) { source_.name = std::move(name); }

  // Reads one value found at key path `key`.
  using Field = std::function<void(const YAML::Node& value, const std::string& key)>;

  // Visits a mapping: each known key goes to its field; unknown keys are
  // problems. A null or absent node is an empty mapping.
  void Map(const YAML::Node& node, const std::string& path, const std::map<std::string, Field>& fields);
  // Visits a list: `item` is called with each element and its path "path[i]".
  void List(const YAML::Node& node, const std::string& path, const Field& item);

  // A problem at `at` (its line) under `key`.
  void Fail(const YAML::Node& at, const std::string& key, const std::string& message);
  // A problem under `key`, at the line the walk found it on (if it did): for
  // checks across keys after the walk.
  void Fail(const std::string& key, const std::string& message) { problems_.push_back(source_.Problem(key, message)); }

  Field String(std::string& out);
  // "true"/"false" and YAML's other spellings of them (yes/no, on/off).
  Field Bool(bool& out);
  // One of the named values ("must be a, b or c" otherwise, in this order).
  template <class E>
  Field Choice(E& out, std::vector<std::pair<std::string, E>> choices);
  // A whole number in [min, max], in decimal ("010" is ten, "0x10" is refused).
  template <class T>
  Field Number(T& out, T min, T max);
  // A duration with its unit ("500ms", "30s", "7d"; common/time_parse.h), at least `min_ms`.
  Field Duration(int64_t& out_ms, int64_t min_ms);
  // A size ("64KiB"; ParseBytes).
  Field Bytes(uint64_t& out);
  // A list of strings; with `scalar_is_one`, a single string is a list of one.
  Field StringList(std::vector<std::string>& out, bool scalar_is_one = false);
  // A mapping of strings; `check` returns why a value is refused (empty: accepted).
  Field StringMap(std::map<std::string, std::string>& out, std::function<std::string(const std::string&)> check = {});

  const std::vector<std::string>& problems() const { return problems_; }
  // Ok, or kInvalidArgument listing every problem, one per line.
  Status status() const;
  // The file's name and the line of every key the walk met.
  const ConfigSource& source() const { return source_; }

  // The 1-based line of `node` (0 when it has none, e.g. an absent key).
  static int LineOf(const YAML::Node& node);

 private:
  static std::string Known(const std::map<std::string, Field>& fields);
  // A scalar that is a whole decimal number (an optional '-', then digits only).
  static bool Decimal(const YAML::Node& v, long long* out);

  ConfigSource source_;
  std::vector<std::string> problems_;
};

// Reads `text` as YAML and walks its root with `walk`; a syntax error is
// reported as "name:LINE: message". Never throws.
Status WalkYaml(const std::string& text, YamlWalker& walker, const std::function<void(const YAML::Node& root)>& walk);

template <class E>
YamlWalker::Field YamlWalker::Choice(E& out, std::vector<std::pair<std::string, E>> choices) {
  return [this, &out, choices](const YAML::Node& v, const std::string& key) {
    const std::string s = v.IsScalar() ? v.as<std::string>() : "";
    std::string names;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (s == choices[i].first) {
        out = choices[i].second;
        return;
      }
      names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
    }
    Fail(v, key, "must be " + names);
  };
}

template <class T>
YamlWalker::Field YamlWalker::Number(T& out, T min, T max) {
  return [this, &out, min, max](const YAML::Node& v, const std::string& key) {
    long long n = 0;
    if (!Decimal(v, &n)) return Fail(v, key, "must be a whole number");
    if (n < static_cast<long long>(min) || n > static_cast<long long>(max)) {
      return Fail(v, key, "must be between " + std::to_string(min) + " and " + std::to_string(max));
    }
    out = static_cast<T>(n);
  };
}

}  // namespace logdex
