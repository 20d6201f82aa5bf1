// 64-bit ids of names (apps, hosts, tags) and chunks, and the row-key salt.
// Ids are XXH64 hashes: stable across versions and machines (the seed is fixed).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

namespace logdex {

// A 64-bit id that knows what it names. An AppId is not a HostId: row keys
// hold several ids side by side, and passing one for another is a compile
// error instead of rows no query finds. value() is the hash itself (what
// keys encode); an id is made from one only by saying which id it is.
template <class Kind>
class Id {
 public:
  constexpr Id() = default;
  constexpr explicit Id(uint64_t value) : value_(value) {}
  constexpr uint64_t value() const { return value_; }
  friend constexpr auto operator<=>(Id, Id) = default;

 private:
  uint64_t value_ = 0;
};

using AppId = Id<struct AppIdKind>;
using HostId = Id<struct HostIdKind>;
using TagId = Id<struct TagIdKind>;          // a tag: key and value
using TagKeyId = Id<struct TagKeyIdKind>;    // a tag's key alone (meta rows)
using ChunkId = Id<struct ChunkIdKind>;

// XXH64 of `bytes` with logdex's fixed seed.
uint64_t Hash64(std::string_view bytes);

inline AppId AppIdOf(std::string_view app) { return AppId(Hash64(app)); }
inline HostId HostIdOf(std::string_view host) { return HostId(Hash64(host)); }
// A tag's id is the hash of "key=value".
TagId TagIdOf(std::string_view key, std::string_view value);
// A tag key's id (for meta rows): the hash of "key".
inline TagKeyId TagKeyIdOf(std::string_view key) { return TagKeyId(Hash64(key)); }

// The chunk id: a hash of (producer id, sequence), so a replayed chunk
// rewrites the same rows.
ChunkId ChunkIdOf(uint64_t producer_id, uint64_t sequence);

// Salt bucket of a stream: hash(app, host) mod `buckets` (buckets in 1..256).
uint8_t SaltOf(AppId app, HostId host, uint32_t buckets);

inline constexpr uint32_t kDefaultSaltBuckets = 16;

}  // namespace logdex

template <class Kind>
struct std::hash<logdex::Id<Kind>> {
  size_t operator()(logdex::Id<Kind> id) const noexcept { return std::hash<uint64_t>{}(id.value()); }
};
