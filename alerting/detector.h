// Detection and fingerprinting: which rule (if any) takes a record, and the
// message template that groups similar records.
//
// Detector is immutable after construction and safe for concurrent use
// (RE2 objects are thread-safe for matching).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alerting/config.h"
#include "common/severity.h"
#include "proto/logdex.pb.h"

namespace re2 {
class RE2;
}

namespace logdex::alerting {

// The message with its variable parts masked, for grouping: UUIDs -> <uuid>,
// IPv4/IPv6 addresses (with an optional :port) -> <ip>, absolute paths ->
// <path>, hex ids (0x..., or 8+ hex digits) -> <hex>, other digit runs ->
// <num>. Only the first 1 KiB of the message is considered. Thread-safe.
std::string MessageTemplate(std::string_view message);

// The group fingerprint: XXH64 of app, severity, template and (when the rule
// groups by host) host.
uint64_t GroupFingerprint(std::string_view app, Severity severity, std::string_view message_template,
                          std::string_view host, bool by_host);

// A rule ready to match.
struct CompiledRule {
  RuleConfig config;
  std::shared_ptr<re2::RE2> message;  // null = any message
};

class Detector {
 public:
  // `config` must have passed ValidateAlertingConfig (bad regexes are skipped otherwise).
  explicit Detector(const AlertingConfig& config);
  ~Detector();

  // The first rule that matches, else the default rule (when enabled and the
  // severity is ERROR/FATAL), else null. The pointer lives as long as the Detector.
  const CompiledRule* Match(std::string_view app, std::string_view host, Severity severity,
                            const proto::LogRecord& record) const;

  // The least severe level any rule can take; chunks whose records are all
  // below it never need Stage() (serve uses this to skip decompression).
  Severity MinSeverity() const { return min_severity_; }

 private:
  std::vector<CompiledRule> rules_;
  CompiledRule default_rule_;
  bool has_default_ = false;
  Severity min_severity_ = Severity::kError;
};

}  // namespace logdex::alerting
