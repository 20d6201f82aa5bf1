// ConfigSource: where each key of a configuration file was, so that checks
// made after the file was read (across keys, against the environment) still
// name the file and the line: "logdex.yaml:12: store.durability: ...".
// Filled by YamlWalker (common/yaml_walker.h); plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace logdex {

struct ConfigSource {
  std::string name;                 // the file (or a name for text parsed directly)
  std::map<std::string, int> lines;  // key path ("store.hbase.port", "alerting.sinks[0].url") -> 1-based line

  // "name:LINE: key: message" when the file holds `key`, else "name: key: message"
  // (the key kept its default). With an empty name: "line LINE: key: message"
  // (for a message the caller already prefixes with the file's name).
  std::string Problem(const std::string& key, const std::string& message) const;
};

// Ok when `problems` is empty, else kInvalidArgument listing them, one per line.
Status ProblemsStatus(const std::vector<std::string>& problems);

// Sizes in configuration files: "512", "512B", "64KiB", "32MiB", "1GiB".
Result<uint64_t> ParseBytes(const std::string& text);

}  // namespace logdex
