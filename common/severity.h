// The severity code table (docs/ARCHITECTURE.md, "Severity code table"): six
// levels stored as one byte whose order is the order of severity, and a
// parser for the common spellings.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace logdex {

enum class Severity : uint8_t {
  kTrace = 10,
  kDebug = 20,
  kInfo = 30,
  kWarn = 40,
  kError = 50,
  kFatal = 60,
};

// All levels, least severe first.
inline constexpr std::array<Severity, 6> kAllSeverities = {
    Severity::kTrace, Severity::kDebug, Severity::kInfo,
    Severity::kWarn,  Severity::kError, Severity::kFatal};

inline constexpr uint8_t SeverityCode(Severity s) { return static_cast<uint8_t>(s); }

// The level for a stored code; nullopt for a code that is not in the table.
std::optional<Severity> SeverityFromCode(uint32_t code);

// Upper-case canonical name: "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL".
std::string_view SeverityName(Severity s);

// Lower-case name: "trace" ... "fatal", as in the table names idx_trace ...
// idx_fatal, Loki's `level` label and Alertmanager's `severity` label.
std::string_view SeverityTableSuffix(Severity s);

// Parses a spelling, case-insensitively: the names and aliases of the table
// (TRACE VERBOSE V FINEST / DEBUG D FINE / INFO I NOTICE INFORMATION /
// WARN WARNING W / ERROR ERR E SEVERE / FATAL F CRITICAL CRIT EMERG EMERGENCY
// ALERT PANIC) and syslog numbers "0".."7". nullopt for anything else.
std::optional<Severity> ParseSeverity(std::string_view text);

// The level of a syslog severity number 0..7; nullopt outside that range.
std::optional<Severity> SeverityFromSyslog(int number);

// True for ERROR and FATAL, the levels that page on-call by default.
inline constexpr bool IsAlertLevel(Severity s) { return s >= Severity::kError; }

}  // namespace logdex
