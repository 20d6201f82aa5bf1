#include "http/tail.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/row_keys.h"
#include "common/severity.h"

namespace logdex {

namespace {

size_t BytesOf(const ResultRecord& r) {
  size_t n = sizeof(ResultRecord) + r.message.size() + r.app.size() + r.host.size();
  for (const auto& [k, v] : r.tags) n += k.size() + v.size() + 2 * sizeof(std::string);
  return n;
}

}  // namespace

TailHub::TailHub(TailOptions options, DecodeOptions decode, prometheus::Registry& registry)
    : options_(options),
      decode_(decode),
      published_(prometheus::BuildCounter()
                     .Name("logdex_tail_batches_total")
                     .Help("Written batches handed to live tail while at least one client listened")
                     .Register(registry)
                     .Add({})),
      dropped_batches_(prometheus::BuildCounter()
                           .Name("logdex_tail_batches_dropped_total")
                           .Help("Written batches live tail skipped because its pending queue was full; its clients "
                                 "were told they missed records")
                           .Register(registry)
                           .Add({})),
      dropped_clients_(prometheus::BuildCounter()
                           .Name("logdex_tail_clients_dropped_total")
                           .Help("Live-tail clients ended because they did not keep up (too many bytes of records "
                                 "waited for them)")
                           .Register(registry)
                           .Add({})),
      records_sent_(prometheus::BuildCounter()
                        .Name("logdex_tail_records_total")
                        .Help("Records handed to live-tail clients")
                        .Register(registry)
                        .Add({})),
      clients_(prometheus::BuildGauge()
                   .Name("logdex_tail_clients")
                   .Help("Live-tail clients connected")
                   .Register(registry)
                   .Add({})) {
  thread_ = std::thread([this] { Run(); });
}

TailHub::~TailHub() { Stop(); }

void TailHub::Stop() {
  std::vector<std::shared_ptr<TailSubscription>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    subs.swap(subs_);
    subscriber_count_ = 0;
    clients_.Set(0);
  }
  cv_.notify_all();
  for (auto& s : subs) {
    s->hub_ = nullptr;
    s->End("the server is stopping");
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void TailHub::Publish(const WriteBatch& written) {
  if (subscriber_count_.load() == 0) return;
  Pending p;
  for (const WriteBatch::Entry& e : written.entries()) {
    if (e.op != WriteBatch::Op::kPut || e.table != kMainTable) continue;
    p.main_rows.push_back(e.Value());
    p.bytes += p.main_rows.back().size();
  }
  if (p.main_rows.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    if (pending_bytes_ + p.bytes > options_.max_pending_bytes) {
      dropped_batches_.Increment();
      for (auto& s : subs_) s->Missed();
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      if (last_drop_log_ns_ == 0 || now - last_drop_log_ns_ >= 10'000'000'000) {
        last_drop_log_ns_ = now;
        spdlog::warn("tail: skipped a written batch of {} bytes: {} bytes wait for the tail thread "
                     "(at most {}); its clients are told they missed records "
                     "(logdex_tail_batches_dropped_total)",
                     p.bytes, pending_bytes_, options_.max_pending_bytes);
      }
      return;
    }
    pending_bytes_ += p.bytes;
    pending_.push_back(std::move(p));
  }
  published_.Increment();
  cv_.notify_one();
}

Result<std::shared_ptr<TailSubscription>> TailHub::Subscribe(const Query& filter) {
  auto text = TextMatcher::Compile(filter.text);
  if (!text.ok()) return text.error();
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return Error{Errc::kUnavailable, "the server is stopping"};
  if (subs_.size() >= options_.max_clients) {
    return Error{Errc::kResourceExhausted, std::to_string(subs_.size()) +
                                               " live-tail clients are connected, the most this server takes; retry "
                                               "later"};
  }
  auto s = std::make_shared<TailSubscription>(*this, filter, std::move(*text), options_.max_client_bytes);
  subs_.push_back(s);
  subscriber_count_ = subs_.size();
  clients_.Set(static_cast<double>(subs_.size()));
  return s;
}

void TailHub::Remove(TailSubscription* s) {
  std::lock_guard<std::mutex> l(mu_);
  subs_.erase(std::remove_if(subs_.begin(), subs_.end(), [&](const auto& p) { return p.get() == s; }), subs_.end());
  subscriber_count_ = subs_.size();
  clients_.Set(static_cast<double>(subs_.size()));
}

void TailHub::Run() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      p = std::move(pending_.front());
      pending_.pop_front();
      pending_bytes_ -= p.bytes;
    }
    Deliver(p);
  }
}

void TailHub::Deliver(const Pending& p) {
  std::vector<std::shared_ptr<TailSubscription>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    subs = subs_;
  }
  if (subs.empty()) return;
  uint64_t sent = 0;
  for (const std::string& value : p.main_rows) {
    proto::MainRow row;
    if (!row.ParseFromString(value)) continue;  // stored by this process: cannot fail but for a bug
    const proto::LogChunk& c = row.chunk();
    const bool wanted = std::any_of(subs.begin(), subs.end(), [&](const auto& s) { return s->MayMatch(c); });
    if (!wanted) continue;  // decoding it would find nothing
    auto records = UnpackRecords(c, decode_);
    if (!records.ok()) continue;  // ingest verified it; a query would count it corrupt
    for (const proto::LogRecord& pr : records->records()) {
      ResultRecord r;
      r.ts_ms = pr.ts_ms();
      r.severity = static_cast<Severity>(pr.severity());
      r.app = row.chunk().app();
      r.host = row.chunk().host();
      r.message = pr.message();
      for (const proto::Tag& t : pr.tags()) r.tags.emplace_back(t.key(), t.value());
      for (auto& s : subs) {
        if (!s->Matches(r)) continue;
        switch (s->Push(r, BytesOf(r))) {
          case TailSubscription::Pushed::kQueued:
            ++sent;
            break;
          case TailSubscription::Pushed::kEndedNow:
            dropped_clients_.Increment();
            [[fallthrough]];
          case TailSubscription::Pushed::kEnded:
            if (s->hub_.exchange(nullptr) != nullptr) Remove(s.get());
            break;
        }
      }
    }
  }
  records_sent_.Increment(static_cast<double>(sent));
}

bool TailSubscription::MayMatch(const proto::LogChunk& c) const {
  const Query& q = filter_;
  if (!q.app.empty() && c.app() != q.app) return false;
  if (!q.host.empty() && c.host() != q.host) return false;
  if (q.severities.empty() || c.severity() == kMixedSeverity) return true;
  return std::find(q.severities.begin(), q.severities.end(), static_cast<Severity>(c.severity())) !=
         q.severities.end();
}

bool TailSubscription::Matches(const ResultRecord& r) const {
  const Query& q = filter_;
  if (!q.app.empty() && r.app != q.app) return false;
  if (!q.host.empty() && r.host != q.host) return false;
  if (!q.severities.empty() && std::find(q.severities.begin(), q.severities.end(), r.severity) == q.severities.end()) {
    return false;
  }
  for (const auto& want : q.tags) {
    if (std::find(r.tags.begin(), r.tags.end(), want) == r.tags.end()) return false;
  }
  if (!q.contains.empty() && r.message.find(q.contains) == std::string::npos) return false;
  return text_.Matches(r.message);
}

TailSubscription::Pushed TailSubscription::Push(ResultRecord r, size_t bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (ended_) return Pushed::kEnded;
    if (bytes_ + bytes > max_bytes_) {
      ended_ = true;
      end_reason_ = "the client did not keep up: over " + std::to_string(max_bytes_) +
                    " bytes of records waited for it";
      queue_.clear();
      bytes_ = 0;
      cv_.notify_all();
      spdlog::info("tail: ended a client that did not keep up ({} bytes queued)", max_bytes_);
      return Pushed::kEndedNow;
    }
    bytes_ += bytes;
    queue_.push_back(std::move(r));
  }
  cv_.notify_all();
  return Pushed::kQueued;
}

void TailSubscription::Missed() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++missed_;
  }
  cv_.notify_all();
}

void TailSubscription::End(std::string reason) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (ended_) return;
    ended_ = true;
    end_reason_ = std::move(reason);
  }
  cv_.notify_all();
}

TailBatch TailSubscription::Next(int timeout_ms) {
  TailBatch out;
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return ended_ || missed_ > 0 || !queue_.empty(); });
  out.records.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  bytes_ = 0;
  out.missed_batches = missed_;
  missed_ = 0;
  out.ended = ended_;
  out.end_reason = end_reason_;
  return out;
}

void TailSubscription::Close() {
  End("closed by the client");
  // The hub may be delivering: Remove() takes the hub's lock, never ours.
  if (TailHub* hub = hub_.exchange(nullptr)) hub->Remove(this);
}

}  // namespace logdex
