// CRC-32C (Castagnoli), as used by the chunk format. Uses SSE4.2 when the
// CPU has it (checked once at run time), a table-driven fallback otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace logdex {

// CRC-32C of `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view data) { return Crc32c(data.data(), data.size()); }

}  // namespace logdex
