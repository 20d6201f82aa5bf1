#include "ship/chunker.h"


#include <utility>

namespace logdex::ship {

using parse::RecordView;
using parse::TagView;

std::string StreamKey(std::string_view app, std::string_view host, Severity severity) {
  std::string k;
  k.reserve(app.size() + host.size() + 8);
  k.append(app).push_back('/');
  k.append(host).push_back('/');
  k.append(SeverityName(severity));
  return k;
}

int SeverityIndex(Severity s) { return SeverityCode(s) / 10 - 1; }

Chunker::Chunker(ChunkerOptions options, SequenceAllocator& sequences, ChunkSink& sink, const Clock& clock)
    : options_(std::move(options)), sequences_(sequences), sink_(sink), clock_(clock) {
  LOGDEX_CHECK(!options_.app.empty() && !options_.host.empty());
}

int64_t Chunker::LingerNs(const Stream& s) const {
  return (IsAlertLevel(s.severity) ? options_.alert_linger_ms : options_.linger_ms) * 1'000'000;
}

Chunker::Stream* Chunker::Find(const RecordView& r) {
  const bool own = options_.line_identity == LineIdentity::kStream && (!r.app.empty() || !r.host.empty());
  if (!own) {
    auto& slot = default_streams_[SeverityIndex(r.severity)];
    if (!slot) {
      slot = std::make_unique<Stream>(options_.summarize_tags);
      slot->app = options_.app;
      slot->host = options_.host;
      slot->severity = r.severity;
      slot->key = StreamKey(slot->app, slot->host, slot->severity);
    }
    return slot.get();
  }
  std::string_view app = r.app.empty() ? std::string_view(options_.app) : r.app;
  std::string_view host = r.host.empty() ? std::string_view(options_.host) : r.host;
  lookup_key_ = StreamKey(app, host, r.severity);
  auto it = other_streams_.find(lookup_key_);
  if (it == other_streams_.end()) {
    auto s = std::make_unique<Stream>(options_.summarize_tags);
    s->app = std::string(app);
    s->host = std::string(host);
    s->severity = r.severity;
    s->key = lookup_key_;
    it = other_streams_.emplace(lookup_key_, std::move(s)).first;
  }
  return it->second.get();
}

Status Chunker::OnRecord(const RecordView& record) {
  Stream* s = Find(record);
  std::span<const TagView> tags = record.tags;
  if (options_.line_identity == LineIdentity::kTags && (!record.app.empty() || !record.host.empty())) {
    tag_scratch_.assign(record.tags.begin(), record.tags.end());
    if (!record.app.empty()) tag_scratch_.push_back({"app", record.app});
    if (!record.host.empty()) tag_scratch_.push_back({"host", record.host});
    tags = tag_scratch_;
  }
  ChunkWriter& w = s->writer;
  int64_t ts_ms = record.ts_ms;
  std::string restamped_from;
  const int64_t now = clock_.NowMs();
  if (!TimestampAccepted(ts_ms, now, options_.time_bounds)) {
    restamped_from = std::to_string(ts_ms);
    ts_ms = now;
  }
  // The re-stamp tag goes first: among the tags the indexer indexes.
  const TagView restamp{kRestampedTag, restamped_from};
  const std::span<const TagView> lead =
      restamped_from.empty() ? std::span<const TagView>() : std::span<const TagView>(&restamp, 1);
  const uint32_t severity = SeverityCode(record.severity);
  const size_t body = ChunkWriter::RecordBodyBytes(ts_ms, severity, record.message, lead, tags);
  const size_t size = ChunkWriter::RecordBytes(body);
  if (w.records() > 0 &&
      (w.payload_bytes() + size > options_.max_chunk_bytes || w.records() >= options_.max_chunk_records)) {
    Status st = Flush(*s);
    if (!st.ok()) return st;
  }
  if (w.records() == 0) s->first_ns = clock_.MonotonicNs();
  if (!restamped_from.empty()) {
    ++stats_.restamped;
  } else if (options_.retention_ms > 0 && ts_ms < now - options_.retention_ms) {
    ++stats_.past_retention;
  }
  w.Add(ts_ms, severity, record.message, lead, tags, body);
  if (record.origin != 0) s->origins.push_back(record.origin);
  ++stats_.records;
  ++stats_.records_by_severity[SeverityIndex(record.severity)];
  if (w.payload_bytes() >= options_.max_chunk_bytes || w.records() >= options_.max_chunk_records) return Flush(*s);
  return Status::Ok();
}

Status Chunker::Flush(Stream& s) {
  const size_t records = s.writer.records();
  if (records == 0) return Status::Ok();
  auto seq = sequences_.Next();
  if (!seq.ok()) return seq.error();
  PackOptions po;
  po.codec = options_.codec;
  po.zstd_level = options_.zstd_level;
  po.producer_id = sequences_.producer_id();
  po.sequence = *seq;
  OutgoingChunk out;
  out.key = s.key;
  stats_.uncompressed_bytes += s.writer.payload_bytes();
  s.writer.Finish(s.app, s.host, po, &out.value, &compressed_);
  out.sequence = *seq;
  out.records = static_cast<uint32_t>(records);
  out.severity = s.severity;
  out.origins = std::move(s.origins);
  s.origins.clear();
  ++stats_.chunks;
  stats_.chunk_bytes += out.value.size();
  return sink_.Send(std::move(out));
}

Status Chunker::Poll() {
  const int64_t now = clock_.MonotonicNs();
  auto check = [&](Stream& s) -> Status {
    if (s.writer.records() > 0 && now - s.first_ns >= LingerNs(s)) return Flush(s);
    return Status::Ok();
  };
  for (auto& s : default_streams_) {
    if (s) {
      Status st = check(*s);
      if (!st.ok()) return st;
    }
  }
  for (auto& [k, s] : other_streams_) {
    Status st = check(*s);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status Chunker::FlushAll() {
  for (auto& s : default_streams_) {
    if (s) {
      Status st = Flush(*s);
      if (!st.ok()) return st;
    }
  }
  for (auto& [k, s] : other_streams_) {
    Status st = Flush(*s);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

int64_t Chunker::MsUntilNextFlush() const {
  const int64_t now = clock_.MonotonicNs();
  int64_t best = -1;
  auto consider = [&](const Stream& s) {
    if (s.writer.records() == 0) return;
    int64_t left = std::max<int64_t>(0, (s.first_ns + LingerNs(s) - now + 999'999) / 1'000'000);
    if (best < 0 || left < best) best = left;
  };
  for (const auto& s : default_streams_) {
    if (s) consider(*s);
  }
  for (const auto& [k, s] : other_streams_) consider(*s);
  return best;
}

size_t Chunker::buffered_records() const {
  size_t n = 0;
  for (const auto& s : default_streams_) n += s ? s->writer.records() : 0;
  for (const auto& [k, s] : other_streams_) n += s->writer.records();
  return n;
}

}  // namespace logdex::ship
