#include "common/ids.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

#include <string>

#include "common/bytes.h"
#include "common/result.h"

namespace logdex {
namespace {
constexpr uint64_t kSeed = 0x6c6f67646578ULL;  // "logdex"

uint64_t HashPair(uint64_t a, uint64_t b) {
  char buf[16];
  PutBigEndian64(buf, a);
  PutBigEndian64(buf + 8, b);
  return XXH64(buf, sizeof buf, kSeed);
}
}  // namespace

uint64_t Hash64(std::string_view bytes) { return XXH64(bytes.data(), bytes.size(), kSeed); }

TagId TagIdOf(std::string_view key, std::string_view value) {
  XXH64_state_t state;
  XXH64_reset(&state, kSeed);
  XXH64_update(&state, key.data(), key.size());
  XXH64_update(&state, "=", 1);
  XXH64_update(&state, value.data(), value.size());
  return TagId(XXH64_digest(&state));
}

ChunkId ChunkIdOf(uint64_t producer_id, uint64_t sequence) { return ChunkId(HashPair(producer_id, sequence)); }

uint8_t SaltOf(AppId app, HostId host, uint32_t buckets) {
  LOGDEX_CHECK(buckets >= 1 && buckets <= 256);
  return static_cast<uint8_t>(HashPair(app.value(), host.value()) % buckets);
}

}  // namespace logdex
