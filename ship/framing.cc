#include "ship/framing.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

namespace logdex::ship {

void AppendFrame(std::string_view value, std::string* out) {
  const uint32_t n = static_cast<uint32_t>(value.size());
  const char len[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                       static_cast<char>(n)};
  out->append(len, 4);
  out->append(value);
}

Result<std::vector<std::string>> SplitFrames(std::string_view bytes) {
  std::vector<std::string> values;
  size_t p = 0;
  while (p < bytes.size()) {
    if (bytes.size() - p < 4) return Error{Errc::kCorruption, "truncated frame length at byte " + std::to_string(p)};
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + p);
    const uint32_t n = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    p += 4;
    if (bytes.size() - p < n) return Error{Errc::kCorruption, "truncated frame at byte " + std::to_string(p - 4)};
    values.emplace_back(bytes.substr(p, n));
    p += n;
  }
  return values;
}

Result<std::vector<std::string>> ReadFramedFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{Errc::kNotFound, "cannot open " + path};
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return SplitFrames(data);
}

Result<std::unique_ptr<FramedFileSink>> FramedFileSink::Open(const std::string& path) {
  std::unique_ptr<FramedFileSink> s(new FramedFileSink());
  if (path == "-") {
    s->file_ = stdout;
  } else {
    s->file_ = std::fopen(path.c_str(), "wb");
    if (!s->file_) return Error{Errc::kIOError, "cannot create " + path + ": " + std::strerror(errno)};
    s->owned_ = true;
  }
  return s;
}

FramedFileSink::~FramedFileSink() {
  if (owned_ && file_) std::fclose(file_);
}

Status FramedFileSink::Send(OutgoingChunk chunk) {
  std::string frame;
  AppendFrame(chunk.value, &frame);
  if (failed_ || std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size()) {
    failed_ = true;
    ++report_.failed_chunks;
    report_.failed_records += chunk.records;
    return Error{Errc::kIOError, std::string("writing the dry-run output failed: ") + std::strerror(errno)};
  }
  ++report_.delivered_chunks;
  report_.delivered_records += chunk.records;
  return Status::Ok();
}

DeliveryReport FramedFileSink::Finish(int64_t) {
  if (std::fflush(file_) != 0 && !failed_) {
    failed_ = true;
    report_.failed_chunks += report_.delivered_chunks;
    report_.failed_records += report_.delivered_records;
    report_.delivered_chunks = report_.delivered_records = 0;
  }
  return report_;
}

}  // namespace logdex::ship
