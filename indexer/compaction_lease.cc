#include "indexer/compaction_lease.h"

#include <algorithm>
#include <random>

#include "common/bytes.h"
#include "common/row_keys.h"

namespace logdex {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kFixed = 2 + 4 * 8;  // version, released, four integers

}  // namespace

std::string CompactionLeaseValue::Encode() const {
  std::string out;
  out.reserve(kFixed + owner.size());
  out.push_back(static_cast<char>(kVersion));
  out.push_back(released ? 1 : 0);
  AppendBigEndian64(out, token);
  AppendBigEndian64(out, counter);
  AppendBigEndian64(out, static_cast<uint64_t>(period_ms));
  AppendBigEndian64(out, static_cast<uint64_t>(written_ms));
  out.append(owner);
  return out;
}

std::optional<CompactionLeaseValue> CompactionLeaseValue::Decode(std::string_view v) {
  if (v.size() < kFixed || static_cast<uint8_t>(v[0]) != kVersion || static_cast<uint8_t>(v[1]) > 1) return std::nullopt;
  CompactionLeaseValue out;
  out.released = v[1] == 1;
  out.token = GetBigEndian64(v.data() + 2);
  out.counter = GetBigEndian64(v.data() + 10);
  out.period_ms = static_cast<int64_t>(GetBigEndian64(v.data() + 18));
  out.written_ms = static_cast<int64_t>(GetBigEndian64(v.data() + 26));
  out.owner = std::string(v.substr(kFixed));
  return out;
}

Result<std::unique_ptr<CompactionLease>> CompactionLease::Create(TableStore& store, CompactionLeaseOptions options,
                                                                 const Clock& clock) {
  if (!store.conditional_writes()) {
    return Error{Errc::kFailedPrecondition, "the compaction lease needs a store with conditional writes (HBase)"};
  }
  if (options.period_ms <= 0) return Error{Errc::kInvalidArgument, "the compaction lease period must be positive"};
  return std::unique_ptr<CompactionLease>(new CompactionLease(store, std::move(options), clock));
}

CompactionLease::CompactionLease(TableStore& store, CompactionLeaseOptions options, const Clock& clock)
    : store_(store), options_(std::move(options)), clock_(clock) {}

bool CompactionLease::held() const {
  return mine_.has_value() && NowNs() - written_ns_ < options_.period_ms * 1'000'000;
}

int64_t CompactionLease::held_for_ms() const { return held() ? (NowNs() - held_since_ns_) / 1'000'000 : 0; }

CompactionLeaseValue CompactionLease::Next() const {
  CompactionLeaseValue v = *mine_;
  // Past every value tried, landed or not: a write whose answer was lost
  // must not look like a later one.
  v.counter = std::max(v.counter, tried_counter_) + 1;
  v.period_ms = options_.period_ms;
  v.written_ms = clock_.NowMs();
  return v;
}

Result<bool> CompactionLease::Write(const std::optional<std::string>& expected, const CompactionLeaseValue& next,
                                    std::optional<std::string>* found) {
  const std::string value = next.Encode();
  tried_counter_ = std::max(tried_counter_, next.counter);
  auto put = store_.CheckAndPut(kMetaTable, kCompactionLeaseRow, expected, value);
  if (put.ok() && *put) return true;
  // "No" (or an error) may follow this very write, landed by a retry whose
  // answer was lost: the row then holds exactly this value.
  auto row = store_.Get(kMetaTable, kCompactionLeaseRow);
  if (!row.ok()) return put.ok() ? row.error() : put.error();
  if (row->has_value() && **row == value) return true;
  if (!put.ok()) return put.error();
  if (found) *found = *row;
  return false;
}

Result<bool> CompactionLease::Hold() {
  const int64_t start = NowNs();
  if (mine_) {
    // Past a whole period without a write (the store failed meanwhile),
    // another member may have taken it: the conditional write says.
    if (held() && start - written_ns_ < options_.period_ms * 1'000'000 / 3) return true;
    return Fence();
  }
  auto row = store_.Get(kMetaTable, kCompactionLeaseRow);
  if (!row.ok()) return row.error();
  std::optional<CompactionLeaseValue> current;
  if (row->has_value()) {
    current = CompactionLeaseValue::Decode(**row);
    if (!current) {
      return Error{Errc::kCorruption, "the compaction lease row (meta) holds a value of another version or shape"};
    }
  }
  bool take = !current || current->released;
  bool takeover = false;
  if (!take) {
    if (seen_ != **row) {  // a holder that writes is alive: wait a period from now
      // From after the read: the value may have landed while it ran.
      seen_ = **row;
      seen_ns_ = NowNs();
      return false;
    }
    const int64_t period_ms = std::max(current->period_ms, options_.period_ms);
    if (start - seen_ns_ < period_ms * 1'000'000) return false;
    take = takeover = true;
  }
  CompactionLeaseValue next;
  std::random_device random;
  next.token = (uint64_t{random()} << 32) ^ random();
  next.counter = current ? current->counter + 1 : 1;
  next.period_ms = options_.period_ms;
  next.written_ms = clock_.NowMs();
  next.owner = options_.owner;
  tried_counter_ = 0;
  auto wrote = Write(current ? std::optional<std::string>(**row) : std::nullopt, next, nullptr);
  if (!wrote.ok()) return wrote.error();
  seen_.reset();
  if (!*wrote) return false;  // another member was first
  mine_ = next;
  written_ns_ = held_since_ns_ = start;
  takeovers_ += takeover;
  return true;
}

Result<bool> CompactionLease::Fence() {
  if (!mine_) return false;
  for (int attempt = 0;; ++attempt) {
    const int64_t start = NowNs();
    const CompactionLeaseValue next = Next();
    std::optional<std::string> found;
    auto wrote = Write(mine_->Encode(), next, &found);
    if (!wrote.ok()) return wrote.error();
    if (*wrote) {
      mine_ = next;
      written_ns_ = start;
      return true;
    }
    // The row moved on from what this member knew. With its token, it is
    // an earlier write of its own whose answer was lost (it landed at an
    // unknown time: written_ns_ stays): written over once more. Else
    // another member took it.
    auto row = found ? CompactionLeaseValue::Decode(*found) : std::nullopt;
    if (attempt == 0 && row && !row->released && row->token == mine_->token && row->counter > mine_->counter) {
      mine_ = *row;
      continue;
    }
    mine_.reset();
    return false;
  }
}

int64_t CompactionLease::remaining_ms() const {
  if (!mine_) return 0;
  return std::max<int64_t>(0, options_.period_ms - (NowNs() - written_ns_) / 1'000'000);
}

Status CompactionLease::Release() {
  if (!mine_) return Status::Ok();
  CompactionLeaseValue next = Next();
  next.released = true;
  auto wrote = Write(mine_->Encode(), next, nullptr);
  mine_.reset();
  if (!wrote.ok()) return wrote.error();
  return Status::Ok();
}

}  // namespace logdex
