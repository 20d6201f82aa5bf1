// A written batch as the consumer hands it to live tail (TailHub::Publish):
// one main row per chunk, one chunk per (app, host, severity) as ingest
// stores them, and an index row beside each (which tail must skip). For the
// live-tail tests of tests/server/.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/chunk_codec.h"
#include "common/row_keys.h"
#include "common/severity.h"
#include "store/table_store.h"

namespace logdex::testing {

struct Line {
  std::string app, host;
  Severity severity;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
};

// Records get times first_ts_ms, first_ts_ms + 1, ... in `lines`' order.
inline WriteBatch Written(const std::vector<Line>& lines, uint64_t* seq, int64_t first_ts_ms) {
  std::map<std::tuple<std::string, std::string, Severity>, proto::RecordBatch> streams;
  int64_t ts = first_ts_ms;
  for (const Line& l : lines) {
    proto::LogRecord* r = streams[{l.app, l.host, l.severity}].add_records();
    r->set_ts_ms(ts++);
    r->set_severity(SeverityCode(l.severity));
    r->set_message(l.message);
    for (const auto& [k, v] : l.tags) {
      proto::Tag* t = r->add_tags();
      t->set_key(k);
      t->set_value(v);
    }
  }
  WriteBatch batch;
  for (const auto& [stream, records] : streams) {
    PackOptions po;
    po.producer_id = 5;
    po.sequence = ++*seq;
    proto::MainRow row;
    *row.mutable_chunk() = PackChunk(std::get<0>(stream), std::get<1>(stream), records, po);
    batch.Put(kMainTable, "k" + std::to_string(*seq), row.SerializeAsString());
    batch.Put(LevelIndexTable(std::get<2>(stream)), "i" + std::to_string(*seq), "index rows are not tailed");
  }
  return batch;
}

}  // namespace logdex::testing
