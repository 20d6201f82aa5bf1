#include "alerting/detector.h"

#include <re2/re2.h>

#include <algorithm>

#include "common/ids.h"

namespace logdex::alerting {
namespace {

constexpr size_t kTemplateInputLimit = 1024;

// Applied in order; a mask's placeholder contains no digits, so later masks
// leave it alone.
struct Mask {
  std::unique_ptr<RE2> re;
  const char* replacement;  // RE2 rewrite string (\1 = first group)
};

const std::vector<Mask>& Masks() {
  static const auto* masks = [] {
    auto* v = new std::vector<Mask>();
    auto add = [&](const char* pattern, const char* repl) {
      v->push_back(Mask{std::make_unique<RE2>(pattern), repl});
      LOGDEX_CHECK(v->back().re->ok());
    };
    add(R"((?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b)", "<uuid>");
    add(R"(\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b)", "<ip>");
    // IPv6: the full eight-group form, or a compressed form with "::".
    add(R"((?i)\b(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}\b)", "<ip>");
    add(R"((?i)(?:\b(?:[0-9a-f]{1,4}:){1,6}|::)(?::[0-9a-f]{1,4}){1,6}\b)", "<ip>");
    // Unix paths with two or more components (after a delimiter), and Windows drive paths.
    add(R"((^|[\s=:"'(\[,])(?:/[\w.\-@+%~]+){2,}/?)", "\\1<path>");
    add(R"((?i)\b[a-z]:\\[^\s"']+)", "<path>");
    add(R"((?i)\b0x[0-9a-f]+\b)", "<hex>");
    return v;
  }();
  return *masks;
}

// Hex words of 8+ characters with both a digit and a letter become <hex>
// ("deadbeef42", a git sha); pure digit runs are left to the number mask.
std::string MaskHexWords(const std::string& in) {
  static const RE2 word(R"((?i)\b([0-9a-f]{8,})\b)");
  std::string out;
  re2::StringPiece rest(in), match;
  size_t last = 0;
  while (RE2::FindAndConsume(&rest, word, &match)) {
    bool digit = false, letter = false;
    for (char ch : match) (ch >= '0' && ch <= '9' ? digit : letter) = true;
    if (!(digit && letter)) continue;
    const size_t pos = static_cast<size_t>(match.data() - in.data());
    out.append(in, last, pos - last).append("<hex>");
    last = pos + match.size();
  }
  out.append(in, last, std::string::npos);
  return out;
}

}  // namespace

std::string MessageTemplate(std::string_view message) {
  std::string out(message.substr(0, kTemplateInputLimit));
  for (const auto& m : Masks()) RE2::GlobalReplace(&out, *m.re, m.replacement);
  out = MaskHexWords(out);
  static const RE2 digits(R"(\d+)");
  RE2::GlobalReplace(&out, digits, "<num>");
  return out;
}

uint64_t GroupFingerprint(std::string_view app, Severity severity, std::string_view message_template,
                          std::string_view host, bool by_host) {
  std::string k;
  k.reserve(app.size() + message_template.size() + host.size() + 4);
  k.append(app).push_back('\0');
  k.push_back(static_cast<char>(SeverityCode(severity)));
  k.push_back('\0');
  k.append(message_template);
  if (by_host) k.append(1, '\0').append(host);
  return Hash64(k);
}

Detector::Detector(const AlertingConfig& config) {
  for (const auto& r : config.rules) {
    CompiledRule c{r, nullptr};
    if (!r.message_regex.empty()) {
      auto re = std::make_shared<RE2>(r.message_regex, RE2::Quiet);
      if (!re->ok()) continue;
      c.message = std::move(re);
    }
    rules_.push_back(std::move(c));
  }
  has_default_ = config.default_rule;
  default_rule_.config.name = "default";
  for (const auto& r : rules_)
    for (Severity s : r.config.severities) min_severity_ = std::min(min_severity_, s);
}

Detector::~Detector() = default;

const CompiledRule* Detector::Match(std::string_view app, std::string_view host, Severity severity,
                                    const proto::LogRecord& record) const {
  for (const auto& r : rules_) {
    const auto& c = r.config;
    if (std::find(c.severities.begin(), c.severities.end(), severity) == c.severities.end()) continue;
    if (!c.apps.empty() && std::find(c.apps.begin(), c.apps.end(), app) == c.apps.end()) continue;
    if (!c.hosts.empty() && std::find(c.hosts.begin(), c.hosts.end(), host) == c.hosts.end()) continue;
    bool tags_ok = true;
    for (const auto& [k, v] : c.tags) {
      bool found = false;
      for (const auto& t : record.tags())
        if (t.key() == k && (v == "*" || t.value() == v)) found = true;
      if (!found) {
        tags_ok = false;
        break;
      }
    }
    if (!tags_ok) continue;
    if (r.message && !RE2::PartialMatch(record.message(), *r.message)) continue;
    return &r;
  }
  if (has_default_ && IsAlertLevel(severity)) return &default_rule_;
  return nullptr;
}

}  // namespace logdex::alerting
