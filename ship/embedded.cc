#include "ship/embedded.h"

#include <chrono>

namespace logdex::ship {

using parse::RecordView;
using parse::SanitizeTagKey;
using parse::TagView;

EmbeddedShipper::EmbeddedShipper(ChunkerOptions options, SequenceAllocator& sequences, ChunkSink& sink,
                                 const Clock& clock, bool background, int64_t tick_ms)
    : chunker_(std::move(options), sequences, sink, clock), sink_(sink), clock_(clock) {
  if (background) thread_ = std::thread([this, tick_ms] { Loop(tick_ms); });
}

EmbeddedShipper::~EmbeddedShipper() { Close(0); }

void EmbeddedShipper::Loop(int64_t tick_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(tick_ms));
    if (stop_ || closed_) break;
    (void)chunker_.Poll();  // a failing sink reports through Close()
    sink_.Poll(0);
  }
}

Status EmbeddedShipper::Log(Severity severity, std::string_view message, std::initializer_list<TagView> tags,
                            std::optional<int64_t> ts_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Error{Errc::kFailedPrecondition, "the shipper is closed"};
  tags_.clear();
  key_buffers_.resize(tags.size());
  size_t i = 0;
  for (const TagView& t : tags) {
    tags_.push_back({SanitizeTagKey(t.key, &key_buffers_[i++]), t.value});
  }
  RecordView r;
  r.ts_ms = ts_ms ? *ts_ms : clock_.NowMs();
  r.severity = severity;
  r.message = message;
  r.tags = tags_;
  return chunker_.OnRecord(r);
}

Status EmbeddedShipper::Add(const RecordView& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Error{Errc::kFailedPrecondition, "the shipper is closed"};
  return chunker_.OnRecord(record);
}

Status EmbeddedShipper::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status::Ok();
  Status s = chunker_.Poll();
  sink_.Poll(0);
  return s;
}

DeliveryReport EmbeddedShipper::Close(int64_t timeout_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_) {
    closed_ = true;
    (void)chunker_.FlushAll();
    report_ = sink_.Finish(timeout_ms);
  }
  return report_;
}

ChunkerStats EmbeddedShipper::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return chunker_.stats();
}

}  // namespace logdex::ship
