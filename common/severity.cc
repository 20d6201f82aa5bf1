#include "common/severity.h"

#include <cctype>

namespace logdex {
namespace {

struct Spelling {
  std::string_view text;  // upper case
  Severity level;
};

constexpr Spelling kSpellings[] = {
    {"TRACE", Severity::kTrace},   {"VERBOSE", Severity::kTrace},    {"V", Severity::kTrace},
    {"FINEST", Severity::kTrace},  {"DEBUG", Severity::kDebug},      {"D", Severity::kDebug},
    {"FINE", Severity::kDebug},    {"INFO", Severity::kInfo},        {"I", Severity::kInfo},
    {"NOTICE", Severity::kInfo},   {"INFORMATION", Severity::kInfo}, {"WARN", Severity::kWarn},
    {"WARNING", Severity::kWarn},  {"W", Severity::kWarn},           {"ERROR", Severity::kError},
    {"ERR", Severity::kError},     {"E", Severity::kError},          {"SEVERE", Severity::kError},
    {"FATAL", Severity::kFatal},   {"F", Severity::kFatal},          {"CRITICAL", Severity::kFatal},
    {"CRIT", Severity::kFatal},    {"EMERG", Severity::kFatal},      {"EMERGENCY", Severity::kFatal},
    {"ALERT", Severity::kFatal},   {"PANIC", Severity::kFatal},
};

constexpr size_t kLongestSpelling = 11;  // "INFORMATION"

}  // namespace

std::optional<Severity> SeverityFromCode(uint32_t code) {
  switch (code) {
    case 10: return Severity::kTrace;
    case 20: return Severity::kDebug;
    case 30: return Severity::kInfo;
    case 40: return Severity::kWarn;
    case 50: return Severity::kError;
    case 60: return Severity::kFatal;
    default: return std::nullopt;
  }
}

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kTrace: return "TRACE";
    case Severity::kDebug: return "DEBUG";
    case Severity::kInfo: return "INFO";
    case Severity::kWarn: return "WARN";
    case Severity::kError: return "ERROR";
    case Severity::kFatal: return "FATAL";
  }
  return "UNKNOWN";
}

std::string_view SeverityTableSuffix(Severity s) {
  switch (s) {
    case Severity::kTrace: return "trace";
    case Severity::kDebug: return "debug";
    case Severity::kInfo: return "info";
    case Severity::kWarn: return "warn";
    case Severity::kError: return "error";
    case Severity::kFatal: return "fatal";
  }
  return "unknown";
}

std::optional<Severity> SeverityFromSyslog(int number) {
  if (number < 0 || number > 7) return std::nullopt;
  if (number <= 2) return Severity::kFatal;
  if (number == 3) return Severity::kError;
  if (number == 4) return Severity::kWarn;
  if (number <= 6) return Severity::kInfo;
  return Severity::kDebug;
}

std::optional<Severity> ParseSeverity(std::string_view text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '9') return SeverityFromSyslog(text[0] - '0');
  if (text.empty() || text.size() > kLongestSpelling) return std::nullopt;
  char upper[kLongestSpelling];
  for (size_t i = 0; i < text.size(); ++i) {
    upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  }
  std::string_view key(upper, text.size());
  for (const Spelling& s : kSpellings) {
    if (s.text == key) return s.level;
  }
  return std::nullopt;
}

}  // namespace logdex
