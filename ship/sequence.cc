#include "ship/sequence.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/files.h"

namespace logdex::ship {
namespace {

Error IoError(const std::string& what) { return Error{Errc::kIOError, what + ": " + std::strerror(errno)}; }

}  // namespace

uint64_t RandomProducerId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return id;
}

std::unique_ptr<SequenceAllocator> SequenceAllocator::InMemory(uint64_t producer_id) {
  std::unique_ptr<SequenceAllocator> a(new SequenceAllocator());
  a->producer_id_ = producer_id;
  return a;
}

Result<std::unique_ptr<SequenceAllocator>> SequenceAllocator::Open(const std::string& dir, uint64_t block) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{Errc::kIOError, "create state directory " + dir + ": " + ec.message()};
  std::unique_ptr<SequenceAllocator> a(new SequenceAllocator());
  a->dir_ = dir;
  a->block_ = block == 0 ? 1 : block;
  const std::string lock = dir + "/producer.lock";
  a->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (a->lock_fd_ < 0) return IoError("open " + lock);
  if (::flock(a->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Error{Errc::kFailedPrecondition,
                 "state directory " + dir + " is in use by another shipper (lock " + lock + " is held)"};
  }
  const std::string path = dir + "/producer.state";
  std::ifstream in(path);
  if (in) {
    std::string k1, k2;
    uint64_t id = 0, reserved = 0;
    if (!(in >> k1 >> id >> k2 >> reserved) || k1 != "producer_id" || k2 != "reserved" || id == 0) {
      return Error{Errc::kCorruption, path + " is not a valid shipper state file"};
    }
    a->producer_id_ = id;
    a->next_ = reserved;
  } else {
    a->producer_id_ = RandomProducerId();
    a->next_ = 1;
  }
  a->reserved_ = a->next_;  // nothing reserved by this process yet
  return a;
}

SequenceAllocator::~SequenceAllocator() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Status SequenceAllocator::Persist(uint64_t reserved) {
  std::ostringstream s;
  s << "producer_id " << producer_id_ << "\nreserved " << reserved << "\n";
  return WriteFileAtomically(dir_ + "/producer.state", s.str());
}

Result<uint64_t> SequenceAllocator::Next() {
  if (next_ >= reserved_) {
    const uint64_t reserved = next_ + block_;
    Status s = Persist(reserved);
    if (!s.ok()) return s.error();
    reserved_ = reserved;
  }
  return next_++;
}

}  // namespace logdex::ship
