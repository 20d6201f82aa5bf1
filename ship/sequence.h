// SequenceAllocator: the producer id and the strictly increasing chunk
// sequence numbers of one shipper. A chunk's id is hash(producer id,
// sequence) (common/ids.h), so a sequence must never be reused, across
// restarts included.
//
// The persisted form is a small text file `<dir>/producer.state`:
//   producer_id <u64>
//   reserved <u64>
// Sequences are handed out in blocks: before using any number below
// `reserved`, the file says so (written to a temporary file, fsynced and
// renamed). A restart starts at the persisted `reserved`, so numbers never
// repeat; a crash only leaves a gap. `<dir>/producer.lock` is held with
// flock() while open, so two processes never share one state directory.
//
// Not thread-safe; one owner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace logdex::ship {

class SequenceAllocator {
 public:
  // Not persisted: `producer_id` (use RandomProducerId()) and sequences from 1.
  static std::unique_ptr<SequenceAllocator> InMemory(uint64_t producer_id);
  // Persisted in `dir` (created if missing). Fails if another process holds
  // the directory, or on I/O errors. `block` numbers are reserved per write.
  static Result<std::unique_ptr<SequenceAllocator>> Open(const std::string& dir, uint64_t block = 4096);
  ~SequenceAllocator();

  uint64_t producer_id() const { return producer_id_; }
  // The next sequence (strictly greater than every earlier one).
  Result<uint64_t> Next();

 private:
  SequenceAllocator() = default;
  Status Persist(uint64_t reserved);

  uint64_t producer_id_ = 0;
  uint64_t next_ = 1;
  uint64_t reserved_ = UINT64_MAX;  // in memory: no limit
  uint64_t block_ = 4096;
  std::string dir_;
  int lock_fd_ = -1;
};

// A random nonzero 64-bit id (std::random_device).
uint64_t RandomProducerId();

}  // namespace logdex::ship
