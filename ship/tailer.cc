#include "ship/tailer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/files.h"
#include "ship/sequence.h"

namespace logdex::ship {
namespace {

Error IoError(const std::string& what) { return Error{Errc::kIOError, what + ": " + std::strerror(errno)}; }

// A file in the directory of `path` with this inode (a rotated file).
std::optional<std::string> FindByInode(const std::string& path, uint64_t dev, uint64_t ino) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st;
    if (::stat(entry.path().c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == dev &&
        static_cast<uint64_t>(st.st_ino) == ino) {
      return entry.path().string();
    }
  }
  return std::nullopt;
}

}  // namespace

FileTailer::FileTailer(std::string path, TailerOptions options, std::optional<FilePosition> resume)
    : path_(std::move(path)), options_(options), resume_(resume) {
  if (path_ == "-") {
    is_stdin_ = true;
    fd_ = STDIN_FILENO;
    opened_once_ = true;
    options_.follow = false;
  }
  if (options_.max_line_bytes == 0) options_.max_line_bytes = 1;
  if (options_.read_block_bytes == 0) options_.read_block_bytes = 64 * 1024;
}

FileTailer::~FileTailer() {
  if (fd_ >= 0 && !is_stdin_) ::close(fd_);
}

FilePosition FileTailer::position() const {
  return FilePosition{dev_, ino_, offset_, fingerprint_, fingerprint_len_};
}

FilePosition FileTailer::line_position() const {
  return FilePosition{dev_, ino_, line_start_, fingerprint_, fingerprint_len_};
}

std::optional<uint64_t> FileTailer::HashPrefix(uint32_t len) const {
  char bytes[kFingerprintBytes];
  if (len > kFingerprintBytes || fd_ < 0) return std::nullopt;
  ssize_t n = ::pread(fd_, bytes, len, 0);
  if (n != static_cast<ssize_t>(len)) return std::nullopt;
  return Hash64(std::string_view(bytes, len));
}

void FileTailer::UpdateFingerprint() {
  if (is_stdin_ || fingerprint_len_ >= kFingerprintBytes) return;
  struct stat st;
  if (::fstat(fd_, &st) != 0) return;
  const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(kFingerprintBytes, st.st_size));
  if (len <= fingerprint_len_) return;
  if (auto h = HashPrefix(len)) {
    fingerprint_ = *h;
    fingerprint_len_ = len;
  }
}

Status FileTailer::OpenPath(uint64_t offset) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error{Errc::kNotFound, path_ + " does not exist"};
    return IoError("open " + path_);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Error e = IoError("stat " + path_);
    ::close(fd);
    return e;
  }
  if (offset > static_cast<uint64_t>(st.st_size)) {
    offset = 0;  // truncated while we were away
    ++stats_.truncations;
  }
  if (offset > 0 && ::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
    Error e = IoError("seek " + path_);
    ::close(fd);
    return e;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  offset_ = offset;
  fingerprint_ = 0;
  fingerprint_len_ = 0;
  buf_.clear();
  return Status::Ok();
}

Status FileTailer::EmitPartial(const LineFn& fn) {
  if (buf_.empty()) return Status::Ok();
  std::string rest = std::move(buf_);
  buf_.clear();
  line_start_ = offset_;
  offset_ += rest.size();
  line_end_ = offset_;
  ++stats_.lines;
  return fn(rest);
}

Status FileTailer::CheckRotationOrTruncation(const LineFn& fn, bool* switched) {
  *switched = false;
  struct stat cur;
  const bool shorter = ::fstat(fd_, &cur) == 0 && static_cast<uint64_t>(cur.st_size) < offset_ + buf_.size();
  bool rewritten = false;
  if (!shorter && fingerprint_len_ > 0) {
    auto h = HashPrefix(fingerprint_len_);
    rewritten = !h || *h != fingerprint_;
  }
  if (shorter || rewritten) {
    Status s = EmitPartial(fn);
    if (!s.ok()) return s;
    if (::lseek(fd_, 0, SEEK_SET) < 0) return IoError("seek " + path_);
    offset_ = 0;
    fingerprint_ = 0;
    fingerprint_len_ = 0;
    ++stats_.truncations;
    *switched = true;
    return Status::Ok();
  }
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return Status::Ok();  // renamed, no new file yet
  if (static_cast<uint64_t>(st.st_dev) == dev_ && static_cast<uint64_t>(st.st_ino) == ino_) return Status::Ok();
  // Rotated: finish the old file (a writer may have added to it), then switch.
  for (;;) {
    block_.resize(options_.read_block_bytes);
    ssize_t n = ::read(fd_, block_.data(), block_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    stats_.bytes += static_cast<uint64_t>(n);
    buf_.append(block_.data(), static_cast<size_t>(n));
    size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf_.data() + start, '\n', buf_.size() - start);
      if (!nl) break;
      size_t end = static_cast<const char*>(nl) - buf_.data();
      ++stats_.lines;
      line_start_ = offset_ + start;
      line_end_ = offset_ + end + 1;
      Status s = fn(std::string_view(buf_).substr(start, end - start));
      if (!s.ok()) return s;
      start = end + 1;
    }
    offset_ += start;
    buf_.erase(0, start);
  }
  Status s = EmitPartial(fn);
  if (!s.ok()) return s;
  s = OpenPath(0);
  if (!s.ok()) return s;
  ++stats_.rotations;
  *switched = true;
  return Status::Ok();
}

Result<size_t> FileTailer::Read(const LineFn& fn, size_t max_bytes) {
  if (done_) return size_t{0};
  if (fd_ < 0) {
    Status s;
    if (!opened_once_ && resume_) {
      struct stat st;
      const bool same = ::stat(path_.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == resume_->dev &&
                        static_cast<uint64_t>(st.st_ino) == resume_->ino;
      if (same) {
        s = OpenPath(resume_->offset);
        if (s.ok() && resume_->fingerprint_len > 0) {
          auto h = HashPrefix(resume_->fingerprint_len);
          if (h && *h == resume_->fingerprint) {
            fingerprint_ = resume_->fingerprint;
            fingerprint_len_ = resume_->fingerprint_len;
          } else if (offset_ > 0) {
            // Same inode, other content (rewritten in place, or a reused inode).
            s = OpenPath(0);
            ++stats_.truncations;
          }
        }
      } else if (auto old = FindByInode(path_, resume_->dev, resume_->ino)) {
        // Rotated while we were away: finish the old file first.
        std::string keep = path_;
        path_ = *old;
        s = OpenPath(resume_->offset);
        path_ = keep;
      } else {
        s = OpenPath(0);
      }
    } else {
      s = OpenPath(0);
    }
    if (!s.ok()) {
      if (s.code() == Errc::kNotFound && options_.follow) return size_t{0};
      return s.error();
    }
    opened_once_ = true;
  }
  size_t total = 0;
  if (options_.follow && idle_) {
    // The file may have been rewritten while we waited (copy-truncate that
    // already wrote past our offset): check before reading on.
    bool switched = false;
    Status s = CheckRotationOrTruncation(fn, &switched);
    if (!s.ok()) return s.error();
  }
  idle_ = false;
  for (;;) {
    block_.resize(options_.read_block_bytes);
    ssize_t n = ::read(fd_, block_.data(), block_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("read " + path_);
    if (n == 0) {
      idle_ = true;
      if (!options_.follow) {
        Status s = EmitPartial(fn);
        if (!s.ok()) return s.error();
        done_ = true;
        return total;
      }
      if (total > 0) return total;
      bool switched = false;
      Status s = CheckRotationOrTruncation(fn, &switched);
      if (!s.ok()) return s.error();
      if (switched) continue;
      return total;
    }
    total += static_cast<size_t>(n);
    stats_.bytes += static_cast<uint64_t>(n);
    buf_.append(block_.data(), static_cast<size_t>(n));
    // Before the lines go out: their line_position() (a checkpoint) carries
    // the fingerprint a restart checks the file's content against.
    if (fingerprint_len_ < kFingerprintBytes) UpdateFingerprint();
    size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf_.data() + start, '\n', buf_.size() - start);
      size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - buf_.data()) : buf_.size();
      if (!nl && end - start < options_.max_line_bytes) break;
      if (end - start > options_.max_line_bytes) end = start + options_.max_line_bytes, nl = nullptr;
      ++stats_.lines;
      line_start_ = offset_ + start;
      line_end_ = offset_ + (nl ? end + 1 : end);
      Status s = fn(std::string_view(buf_).substr(start, end - start));
      if (!s.ok()) return s.error();
      start = nl ? end + 1 : end;
    }
    offset_ += start;
    buf_.erase(0, start);
    if (max_bytes && total >= max_bytes) return total;
  }
}

CheckpointStore::CheckpointStore(std::string dir) : dir_(std::move(dir)) {}

Status CheckpointStore::Load() {
  const std::string path = dir_ + "/checkpoints.json";
  std::ifstream in(path);
  if (!in) return Status::Ok();  // none yet
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error{Errc::kCorruption, path + " is not valid JSON"};
  positions_.clear();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    if (!v.is_object() || !v.contains("dev") || !v.contains("ino") || !v.contains("offset")) {
      return Error{Errc::kCorruption, path + ": bad entry for " + it.key()};
    }
    FilePosition pos{v["dev"].get<uint64_t>(), v["ino"].get<uint64_t>(), v["offset"].get<uint64_t>()};
    if (v.contains("fingerprint") && v.contains("fingerprint_len")) {
      pos.fingerprint = v["fingerprint"].get<uint64_t>();
      pos.fingerprint_len = v["fingerprint_len"].get<uint32_t>();
    }
    std::string format;
    if (v.contains("format") && v["format"].is_string()) format = v["format"].get<std::string>();
    positions_[it.key()] = Entry{pos, std::move(format)};
  }
  return Status::Ok();
}

std::optional<FilePosition> CheckpointStore::Get(const std::string& path) const {
  auto it = positions_.find(path);
  if (it == positions_.end()) return std::nullopt;
  return it->second.pos;
}

std::string CheckpointStore::Format(const std::string& path) const {
  auto it = positions_.find(path);
  return it == positions_.end() ? std::string() : it->second.format;
}

void CheckpointStore::Set(const std::string& path, const FilePosition& pos, std::string format) {
  positions_[path] = Entry{pos, std::move(format)};
}

Status CheckpointStore::Save() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, e] : positions_) {
    const FilePosition& p = e.pos;
    j[path] = {{"dev", p.dev},
               {"ino", p.ino},
               {"offset", p.offset},
               {"fingerprint", p.fingerprint},
               {"fingerprint_len", p.fingerprint_len}};
    if (!e.format.empty()) j[path]["format"] = e.format;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  return WriteFileAtomically(dir_ + "/checkpoints.json", j.dump(2) + "\n");
}

}  // namespace logdex::ship
