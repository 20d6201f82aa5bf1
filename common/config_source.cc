#include "common/config_source.h"

#include <cctype>

namespace logdex {

std::string ConfigSource::Problem(const std::string& key, const std::string& message) const {
  std::string where = name;
  if (auto it = lines.find(key); it != lines.end()) {
    where += (name.empty() ? "line " : ":") + std::to_string(it->second);
  }
  return (where.empty() ? "" : where + ": ") + key + ": " + message;
}

Status ProblemsStatus(const std::vector<std::string>& problems) {
  if (problems.empty()) return Status::Ok();
  std::string all;
  for (const std::string& p : problems) all += (all.empty() ? "" : "\n") + p;
  return Status(Errc::kInvalidArgument, all);
}

Result<uint64_t> ParseBytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) return Error{Errc::kInvalidArgument, "'" + text + "' is not a size"};
  const uint64_t n = std::stoull(text.substr(0, i));
  const std::string unit = text.substr(i);
  static const std::map<std::string, uint64_t> kUnits = {{"", 1}, {"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20},
                                                         {"GiB", 1ull << 30}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return Error{Errc::kInvalidArgument, "'" + text + "' has an unknown unit '" + unit + "'"};
  return n * it->second;
}

}  // namespace logdex
