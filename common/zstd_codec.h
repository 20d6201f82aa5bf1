// zstd for chunk payloads (proto::CODEC_ZSTD), over Debian's libzstd.
//
// A chunk's zstd payload is exactly one zstd frame whose header records the
// content size: the decoder checks that size against the chunk header and
// the compression-bomb limit before it allocates anything, as it does with
// snappy's length header. Contexts are reused per thread (a compression
// context costs about 1 MiB at level 3; one per stream would not do).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace logdex {

// The level logdex writes zstd at unless told (`ship --zstd-level`). Level 1:
// on Loghub text it costs `ship` no more CPU than snappy and its chunks are as
// small as level 3's (`logdex bench codec`, README "Chunk codecs").
inline constexpr int kDefaultZstdLevel = 1;
// The levels accepted (zstd's own range is wider; above 19 costs far more
// memory and CPU than a log chunk is worth).
inline constexpr int kMinZstdLevel = 1;
inline constexpr int kMaxZstdLevel = 19;

// Compresses `in` as one frame (content size recorded) into `*out`
// (replaced); returns its size. `level` is clamped to [kMinZstdLevel, kMaxZstdLevel].
size_t ZstdCompress(std::string_view in, int level, std::string* out);

// The content size of `payload` when it is exactly one complete current zstd
// frame that records its content size; nullopt otherwise (garbage, truncated,
// more than one frame, trailing bytes, unknown size, a legacy or skippable frame).
std::optional<uint64_t> ZstdContentSize(std::string_view payload);

// Decompresses a payload ZstdContentSize accepted into `*out` (resized to
// `content_size`). False if the frame is corrupt or does not expand to
// exactly `content_size` bytes.
bool ZstdDecompress(std::string_view payload, uint64_t content_size, std::string* out);

// One pass over the frame without keeping the output (a fixed window is
// reused): true if it decompresses cleanly to exactly `content_size` bytes
// and its checksum, when present, matches.
bool ZstdValidate(std::string_view payload, uint64_t content_size);

}  // namespace logdex
