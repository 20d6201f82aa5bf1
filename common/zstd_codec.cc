#include "common/zstd_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace logdex {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> cctx(ZSTD_createCCtx());
  return cctx.get();
}

ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> dctx(ZSTD_createDCtx());
  return dctx.get();
}

}  // namespace

size_t ZstdCompress(std::string_view in, int level, std::string* out) {
  level = std::clamp(level, kMinZstdLevel, kMaxZstdLevel);
  out->resize(ZSTD_compressBound(in.size()));
  // ZSTD_compressCCtx writes the content size into the frame header.
  const size_t n = ZSTD_compressCCtx(ThreadCCtx(), out->data(), out->size(), in.data(), in.size(), level);
  // With a buffer of compressBound bytes compression cannot fail, short of
  // allocation failure, which the rest of the process does not survive either.
  if (ZSTD_isError(n)) std::abort();
  out->resize(n);
  return n;
}

std::optional<uint64_t> ZstdContentSize(std::string_view payload) {
  // A current zstd frame only: the library also reads legacy (v0.5-0.7)
  // frames with their older decoders, and skippable frames, which no logdex
  // writer makes and a hostile producer could send.
  static constexpr char kMagic[4] = {'\x28', '\xb5', '\x2f', '\xfd'};  // ZSTD_MAGICNUMBER, little-endian
  if (payload.size() < 4 || std::memcmp(payload.data(), kMagic, 4) != 0) return std::nullopt;
  const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return std::nullopt;
  // Exactly one frame: no second frame, skippable frame or trailing bytes
  // that the crc would sign but no reader would look at.
  const size_t frame = ZSTD_findFrameCompressedSize(payload.data(), payload.size());
  if (ZSTD_isError(frame) || frame != payload.size()) return std::nullopt;
  return static_cast<uint64_t>(size);
}

bool ZstdDecompress(std::string_view payload, uint64_t content_size, std::string* out) {
  out->resize(content_size);
  const size_t n = ZSTD_decompressDCtx(ThreadDCtx(), out->data(), out->size(), payload.data(), payload.size());
  return !ZSTD_isError(n) && n == content_size;
}

bool ZstdValidate(std::string_view payload, uint64_t content_size) {
  ZSTD_DCtx* d = ThreadDCtx();
  // A previous call may have stopped mid-frame.
  ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
  // The one-shot decoder takes any window; so must this pass, or the two
  // would disagree on a frame with a window over zstd's default streaming
  // limit (2^27). Memory stays bounded: the streaming decoder's buffer is at
  // most the content size, which the caller checked against its limit.
  ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, 31);
  thread_local std::unique_ptr<char[]> window(new char[ZSTD_DStreamOutSize()]);
  ZSTD_inBuffer in{payload.data(), payload.size(), 0};
  uint64_t produced = 0;
  size_t ret = 1;
  while (ret != 0) {
    ZSTD_outBuffer out{window.get(), ZSTD_DStreamOutSize(), 0};
    ret = ZSTD_decompressStream(d, &out, &in);
    if (ZSTD_isError(ret)) return false;
    produced += out.pos;
    if (produced > content_size) return false;
    // No progress with input left and the frame unfinished: truncated.
    if (ret != 0 && in.pos == in.size && out.pos == 0) return false;
  }
  return produced == content_size && in.pos == in.size;
}

}  // namespace logdex
