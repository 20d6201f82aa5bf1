// A serialized RecordBatch rearranged by columns, for chunks stored with
// proto::CODEC_ZSTD_COLUMNS (one zstd frame of the columns).
//
// Why: zstd sees a RecordBatch as records interleaved with their framing
// (a length, field keys, an 8-byte timestamp whose low bytes change every
// record), and those bytes cost it about 5 bytes per record that it cannot
// predict. Laid out as columns, the timestamps become small deltas, the
// framing disappears, and the messages follow one another as the raw log
// did: on Loghub lines merged chunks are 17-51 % smaller at the same zstd
// level (`logdex bench storage`'s columns_vs_plain; README, "Benchmarks").
// No library does this for protobuf bytes
// (Parquet and ORC are file formats around columns of whole tables), so it
// is written here; it is a few hundred bytes of layout, not a codec.
//
// The layout is an exact, reversible rearrangement of one canonical wire
// form, the one ChunkWriter writes: records of a ts, a severity, a message
// and tags, in field order, defaults left out, minimal varints. Records in
// any other form (unknown fields from a newer producer, fields repeated or
// out of order) are refused by RecordsToColumns, which proves each layout it
// gives by reading it back; the writer then stores that chunk with plain zstd.
//
//   varint 1 (the layout's version), varint record count,
//   varint byte size of each column but the last, then the columns:
//     ts deltas (zigzag varints, the first from 0), severities (varints),
//     message lengths (varints), tag counts (varints), tag lengths
//     (varints), tag bodies (their Tag wire bytes), messages.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace logdex {

// The columns of `records` (a serialized RecordBatch) into `*out`
// (replaced), or false when `records` is not in the canonical form or its
// columns would not be smaller (`*out` is then unspecified).
bool RecordsToColumns(std::string_view records, std::string* out);

// The RecordBatch wire bytes `columns` were made from, into `*out` (resized
// to exactly `records_size`). False when `columns` is malformed or does not
// give exactly `records_size` bytes; nothing past `records_size` is ever
// allocated or written, whatever `columns` holds.
bool ColumnsToRecords(std::string_view columns, uint64_t records_size, std::string* out);

}  // namespace logdex
