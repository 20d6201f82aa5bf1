// Every metric the alerting module exports, declared in one place.
//
// Names follow logdex_alerting_<what>_<unit>; counters end in _total; labels
// are bounded (severity, kind, reason, sink name from config): never a
// message, app, host or key.
//
//   logdex_alerting_alerts_detected_total{severity}            records a rule took
//   logdex_alerting_alerts_suppressed_total{reason}            records folded into a digest or ignored
//        reason: group_window | app_limit | global_cap | rule | replay
//   logdex_alerting_notifications_staged_total{kind}           outbox rows written (one per sink)
//        kind: event | group_digest | app_digest | storm_summary
//   logdex_alerting_notifications_sent_total{sink}             delivered
//   logdex_alerting_notifications_retried_total{sink}          rescheduled after a failed attempt
//   logdex_alerting_notifications_failed_total{sink,reason}    failed attempts
//        reason: connect | timeout | http_5xx | http_4xx | http_429 | tls | other
//   logdex_alerting_notifications_dropped_total{sink,reason}   given up, removed from the outbox
//        reason: max_attempts | expired | rejected | unknown_sink | corrupt
//   logdex_alerting_delivery_latency_seconds{sink}             histogram: Kafka timestamp -> delivered,
//                                                              events only (digests wait by design)
//   logdex_alerting_state_conflicts_total{outcome}             stagings of a chunk whose conditional state
//                                                              writes (shared store) did not all hold
//        outcome: restaged (another member changed a row first: the chunk staged
//                 again on what is stored) | gave_up (the 16th such loss in a row:
//                 the batch fails and is retried) | overcounted (a row this
//                 staging had written could not be put back after a loss or a
//                 store error: the chunk's records count twice in that window)
//   logdex_alerting_circuit_open{sink}                         gauge: 1 while the sink's circuit is open
//   logdex_alerting_circuit_opened_total{sink}                 times the circuit opened
//   logdex_alerting_outbox_due_notifications                   gauge: due rows at the last backlog check
//   logdex_alerting_outbox_oldest_due_age_seconds              gauge: age of the oldest due row
//   logdex_alerting_dispatcher_active                          gauge: 1 while this member delivers
//
// Thread-safety: all methods are safe for concurrent use. Several
// AlertingMetrics on one registry share the same series (the registry merges
// identical families), so the stager and the dispatcher may each own one.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

#include "common/severity.h"

namespace logdex::alerting {

class AlertingMetrics {
 public:
  explicit AlertingMetrics(prometheus::Registry& registry);

  prometheus::Counter& Detected(Severity s) { return detected_.Add({{"severity", std::string(SeverityName(s))}}); }
  prometheus::Counter& Suppressed(const std::string& reason) { return suppressed_.Add({{"reason", reason}}); }
  prometheus::Counter& Staged(const std::string& kind) { return staged_.Add({{"kind", kind}}); }
  prometheus::Counter& Sent(const std::string& sink) { return sent_.Add({{"sink", sink}}); }
  prometheus::Counter& Retried(const std::string& sink) { return retried_.Add({{"sink", sink}}); }
  prometheus::Counter& Failed(const std::string& sink, const std::string& reason) {
    return failed_.Add({{"sink", sink}, {"reason", reason}});
  }
  prometheus::Counter& Dropped(const std::string& sink, const std::string& reason) {
    return dropped_.Add({{"sink", sink}, {"reason", reason}});
  }
  prometheus::Histogram& Latency(const std::string& sink);
  prometheus::Gauge& CircuitOpen(const std::string& sink) { return circuit_open_.Add({{"sink", sink}}); }
  prometheus::Counter& StateConflicts(const std::string& outcome) {
    return state_conflicts_.Add({{"outcome", outcome}});
  }
  prometheus::Counter& DigestStateReads(const std::string& outcome) {
    return digest_state_reads_.Add({{"outcome", outcome}});
  }
  prometheus::Counter& CircuitOpened(const std::string& sink) { return circuit_opened_.Add({{"sink", sink}}); }
  prometheus::Gauge& OutboxDue() { return outbox_due_; }
  prometheus::Gauge& OutboxOldestDueAge() { return outbox_oldest_age_; }
  prometheus::Gauge& DispatcherActive() { return dispatching_; }

 private:
  prometheus::Family<prometheus::Counter>& detected_;
  prometheus::Family<prometheus::Counter>& suppressed_;
  prometheus::Family<prometheus::Counter>& staged_;
  prometheus::Family<prometheus::Counter>& sent_;
  prometheus::Family<prometheus::Counter>& retried_;
  prometheus::Family<prometheus::Counter>& failed_;
  prometheus::Family<prometheus::Counter>& dropped_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& state_conflicts_;
  prometheus::Family<prometheus::Counter>& digest_state_reads_;
  prometheus::Family<prometheus::Gauge>& circuit_open_;
  prometheus::Family<prometheus::Counter>& circuit_opened_;
  prometheus::Gauge& outbox_due_;
  prometheus::Gauge& outbox_oldest_age_;
  prometheus::Gauge& dispatching_;
};

}  // namespace logdex::alerting
