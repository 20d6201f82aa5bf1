// Slow (label "load"): Kafka down for 10 s during shipping.
#include "tests/ship/outage_scenario.h"

namespace logdex::ship {
namespace {

TEST(KafkaOutageLoad, TenSecondsDownThenNewestFirstAndDropsCounted) { testing::RunOutageScenario(10'000); }

}  // namespace
}  // namespace logdex::ship
