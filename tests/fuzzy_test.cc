#include <gtest/gtest.h>

#include "store/table_store.h"

namespace logdex {
namespace {

const std::string kAlphabet("\x00\x01\x02\xfe\xff", 5);

std::vector<std::string> AllStrings(size_t len) {
  std::vector<std::string> out{""};
  for (size_t i = 0; i < len; ++i) {
    std::vector<std::string> next;
    for (const auto& s : out) {
      for (char c : kAlphabet) next.push_back(s + c);
    }
    out = std::move(next);
  }
  return out;
}

// For every row and pattern over a small alphabet: the seek target matches,
// lies strictly beyond the row in the scan direction, and no matching key
// lies between them (so the seek skips nothing it should return).
TEST(FuzzyNextKey, NeverSkipsAMatchOnExhaustiveSmallKeys) {
  const size_t kLen = 3;
  std::vector<std::string> keys = AllStrings(kLen);
  std::vector<std::string> rows = keys;
  for (size_t len : {1, 2, 4}) {
    for (auto& s : AllStrings(len)) rows.push_back(s);
  }
  int checked = 0;
  for (int m = 0; m < 8; ++m) {
    std::string mask(kLen, '\0');
    for (size_t i = 0; i < kLen; ++i) mask[i] = (m >> i) & 1;
    for (const std::string& key : {std::string("\x01\xfe\x00", 3), std::string("\xff\x00\x02", 3)}) {
      for (const std::string& row : rows) {
        if (FuzzyMatches(row, key, mask)) continue;
        for (bool reverse : {false, true}) {
          auto next = FuzzyNextKey(row, key, mask, reverse);
          // The nearest matching candidate in the scan direction.
          std::optional<std::string> nearest;
          for (const std::string& k : keys) {
            if (!FuzzyMatches(k, key, mask)) continue;
            bool beyond = reverse ? k < row : k > row;
            if (beyond && (!nearest || (reverse ? k > *nearest : k < *nearest))) nearest = k;
          }
          if (!next) {
            ASSERT_FALSE(nearest.has_value()) << "gave up though a match exists";
            continue;
          }
          ASSERT_TRUE(FuzzyMatches(*next, key, mask));
          ASSERT_TRUE(reverse ? *next < row : *next > row);
          if (nearest) {
            ASSERT_TRUE(reverse ? *next >= *nearest : *next <= *nearest) << "skipped a match";
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(FuzzyNextKey, JumpsToTheNextSaltBucket) {
  // [salt any][app fixed]: from bucket 3 past the app, the next candidate is bucket 4.
  std::string key("\x00\x41", 2), mask("\x01\x00", 2);
  EXPECT_EQ(FuzzyNextKey(std::string("\x03\x42", 2), key, mask, false), std::string("\x04\x41", 2));
  EXPECT_EQ(FuzzyNextKey(std::string("\x03\x40", 2), key, mask, false), std::string("\x03\x41", 2));
  EXPECT_EQ(FuzzyNextKey(std::string("\x03\x40", 2), key, mask, true), std::string("\x02\x41", 2));
  EXPECT_EQ(FuzzyNextKey(std::string("\xff\x42", 2), key, mask, false), std::nullopt);
}

TEST(FuzzySpec, ValidatesKeyAndMask) {
  FuzzyScanSpec spec;
  spec.key = "ab";
  spec.mask = std::string("\x00", 1);
  EXPECT_FALSE(ValidateFuzzySpec(spec).ok());
  spec.mask = std::string("\x00\x02", 2);
  EXPECT_FALSE(ValidateFuzzySpec(spec).ok());
  spec.mask = std::string("\x00\x01", 2);
  EXPECT_TRUE(ValidateFuzzySpec(spec).ok());
}

}  // namespace
}  // namespace logdex
