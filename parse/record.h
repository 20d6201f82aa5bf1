// The record types shared by the assembler, the chunker and the embedding API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/severity.h"
#include "parse/parsers.h"

namespace logdex::parse {

// A record to ship, by view: the caller owns the bytes for the duration of
// the call that receives it.
struct RecordView {
  int64_t ts_ms = 0;  // ms since the epoch, UTC
  Severity severity = Severity::kInfo;
  std::string_view message;
  std::span<const TagView> tags;  // keys must not contain '=' (see parsers.h)
  // Empty: the receiver's default app/host.
  std::string_view app;
  std::string_view host;
  // From RecordAssembler: whether its first line matched the input's format,
  // and that line's number in the input (1-based; 0 when not known).
  bool parsed = true;
  uint64_t first_line = 0;
  // How many input lines the record holds (joined continuation lines too).
  uint32_t lines = 1;
  // Opaque to the parse and chunk code: an id the shipping pipeline gives a
  // record to find it in the chunk that carries it (0: none).
  uint64_t origin = 0;
};

// Receives complete records (from RecordAssembler). A failure stops the caller.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual Status OnRecord(const RecordView& record) = 0;
};

}  // namespace logdex::parse
