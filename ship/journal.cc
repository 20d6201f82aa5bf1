#include "ship/journal.h"

#include <fcntl.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/crc32c.h"
#include "proto/logdex.pb.h"
#include "common/ids.h"

namespace logdex::ship {
namespace {

constexpr size_t kDrainBytes = 1 << 20;
constexpr uint32_t kMaxEntryBytes = 256u << 20;

std::string SegmentName(const std::string& dir, uint64_t n) {
  char name[32];
  std::snprintf(name, sizeof name, "%020llu.log", static_cast<unsigned long long>(n));
  return dir + "/" + name;
}

int64_t NowS() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Segment numbers present in `dir`, ascending; `*error` set when it cannot be listed.
std::vector<uint64_t> ListSegments(const std::string& dir, std::error_code* error = nullptr) {
  std::vector<uint64_t> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (error) *error = ec;
  if (ec) return out;
  for (const auto& e : it) {
    const std::string name = e.path().filename().string();
    if (name.size() != 24 || !name.ends_with(".log")) continue;
    uint64_t n = 0;
    bool digits = true;
    for (size_t i = 0; i < 20; ++i) {
      if (name[i] < '0' || name[i] > '9') digits = false;
      else n = n * 10 + static_cast<uint64_t>(name[i] - '0');
    }
    if (digits && n > 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void SyncDir(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

uint64_t RecordHash(std::string_view message) { return Hash64(message); }

JournalSink::JournalSink(ChunkSink& inner, std::string dir, uint64_t max_bytes, prometheus::Registry& registry)
    : inner_(inner), dir_(std::move(dir)), max_bytes_(max_bytes) {
  auto& errors = prometheus::BuildCounter()
                     .Name("logdex_ship_journal_errors_total")
                     .Help("Journal writes not made, by reason (write: an I/O error; full: the segments would pass "
                           "--journal-max-bytes): the chunks were sent unjournaled, so a crash may ship their "
                           "lines twice")
                     .Register(registry);
  write_errors_ = &errors.Add({{"reason", "write"}});
  full_ = &errors.Add({{"reason", "full"}});
  entries_ = &prometheus::BuildCounter()
                  .Name("logdex_ship_journal_entries_total")
                  .Help("Chunks written to the ship journal before they were sent")
                  .Register(registry)
                  .Add({});
}

JournalSink::~JournalSink() {
  if (fd_ >= 0) ::close(fd_);
}

Result<JournalReplay> JournalSink::Replay() {
  JournalReplay out;
  if (!enabled()) return out;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Error{Errc::kIOError, "cannot create the journal directory " + dir_ + ": " + ec.message()};
  const std::vector<uint64_t> segments = ListSegments(dir_, &ec);
  if (ec) return Error{Errc::kIOError, "cannot list the journal directory " + dir_ + ": " + ec.message()};
  bytes_ = SegmentBytes();
  proto::ShipJournalEntry entry;
  for (uint64_t n : segments) {
    last_segment_ = std::max(last_segment_, n);
    const std::string path = SegmentName(dir_, n);
    std::ifstream in(path, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = 0;
    while (at < data.size()) {
      const uint32_t len = data.size() - at >= 8 ? GetU32(data.data() + at) : 0;
      if (data.size() - at < 8 || len > kMaxEntryBytes || data.size() - at - 8 < len ||
          Crc32c(data.data() + at + 8, len) != GetU32(data.data() + at + 4) ||
          !entry.ParseFromArray(data.data() + at + 8, static_cast<int>(len))) {
        // Written last, never fsynced whole: its chunk was never sent.
        ++out.torn_entries;
        spdlog::warn("ship: journal {}: the entry at byte {} is incomplete (a crash or a failed write while it "
                     "was written): its chunk is not sent again and its lines are read again", path, at);
        break;
      }
      at += 8 + len;
      for (const proto::ShipJournalSpan& s : entry.spans()) {
        if (s.input() >= static_cast<uint32_t>(entry.inputs_size())) continue;
        out.records[entry.inputs(static_cast<int>(s.input()))][{s.dev(), s.ino()}][s.start()] = {s.end(), s.hash()};
      }
      for (int i = 0; i < entry.formats_size() && i < entry.inputs_size(); ++i) {
        if (!entry.formats(i).empty()) out.formats[entry.inputs(i)] = entry.formats(i);
      }
      OutgoingChunk chunk;
      chunk.key = entry.key();
      chunk.value = entry.value();
      chunk.sequence = entry.sequence();
      chunk.records = entry.records();
      chunk.severity = SeverityFromCode(entry.severity()).value_or(Severity::kInfo);
      max_sequence_ = std::max(max_sequence_, chunk.sequence);
      ++out.chunks;
      if (Status s = inner_.Send(std::move(chunk)); !s.ok()) return s.error();
    }
  }
  return out;
}

uint32_t JournalSink::AddInput(std::string path) {
  inputs_.push_back(std::move(path));
  input_formats_.emplace_back();
  return static_cast<uint32_t>(inputs_.size() - 1);
}

void JournalSink::SetInputFormat(uint32_t input, std::string_view format) {
  if (input_formats_.at(input) != format) input_formats_[input] = format;
}

uint64_t JournalSink::Note(const RecordSpan& span) {
  const uint64_t id = next_origin_++;
  spans_.emplace(id, span);
  return id;
}

Status JournalSink::Send(OutgoingChunk chunk) {
  max_sequence_ = std::max(max_sequence_, chunk.sequence);
  if (!enabled()) return inner_.Send(std::move(chunk));
  proto::ShipJournalEntry entry;
  entry.set_sequence(chunk.sequence);
  entry.set_key(chunk.key);
  entry.set_value(chunk.value);
  entry.set_records(chunk.records);
  entry.set_severity(SeverityCode(chunk.severity));
  for (uint64_t id : chunk.origins) {
    auto it = spans_.find(id);
    if (it == spans_.end()) continue;
    const RecordSpan& span = it->second;
    const std::string& path = inputs_.at(span.input);
    int input = 0;
    while (input < entry.inputs_size() && entry.inputs(input) != path) ++input;
    if (input == entry.inputs_size()) {
      entry.add_inputs(path);
      entry.add_formats(input_formats_[span.input]);
    }
    proto::ShipJournalSpan* s = entry.add_spans();
    s->set_input(static_cast<uint32_t>(input));
    s->set_dev(span.dev);
    s->set_ino(span.ino);
    s->set_start(span.start);
    s->set_end(span.end);
    s->set_hash(span.hash);
    spans_.erase(it);
  }
  const std::string bytes = entry.SerializeAsString();
  if (bytes.size() > kMaxEntryBytes) {  // a replay would refuse it: send it unjournaled
    full_->Increment();
    spdlog::warn("ship: chunk {} is too large for the journal ({} bytes): sent unjournaled", chunk.sequence,
                 bytes.size());
    queued_.push_back(std::move(chunk));
    return Flush();
  }
  PutU32(buffer_, static_cast<uint32_t>(bytes.size()));
  PutU32(buffer_, Crc32c(bytes));
  buffer_ += bytes;
  chunk.origins.clear();
  queued_.push_back(std::move(chunk));
  if (buffer_.size() >= kDrainBytes) return Flush();
  return Status::Ok();
}

uint64_t JournalSink::SegmentBytes() const {
  uint64_t total = 0;
  for (uint64_t n : ListSegments(dir_)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(SegmentName(dir_, n), ec);
    if (!ec) total += size;
  }
  return total;
}

void JournalSink::JournalError(prometheus::Counter* counter, const std::string& what) {
  counter->Increment(static_cast<double>(queued_.size()));
  const int64_t now_s = NowS();
  if (!last_error_log_s_ || now_s - *last_error_log_s_ >= 60) {
    last_error_log_s_ = now_s;
    spdlog::error("ship: cannot write the journal ({}); chunks are sent unjournaled: after a crash the lines since "
                  "the last checkpoint may be shipped twice (logdex_ship_journal_errors_total)", what);
  }
}

Status JournalSink::WriteQueued() {
  if (fd_ < 0) {
    // After a write error, no new segment file every flush: one try a minute.
    if (write_retry_s_ && NowS() < *write_retry_s_) return Error{Errc::kIOError, "retrying once a minute"};
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const uint64_t n = last_segment_ + 1;
    const std::string path = SegmentName(dir_, n);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return Error{Errc::kIOError, "open " + path + ": " + std::strerror(errno)};
    segment_ = last_segment_ = n;
    SyncDir(dir_);
  }
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Error{Errc::kIOError, std::string("write: ") + std::strerror(errno)};
    done += static_cast<size_t>(w);
  }
  if (::fdatasync(fd_) != 0) return Error{Errc::kIOError, std::string("fdatasync: ") + std::strerror(errno)};
  return Status::Ok();
}

Status JournalSink::Flush() {
  if (failed_) return *failed_;
  if (queued_.empty()) return Status::Ok();
  if (bytes_ + buffer_.size() > max_bytes_) {
    JournalError(full_, "its segments would pass " + std::to_string(max_bytes_) +
                            " bytes: the chunks since the oldest undelivered checkpoint are all kept");
  } else if (Status s = WriteQueued(); !s.ok()) {
    JournalError(write_errors_, s.error().ToString());
    // The segment may now hold part of an entry: start a new one, later.
    if (fd_ >= 0) {
      ::close(fd_);
      std::error_code ec;
      const std::string path = SegmentName(dir_, segment_);
      if (std::filesystem::file_size(path, ec) == 0 && !ec) std::filesystem::remove(path, ec);
    }
    fd_ = -1;
    segment_ = 0;
    write_retry_s_ = NowS() + 60;
  } else {
    write_retry_s_.reset();
    bytes_ += buffer_.size();
    entries_->Increment(static_cast<double>(queued_.size()));
  }
  buffer_.clear();
  std::vector<OutgoingChunk> chunks = std::move(queued_);
  queued_.clear();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint64_t sequence = chunks[i].sequence;
    if (Status s = inner_.Send(std::move(chunks[i])); !s.ok()) {
      // The sink cannot go on: the chunks not forwarded stay queued, so they
      // stay unresolved (no checkpoint passes them; the journal has them).
      for (size_t j = i + 1; j < chunks.size(); ++j) queued_.push_back(std::move(chunks[j]));
      if (queued_.empty() || queued_.front().sequence > sequence) {
        OutgoingChunk marker;  // the failed chunk itself: unresolved too
        marker.sequence = sequence;
        queued_.insert(queued_.begin(), std::move(marker));
      }
      failed_ = s;
      return s;
    }
  }
  return Status::Ok();
}

void JournalSink::Poll(int timeout_ms) {
  if (Status s = Flush(); !s.ok()) spdlog::error("ship: {}", s.ToString());
  inner_.Poll(timeout_ms);
}

uint64_t JournalSink::LowestUnresolved() const {
  uint64_t low = inner_.LowestUnresolved();
  for (const OutgoingChunk& c : queued_) low = std::min(low, c.sequence);
  return low;
}

DeliveryReport JournalSink::Finish(int64_t timeout_ms) {
  if (Status s = Flush(); !s.ok()) spdlog::error("ship: {}", s.ToString());
  return inner_.Finish(timeout_ms);
}

Result<uint64_t> JournalSink::Rotate() {
  if (!enabled()) return uint64_t{0};
  if (Status s = Flush(); !s.ok()) return s.error();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  segment_ = 0;
  return last_segment_;
}

void JournalSink::Release(uint64_t segment) {
  if (!enabled()) return;
  for (uint64_t n : ListSegments(dir_)) {
    if (n > segment || n == segment_) continue;
    std::error_code ec;
    std::filesystem::remove(SegmentName(dir_, n), ec);
    if (ec) spdlog::warn("ship: cannot remove journal segment {}: {}", SegmentName(dir_, n), ec.message());
  }
  bytes_ = SegmentBytes();
}

}  // namespace logdex::ship
