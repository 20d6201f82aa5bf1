// Test helpers for parse/: a record collector, the loghub samples and their
// CSVs (tests/data/loghub, see its LICENSE). ship's tests use them too.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "parse/record.h"

namespace logdex::parse::testing {

inline std::string LoghubPath(const std::string& name) { return std::string(LOGDEX_LOGHUB_DIR) + "/" + name; }

inline std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();  // some samples end lines with CRLF
    lines.push_back(l);
  }
  return lines;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Rows of a CSV file (RFC 4180 quoting), header first.
inline std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  const std::string text = ReadAll(path);
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field.push_back('"'), ++i;
      else if (c == '"') quoted = false;
      else field.push_back(c);
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else {
      field.push_back(c);
    }
  }
  if (!field.empty() || !rows.back().empty()) rows.back().push_back(std::move(field));
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

// The values of one column, by header name.
inline std::vector<std::string> CsvColumn(const std::string& path, const std::string& name) {
  auto rows = ReadCsv(path);
  std::vector<std::string> out;
  if (rows.empty()) return out;
  size_t col = rows[0].size();
  for (size_t i = 0; i < rows[0].size(); ++i) {
    if (rows[0][i] == name) col = i;
  }
  EXPECT_LT(col, rows[0].size()) << "no column " << name << " in " << path;
  for (size_t r = 1; r < rows.size(); ++r) out.push_back(col < rows[r].size() ? rows[r][col] : "");
  return out;
}

// A record, owned.
struct Rec {
  int64_t ts_ms;
  Severity severity;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
  std::string app, host;
};

class CollectingSink : public RecordSink {
 public:
  Status OnRecord(const RecordView& r) override {
    Rec rec{r.ts_ms, r.severity, std::string(r.message), {}, std::string(r.app), std::string(r.host)};
    for (const TagView& t : r.tags) rec.tags.emplace_back(std::string(t.key), std::string(t.value));
    records.push_back(std::move(rec));
    return Status::Ok();
  }
  std::vector<Rec> records;
};

}  // namespace logdex::parse::testing
