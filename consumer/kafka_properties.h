// The consumer's checks of the `kafka:` properties a user sets, shared by
// GroupConsumer::Start and `logdex check-config`.
#pragma once

#include <map>
#include <string>

#include "common/result.h"

namespace logdex {

// Refuses properties under which the consumer would lose or stall data:
// - auto.offset.reset other than earliest;
// - partition.assignment.strategy naming cooperative-sticky: its incremental
//   assign and revoke are not implemented (the rebalance callback replaces the
//   whole assignment, which librdkafka refuses in a cooperative rebalance).
Status CheckConsumerKafkaProperties(const std::map<std::string, std::string>& kafka);

}  // namespace logdex
