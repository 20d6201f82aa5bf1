// libFuzzer target for issue 12's "ship and serve cannot disagree": any
// records (times, severities, messages, tags, app/host, as the bytes say)
// through ship's Chunker, and every chunk it emits through what serve runs
// on a chunk: DecodeChunk (header, crc, the time bounds of ValidateChunk),
// VerifyPayload (snappy stream), VerifyRecords (every record against the
// header) and UnpackRecords. A chunk ship makes that serve would refuse
// traps, and libFuzzer keeps the input. Also checked: every record given is
// in some chunk (record counts add up).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/chunk_codec.h"
#include "common/clock.h"
#include "ship/chunker.h"
#include "ship/sequence.h"

namespace {

constexpr int64_t kNow = 1'800'000'000'000;  // 2027-01-15

class CheckingSink final : public logdex::ship::ChunkSink {
 public:
  explicit CheckingSink(const logdex::Clock& clock) { decode_.clock = &clock; }
  logdex::Status Send(logdex::ship::OutgoingChunk c) override {
    auto chunk = logdex::DecodeChunk(c.value, decode_);
    if (!chunk.ok()) __builtin_trap();
    if (!logdex::VerifyPayload(*chunk, decode_, logdex::PayloadCheck::kStream).ok()) __builtin_trap();
    if (!logdex::VerifyRecords(*chunk, decode_, &scratch_).ok()) __builtin_trap();
    auto records = logdex::UnpackRecords(*chunk, decode_);
    if (!records.ok()) __builtin_trap();
    if (static_cast<uint32_t>(records->records_size()) != c.records) __builtin_trap();
    records_ += c.records;
    return logdex::Status::Ok();
  }
  void Poll(int) override {}
  uint64_t LowestUnresolved() const override { return UINT64_MAX; }
  logdex::ship::DeliveryReport Finish(int64_t) override { return {}; }
  uint64_t records() const { return records_; }

 private:
  logdex::DecodeOptions decode_;
  std::string scratch_;
  uint64_t records_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  logdex::ManualClock clock(kNow);
  CheckingSink sink(clock);
  auto sequences = logdex::ship::SequenceAllocator::InMemory(7);
  logdex::ship::ChunkerOptions o;
  o.app = "fuzz-app";
  o.host = "fuzz-host";
  o.max_chunk_bytes = in.ConsumeIntegralInRange<size_t>(64, 1 << 16);
  o.max_chunk_records = in.ConsumeIntegralInRange<size_t>(1, 500);
  o.line_identity = in.ConsumeBool() ? logdex::ship::LineIdentity::kStream : logdex::ship::LineIdentity::kTags;
  logdex::ship::Chunker chunker(o, *sequences, sink, clock);
  uint64_t given = 0;
  while (in.remaining_bytes() > 0) {
    // Times anywhere: around now, the edges of what serve accepts, or any int64.
    int64_t ts = 0;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: ts = kNow + in.ConsumeIntegralInRange<int64_t>(-86'400'000'000, 86'400'000'000); break;
      case 1: ts = logdex::DecodeOptions{}.min_ts_ms + in.ConsumeIntegralInRange<int64_t>(-2, 2); break;
      case 2: ts = kNow + logdex::DecodeOptions{}.max_future_ms + in.ConsumeIntegralInRange<int64_t>(-2, 2); break;
      default: ts = in.ConsumeIntegral<int64_t>(); break;
    }
    const auto severity = logdex::kAllSeverities[in.ConsumeIntegralInRange<size_t>(0, 5)];
    const std::string message = in.ConsumeRandomLengthString(4096);
    const std::string app = in.ConsumeBool() ? in.ConsumeRandomLengthString(16) : "";
    const std::string host = in.ConsumeBool() ? in.ConsumeRandomLengthString(16) : "";
    std::vector<std::string> strings;
    const size_t tags = in.ConsumeIntegralInRange<size_t>(0, 4);
    for (size_t i = 0; i < 2 * tags; ++i) {
      std::string s = in.ConsumeRandomLengthString(32);
      if (i % 2 == 0) {
        for (char& c : s) c = c == '=' ? '_' : c;  // keys never hold '=' (parse/parsers.h)
        if (s.empty()) s = "_";
      }
      strings.push_back(std::move(s));
    }
    std::vector<logdex::parse::TagView> views;
    for (size_t i = 0; i + 1 < strings.size(); i += 2) views.push_back({strings[i], strings[i + 1]});
    logdex::parse::RecordView r;
    r.ts_ms = ts;
    r.severity = severity;
    r.message = message;
    r.tags = views;
    r.app = app;
    r.host = host;
    if (!chunker.OnRecord(r).ok()) __builtin_trap();
    ++given;
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0) clock.AdvanceMs(in.ConsumeIntegralInRange<int64_t>(0, 5'000));
  }
  if (!chunker.FlushAll().ok()) __builtin_trap();
  if (sink.records() != given) __builtin_trap();
  return 0;
}
