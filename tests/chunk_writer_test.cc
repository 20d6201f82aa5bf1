// ChunkWriter writes the protobuf wire format by hand: these tests hold its
// bytes equal to what protobuf's generated code writes for the same chunk.
#include "common/chunk_writer.h"

#include <gtest/gtest.h>
#include <snappy.h>
#include <zstd.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/record_columns.h"
#include "common/severity.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;

struct Rec {
  int64_t ts;
  uint32_t severity;
  std::string message;
  std::vector<std::pair<std::string, std::string>> tags;
};

// Records that reach every encoding edge: zero and negative times (a
// ten-byte varint), severity 0, empty messages, keys and values, lengths
// that need one, two and three varint bytes, and many tags.
std::vector<Rec> EdgeRecords() {
  std::mt19937_64 rng(7);
  std::vector<Rec> out;
  const int64_t times[] = {0, -1, 1, 127, 128, kNow, INT64_MAX, INT64_MIN};
  const size_t lengths[] = {0, 1, 127, 128, 16383, 16384, 70000};
  for (int i = 0; i < 60; ++i) {
    Rec r;
    r.ts = times[i % 8];
    r.severity = i % 7 == 0 ? 0 : SeverityCode(kAllSeverities[i % 6]);
    r.message.assign(lengths[i % 7], static_cast<char>('a' + i % 26));
    const int tags = i % 5 == 0 ? 70 : i % 4;
    for (int t = 0; t < tags; ++t) {
      std::string key = t % 9 == 0 ? "" : "k" + std::to_string(t % 12);
      std::string value = t % 7 == 0 ? "" : std::to_string(rng() % 5);
      if (t == 1) value.assign(lengths[(i + t) % 7], 'v');
      r.tags.emplace_back(std::move(key), std::move(value));
    }
    out.push_back(std::move(r));
  }
  return out;
}

// `n` letters that compress about as well as log text does, no better: a
// message long enough that a record's tags are a small part of its chunk.
std::string Noise(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, ' ');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

std::vector<TagView> Views(const Rec& r) {
  std::vector<TagView> v;
  for (const auto& [k, val] : r.tags) v.push_back({k, val});
  return v;
}

proto::RecordBatch Batch(const std::vector<Rec>& recs) {
  proto::RecordBatch b;
  for (const Rec& r : recs) {
    proto::LogRecord* p = b.add_records();
    p->set_ts_ms(r.ts);
    p->set_severity(r.severity);
    p->set_message(r.message);
    for (const auto& [k, v] : r.tags) {
      proto::Tag* t = p->add_tags();
      t->set_key(k);
      t->set_value(v);
    }
  }
  return b;
}

// The summary as the rule says: each distinct tag among each record's first
// kMaxIndexedTagsPerRecord, once, in the order first seen.
std::vector<std::pair<std::string, std::string>> ExpectedSummary(const std::vector<Rec>& recs) {
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::pair<std::string, std::string>> seen;
  for (const Rec& r : recs) {
    for (size_t i = 0; i < r.tags.size() && i < static_cast<size_t>(kMaxIndexedTagsPerRecord); ++i) {
      if (seen.insert(r.tags[i]).second) out.push_back(r.tags[i]);
    }
  }
  return out;
}

// Writes `recs` with `w` and checks the chunk against protobuf's own bytes,
// with its tag summary when that is at most kMaxTagSummaryShare of the
// compressed payload; `summarized`: whether it should have been.
void ExpectProtobufBytes(ChunkWriter& w, const std::vector<Rec>& recs, proto::Codec codec, bool summarized,
                         bool* summary_given_up = nullptr, bool* fits_at_finish = nullptr) {
  for (const Rec& r : recs) w.Add(r.ts, r.severity, r.message, Views(r));
  const proto::RecordBatch batch = Batch(recs);
  EXPECT_EQ(w.payload_bytes(), batch.ByteSizeLong());
  PackOptions po;
  po.codec = codec;
  po.producer_id = 9;
  po.sequence = 300;
  std::string written = "prefix:";  // Finish appends
  w.Finish("app", "host", po, &written);
  ASSERT_EQ(written.substr(0, 7), "prefix:");
  written.erase(0, 7);

  proto::LogChunk parsed;
  ASSERT_TRUE(parsed.ParseFromString(written));
  // What protobuf writes for the same header, payload and summary.
  proto::LogChunk expected;
  expected.set_format_major(kChunkFormatMajor);
  expected.set_format_minor(kChunkFormatMinor);
  expected.set_app("app");
  expected.set_host("host");
  int64_t first = 0, last = 0;
  uint32_t severity = recs.empty() ? kMixedSeverity : recs[0].severity;
  for (size_t i = 0; i < recs.size(); ++i) {
    first = i == 0 ? recs[i].ts : std::min(first, recs[i].ts);
    last = i == 0 ? recs[i].ts : std::max(last, recs[i].ts);
    if (recs[i].severity != severity) severity = kMixedSeverity;
  }
  expected.set_severity(severity);
  expected.set_first_ts_ms(first);
  expected.set_last_ts_ms(last);
  expected.set_record_count(static_cast<uint32_t>(recs.size()));
  std::string payload = batch.SerializeAsString();
  if (std::string columns; codec == proto::CODEC_ZSTD_COLUMNS) {
    // By columns when they hold the records (not the empty batch: its
    // columns are no smaller), else plain zstd.
    if (RecordsToColumns(payload, &columns)) {
      payload = columns;
    } else {
      EXPECT_TRUE(recs.empty());
      codec = proto::CODEC_ZSTD;
    }
  }
  expected.set_codec(codec);
  if (codec == proto::CODEC_SNAPPY) {
    std::string compressed;
    snappy::Compress(payload.data(), payload.size(), &compressed);
    payload = compressed;
  } else if (codec == proto::CODEC_ZSTD || codec == proto::CODEC_ZSTD_COLUMNS) {
    // The same frame zstd's one-shot API writes at the default level.
    std::string compressed(ZSTD_compressBound(payload.size()), '\0');
    const size_t n = ZSTD_compress(compressed.data(), compressed.size(), payload.data(), payload.size(), kDefaultZstdLevel);
    ASSERT_FALSE(ZSTD_isError(n));
    compressed.resize(n);
    payload = compressed;
  }
  expected.set_payload(payload);
  expected.set_payload_crc32c(Crc32c(payload));
  expected.set_uncompressed_size(batch.ByteSizeLong());
  expected.set_producer_id(9);
  expected.set_sequence(300);
  proto::TagSummary summary;
  for (const auto& [k, v] : ExpectedSummary(recs)) {
    proto::Tag* t = summary.add_tags();
    t->set_key(k);
    t->set_value(v);
  }
  // The writer gives up on the summary when, past the chunk's first 8 KiB
  // of records, the summary of the records before one outweighs the share
  // of the records up to it.
  bool given_up = false;
  {
    proto::RecordBatch upto;
    proto::TagSummary so_far;
    std::set<std::pair<std::string, std::string>> seen;
    for (const proto::LogRecord& r : batch.records()) {
      *upto.add_records() = r;
      const size_t payload_now = upto.ByteSizeLong();
      if (payload_now >= 8192 &&
          static_cast<double>(so_far.ByteSizeLong()) > kMaxTagSummaryShare * static_cast<double>(payload_now)) {
        given_up = true;
        break;
      }
      for (int i = 0; i < r.tags_size() && i < kMaxIndexedTagsPerRecord; ++i) {
        if (seen.insert({r.tags(i).key(), r.tags(i).value()}).second) *so_far.add_tags() = r.tags(i);
      }
    }
  }
  if (summary_given_up) *summary_given_up = given_up;
  const bool fits_finish =
      static_cast<double>(summary.ByteSizeLong()) <= kMaxTagSummaryShare * static_cast<double>(payload.size());
  if (fits_at_finish) *fits_at_finish = fits_finish;
  const bool fits = !given_up && fits_finish;
  EXPECT_EQ(fits, summarized) << "codec " << codec << ", " << recs.size() << " records: not the case the test means";
  if (fits) *expected.mutable_tag_summary() = summary;
  EXPECT_EQ(parsed.has_tag_summary(), fits) << "codec " << codec << ", " << recs.size() << " records";
  EXPECT_TRUE(written == expected.SerializeAsString()) << "codec " << codec << ", " << recs.size() << " records";
  EXPECT_TRUE(VerifyPayload(parsed, DecodeOptions{}).ok());
}

TEST(ChunkWriter, WritesTheBytesProtobufWritesForTheSameChunk) {
  const std::vector<Rec> recs = EdgeRecords();
  std::vector<Rec> padded = {{kNow, 30, Noise(2 << 20, 9), {}}};
  padded.insert(padded.end(), recs.begin(), recs.end());
  // 300 distinct tags: the summary's set outgrows 127 slots, is cleared and
  // sized again by Finish; the next chunk of the same writer is checked too.
  // With long messages the summary is written; with one-letter messages it
  // is larger than the payload it summarizes, and left out: given up on
  // past 8 KiB of records (1,000 of them), or at Finish (200).
  // Given up on, it stays out even when long records without new tags
  // follow, which would have made it fit (`ids_then_long`).
  std::vector<Rec> many, many_short, few_short;
  for (int i = 0; i < 1000; ++i) {
    if (i < 300) many.push_back({kNow + i, 30, Noise(400, i), {{"id", std::to_string(i)}, {"dc", "east"}}});
    many_short.push_back({kNow + i, 30, "m", {{"id", std::to_string(i)}, {"dc", "east"}}});
    if (i < 200) few_short.push_back(many_short.back());
  }
  std::vector<Rec> ids_then_long = many_short;
  for (int i = 0; i < 200; ++i) ids_then_long.push_back({kNow + i, 30, Noise(2000, 1000 + i), {}});
  for (proto::Codec codec : {proto::CODEC_NONE, proto::CODEC_SNAPPY, proto::CODEC_ZSTD, proto::CODEC_ZSTD_COLUMNS}) {
    ChunkWriter w;
    ExpectProtobufBytes(w, many, codec, true);
    // The edge records' long tag values outweigh their records: no summary.
    // After a long first record, they are a small share, and the summary's
    // encoding of them is checked too.
    ExpectProtobufBytes(w, recs, codec, false);
    ExpectProtobufBytes(w, padded, codec, true);
    ExpectProtobufBytes(w, {}, codec, true);  // no record (serve refuses it; the bytes are still protobuf's)
    bool given_up = false;
    ExpectProtobufBytes(w, many_short, codec, false, &given_up);
    EXPECT_TRUE(given_up);
    ExpectProtobufBytes(w, few_short, codec, false, &given_up);
    EXPECT_FALSE(given_up);
    bool fits_at_finish = false;
    ExpectProtobufBytes(w, ids_then_long, codec, false, &given_up, &fits_at_finish);
    EXPECT_TRUE(given_up);
    EXPECT_TRUE(fits_at_finish) << "the case where giving up early changes the chunk";
    ExpectProtobufBytes(w, many, codec, true);
  }
}

// PackChunk (re-packing received records: the indexer's split path) keeps
// the fields of a newer producer that this build does not know.
TEST(ChunkWriter, PackChunkKeepsUnknownFieldsOfRecordsAndTags) {
  proto::RecordBatch batch = Batch({{kNow, 30, "with extras " + Noise(200, 1), {{"dc", "east"}}}});
  proto::LogRecord* r = batch.mutable_records(0);
  ASSERT_TRUE(r->MergeFromString(std::string("\xa0\x06\x2a", 3)));  // field 100, varint 42
  ASSERT_TRUE(r->mutable_tags(0)->MergeFromString(std::string("\x18\x07", 2)));  // field 3, varint 7
  ASSERT_NE(batch.SerializeAsString().find(std::string("\xa0\x06\x2a", 3)), std::string::npos);
  PackOptions po;
  po.codec = proto::CODEC_NONE;
  proto::LogChunk c = PackChunk("a", "h", batch, po);
  EXPECT_EQ(c.payload(), batch.SerializeAsString());
  ASSERT_EQ(c.tag_summary().tags_size(), 1);
  EXPECT_EQ(c.tag_summary().tags(0).value(), "east");
}

TEST(ChunkWriter, ChunksItWritesPassServesDecode) {
  ChunkWriter w;
  std::vector<Rec> recs;
  for (int i = 0; i < 500; ++i) {
    recs.push_back({kNow - 1000 + i, SeverityCode(Severity::kWarn), "line " + std::to_string(i),
                    {{"host", "web-" + std::to_string(i % 3)}, {"request", std::to_string(i)}}});
  }
  for (const Rec& r : recs) w.Add(r.ts, r.severity, r.message, Views(r));
  std::string bytes;
  w.Finish("a", "h", PackOptions{}, &bytes);
  DecodeOptions dop;
  ManualClock clock(kNow);
  dop.clock = &clock;
  auto chunk = DecodeChunk(bytes, dop);
  ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
  EXPECT_EQ(chunk->severity(), SeverityCode(Severity::kWarn));
  EXPECT_EQ(chunk->first_ts_ms(), kNow - 1000);
  EXPECT_EQ(chunk->last_ts_ms(), kNow - 501);
  // 3 hosts and 500 request ids: a summary larger than the compressed
  // payload, left out (the indexer reads the tags from the records).
  EXPECT_FALSE(chunk->has_tag_summary());
  auto records = UnpackRecords(*chunk, dop);
  ASSERT_TRUE(records.ok()) << records.error().ToString();
  EXPECT_EQ(records->SerializeAsString(), Batch(recs).SerializeAsString());
  std::string scratch;
  EXPECT_TRUE(VerifyRecords(*chunk, dop, &scratch).ok());
}

TEST(ChunkWriter, FinishStartsAFreshChunk) {
  ChunkWriter w;
  std::vector<TagView> tags = {{"dc", "east"}};
  w.Add(kNow, SeverityCode(Severity::kError), "first " + Noise(200, 1), tags);
  std::string one;
  w.Finish("a", "h", PackOptions{}, &one);
  EXPECT_EQ(w.records(), 0u);
  EXPECT_EQ(w.payload_bytes(), 0u);
  tags = {{"dc", "east"}};  // the same tag at the same position: in the new chunk's summary too
  w.Add(kNow - 5, SeverityCode(Severity::kInfo), "second " + Noise(200, 2), tags);
  std::string two;
  w.Finish("a", "h", PackOptions{}, &two);
  proto::LogChunk c;
  ASSERT_TRUE(c.ParseFromString(two));
  EXPECT_EQ(c.record_count(), 1u);
  EXPECT_EQ(c.severity(), SeverityCode(Severity::kInfo));
  EXPECT_EQ(c.first_ts_ms(), kNow - 5);
  EXPECT_EQ(c.last_ts_ms(), kNow - 5);
  ASSERT_EQ(c.tag_summary().tags_size(), 1);
  EXPECT_EQ(c.tag_summary().tags(0).value(), "east");
}

TEST(ChunkWriter, LeadTagsComeFirstAndCountTowardTheIndexedCap) {
  ChunkWriter w;
  const TagView lead{kRestampedTag, "12345"};
  std::vector<std::string> values;
  for (int i = 0; i < kMaxIndexedTagsPerRecord; ++i) values.push_back(std::to_string(i));
  std::vector<TagView> tags;
  for (const std::string& v : values) tags.push_back({"k", v});
  w.Add(kNow, SeverityCode(Severity::kInfo), Noise(8000, 1), std::span<const TagView>(&lead, 1), tags);
  std::string bytes;
  w.Finish("a", "h", PackOptions{}, &bytes);
  proto::LogChunk c;
  ASSERT_TRUE(c.ParseFromString(bytes));
  ASSERT_EQ(c.tag_summary().tags_size(), kMaxIndexedTagsPerRecord);  // the last tag is past the cap
  EXPECT_EQ(c.tag_summary().tags(0).key(), kRestampedTag);
  EXPECT_EQ(c.tag_summary().tags(kMaxIndexedTagsPerRecord - 1).value(), std::to_string(kMaxIndexedTagsPerRecord - 2));
  DecodeOptions dop;
  ManualClock clock(kNow);
  dop.clock = &clock;
  auto records = UnpackRecords(c, dop);
  ASSERT_TRUE(records.ok()) << records.error().ToString();
  ASSERT_EQ(records->records(0).tags_size(), kMaxIndexedTagsPerRecord + 1);  // every tag is kept in the record
  EXPECT_EQ(records->records(0).tags(0).key(), kRestampedTag);
  EXPECT_EQ(records->records(0).tags(0).value(), "12345");
}

TEST(ChunkWriter, WritesNoSummaryWhenToldNot) {
  ChunkWriter w(/*summarize_tags=*/false);
  std::vector<TagView> tags = {{"dc", "east"}};
  w.Add(kNow, SeverityCode(Severity::kInfo), "m", tags);
  std::string bytes;
  w.Finish("a", "h", PackOptions{}, &bytes);
  proto::LogChunk c;
  ASSERT_TRUE(c.ParseFromString(bytes));
  EXPECT_FALSE(c.has_tag_summary());
  EXPECT_EQ(c.record_count(), 1u);
}

}  // namespace
}  // namespace logdex
