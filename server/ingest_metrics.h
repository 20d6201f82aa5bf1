// The ingest path's degraded modes as metrics (STYLE.md: declared in one
// place): tags the indexer did not index, stagings a store read failed, and
// what serve's line input kept in a degraded form. The indexer and the line
// decoder keep plain counters on the consumer's thread; Update() turns their
// growth into Prometheus counters from that same thread (after each batch),
// so neither module needs a metrics library nor shared state. It also logs
// one warn line a minute at most, with what grew since the last one.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "common/clock.h"
#include "indexer/indexer.h"
#include "server/ingest_adapters.h"

namespace logdex {

class IngestMetrics {
 public:
  // `clock` must outlive the metrics.
  IngestMetrics(prometheus::Registry& registry, const Clock& clock);

  // Adds what grew since the last call. Call from the consumer's thread.
  // With `indexer`, also warns (once a minute at most, one line per stream)
  // of the records past the store's retention it took in.
  void Update(const IndexerCounters& indexer, const ShipLineDecoder::Counters& lines, Indexer* past_retention = nullptr);

 private:
  prometheus::Family<prometheus::Counter>& not_indexed_;
  prometheus::Counter& values_over_cap_;
  prometheus::Counter& keys_over_cap_;
  prometheus::Counter& record_cap_;
  prometheus::Counter& denied_;
  prometheus::Counter& store_read_failures_;
  prometheus::Counter& utf8_replaced_;
  prometheus::Counter& unparsed_;
  prometheus::Counter& untimed_;
  prometheus::Counter& restamped_;
  prometheus::Counter& past_retention_;
  prometheus::Counter& merged_checks_;
  prometheus::Counter& merged_resends_;
  prometheus::Counter& unreadable_ledger_reads_;
  const Clock& clock_;
  IndexerCounters last_indexer_, logged_indexer_;
  ShipLineDecoder::Counters last_lines_, logged_lines_;
  int64_t logged_ms_ = INT64_MIN / 2;
  int64_t retention_logged_ms_ = INT64_MIN / 2;
};

}  // namespace logdex
