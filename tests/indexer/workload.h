// A generated workload for indexer and query tests: chunks of records over
// apps × hosts × severities × tag values, with the records kept for a
// brute-force answer to any query.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/chunk_codec.h"
#include "common/ids.h"
#include "indexer/query.h"

namespace logdex::testing {

struct Rec {
  int64_t ts;
  std::string app, host;
  Severity sev;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
};

struct Workload {
  std::vector<std::string> chunks;  // serialized LogChunks
  std::vector<Rec> records;
  int64_t start_ms = 0, end_ms = 0;
};

inline const char* const kWords[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
                                     "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"};

struct WorkloadSpec {
  int apps = 20, hosts = 50, tag_values = 30;
  std::vector<Severity> severities = {Severity::kDebug, Severity::kInfo, Severity::kWarn, Severity::kError,
                                      Severity::kFatal};
  int records = 100'000;
  int max_records_per_chunk = 8;
  int64_t start_ms = 1'790'000'000'000;
  int64_t duration_ms = 6 * 3'600'000;
  int64_t max_chunk_span_ms = 30'000;  // a chunk's records lie within this
  // Every n-th chunk mixes two severities (as a foreign producer's would), 0 = never.
  int mixed_every = 50;
  // Every n-th chunk has no tag summary, 0 = never.
  int no_summary_every = 40;
  uint32_t seed = 1;
};

// Timestamps are unique, so that the expected order is the timestamp order.
inline Workload MakeWorkload(const WorkloadSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  Workload w;
  w.start_ms = spec.start_ms;
  w.end_ms = spec.start_ms + spec.duration_ms;
  std::unordered_set<int64_t> used;
  uint64_t sequence = 0;
  int made = 0;
  while (made < spec.records) {
    const int a = static_cast<int>(rng() % spec.apps), h = static_cast<int>(rng() % spec.hosts);
    const Severity sev = spec.severities[rng() % spec.severities.size()];
    const Severity other = spec.severities[rng() % spec.severities.size()];
    const bool mixed = spec.mixed_every && ++sequence % spec.mixed_every == 0;
    const int n = std::min<int>(1 + static_cast<int>(rng() % spec.max_records_per_chunk), spec.records - made);
    const int64_t base = spec.start_ms + static_cast<int64_t>(rng() % (spec.duration_ms - spec.max_chunk_span_ms));
    proto::RecordBatch batch;
    for (int i = 0; i < n; ++i) {
      Rec r;
      // Unique timestamps: ms precision, redrawn on collision.
      do {
        r.ts = base + static_cast<int64_t>(rng() % spec.max_chunk_span_ms);
      } while (!used.insert(r.ts).second);
      r.app = "app" + std::to_string(a);
      r.host = "host" + std::to_string(h);
      r.sev = mixed && i % 2 ? other : sev;
      r.message = std::string(kWords[rng() % 16]) + " request " + std::to_string(rng() % 100000) + " " +
                  kWords[rng() % 16] + " done";
      r.tags.emplace_back("k", "v" + std::to_string(rng() % spec.tag_values));
      if (rng() % 4 == 0) r.tags.emplace_back("dc", rng() % 2 ? "east" : "west");
      proto::LogRecord* pr = batch.add_records();
      pr->set_ts_ms(r.ts);
      pr->set_severity(SeverityCode(r.sev));
      pr->set_message(r.message);
      for (auto& [k, v] : r.tags) {
        proto::Tag* t = pr->add_tags();
        t->set_key(k);
        t->set_value(v);
      }
      w.records.push_back(std::move(r));
    }
    PackOptions po;
    po.producer_id = 77;
    po.sequence = sequence;
    po.summarize_tags = !(spec.no_summary_every && sequence % spec.no_summary_every == 0);
    w.chunks.push_back(PackChunk("app" + std::to_string(a), "host" + std::to_string(h), batch, po).SerializeAsString());
    made += n;
  }
  return w;
}

// The brute-force filter the query engine must agree with.
inline bool Matches(const Rec& r, const Query& q) {
  if (r.ts < q.from_ms || r.ts >= q.to_ms) return false;
  if (!q.app.empty() && r.app != q.app) return false;
  if (!q.host.empty() && r.host != q.host) return false;
  if (!q.severities.empty() && std::find(q.severities.begin(), q.severities.end(), r.sev) == q.severities.end()) {
    return false;
  }
  for (auto& want : q.tags) {
    if (std::find(r.tags.begin(), r.tags.end(), want) == r.tags.end()) return false;
  }
  return q.contains.empty() || r.message.find(q.contains) != std::string::npos;
}

}  // namespace logdex::testing
