#include "indexer/compactor.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/bytes.h"
#include "common/chunk_writer.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/row_keys.h"
#include "common/severity.h"
#include "indexer/compaction_lease.h"
#include "indexer/merge_ledger.h"
#include "indexer/minute_counts.h"

namespace logdex {
namespace {

// Rows the compactor steps over, reading a run's parts, before it seeks
// (Compactor::MergeRun).
constexpr int kStepsBeforeSeek = 8;

int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) return b < 0 ? INT64_MAX : INT64_MIN;
  return out;
}

}  // namespace

// One stored chunk of a run: from its index row, then (when merged) its main row.
struct Compactor::Part {
  MainKey key;
  int64_t last_ts = 0;
  uint32_t records = 0;
  bool has_token_filter = false;  // its index rows say so (IndexValue)
  bool has_minute_counts = false;  // likewise
  proto::MainRow row;
  int64_t written_ms = 0;  // when its main row was written (0: the store does not say)
  // Its records, read in place (ViewRecords) from `row` or from `payload`,
  // its decompressed payload: neither moves while the views are used (a
  // Part stays where its run holds it).
  std::string payload;
  RecordViews views;
  uint64_t bytes = 0;  // the serialized size of its records, as a merged chunk holds them

  // Done with (merged, or left as it is): its memory goes now, not with its run.
  void Release() {
    row = proto::MainRow();
    payload = std::string();
    views = RecordViews();
  }
};

namespace {

// A meta row of one int64 in ms (8 bytes, big-endian): nullopt when absent
// or of another size.
std::optional<int64_t> MetaMs(const std::optional<std::string>& stored) {
  if (!stored || stored->size() != 8) return std::nullopt;
  return static_cast<int64_t>(GetBigEndian64(stored->data()));
}

// Writes `ms` to the meta row unless it holds a value `ms` does not improve
// on (`improves(ms, stored)` false), and answers what the row then holds.
// On a store other processes write (HBase: members started with different
// settings at once), the put is conditional on the value read, and lost
// races are read again, so the better value is never overwritten.
Result<int64_t> ImproveMetaMs(TableStore& store, std::string_view row, int64_t ms,
                              bool (*improves)(int64_t ms, int64_t stored)) {
  constexpr int kAttempts = 16;
  std::string value;
  AppendBigEndian64(value, static_cast<uint64_t>(ms));
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto raw = store.Get(kMetaTable, row);
    if (!raw.ok()) return raw.error();
    if (auto stored = MetaMs(*raw); stored && !improves(ms, *stored)) return *stored;
    if (!store.shared() || !store.conditional_writes()) {
      WriteBatch batch;
      batch.Put(kMetaTable, std::string(row), value);
      if (Status s = store.Write(batch); !s.ok()) return s.error();
      return ms;
    }
    auto wrote = store.CheckAndPut(kMetaTable, row, *raw, value);
    if (!wrote.ok()) return wrote.error();
    if (*wrote) return ms;
  }
  return Error{Errc::kUnavailable, "the meta row " + std::string(row.substr(1)) + " changed under " +
                                       std::to_string(kAttempts) + " conditional writes in a row"};
}

}  // namespace

Result<int64_t> RecordLongestSpan(TableStore& store, int64_t span_ms) {
  return ImproveMetaMs(store, kLongestSpanRow, span_ms, [](int64_t ms, int64_t stored) { return ms > stored; });
}

LongestSpanWatch::LongestSpanWatch(TableStore& store, int64_t span_ms, const Clock& clock, int64_t every_ms,
                                   std::function<void(const Error&)> on_failure)
    : store_(store),
      clock_(clock),
      every_ns_(every_ms * 1'000'000),
      on_failure_(std::move(on_failure)),
      span_ms_(span_ms),
      next_read_ns_(clock.MonotonicNs() + every_ns_) {}

int64_t LongestSpanWatch::Get() {
  if (!store_.shared() || clock_.MonotonicNs() < next_read_ns_.load()) return span_ms_.load();
  std::unique_lock<std::mutex> lock(reading_, std::try_to_lock);
  if (!lock.owns_lock()) return span_ms_.load();  // another query is reading it
  const int64_t now = clock_.MonotonicNs();
  if (now < next_read_ns_.load()) return span_ms_.load();
  next_read_ns_.store(now + every_ns_);
  auto raw = store_.Get(kMetaTable, kLongestSpanRow);
  if (!raw.ok()) {
    if (on_failure_) on_failure_(raw.error());
  } else if (auto stored = MetaMs(*raw); stored && *stored > span_ms_.load()) {
    span_ms_.store(*stored);
  }
  return span_ms_.load();
}

Result<std::optional<int64_t>> StoredLongestSpan(TableStore& store) {
  auto raw = store.Get(kMetaTable, kLongestSpanRow);
  if (!raw.ok()) return raw.error();
  return MetaMs(*raw);
}

Result<int64_t> MergedCheckMs(TableStore& store, std::optional<int64_t> settle_ms) {
  std::optional<int64_t> shortest;
  if (settle_ms) {
    auto recorded = ImproveMetaMs(store, kShortestSettleRow, std::max<int64_t>(*settle_ms, 0),
                                  [](int64_t ms, int64_t stored) { return ms < stored; });
    if (!recorded.ok()) return recorded.error();
    shortest = *recorded;
  } else {
    auto raw = store.Get(kMetaTable, kShortestSettleRow);
    if (!raw.ok()) return raw.error();
    shortest = MetaMs(*raw);
  }
  if (shortest) return std::max<int64_t>(*shortest, 1);  // settle 0 still checks
  // No compactor recorded its settle: one that ran before the row existed
  // left ledger rows, and then any chunk may have been merged.
  bool merged = false;
  Status s = store.Scan(ScanSpec{std::string(kMergedTable), "", "", false, 1}, [&](std::string_view, std::string_view) {
    merged = true;
    return false;
  });
  if (!s.ok()) return s.error();
  return merged ? 1 : 0;
}

Result<std::unique_ptr<Compactor>> Compactor::Create(TableStore& store, CompactorOptions options) {
  if (!store.atomic_writes() && !options.allow_non_atomic) {
    return Error{Errc::kFailedPrecondition,
                 "compaction needs a store whose writes are atomic (rocksdb); this store's are not (hbase)"};
  }
  if (!store.atomic_writes()) options.list_parts = true;
  if (store.shared() && !options.lease) {
    return Error{Errc::kFailedPrecondition,
                 "compaction on a store several members write needs the compaction lease (one merges at a time)"};
  }
  if (options.settle_ms < 0 || options.max_span_ms < 1 || options.target_records < 2 || options.target_bytes < 1 ||
      options.lookback_ms < 1 || options.max_pass_bytes < 1) {
    return Error{Errc::kInvalidArgument, "compactor: settle >= 0, max_span >= 1 ms, target_records >= 2, "
                                         "target_bytes, lookback and max_pass_bytes >= 1"};
  }
  return std::unique_ptr<Compactor>(new Compactor(store, std::move(options)));
}

Compactor::Compactor(TableStore& store, CompactorOptions options)
    : store_(store), options_(std::move(options)), indexer_(store_, [this] {
        IndexerOptions io = options_.indexer;  // its chain has no alert observer: merged records alerted on arrival
        io.retention_ms = 0;
        // The guard counts a chunk's tags in the hour of its first record: a
        // merged chunk brings up to max_span's hours of values into one hour,
        // so its caps grow by as many hours; what was indexed stays indexed.
        const uint64_t hours = static_cast<uint64_t>(options_.max_span_ms / 3'600'000) + 2;
        auto scale = [hours](auto cap) {
          return static_cast<decltype(cap)>(std::min<uint64_t>(uint64_t{cap} * hours, UINT32_MAX));
        };
        io.tags.max_values_per_hour = scale(io.tags.max_values_per_hour);
        io.tags.max_keys_per_hour = scale(io.tags.max_keys_per_hour);
        return io;
      }()) {}

Result<CompactionPass> Compactor::Pass(int64_t now_ms, const std::function<bool(uint64_t)>& keep_going) {
  CompactionPass pass;
  const int64_t cpu0 = ThreadCpuNs();
  lease_lost_ = false;
  Status s = RunPass(now_ms, keep_going, pass);
  pass.cpu_ns = ThreadCpuNs() - cpu0;
  pass.lease_lost = lease_lost_;
  last_pass_ = pass;
  if (!s.ok()) return s.error();
  return pass;
}

Status Compactor::RunPass(int64_t now_ms, const std::function<bool(uint64_t)>& keep_going, CompactionPass& pass) {
  if (stop_requested_.load()) {  // not even the lease's renewal
    pass.stopped = true;
    return Status::Ok();
  }
  if (options_.lease) {
    const bool holding = options_.lease->holding();
    auto held = options_.lease->Hold();
    if (!held.ok()) return held.error();
    if (!*held) {
      pass.lease_elsewhere = true;
      lease_lost_ = holding;  // it stalled past its period between passes
      return Status::Ok();
    }
  }
  now_ms_ = now_ms;
  pass_started_ns_ = clock().MonotonicNs();
  std::erase_if(waiting_, [&](const auto& w) {
    return SaturatingSub(now_ms, w.second.written_ms) >= options_.removal_delay_ms &&
           (pass_started_ns_ - w.second.written_ns) / 1'000'000 >= options_.removal_delay_ms;
  });
  const int64_t cutoff = SaturatingSub(now_ms, options_.settle_ms);
  // A deep pass starts at time 0 (no stored record is older: the chunk
  // validator's bounds start in 2000).
  pass.deep = options_.deep_interval_ms > 0 && !options_.allow_non_atomic &&
              (!last_deep_ms_ || SaturatingSub(now_ms, *last_deep_ms_) >= options_.deep_interval_ms);
  const int64_t lo = pass.deep ? 0 : SaturatingSub(now_ms, options_.lookback_ms);
  // The next deep pass is due an interval after this one, also when a store
  // error ends it (so that an error met in old data is not met at every
  // pass); one stopped, or that left old runs for want of budget, is
  // followed by another (below).
  const std::optional<int64_t> previous_deep_ms = last_deep_ms_;
  if (pass.deep) last_deep_ms_ = now_ms;

  // Streams with records in [lo, cutoff), by (host, app): one host index range each.
  std::set<std::pair<HostId, AppId>> ranges;
  const std::string prefix(1, static_cast<char>(MetaKind::kStream));
  std::string stop = prefix;
  stop.back() = static_cast<char>(static_cast<uint8_t>(MetaKind::kStream) + 1);
  Status s = store_.Scan(ScanSpec{std::string(kMetaTable), prefix, stop, false, 0},
                         [&](std::string_view k, std::string_view v) {
                           auto key = MetaKey::Decode(k);
                           if (!key || key->kind != MetaKind::kStream || v.size() != 16) return true;
                           const int64_t first = static_cast<int64_t>(GetBigEndian64(v.data()));
                           const int64_t last = static_cast<int64_t>(GetBigEndian64(v.data() + 8));
                           if (last > lo && first < cutoff) ranges.emplace(key->stream_host(), key->stream_app());
                           return true;
                         });
  if (!s.ok()) return s;
  bool stop_pass = false;
  for (const auto& [host, app] : ranges) {
    // A pass that only reads (or removes) may run long: shutdown stops it here.
    if (stop_requested_.load()) {
      pass.stopped = true;
      stop_pass = true;
      break;
    }
    // A pass may read for long without a write: the lease is renewed
    // between streams (a write once a third of its period has passed).
    if (options_.lease && !stop_pass) {
      auto held = options_.lease->Hold();
      if (!held.ok()) return held.error();
      if (!*held) {
        lease_lost_ = pass.lease_elsewhere = stop_pass = true;
        break;
      }
    }
    if (Status r = PassOverHostApp(host, app, lo, cutoff, now_ms, pass, keep_going, stop_pass); !r.ok()) return r;
    if (stop_pass) break;
  }
  // Streams neither seen by a whole pass nor merged within `settle` are
  // forgotten; past 1 M streams, all are (every run is at its first sight).
  if (!stop_pass) {
    std::erase_if(clock_closed_, [&](const auto& e) {
      return e.second.pass != passes_ && SaturatingSub(now_ms, e.second.merged_ms) >= options_.settle_ms;
    });
  }
  if (clock_closed_.size() > (1u << 20)) clock_closed_.clear();
  // Parts waiting for their commit (which may never come: a recreated
  // topic) wait for the next deep pass on schedule.
  if (pass.deep && (stop_pass || pass.runs_left_past_lookback > 0)) last_deep_ms_ = previous_deep_ms;
  ++passes_;
  if (pass.runs_left > 0 && pass.lag_ms > 0) pass.lag_ms = std::max<int64_t>(0, now_ms - pass.lag_ms);
  return Status::Ok();
}

Status Compactor::PassOverHostApp(HostId host, AppId app, int64_t lo, int64_t cutoff, int64_t now_ms,
                                  CompactionPass& pass,
                                  const std::function<bool(uint64_t)>& keep_going, bool& stop) {
  ++pass.streams;
  struct Run {
    std::vector<Part> parts;
    uint64_t records = 0;
    int64_t first = INT64_MAX, last = INT64_MIN;
  };
  std::map<uint8_t, Run> runs;  // by severity code
  // A closed run: merged when the pass has budget, else counted as left.
  auto close = [&](Run& run) -> Status {
    Status st;
    if (run.parts.size() >= 2) {
      if (stop || pass.bytes_read >= options_.max_pass_bytes) {
        ++pass.runs_left;
        if (run.last < SaturatingSub(now_ms, options_.lookback_ms)) ++pass.runs_left_past_lookback;
        // lag_ms holds the oldest last-record time left until Pass() turns it into an age.
        pass.lag_ms = pass.lag_ms == 0 ? run.last : std::min(pass.lag_ms, run.last);
      } else {
        st = MergeRun(run.parts, pass, keep_going, stop);
      }
    }
    run = Run{};
    return st;
  };
  auto it = store_.NewIterator(ScanSpec{std::string(kHostIndexTable),
                                        HostIndexKey{host, app, lo, Severity::kTrace, ChunkId()}.Encode(),
                                        HostIndexKey{host, app, cutoff, Severity::kTrace, ChunkId()}.Encode(), false, 0});
  // One index row, in key order (stream, last record time): closes or grows its run.
  auto take = [&](const HostIndexKey* key, const IndexValue* value) -> Status {
    Run& run = runs[SeverityCode(key->severity)];
    const uint64_t stored = StoredChunk(value->main_key);
    if (value->record_count >= options_.target_records || big_.count(stored) || corrupt_.count(stored)) {
      return close(run);
    }
    const int64_t first = std::min(run.first, value->main_key.first_ts_ms);
    const int64_t last = std::max(run.last, key->ts_ms);
    if (!run.parts.empty() && (run.records + value->record_count > options_.target_records ||
                               last - first >= options_.max_span_ms)) {
      if (Status st = close(run); !st.ok()) return st;
    }
    Part& part = run.parts.emplace_back();
    part.key = value->main_key;
    part.last_ts = key->ts_ms;
    part.records = value->record_count;
    part.has_token_filter = value->has_token_filter;
    part.has_minute_counts = value->has_minute_counts;
    run.records += value->record_count;
    run.first = std::min(run.first, value->main_key.first_ts_ms);
    run.last = std::max(run.last, key->ts_ms);
    return Status::Ok();
  };
  // Where merges are not atomic, the rows are read first: a merged chunk
  // comes after the parts it lists (it ends with the newest), and those
  // still stored are removed, not merged again.
  std::vector<std::pair<HostIndexKey, IndexValue>> rows;
  bool listing = false;
  for (; it->Valid(); it->Next()) {
    ++pass.index_rows;
    auto key = HostIndexKey::Decode(it->key());
    auto value = IndexValue::Decode(it->value());
    if (!key || !value) continue;  // not a row of ours: left alone
    if (store_.atomic_writes()) {
      if (Status st = take(&*key, &*value); !st.ok()) return st;
      continue;
    }
    listing |= value->lists_parts;
    rows.emplace_back(*key, *value);
  }
  if (!it->status().ok()) return it->status();
  std::set<std::tuple<Severity, int64_t, ChunkId>> listed;  // severity, first time, id: a part's main key in this stream
  if (listing) {
    if (Status st = RemoveListedParts(rows, listed, pass); !st.ok()) return st;
  }
  for (const auto& [key, value] : rows) {
    if (listed.count({value.main_key.severity, value.main_key.first_ts_ms, value.main_key.chunk})) continue;
    if (Status st = take(&key, &value); !st.ok()) return st;
  }
  // An open run closes once no chunk still to settle could join it, by the
  // clock; late records break that premise (compactor.h): a stream's run the
  // clock closed is merged at its first sight, then again only once it has
  // not grown since the previous pass and its last such merge is `settle`
  // old.
  for (auto& [sev, run] : runs) {
    if (run.parts.size() < 2 || cutoff - run.first < options_.max_span_ms) continue;
    std::string bytes;
    AppendBigEndian64(bytes, host.value());
    AppendBigEndian64(bytes, app.value());
    bytes.push_back(static_cast<char>(sev));
    const uint64_t stream = Hash64(bytes);
    bytes.clear();
    for (const Part& p : run.parts) AppendBigEndian64(bytes, p.key.chunk.value());
    const uint64_t parts_hash = Hash64(bytes);
    auto [seen, first_sight] = clock_closed_.try_emplace(stream, ClockClosed{parts_hash, INT64_MIN, 0});
    const bool grew = !first_sight && seen->second.parts_hash != parts_hash;
    const bool recent = !first_sight && SaturatingSub(now_ms, seen->second.merged_ms) < options_.settle_ms;
    seen->second.parts_hash = parts_hash;
    seen->second.pass = passes_;
    if (grew || recent) {
      ++pass.runs_growing;
      continue;
    }
    const uint64_t merges = pass.merges;
    if (Status st = close(run); !st.ok()) return st;
    if (pass.merges > merges) seen->second.merged_ms = now_ms;
  }
  return Status::Ok();
}

Status Compactor::MergeRun(std::vector<Part>& run, CompactionPass& pass,
                           const std::function<bool(uint64_t)>& keep_going, bool& stop) {
  // Replays first: a run with a part its source could still write again waits.
  std::vector<Part*> loaded;  // parts of `run`, which does not move them
  loaded.reserve(run.size());
  uint64_t loaded_bytes = 0;  // record bytes of `loaded`
  auto write = [&]() -> Status {
    Status s = WriteMerge(loaded, pass);
    for (Part* p : loaded) p->Release();
    loaded.clear();
    loaded_bytes = 0;
    return s;
  };
  // One iterator for the run: a stream's parts are neighbours in the main
  // table, and a seek within the block it holds reads nothing again (the
  // main table has no block cache; a Get per part re-read and re-checked a
  // 64 KiB block each time). Bounded by the run's lowest and highest keys:
  // it starts on the lowest and reads nothing past the highest (unbounded,
  // it started on the table's first row, and on HBase its first page was
  // that many of the table's first chunks, read and dropped for every run).
  std::vector<std::string> keys;
  keys.reserve(run.size());
  for (const Part& p : run) keys.push_back(p.key.Encode());
  ScanSpec range{std::string(kMainTable), "", "", false, 0};
  if (!keys.empty()) {
    range.start = *std::min_element(keys.begin(), keys.end());
    range.stop = *std::max_element(keys.begin(), keys.end());
    range.stop.push_back('\0');  // the first key past the highest: a scan's stop is exclusive
  }
  std::unique_ptr<RowIterator> it = store_.NewIterator(range);
  // A bad part: counted once, and later passes cut runs around it unread.
  auto corrupt = [&](const Part& p) {
    if (corrupt_.size() >= (1u << 16)) {
      ++pass.corrupt_parts;  // past the first 64 Ki: read and counted at every pass
      return;
    }
    if (corrupt_.insert(StoredChunk(p.key)).second) ++pass.corrupt_parts;
  };
  bool on_part = false;  // `it` is on the previous part's row
  for (size_t i = 0; i < run.size(); ++i) {
    Part& p = run[i];
    const std::string& key = keys[i];
    // The next part is often a few rows on (other hosts' rows of the same
    // salt, app and severity sit between: 50 hosts of an app share 16
    // salts in `bench storage`'s real-time run): steps cost less than a
    // seek (RocksDB searches no index and no memtable; HBase reads on within
    // the page it holds instead of opening a scanner), so it looks up to
    // kStepsBeforeSeek rows on (a first step leaves the previous part)
    // before it seeks. Only rows below the part's key are stepped over, and
    // a part behind the iterator (runs go by last record, keys by first) is
    // sought: none is missed.
    if (on_part) it->Next();
    for (int step = on_part ? 1 : 0; step < kStepsBeforeSeek && it->Valid() && it->key() < key; ++step) it->Next();
    if (!it->Valid() || it->key() != key) it->Seek(key);
    on_part = false;
    if (!it->status().ok()) return it->status();
    const bool found = it->Valid() && it->key() == key;
    if (!found || !p.row.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      // Gone (expired) or unreadable: the run is cut around it.
      if (found) corrupt(p);
      if (Status s = write(); !s.ok()) return s;
      continue;
    }
    p.written_ms = it->written_ms();
    on_part = true;
    if (options_.replay_safe && !p.row.source().topic().empty() && !options_.replay_safe(p.row.source())) {
      // The rest of the run waits, with what was read of it and not written
      // (a cut may have merged its start already).
      pass.unsafe_parts += loaded.size() + static_cast<uint64_t>(&run.back() - &p) + 1;
      return Status::Ok();
    }
    // Read in place: a record's bytes are copied from the decompressed
    // payload straight into the merged chunk's.
    auto read = ViewRecords(ChunkRef::Of(p.row.chunk()), options_.indexer.decode, p.payload, p.views);
    if (!read.ok() || p.row.chunk().severity() != SeverityCode(p.key.severity)) {
      corrupt(p);
      p.Release();
      if (Status s = write(); !s.ok()) return s;
      continue;
    }
    // Sizes of the records as the merged chunk will hold them, not the
    // headers' uncompressed_size: the reader tolerates a wrong one in old
    // stores, and the merged chunk must stay under the decode limit.
    p.bytes = 0;
    for (const RecordView& r : p.views.records) p.bytes += ChunkWriter::SerializedRecordBytes(r.wire);
    pass.bytes_read += p.bytes;
    NoteBig(p.key, p.bytes);
    if (!loaded.empty() && loaded_bytes + p.bytes > options_.target_bytes) {
      if (Status s = write(); !s.ok()) return s;
    }
    loaded.push_back(&p);
    loaded_bytes += p.bytes;
  }
  if (Status s = write(); !s.ok()) return s;
  if (keep_going && !keep_going(pass.bytes_read)) stop = true;
  return Status::Ok();
}

Status Compactor::Land(const std::vector<WriteBatch*>& batches) {
  // The writes below must land while no other member merges: each batch
  // starts with at least half the lease's period left (CompactionLease).
  // The first fence comes before the gate, so that ingest does not wait
  // behind its round trip; a wait for the gate may use the half up.
  // The first fence also begins a write phase: the store's epoch in the
  // lease row (indexer/store_epoch.h) turns odd until EndPhase below.
  // Fenced again once a quarter of the period is gone, so that each batch
  // has at least a quarter of it to be sent in (its send deadline).
  auto fence = [&](bool first) -> Status {
    if (!options_.lease) return Status::Ok();
    if (!first && options_.lease->remaining_ms() >= options_.lease->period_ms() * 3 / 4) return Status::Ok();
    auto held = options_.lease->Fence(first);
    if (!held.ok()) return held.error();
    if (!*held) return LeaseLost();
    return Status::Ok();
  };
  if (Status f = fence(true); !f.ok()) return f;
  std::unique_lock<std::shared_mutex> gate;
  if (options_.merge_gate) {
    ++options_.merge_gate->merges_waiting;
    gate = std::unique_lock(options_.merge_gate->mu);
    --options_.merge_gate->merges_waiting;
  }
  if (options_.store_epoch) options_.store_epoch->fetch_add(1);  // odd: a merge is landing
  Status s;
  for (WriteBatch* b : batches) {
    if (b->empty()) continue;
    s = fence(false);
    // Its last attempt starts in the first half of the period from its
    // fence (a quarter of the period at least).
    if (options_.lease) b->set_send_within_ms(options_.lease->remaining_ms() - options_.lease->period_ms() / 2);
    if (s.ok()) s = store_.Write(*b);
    if (!s.ok()) break;
  }
  if (options_.store_epoch) options_.store_epoch->fetch_add(1);
  if (gate.owns_lock()) gate.unlock();  // ingest need not wait for the round trip below
  if (!options_.lease) return s;
  if (!s.ok()) {
    options_.lease->NoteUnanswered();  // the epoch stays odd while the write may land
    return s;
  }
  // Every write answered: a store error here leaves the phase open in the
  // row until the lease's next write (Next() ends it), not the merge failed.
  auto ended = options_.lease->EndPhase();
  if (ended.ok() && !*ended) return LeaseLost();
  return s;
}

Status Compactor::LeaseLost() {
  lease_lost_ = true;
  return Status(Errc::kFailedPrecondition, "the compaction lease went to another member: this pass stops");
}

Status Compactor::RemoveListedParts(const std::vector<std::pair<HostIndexKey, IndexValue>>& rows,
                                    std::set<std::tuple<Severity, int64_t, ChunkId>>& listed, CompactionPass& pass) {
  // Parts listed whose removal waits (removal_delay_ms): skipped by the
  // planner, left in place.
  std::set<std::tuple<Severity, int64_t, ChunkId>> keep;
  // Until the lease has been held for the delay, merged chunks this
  // compactor did not write (or wrote before a restart) may be younger.
  const bool others_removable = options_.removal_delay_ms <= 0 || !options_.lease ||
                                options_.lease->held_for_ms() >= options_.removal_delay_ms;
  for (size_t at = 0; at < rows.size(); ++at) {
    const auto& [key, value] = rows[at];
    if (!value.lists_parts || corrupt_.count(StoredChunk(value.main_key))) continue;
    const MainKey& m = value.main_key;
    if (auto w = waiting_.find({m.app, m.host, m.severity, m.first_ts_ms, m.chunk}); w != waiting_.end()) {
      for (const auto& part : w->second.parts) {
        listed.insert(part);
        keep.insert(part);  // whatever another lister says
      }
      continue;
    }
    // Read only when a row that could be one of its parts is there (same
    // severity, within its span; rows are in index time order): a merged
    // chunk is read once per merge stopped part-way, not at every pass.
    bool maybe = false;
    for (size_t j = at; j-- > 0 && rows[j].first.ts_ms >= value.main_key.first_ts_ms;) {
      const IndexValue& v = rows[j].second;
      maybe |= v.main_key.severity == value.main_key.severity && v.main_key.first_ts_ms >= value.main_key.first_ts_ms;
    }
    for (size_t j = at + 1; j < rows.size() && rows[j].first.ts_ms == key.ts_ms; ++j) {
      maybe |= rows[j].second.main_key.severity == value.main_key.severity;  // one ending with it
    }
    if (!maybe) continue;
    auto raw = store_.Get(kMainTable, value.main_key.Encode());
    if (!raw.ok()) return raw.error();
    // Without its main row (written last), the merge stopped in its first
    // write: its parts stand, and are merged again under the same key. Its
    // index rows go (the merge writes them again), so that runs are cut as
    // if it had never started.
    if (!raw->has_value()) {
      listed.insert({value.main_key.severity, value.main_key.first_ts_ms, value.main_key.chunk});
      continue;
    }
    // Its parts go only if its own records read: else they hold them.
    proto::MainRow row;
    std::string payload;
    RecordViews views;
    if (!row.ParseFromString(**raw) ||
        !ViewRecords(ChunkRef::Of(row.chunk()), options_.indexer.decode, payload, views).ok() ||
        views.records.size() != value.record_count) {
      if (corrupt_.size() < (1u << 16) && corrupt_.insert(StoredChunk(value.main_key)).second) ++pass.corrupt_parts;
      continue;
    }
    for (int i = 0; i + 1 < row.parts_size(); i += 2) {
      const std::tuple<Severity, int64_t, ChunkId> part{value.main_key.severity, static_cast<int64_t>(row.parts(i)),
                                                        ChunkId(row.parts(i + 1))};
      listed.insert(part);
      if (!others_removable) keep.insert(part);
    }
  }
  // The parts' removals land together, a few thousand rows at a time: each
  // landing is a write phase (fences, and the shared epoch moves, which
  // sends every cursor on the store to resume by record).
  constexpr size_t kRemovalRows = 4096;
  WriteBatch tag_rows, removal;
  uint64_t staged = 0;
  auto land = [&]() -> Status {
    if (staged == 0) return Status::Ok();
    Status s = Land({&tag_rows, &removal});
    if (s.ok()) pass.repaired_parts += staged;
    tag_rows.Clear();
    removal.Clear();
    staged = 0;
    return s;
  };
  for (const auto& [key, value] : rows) {
    const std::tuple<Severity, int64_t, ChunkId> name{value.main_key.severity, value.main_key.first_ts_ms,
                                                      value.main_key.chunk};
    if (!listed.count(name)) continue;
    if (keep.count(name)) {
      ++pass.removals_waiting;
      continue;
    }
    // Its rows as a merge removes them: its tag rows first, while its main
    // row (which says what they are) stands. A part whose main row is gone
    // already had its tag rows removed before it.
    auto raw = store_.Get(kMainTable, value.main_key.Encode());
    if (!raw.ok()) return raw.error();
    proto::MainRow part;
    std::string payload;
    RecordViews views;
    if (!raw->has_value() || !part.ParseFromString(**raw) ||
        !ViewRecords(ChunkRef::Of(part.chunk()), options_.indexer.decode, payload, views).ok()) {
      part.Clear();
      views = RecordViews();
    }
    part.mutable_chunk()->set_last_ts_ms(key.ts_ms);
    Indexer::StageRemoval(part.chunk(), value.main_key, views, removal, value.has_token_filter, &tag_rows,
                          value.has_minute_counts);
    ++staged;
    if (removal.size() + tag_rows.size() >= kRemovalRows) {
      if (Status s = land(); !s.ok()) return s;
    }
  }
  return land();
}

uint64_t Compactor::StoredChunk(const MainKey& key) {
  char bytes[33];  // on the stack: the planner hashes every index row it reads
  PutBigEndian64(bytes, key.app.value());
  PutBigEndian64(bytes + 8, key.host.value());
  bytes[16] = static_cast<char>(SeverityCode(key.severity));
  PutBigEndian64(bytes + 17, static_cast<uint64_t>(key.first_ts_ms));
  PutBigEndian64(bytes + 25, key.chunk.value());
  return Hash64(std::string_view(bytes, sizeof bytes));
}

void Compactor::NoteBig(const MainKey& key, uint64_t bytes) {
  if (bytes < options_.target_bytes / 2) return;
  if (big_.size() >= 1'000'000) big_.clear();  // bounded; the next passes re-learn
  big_.insert(StoredChunk(key));
}

Status Compactor::WriteMerge(std::vector<Part*>& parts, CompactionPass& pass) {
  if (parts.size() < 2) return Status::Ok();
  // Records by (time, part id, index in part): of one stream's records with
  // the same time, the query order (chunk id, index; descending) is kept
  // among the parts of this merge.
  struct Entry {
    int64_t ts;
    ChunkId part;
    uint32_t index;
    const Part* p;
  };
  std::vector<Entry> order;
  std::vector<ChunkId> ids;
  for (const Part* p : parts) {
    ids.push_back(p->key.chunk);
    for (size_t i = 0; i < p->views.records.size(); ++i) {
      order.push_back(Entry{p->views.records[i].ts_ms, p->key.chunk, static_cast<uint32_t>(i), p});
    }
  }
  std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.ts, a.part, a.index) < std::tie(b.ts, b.part, b.index);
  });

  std::sort(ids.begin(), ids.end());
  std::string id_bytes;
  for (ChunkId id : ids) AppendBigEndian64(id_bytes, id.value());
  const ChunkId id = ChunkIdOf(Hash64(id_bytes), ids.size());

  // Each record's stored bytes are written again as they are (a field a
  // newer producer added is kept, as PackChunk kept it), through the one
  // chunk encoder.
  const proto::LogChunk& head = parts.front()->row.chunk();
  PackOptions po;
  po.codec = options_.codec;
  po.zstd_level = options_.zstd_level;
  ChunkWriter writer(po.summarize_tags);
  std::vector<std::string_view> messages;  // the token filter's input
  messages.reserve(order.size());
  std::vector<int64_t> times;  // the minute counts' (oldest first, as `order`)
  times.reserve(order.size());
  for (const Entry& e : order) {
    const RecordView& r = e.p->views.records[e.index];
    writer.AddSerialized(r.ts_ms, r.severity, r.wire, e.p->views.TagsOf(r));
    messages.push_back(r.message);
    times.push_back(r.ts_ms);
  }
  const uint64_t merged_record_bytes = writer.payload_bytes();
  std::string bytes;
  writer.Finish(head.app(), head.host(), po, &bytes);
  proto::LogChunk merged;
  LOGDEX_CHECK(merged.ParseFromString(bytes));  // written just above
  if (po.codec == proto::CODEC_ZSTD_COLUMNS && merged.codec() != po.codec) ++pass.plain_merges;
  // The merged chunk spans its parts' headers, which may be wider than
  // their records (ingest requires records within them only): so it ends
  // no earlier than any part, and starts no later (a query meets it before
  // a part it lists, but for one that ends with it, and the main-table scan
  // before one that does not start with it).
  int64_t first = merged.first_ts_ms(), last = merged.last_ts_ms();
  for (const Part* p : parts) {
    first = std::min(first, p->row.chunk().first_ts_ms());
    last = std::max(last, p->row.chunk().last_ts_ms());
  }
  if (first != merged.first_ts_ms() || last != merged.last_ts_ms()) {
    merged.set_first_ts_ms(first);
    merged.set_last_ts_ms(last);
    bytes = merged.SerializeAsString();
  }

  const ChunkId merged_id = id;
  WriteBatch batch;
  // The ledger: a re-send of a part, later, is recognised (IndexerOptions::merged_check_ms).
  std::vector<LedgerPart> ledger;
  ledger.reserve(parts.size());
  for (const Part* p : parts) {
    // Its (producer, sequence) or Kafka source when they make its id (EncodeLedger checks).
    const auto [a, b] = StoredChunkPair(p->row.chunk(), p->row.source());
    ledger.push_back(LedgerPart{p->key.chunk, true, a, b});
  }
  batch.Put(kMergedTable,
            MergedKey{HostIdOf(head.host()), AppIdOf(head.app()), parts.front()->key.severity, merged.last_ts_ms(), id, 2}
                .Encode(),
            EncodeLedger(ledger));
  const IndexerCounters counted = indexer_.counters();
  const size_t merged_rows = batch.size();
  std::vector<TagView> record_tags;  // what the index holds when the writer left the summary out
  if (!merged.has_tag_summary()) {
    for (const Entry& e : order) AppendIndexedTags(e.p->views.TagsOf(e.p->views.records[e.index]), record_tags);
  }
  // Each part's first record time and id (MainRow.parts), and the parts a
  // merged part lists: a query that skips a part unread must still skip
  // those.
  std::vector<uint64_t> part_ids;
  if (options_.list_parts) {
    for (const Part* p : parts) {
      part_ids.push_back(static_cast<uint64_t>(p->key.first_ts_ms));
      part_ids.push_back(p->key.chunk.value());
      part_ids.insert(part_ids.end(), p->row.parts().begin(), p->row.parts().end());
    }
  }
  const std::string minute_counts = EncodeMinuteCounts(times);
  if (Status s = indexer_.StageMerged(merged, bytes, id, messages, record_tags, parts.front()->row.source(), batch,
                                      part_ids, minute_counts);
      !s.ok()) {
    indexer_.Settle(false);
    return s;
  }
  // The merged rows take the write time of the newest part, not the
  // merge's: the TTL then counts from when the records were written, as it
  // did for the parts. The newest, not the oldest: no record expires before
  // its own retention, and the others outlive theirs by at most the time
  // between the parts' writes (a fresh stamp kept them the whole settle
  // time and compaction lag longer). A part whose time the store does not
  // keep leaves the merge's time. The ledger row above keeps the merge's.
  int64_t newest = 0;
  bool known = true;
  for (const Part* p : parts) {
    known = known && p->written_ms > 0;
    newest = std::max(newest, p->written_ms);
  }
  if (known) batch.Restamp(merged_rows, newest);
  // Not atomic: the parts go in later writes, once the merged chunk (its
  // main row last) is written: their tag rows, then the rest
  // (Indexer::StageRemoval).
  // With removal_delay_ms, a later pass removes them (RemoveListedParts).
  WriteBatch tag_rows, removal;
  const bool atomic = store_.atomic_writes();
  const bool delayed = !atomic && options_.removal_delay_ms > 0;
  WriteBatch& removes = atomic ? batch : removal;
  Waiting waiting;
  uint64_t bytes_in = 0, uncompressed = 0;
  for (const Part* p : parts) {
    // The merged chunk's main key is new (its id is not a part's), so a
    // part's delete never removes it.
    if (delayed) {
      waiting.parts.emplace_back(p->key.severity, p->key.first_ts_ms, p->key.chunk);
    } else {
      Indexer::StageRemoval(p->row.chunk(), p->key, p->views, removes, p->has_token_filter,
                            atomic ? nullptr : &tag_rows, p->has_minute_counts);
    }
    bytes_in += p->row.chunk().ByteSizeLong();
    uncompressed += p->row.chunk().uncompressed_size();
  }
  Status s = Land({&batch});
  indexer_.Settle(s.ok());
  if (s.ok() && !removal.empty()) s = Land({&tag_rows, &removal});
  if (delayed) {
    // Written (landed) at the pass's now_ms plus the time the pass has run:
    // a long pass or a slow write must not shorten the delay. Also when the
    // write failed: it may have landed (or land later), and the parts must
    // then stay the delay too; one that never lands only waits to be merged
    // again.
    waiting.written_ns = clock().MonotonicNs();
    waiting.written_ms = now_ms_ + (waiting.written_ns - pass_started_ns_) / 1'000'000;
    if (s.ok()) pass.removals_waiting += waiting.parts.size();
    waiting_[{AppIdOf(head.app()), HostIdOf(head.host()), parts.front()->key.severity, merged.first_ts_ms(), merged_id}] =
        std::move(waiting);
  }
  if (!s.ok()) return s;
  MainKey merged_key = parts.front()->key;  // its stream's; as stored
  merged_key.first_ts_ms = merged.first_ts_ms();
  merged_key.chunk = merged_id;
  NoteBig(merged_key, merged_record_bytes);
  ++pass.merges;
  pass.parts += parts.size();
  pass.records += order.size();
  pass.bytes_in += bytes_in;
  pass.bytes_out += bytes.size();
  pass.token_filters += indexer_.counters().token_filters - counted.token_filters;
  pass.token_filter_bytes += indexer_.counters().token_filter_bytes - counted.token_filter_bytes;
  pass.token_filters_skipped += indexer_.counters().token_filters_skipped - counted.token_filters_skipped;
  pass.token_filter_cpu_ns += indexer_.counters().token_filter_cpu_ns - counted.token_filter_cpu_ns;
  pass.uncompressed += uncompressed;
  return Status::Ok();
}

}  // namespace logdex
