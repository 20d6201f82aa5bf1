#include "alerting/metrics.h"

namespace logdex::alerting {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

AlertingMetrics::AlertingMetrics(prometheus::Registry& r)
    : detected_(BuildCounter()
                    .Name("logdex_alerting_alerts_detected_total")
                    .Help("Log records taken by an alerting rule, by severity.")
                    .Register(r)),
      suppressed_(BuildCounter()
                      .Name("logdex_alerting_alerts_suppressed_total")
                      .Help("Detected records not notified on their own (folded into a digest, ignored by a rule, "
                            "or replayed), by reason.")
                      .Register(r)),
      staged_(BuildCounter()
                  .Name("logdex_alerting_notifications_staged_total")
                  .Help("Outbox rows written (one per notification and sink), by kind.")
                  .Register(r)),
      sent_(BuildCounter()
                .Name("logdex_alerting_notifications_sent_total")
                .Help("Notifications delivered, by sink.")
                .Register(r)),
      retried_(BuildCounter()
                   .Name("logdex_alerting_notifications_retried_total")
                   .Help("Notifications rescheduled with backoff after a failed attempt, by sink.")
                   .Register(r)),
      failed_(BuildCounter()
                  .Name("logdex_alerting_notifications_failed_total")
                  .Help("Failed delivery attempts, by sink and reason.")
                  .Register(r)),
      dropped_(BuildCounter()
                   .Name("logdex_alerting_notifications_dropped_total")
                   .Help("Notifications given up and removed from the outbox, by sink and reason.")
                   .Register(r)),
      latency_(BuildHistogram()
                   .Name("logdex_alerting_delivery_latency_seconds")
                   .Help("Seconds from a record's Kafka timestamp to the delivery of its event notification, by sink.")
                   .Register(r)),
      state_conflicts_(BuildCounter()
                           .Name("logdex_alerting_state_conflicts_total")
                           .Help("Stagings of a chunk whose conditional alert state writes (shared stores) did not all "
                                 "hold, by outcome: restaged (another member wrote first), gave_up (16 losses in a "
                                 "row: the batch is retried), overcounted (a row already written could not be put "
                                 "back).")
                           .Register(r)),
      digest_state_reads_(BuildCounter()
                              .Name("logdex_alerting_digest_state_reads_total")
                              .Help("Reads of a digest's window state by the dispatcher before it sends the digest "
                                    "to a sink (shared stores), by outcome: raised (the state row counted more than "
                                    "the outbox row, as when a member's batch landed after a later one's, and its "
                                    "count was sent), unchanged, gone (the row no longer holds that window: sent as "
                                    "staged), failed (the read failed: sent as staged).")
                              .Register(r)),
      circuit_open_(BuildGauge()
                        .Name("logdex_alerting_circuit_open")
                        .Help("1 while the sink's circuit breaker is open (attempts paused), else 0.")
                        .Register(r)),
      circuit_opened_(BuildCounter()
                          .Name("logdex_alerting_circuit_opened_total")
                          .Help("Times the sink's circuit breaker opened.")
                          .Register(r)),
      outbox_due_(BuildGauge()
                      .Name("logdex_alerting_outbox_due_notifications")
                      .Help("Outbox rows due for delivery at the last backlog check.")
                      .Register(r)
                      .Add({})),
      outbox_oldest_age_(BuildGauge()
                             .Name("logdex_alerting_outbox_oldest_due_age_seconds")
                             .Help("Age in seconds of the oldest due outbox row at the last backlog check.")
                             .Register(r)
                             .Add({})),
      dispatching_(BuildGauge()
                       .Name("logdex_alerting_dispatcher_active")
                       .Help("1 while this member delivers from the outbox; 0 while another member does "
                             "(alerting.delivery.dispatch: partition_0_owner).")
                       .Register(r)
                       .Add({})) {}

prometheus::Histogram& AlertingMetrics::Latency(const std::string& sink) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                   0.5,   1,    2.5,   5,    10,  30, 60};
  return latency_.Add({{"sink", sink}}, kBuckets);
}

}  // namespace logdex::alerting
