#include "server/ingest_metrics.h"

#include <prometheus/family.h>
#include <spdlog/spdlog.h>

namespace logdex {
namespace {

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

void Grow(prometheus::Counter& c, uint64_t now, uint64_t before) {
  if (now > before) c.Increment(static_cast<double>(now - before));
}

}  // namespace

IngestMetrics::IngestMetrics(prometheus::Registry& r, const Clock& clock)
    : not_indexed_(prometheus::BuildCounter()
                       .Name("logdex_indexer_tags_not_indexed_total")
                       .Help("Record tags kept in their records but not indexed (found by scan=true), by the cap "
                             "that stopped them")
                       .Register(r)),
      values_over_cap_(not_indexed_.Add({{"reason", "values_per_hour"}})),
      keys_over_cap_(not_indexed_.Add({{"reason", "keys_per_hour"}})),
      record_cap_(not_indexed_.Add({{"reason", "tags_per_record"}})),
      denied_(not_indexed_.Add({{"reason", "denied"}})),
      store_read_failures_(Counter(r, "logdex_indexer_store_read_failures_total",
                                   "Chunk stagings failed by a store call (a read, or an HBase extent checkAndPut; the batch is retried)")),
      utf8_replaced_(Counter(r, "logdex_line_input_invalid_utf8_lines_total",
                             "JSON lines kept with their invalid UTF-8 replaced by U+FFFD")),
      unparsed_(Counter(r, "logdex_line_input_unparsed_lines_total",
                        "Text lines no format matched, kept whole as their message")),
      untimed_(Counter(r, "logdex_line_input_untimed_messages_total",
                       "Line messages without a Kafka timestamp (lines without a time take the clock's)")),
      restamped_(Counter(r, "logdex_line_input_restamped_records_total",
                         "Line records whose own time serve refuses (before 2000, over a day ahead), stored with "
                         "their Kafka message's time and the tag logdex_restamped_from")),
      past_retention_(Counter(r, "logdex_ingest_past_retention_records_total",
                              "Records stored although older than the store's retention (store.ttl): no query "
                              "reaches them")),
      merged_checks_(Counter(r, "logdex_indexer_merged_checks_total",
                             "Chunks older than the shortest compaction.settle the store used checked against the "
                             "compactor's ledger before they are stored (a store read each; a re-send of a merged "
                             "part is not stored)")),
      merged_resends_(Counter(r, "logdex_indexer_merged_resends_total",
                              "Stored chunks not written again because the compactor had merged them already "
                              "(a re-send: ship's journal or backlog, a producer's retry)")),
      unreadable_ledger_reads_(Counter(r, "logdex_indexer_unreadable_ledger_reads_total",
                                       "Reads of compactor ledger rows no format allows (damaged, or another build's) "
                                       "while checking a re-send, a row at each read: a chunk only they list is stored "
                                       "again")),
      clock_(clock) {}

void IngestMetrics::Update(const IndexerCounters& i, const ShipLineDecoder::Counters& l, Indexer* past_retention) {
  Grow(past_retention_, i.past_retention_records, last_indexer_.past_retention_records);
  Grow(merged_checks_, i.merged_checks, last_indexer_.merged_checks);
  Grow(merged_resends_, i.merged_resends, last_indexer_.merged_resends);
  Grow(unreadable_ledger_reads_, i.unreadable_ledger_reads, last_indexer_.unreadable_ledger_reads);
  Grow(restamped_, l.restamped_records, last_lines_.restamped_records);
  Grow(values_over_cap_, i.tag_values_over_cap, last_indexer_.tag_values_over_cap);
  Grow(keys_over_cap_, i.tag_keys_over_cap, last_indexer_.tag_keys_over_cap);
  Grow(record_cap_, i.tags_over_record_cap, last_indexer_.tags_over_record_cap);
  Grow(denied_, i.tag_keys_denied, last_indexer_.tag_keys_denied);
  Grow(store_read_failures_, i.store_read_failures, last_indexer_.store_read_failures);
  Grow(utf8_replaced_, l.utf8_replaced_lines, last_lines_.utf8_replaced_lines);
  Grow(unparsed_, l.unparsed_lines, last_lines_.unparsed_lines);
  Grow(untimed_, l.untimed_messages, last_lines_.untimed_messages);
  last_indexer_ = i;
  last_lines_ = l;

  const int64_t now = clock_.MonotonicNs() / 1'000'000;
  if (past_retention != nullptr && now - retention_logged_ms_ >= 60'000) {
    const std::map<std::string, uint64_t> streams = past_retention->TakePastRetention();
    size_t lines = 0;
    for (const auto& [stream, records] : streams) {
      if (++lines > 10) {
        spdlog::warn("ingest: and {} more streams sent records older than the retention", streams.size() - 10);
        break;
      }
      spdlog::warn("ingest: {} records of {} are older than the store's retention (store.ttl): stored, but no query "
                   "reaches them (logdex_ingest_past_retention_records_total)",
                   records, stream);
    }
    if (!streams.empty()) retention_logged_ms_ = now;
  }
  if (now - logged_ms_ < 60'000) return;
  const IndexerCounters& a = logged_indexer_;
  const ShipLineDecoder::Counters& b = logged_lines_;
  const uint64_t not_indexed = (i.tag_values_over_cap - a.tag_values_over_cap) +
                               (i.tag_keys_over_cap - a.tag_keys_over_cap) +
                               (i.tags_over_record_cap - a.tags_over_record_cap);
  if (not_indexed > 0) {
    spdlog::warn("indexer: {} tags kept in their records but not indexed since the last report ({} over a key's "
                 "values per hour, {} over the keys per hour, {} past a record's first {}); scan=true finds them",
                 not_indexed, i.tag_values_over_cap - a.tag_values_over_cap, i.tag_keys_over_cap - a.tag_keys_over_cap,
                 i.tags_over_record_cap - a.tags_over_record_cap, kMaxIndexedTagsPerRecord);
  }
  if (i.store_read_failures > a.store_read_failures) {
    spdlog::warn("indexer: {} chunk stagings failed on a store read since the last report; their batches were retried",
                 i.store_read_failures - a.store_read_failures);
  }
  if (i.unreadable_ledger_reads > a.unreadable_ledger_reads) {
    spdlog::warn("indexer: {} reads of compactor ledger rows found them unreadable since the last report (damaged, "
                 "or another build's); a re-sent chunk only they list is stored again, its records then twice",
                 i.unreadable_ledger_reads - a.unreadable_ledger_reads);
  }
  if (l.utf8_replaced_lines > b.utf8_replaced_lines) {
    spdlog::warn("line input: {} JSON lines held invalid UTF-8, kept with U+FFFD in its place",
                 l.utf8_replaced_lines - b.utf8_replaced_lines);
  }
  if (l.restamped_records > b.restamped_records) {
    spdlog::warn("line input: {} records had a time serve refuses (before 2000, over a day ahead); stored with their "
                 "message's time, tagged logdex_restamped_from",
                 l.restamped_records - b.restamped_records);
  }
  if (l.untimed_messages > b.untimed_messages) {
    spdlog::warn("line input: {} messages had no Kafka timestamp; their untimed lines took the clock's time",
                 l.untimed_messages - b.untimed_messages);
  }
  if (not_indexed > 0 || i.store_read_failures > a.store_read_failures ||
      i.unreadable_ledger_reads > a.unreadable_ledger_reads || l.utf8_replaced_lines > b.utf8_replaced_lines ||
      l.untimed_messages > b.untimed_messages || l.restamped_records > b.restamped_records) {
    logged_ms_ = now;
    logged_indexer_ = i;
    logged_lines_ = l;
  }
}

}  // namespace logdex
