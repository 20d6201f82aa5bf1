// FileTailer: reads a file line by line, optionally following it as it
// grows, across rotation and truncation; and CheckpointStore, which keeps
// each file's read position so a restart resumes where it stopped.
//
// A position is (device, inode, offset): the offset is just past the last
// complete line handed out. Following:
//   - rotation (the path now names another inode; "mv app.log app.log.1"
//     then a new app.log): the old file is read to its end first, then the
//     new file from offset 0;
//   - truncation (the file is shorter than the position): reading restarts
//     at offset 0 (a fragment read before the truncation is handed out as a
//     line: nothing is dropped);
//   - resuming from a checkpoint whose inode the path no longer names: the
//     rotated file is looked for by inode in the same directory and read from
//     the checkpointed offset before the new file.
// A copy-truncate followed by writes past the old size before the tailer
// looks is caught by the fingerprint of the file's first bytes (FilePosition),
// unless the new first 256 bytes equal the old ones byte for byte.
// A partial last line waits for its newline while following; without
// --follow it is handed out at end of file.
//
// Not thread-safe. No clock: the caller decides when to call again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace logdex::ship {

struct FilePosition {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t offset = 0;
  // Hash (XXH64) of the file's first fingerprint_len bytes (at most
  // kFingerprintBytes): tells a file rewritten in place (copy-truncate, then
  // more written than before) or an inode reused by a new file from the one
  // the offset belongs to. 0 bytes: not known yet.
  uint64_t fingerprint = 0;
  uint32_t fingerprint_len = 0;
  bool operator==(const FilePosition&) const = default;
};

inline constexpr uint32_t kFingerprintBytes = 256;

struct TailerOptions {
  bool follow = false;
  // Longer lines are cut into pieces of this size (each piece is a line).
  size_t max_line_bytes = 1 << 20;
  size_t read_block_bytes = 1 << 20;
};

struct TailerStats {
  uint64_t bytes = 0;
  uint64_t lines = 0;
  uint64_t rotations = 0;
  uint64_t truncations = 0;
};

class FileTailer {
 public:
  using LineFn = std::function<Status(std::string_view line)>;

  // "-" reads stdin (never follows, no position). `resume`: a checkpoint.
  FileTailer(std::string path, TailerOptions options, std::optional<FilePosition> resume = std::nullopt);
  ~FileTailer();
  FileTailer(const FileTailer&) = delete;
  FileTailer& operator=(const FileTailer&) = delete;

  // Reads up to `max_bytes` (0: no limit until the end of the data) and
  // calls `fn` for every complete line. Returns the bytes read; 0 means
  // nothing new right now (or, without follow, the end: see done()).
  // A missing file is not an error while following (it may appear later).
  Result<size_t> Read(const LineFn& fn, size_t max_bytes = 0);
  // Without follow: the whole file has been read.
  bool done() const { return done_; }
  // Position just past the last line handed out (current file).
  FilePosition position() const;
  // During a LineFn call: the position at the start of the line handed out
  // (resuming there reads that line again). Checkpoints at record boundaries.
  FilePosition line_position() const;
  // During a LineFn call: the offset just past the line handed out (its
  // newline included), in the same file.
  uint64_t line_end() const { return line_end_; }
  const std::string& path() const { return path_; }
  const TailerStats& stats() const { return stats_; }

 private:
  Status OpenPath(uint64_t offset);
  Status CheckRotationOrTruncation(const LineFn& fn, bool* switched);
  Status EmitPartial(const LineFn& fn);
  // Hash of the first `len` bytes of the open file; nullopt if shorter.
  std::optional<uint64_t> HashPrefix(uint32_t len) const;
  // Records (or extends up to kFingerprintBytes) the fingerprint.
  void UpdateFingerprint();

  std::string path_;
  TailerOptions options_;
  std::optional<FilePosition> resume_;
  int fd_ = -1;
  bool is_stdin_ = false;
  bool done_ = false;
  bool opened_once_ = false;
  bool idle_ = false;  // the last Read() ended at the end of the file
  uint64_t dev_ = 0, ino_ = 0;
  uint64_t offset_ = 0;    // file offset of buf_[0]
  uint64_t line_start_ = 0;  // file offset of the line being handed out
  uint64_t line_end_ = 0;    // and just past it
  uint64_t fingerprint_ = 0;
  uint32_t fingerprint_len_ = 0;
  std::string buf_;        // bytes read, not yet handed out (a partial line)
  std::string block_;
  TailerStats stats_;
};

// Read positions of tailed files, persisted as JSON in `<dir>/checkpoints.json`
// (written atomically). Not thread-safe.
class CheckpointStore {
 public:
  explicit CheckpointStore(std::string dir);
  Status Load();
  std::optional<FilePosition> Get(const std::string& path) const;
  // The format an auto-format input had chosen at the position ("" when it
  // was still sampling its first lines): a restart resumes with it.
  std::string Format(const std::string& path) const;
  void Set(const std::string& path, const FilePosition& pos, std::string format = "");
  Status Save() const;

 private:
  struct Entry {
    FilePosition pos;
    std::string format;
  };
  std::string dir_;
  std::map<std::string, Entry> positions_;
};

}  // namespace logdex::ship
