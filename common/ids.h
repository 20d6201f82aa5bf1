// 64-bit ids of names (apps, hosts, tags) and chunks, and the row-key salt.
// Ids are XXH64 hashes: stable across versions and machines (the seed is fixed).
#pragma once

#include <cstdint>
#include <string_view>

namespace logdex {

using AppId = uint64_t;
using HostId = uint64_t;
using TagId = uint64_t;
using ChunkId = uint64_t;

// XXH64 of `bytes` with logdex's fixed seed.
uint64_t Hash64(std::string_view bytes);

inline AppId AppIdOf(std::string_view app) { return Hash64(app); }
inline HostId HostIdOf(std::string_view host) { return Hash64(host); }
// A tag's id is the hash of "key=value".
TagId TagIdOf(std::string_view key, std::string_view value);
// A tag key's id (for meta rows): the hash of "key".
inline uint64_t TagKeyIdOf(std::string_view key) { return Hash64(key); }

// The chunk id: a hash of (producer id, sequence), so a replayed chunk
// rewrites the same rows.
ChunkId ChunkIdOf(uint64_t producer_id, uint64_t sequence);

// Salt bucket of a stream: hash(app, host) mod `buckets` (buckets in 1..256).
uint8_t SaltOf(AppId app, HostId host, uint32_t buckets);

inline constexpr uint32_t kDefaultSaltBuckets = 16;

}  // namespace logdex
