// A query answer's record as JSON, written straight into a string: the
// bytes nlohmann::json's dump() gives for RecordToJson's object (keys in
// its order, its escapes, an invalid UTF-8 sequence replaced by U+FFFD as
// error_handler_t::replace does), without building the object: live tail
// writes one per record (100,000 a second under load), and the DOM's maps
// and copies were most of its CPU. tests/server/record_json_test.cc holds
// it to nlohmann's output on random records.
#pragma once

#include <string>
#include <string_view>

#include "indexer/query.h"

namespace logdex {

// Appends `s` as a JSON string (quoted): nlohmann's escapes (\" \\ \b \f
// \n \r \t, \u00xx for the other bytes below 0x20, nothing else) and its
// replacement of each invalid UTF-8 sequence by U+FFFD.
void AppendJsonString(std::string& out, std::string_view s);

// Appends {"app":..,"host":..,"message":..,"severity":..,"tags":{..},
// "time":..,"ts":..}: tags sorted by key, of a key given twice the last.
void AppendRecordJson(std::string& out, const ResultRecord& r);

}  // namespace logdex
