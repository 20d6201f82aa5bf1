#include "common/yaml_walker.h"

#include "common/time_parse.h"

#include <charconv>

namespace logdex {

int YamlWalker::LineOf(const YAML::Node& node) {
  return node.IsDefined() && node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
}

void YamlWalker::Map(const YAML::Node& node, const std::string& path, const std::map<std::string, Field>& fields) {
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) return Fail(node, path, "must be a mapping");
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      Fail(kv.first, path, "keys must be strings");
      continue;
    }
    const std::string key = kv.first.as<std::string>();
    const std::string full = path.empty() ? key : path + "." + key;
    source_.lines[full] = LineOf(kv.first);
    auto it = fields.find(key);
    if (it == fields.end()) {
      Fail(kv.first, full, "unknown key" + Known(fields));
      continue;
    }
    it->second(kv.second, full);
  }
}

void YamlWalker::List(const YAML::Node& node, const std::string& path, const Field& item) {
  if (!node || node.IsNull()) return;
  if (!node.IsSequence()) return Fail(node, path, "must be a list");
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item_path = path + "[" + std::to_string(i) + "]";
    source_.lines[item_path] = LineOf(node[i]);
    item(node[i], item_path);
  }
}

void YamlWalker::Fail(const YAML::Node& at, const std::string& key, const std::string& message) {
  const int line = LineOf(at);
  problems_.push_back(source_.name + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + key + ": " +
                      message);
}

YamlWalker::Field YamlWalker::String(std::string& out) {
  return [this, &out](const YAML::Node& v, const std::string& key) {
    if (!v.IsScalar()) return Fail(v, key, "must be a string");
    out = v.as<std::string>();
  };
}

YamlWalker::Field YamlWalker::Bool(bool& out) {
  return [this, &out](const YAML::Node& v, const std::string& key) {
    bool b = false;
    if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) return Fail(v, key, "must be true or false");
    out = b;
  };
}

YamlWalker::Field YamlWalker::Duration(int64_t& out_ms, int64_t min_ms) {
  return [this, &out_ms, min_ms](const YAML::Node& v, const std::string& key) {
    if (!v.IsScalar()) return Fail(v, key, "must be a duration (e.g. 500ms, 30s, 2m, 1h, 7d)");
    auto d = ParseDuration(v.as<std::string>());
    if (!d.ok()) return Fail(v, key, d.error().message);
    if (*d < min_ms) return Fail(v, key, "must be at least " + std::to_string(min_ms) + " ms");
    out_ms = *d;
  };
}

YamlWalker::Field YamlWalker::Bytes(uint64_t& out) {
  return [this, &out](const YAML::Node& v, const std::string& key) {
    auto b = v.IsScalar() ? ParseBytes(v.as<std::string>()) : Result<uint64_t>(Error{Errc::kInvalidArgument, "must be a size"});
    if (!b.ok()) return Fail(v, key, b.error().message + " (e.g. 64KiB, 32MiB)");
    out = *b;
  };
}

YamlWalker::Field YamlWalker::StringList(std::vector<std::string>& out, bool scalar_is_one) {
  return [this, &out, scalar_is_one](const YAML::Node& v, const std::string& key) {
    if (scalar_is_one && v.IsScalar()) {
      out = {v.as<std::string>()};
      return;
    }
    if (!v.IsSequence()) return Fail(v, key, "must be a list");
    out.clear();
    for (const auto& item : v) {
      if (!item.IsScalar()) return Fail(item, key, "items must be strings");
      out.push_back(item.as<std::string>());
    }
  };
}

YamlWalker::Field YamlWalker::StringMap(std::map<std::string, std::string>& out,
                                        std::function<std::string(const std::string&)> check) {
  return [this, &out, check](const YAML::Node& v, const std::string& key) {
    if (!v.IsMap()) return Fail(v, key, "must be a mapping");
    for (const auto& kv : v) {
      if (!kv.first.IsScalar()) {
        Fail(kv.first, key, "keys must be strings");
        continue;
      }
      const std::string k = kv.first.as<std::string>();
      source_.lines[key + "." + k] = LineOf(kv.first);
      if (!kv.second.IsScalar()) {
        Fail(kv.second, key + "." + k, "must be a string");
        continue;
      }
      const std::string value = kv.second.as<std::string>();
      if (check) {
        if (std::string why = check(value); !why.empty()) {
          Fail(kv.second, key + "." + k, why);
          continue;
        }
      }
      out[k] = value;
    }
  };
}

bool YamlWalker::Decimal(const YAML::Node& v, long long* out) {
  if (!v.IsScalar()) return false;
  const std::string& s = v.Scalar();
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

Status YamlWalker::status() const { return ProblemsStatus(problems_); }

std::string YamlWalker::Known(const std::map<std::string, Field>& fields) {
  std::string s = " (known: ";
  bool first = true;
  for (const auto& [k, f] : fields) {
    s += (first ? "" : ", ") + k;
    first = false;
  }
  return s + ")";
}

Status WalkYaml(const std::string& text, YamlWalker& walker, const std::function<void(const YAML::Node& root)>& walk) {
  const std::string& name = walker.source().name;
  try {
    const YAML::Node root = YAML::Load(text);
    walk(root);
  } catch (const YAML::Exception& e) {
    return Status(Errc::kInvalidArgument, name + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  return walker.status();
}

}  // namespace logdex
