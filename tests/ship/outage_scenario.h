// Kafka down for a while during shipping, with a backlog bound (shared by
// the fast variant in kafka_test.cc and the 10 s one in outage_load_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "ship/chunker.h"
#include "ship/kafka_producer.h"
#include "tests/ship/mock_kafka.h"

namespace logdex::ship::testing {

inline double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const auto& fam : registry.Collect()) {
    if ((fam.name == name || fam.name + "_total" == name) && !fam.metric.empty()) {
      return fam.metric[0].counter.value;
    }
  }
  ADD_FAILURE() << "no metric " << name;
  return -1;
}

inline void RunOutageScenario(int down_ms) {
  constexpr int kBefore = 10, kDuring = 60, kWindow = 4, kBound = 20;
  MockKafka kafka(1);
  kafka.CreateTopic("ship.outage", 1);
  prometheus::Registry registry;
  ProducerOptions po;
  po.brokers = kafka.bootstraps();
  po.topic = "ship.outage";
  po.max_in_flight = kWindow;
  po.backlog_max_chunks = kBound;
  po.unavailable_after_ms = 1000;
  po.kafka = {{"reconnect.backoff.max.ms", "300"}, {"message.timeout.ms", "120000"}, {"log_level", "0"}};
  const Clock& clock = SystemClock::Instance();
  auto producer = KafkaChunkProducer::Create(po, registry, clock);
  ASSERT_TRUE(producer.ok()) << producer.error().ToString();
  KafkaChunkProducer& kp = **producer;
  auto seq = SequenceAllocator::InMemory(42);
  ChunkerOptions co;
  co.app = "app";
  co.host = "h1";
  co.max_chunk_records = 1;  // one record per chunk: chunk n holds "c<n>"
  Chunker chunker(co, *seq, kp, clock);
  auto send = [&](int n) {
    parse::RecordView r;
    r.ts_ms = clock.NowMs();
    r.severity = Severity::kInfo;
    std::string msg = "c" + std::to_string(n);
    r.message = msg;
    ASSERT_TRUE(chunker.OnRecord(r).ok());
  };

  // Chunk 1 alone first, so that the connection is up before the other nine
  // (a loaded machine must not make the warm-up look like an outage).
  auto drain = [&] {
    for (int i = 0; i < 200 && kp.in_flight() > 0; ++i) kp.Poll(50);
  };
  send(1);
  drain();
  ASSERT_EQ(kp.report().delivered_chunks, 1u);
  ASSERT_TRUE(kp.available());
  for (int i = 2; i <= kBefore; ++i) send(i);
  drain();
  ASSERT_EQ(kp.report().delivered_chunks, static_cast<uint64_t>(kBefore));

  kafka.SetAllDown(true);
  const auto start = std::chrono::steady_clock::now();
  for (int i = kBefore + 1; i <= kBefore + kDuring; ++i) {
    send(i);
    kp.Poll(0);
    std::this_thread::sleep_until(start + std::chrono::milliseconds(down_ms * (i - kBefore) / kDuring));
  }
  EXPECT_FALSE(kp.available());
  EXPECT_EQ(kp.backlog_size(), static_cast<size_t>(kBound));
  kafka.SetAllDown(false);
  DeliveryReport report = kp.Finish(60'000);

  const int total = kBefore + kDuring;
  EXPECT_EQ(report.failed_chunks, 0u);
  EXPECT_GT(report.dropped_chunks, 0u);
  EXPECT_EQ(report.delivered_chunks + report.dropped_chunks, static_cast<uint64_t>(total));
  EXPECT_EQ(CounterValue(registry, "logdex_ship_backlog_dropped_chunks_total"),
            static_cast<double>(report.dropped_chunks));
  EXPECT_EQ(CounterValue(registry, "logdex_ship_backlog_dropped_records_total"),
            static_cast<double>(report.dropped_records));

  // What arrived, in partition order (one partition: the delivery order).
  auto got = kafka.ConsumeAll("ship.outage", 1, report.delivered_chunks, 20'000);
  ASSERT_EQ(got.size(), report.delivered_chunks);
  DecodeOptions d;
  std::vector<uint64_t> seqs;
  for (const Consumed& c : got) {
    auto chunk = DecodeChunk(c.value, d);
    ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
    seqs.push_back(chunk->sequence());
  }
  std::set<uint64_t> unique(seqs.begin(), seqs.end());
  EXPECT_EQ(unique.size(), seqs.size()) << "a chunk arrived twice";
  // Before the outage: in order.
  for (int i = 0; i < kBefore; ++i) EXPECT_EQ(seqs[i], static_cast<uint64_t>(i + 1));
  // After it: the chunks that were in flight (at most the window), then the
  // backlog newest first, starting with the newest chunk of all.
  std::vector<uint64_t> post(seqs.begin() + kBefore, seqs.end());
  size_t k = 0;
  while (k < post.size() && post[k] != static_cast<uint64_t>(total)) ++k;
  ASSERT_LT(k, post.size()) << "the newest chunk never arrived";
  EXPECT_LE(k, static_cast<size_t>(kWindow));
  for (size_t i = k + 1; i < post.size(); ++i) EXPECT_LT(post[i], post[i - 1]) << "not newest first at " << i;
  EXPECT_EQ(post.size() - k, static_cast<size_t>(kBound));
  // The dropped ones are exactly the rest, and older than everything the backlog delivered.
  const uint64_t oldest_delivered_from_backlog = post.back();
  uint64_t dropped = 0;
  for (uint64_t s = 1; s <= static_cast<uint64_t>(total); ++s) {
    if (!unique.count(s)) {
      ++dropped;
      EXPECT_LT(s, oldest_delivered_from_backlog);
    }
  }
  EXPECT_EQ(dropped, report.dropped_chunks);
}

}  // namespace logdex::ship::testing
