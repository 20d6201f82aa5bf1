// The one retry schedule of logdex: exponential backoff with "equal jitter".
// The delay before retry n (1 = the first) is d = initial · 2^(n-1), capped
// at max, then drawn uniformly from [d/2, d] (at least 1 ms when d > 0), so
// that the members of a consumer group retrying one failed store, or the
// sinks of many servers retrying one receiver, spread out instead of
// arriving together. Used by the consumer's store, staging and dead-letter
// retries, the HBase store's RPC and scanner retries, the alert
// dispatcher's redeliveries, and alert staging's pauses between lost
// conditional state writes.
#pragma once

#include <cstdint>
#include <random>

namespace logdex {

struct BackoffPolicy {
  int64_t initial_ms = 100;
  int64_t max_ms = 5'000;

  // d for retry `attempt` (1 = the first; 0 is read as 1), before jitter.
  int64_t CeilingMs(uint32_t attempt) const;
  // The jittered delay for retry `attempt`, drawn from `rng`.
  int64_t DelayMs(uint32_t attempt, std::mt19937_64& rng) const;
};

}  // namespace logdex
