// Fuzzy row matching and seek-ahead, shared by every TableStore backend.
#include <string>

#include "store/table_store.h"

namespace logdex {
namespace {

// Completes `prefix` (whose length is `from`) to the full key length: fixed
// positions take the key's byte, "any" positions take `fill`.
std::string Complete(std::string prefix, std::string_view key, std::string_view mask, char fill) {
  for (size_t j = prefix.size(); j < key.size(); ++j) prefix.push_back(mask[j] ? fill : key[j]);
  return prefix;
}

// Steps the prefix r[0..i) to the next (or previous) prefix that can still
// match: the last "any" byte before i that is not at its limit moves by one,
// and the rest is completed with the extreme bytes. nullopt when none can move.
std::optional<std::string> Carry(std::string_view row, size_t i, std::string_view key, std::string_view mask,
                                 bool reverse) {
  const unsigned char limit = reverse ? 0x00 : 0xFF;
  for (size_t j = i; j-- > 0;) {
    if (mask[j] && static_cast<unsigned char>(row[j]) != limit) {
      std::string next(row.substr(0, j));
      next.push_back(static_cast<char>(static_cast<unsigned char>(row[j]) + (reverse ? -1 : 1)));
      return Complete(std::move(next), key, mask, reverse ? '\xff' : '\0');
    }
  }
  return std::nullopt;
}

}  // namespace

bool FuzzyMatches(std::string_view row, std::string_view key, std::string_view mask) {
  if (row.size() != key.size()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    if (!mask[i] && row[i] != key[i]) return false;
  }
  return true;
}

std::optional<std::string> FuzzyNextKey(std::string_view row, std::string_view key, std::string_view mask,
                                        bool reverse) {
  const size_t n = std::min(row.size(), key.size());
  size_t i = 0;
  while (i < n && (mask[i] || row[i] == key[i])) ++i;
  if (i == n) {
    // The first n bytes can match; the lengths decide.
    if (row.size() == key.size()) return std::nullopt;  // matches: nothing to seek to
    if (row.size() < key.size()) {
      if (!reverse) return Complete(std::string(row), key, mask, '\0');  // longer keys sort after row
      return Carry(row, i, key, mask, true);
    }
    if (reverse) return std::string(row.substr(0, key.size()));  // a proper prefix sorts before row
    return Carry(row, key.size(), key, mask, false);
  }
  const bool row_below = static_cast<unsigned char>(row[i]) < static_cast<unsigned char>(key[i]);
  if (row_below != reverse) {
    // Forward and row below the key (or reverse and row above): jump to the key's byte here.
    std::string next(row.substr(0, i));
    next.push_back(key[i]);
    return Complete(std::move(next), key, mask, reverse ? '\xff' : '\0');
  }
  return Carry(row, i, key, mask, reverse);
}

Status ValidateFuzzySpec(const FuzzyScanSpec& spec) {
  if (spec.key.empty()) return Status(Errc::kInvalidArgument, "fuzzy key is empty");
  if (spec.key.size() != spec.mask.size()) {
    return Status(Errc::kInvalidArgument, "fuzzy key has " + std::to_string(spec.key.size()) +
                                              " bytes but mask has " + std::to_string(spec.mask.size()));
  }
  for (char m : spec.mask) {
    if (m != 0 && m != 1) return Status(Errc::kInvalidArgument, "fuzzy mask bytes must be 0 (fixed) or 1 (any)");
  }
  return Status::Ok();
}

}  // namespace logdex
