#include "indexer/compaction_lease.h"

#include <algorithm>
#include <random>

#include "common/bytes.h"
#include "common/row_keys.h"

namespace logdex {
namespace {

constexpr uint8_t kVersion = 2;
constexpr size_t kFixed = 2 + 7 * 8;    // version, released, seven integers
constexpr size_t kFixedV1 = 2 + 4 * 8;  // version 1: no begun, ended
constexpr uint64_t kEpochBit = uint64_t{1} << 63;

}  // namespace

uint64_t CompactionLeaseValue::Epoch() const {
  return kEpochBit | ((2 * begun - (begun != ended ? 1 : 0)) & ~kEpochBit);
}

std::optional<uint64_t> CompactionLeaseEpoch(const std::optional<std::string>& row) {
  if (!row) return kEpochBit;
  auto value = CompactionLeaseValue::Decode(*row);
  if (!value) return std::nullopt;
  return value->Epoch();
}

std::string CompactionLeaseValue::Encode() const {
  std::string out;
  out.reserve(kFixed + owner.size());
  out.push_back(static_cast<char>(kVersion));
  out.push_back(released ? 1 : 0);
  AppendBigEndian64(out, token);
  AppendBigEndian64(out, counter);
  AppendBigEndian64(out, static_cast<uint64_t>(period_ms));
  AppendBigEndian64(out, static_cast<uint64_t>(written_ms));
  AppendBigEndian64(out, begun);
  AppendBigEndian64(out, ended);
  AppendBigEndian64(out, static_cast<uint64_t>(removal_delay_ms));
  out.append(owner);
  return out;
}

std::optional<CompactionLeaseValue> CompactionLeaseValue::Decode(std::string_view v) {
  if (v.size() < 2 || static_cast<uint8_t>(v[1]) > 1) return std::nullopt;
  const uint8_t version = static_cast<uint8_t>(v[0]);
  const size_t fixed = version == kVersion ? kFixed : version == 1 ? kFixedV1 : 0;
  if (fixed == 0 || v.size() < fixed) return std::nullopt;
  CompactionLeaseValue out;
  out.released = v[1] == 1;
  out.token = GetBigEndian64(v.data() + 2);
  out.counter = GetBigEndian64(v.data() + 10);
  out.period_ms = static_cast<int64_t>(GetBigEndian64(v.data() + 18));
  out.written_ms = static_cast<int64_t>(GetBigEndian64(v.data() + 26));
  if (version == kVersion) {
    out.begun = GetBigEndian64(v.data() + 34);
    out.ended = GetBigEndian64(v.data() + 42);
    out.removal_delay_ms = static_cast<int64_t>(GetBigEndian64(v.data() + 50));
    if (out.ended > out.begun || out.removal_delay_ms < 0) return std::nullopt;
  }
  out.owner = std::string(v.substr(fixed));
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
  v.removal_delay_ms = options_.removal_delay_ms;
  // A phase open while none runs ends once no failed write of it may still
  // land (a period after the last failure).
  if (!in_phase_ && v.begun != v.ended && !unanswered_recently()) v.ended = v.begun;
  return v;
}

bool CompactionLease::unanswered_recently() const {
  return unanswered_ns_ && NowNs() - *unanswered_ns_ < options_.period_ms * 1'000'000;
}

void CompactionLease::NoteUnanswered() {
  in_phase_ = false;
  unanswered_ns_ = NowNs();
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
  next.removal_delay_ms = options_.removal_delay_ms;
  next.owner = options_.owner;
  // The epoch goes on from the row's; a phase left open ends: its holder
  // released the lease after its writes answered, or wrote nothing for a
  // whole period. A new row starts at the wall clock, so that a row deleted
  // by an operator does not repeat an epoch older cursors carry.
  next.begun = next.ended = current ? current->begun : static_cast<uint64_t>(std::max<int64_t>(clock_.NowMs(), 0));
  tried_counter_ = 0;
  in_phase_ = false;
  unanswered_ns_.reset();
  auto wrote = Write(current ? std::optional<std::string>(**row) : std::nullopt, next, nullptr);
  if (!wrote.ok()) return wrote.error();
  seen_.reset();
  if (!*wrote) return false;  // another member was first
  mine_ = next;
  written_ns_ = held_since_ns_ = start;
  takeovers_ += takeover;
  return true;
}

Result<bool> CompactionLease::EndPhase() {
  in_phase_ = false;
  return Fence(false);
}

Result<bool> CompactionLease::Fence(bool begin_phase) {
  if (!mine_) return false;
  for (int attempt = 0;; ++attempt) {
    const int64_t start = NowNs();
    CompactionLeaseValue next = Next();
    if (begin_phase) ++next.begun;
    std::optional<std::string> found;
    auto wrote = Write(mine_->Encode(), next, &found);
    if (!wrote.ok()) return wrote.error();
    if (*wrote) {
      mine_ = next;
      written_ns_ = start;
      in_phase_ |= begin_phase;
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

Result<bool> CompactionLease::Release() {
  if (!mine_) return false;
  if (in_phase_ || unanswered_recently()) {
    // A write may still land: the next holder waits out the period.
    mine_.reset();
    return false;
  }
  CompactionLeaseValue next = Next();
  next.released = true;
  auto wrote = Write(mine_->Encode(), next, nullptr);
  mine_.reset();
  return wrote;
}

}  // namespace logdex
