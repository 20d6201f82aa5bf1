// Records laid out by columns (common/record_columns.h) and the chunk codec
// that stores them (CODEC_ZSTD_COLUMNS).
#include "common/record_columns.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/chunk_codec.h"
#include "common/crc32c.h"
#include "common/severity.h"
#include "common/zstd_codec.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;

// Records with what the canonical form leaves out (ts 0, severity 0, an
// empty message, empty tags) and extremes (a negative time, the largest
// varints), in a random mix.
proto::RecordBatch Mixed(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  proto::RecordBatch b;
  for (int i = 0; i < n; ++i) {
    proto::LogRecord* r = b.add_records();
    switch (rng() % 6) {
      case 0: break;  // ts 0
      case 1: r->set_ts_ms(-static_cast<int64_t>(rng() % 1'000'000)); break;
      case 2: r->set_ts_ms(INT64_MAX - static_cast<int64_t>(rng() % 10)); break;
      default: r->set_ts_ms(kNow - static_cast<int64_t>(rng() % 3'600'000));
    }
    if (rng() % 4) r->set_severity(rng() % 5 ? 30 : UINT32_MAX);
    if (rng() % 5) r->set_message(std::string(rng() % 300, static_cast<char>('a' + rng() % 26)) + "\n\0x"[rng() % 3]);
    for (uint64_t t = rng() % 4; t > 0; --t) {
      proto::Tag* tag = r->add_tags();
      if (rng() % 3) tag->set_key("key" + std::to_string(rng() % 5));
      if (rng() % 3) tag->set_value(std::string(rng() % 40, 'v'));
    }
  }
  return b;
}

TEST(RecordColumns, WhatProtobufWritesRoundTripsExactlyAndIsSmaller) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const std::string records = Mixed(static_cast<int>(seed * 7), seed).SerializeAsString();
    std::string columns, back;
    ASSERT_TRUE(RecordsToColumns(records, &columns)) << "seed " << seed;
    EXPECT_LT(columns.size(), records.size());
    ASSERT_TRUE(ColumnsToRecords(columns, records.size(), &back)) << "seed " << seed;
    EXPECT_EQ(back, records) << "seed " << seed;
  }
}

TEST(RecordColumns, RecordsInAnotherFormAreRefused) {
  proto::RecordBatch b = Mixed(20, 3);
  b.mutable_records(0)->set_ts_ms(kNow);
  b.mutable_records(0)->set_message("a message");
  b.mutable_records(0)->clear_tags();  // a body under 128 bytes: its length is one byte
  const std::string good = b.SerializeAsString();
  std::string columns;
  ASSERT_TRUE(RecordsToColumns(good, &columns));

  // The first record's bytes, rewritten: 0x0a <len> <body>; the rest follows.
  const std::string first = b.records(0).SerializeAsString();
  const std::string rest = good.substr(2 + first.size());
  auto with_first = [&](const std::string& body) {
    return std::string(1, '\x0a') + static_cast<char>(body.size()) + body + rest;
  };
  ASSERT_EQ(with_first(first), good);
  std::string unknown = first;
  unknown += std::string("\x28\x07", 2);  // field 5, a varint: a newer producer's field
  EXPECT_FALSE(RecordsToColumns(with_first(unknown), &columns)) << "an unknown field";
  // Forms the grammar takes that would not read back the same: only the
  // writer's proof refuses these.
  EXPECT_FALSE(RecordsToColumns(with_first(std::string("\x08\x00\x10\x1e\x1a\x01x", 7)), &columns)) << "ts 0 written";
  EXPECT_FALSE(RecordsToColumns(with_first(std::string("\x10\x9e\x00\x1a\x01x", 6)), &columns))
      << "a severity of 30 in two bytes";
  EXPECT_FALSE(RecordsToColumns(with_first(std::string("\x10\x1e\x1a\x00", 4)), &columns)) << "an empty message written";
  EXPECT_TRUE(RecordsToColumns(with_first(std::string("\x10\x1e\x1a\x01x", 5)), &columns)) << "the same, canonical";
  EXPECT_FALSE(RecordsToColumns(with_first(first + first.substr(0, 7)), &columns)) << "ts written twice";
  EXPECT_FALSE(RecordsToColumns(good + "\x12\x00", &columns)) << "a batch field that is not a record";
  EXPECT_FALSE(RecordsToColumns(good.substr(0, good.size() - 1), &columns)) << "truncated";
  EXPECT_FALSE(RecordsToColumns(std::string("\x0a\x00", 2), &columns)) << "one empty record: no smaller";
}

TEST(RecordColumns, MalformedColumnsAreRefusedWithoutWritingPastTheSize) {
  const std::string records = Mixed(40, 9).SerializeAsString();
  std::string columns, out;
  ASSERT_TRUE(RecordsToColumns(records, &columns));
  EXPECT_FALSE(ColumnsToRecords(columns, records.size() - 1, &out)) << "a size one short";
  EXPECT_EQ(out.size(), records.size() - 1);
  EXPECT_FALSE(ColumnsToRecords(columns, records.size() + 1, &out)) << "a size one long";
  EXPECT_FALSE(ColumnsToRecords(columns + "x", records.size(), &out)) << "a trailing byte";
  for (size_t cut = 0; cut < columns.size(); cut += 7) {
    EXPECT_FALSE(ColumnsToRecords(columns.substr(0, cut), records.size(), &out)) << "cut at " << cut;
  }
  std::string version = columns;
  version[0] = 2;
  EXPECT_FALSE(ColumnsToRecords(version, records.size(), &out)) << "an unknown layout version";
  // A count of records no size can hold, and random bytes.
  EXPECT_FALSE(ColumnsToRecords(std::string("\x01\xff\xff\xff\xff\x0f", 6), 1 << 20, &out));
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 ? rng() % 8 : rng());
    if (!junk.empty()) junk[0] = 1;
    const uint64_t size = rng() % 256;
    if (ColumnsToRecords(junk, size, &out)) {
      EXPECT_EQ(out.size(), size);
    }
  }
}

class ColumnsChunk : public ::testing::Test {
 protected:
  ColumnsChunk() { options_.clock = &clock_; }

  static proto::LogChunk Pack(const proto::RecordBatch& b, proto::Codec codec, int level = 3) {
    PackOptions po;
    po.codec = codec;
    po.zstd_level = level;
    return PackChunk("billing", "web-1", b, po);
  }
  static proto::RecordBatch Lines(int n) {
    proto::RecordBatch b;
    std::vector<std::string> lines;
    for (const char* name : {"HDFS_2k.log", "Linux_2k.log", "OpenSSH_2k.log"}) {
      std::ifstream in(std::string(LOGDEX_LOGHUB_DIR) + "/" + name);
      for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    EXPECT_GT(lines.size(), 5000u);
    for (int i = 0; i < n; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(kNow - 3'600'000 + i * 997);
      r->set_severity(SeverityCode(Severity::kInfo));
      r->set_message(lines[static_cast<size_t>(i * 3) % lines.size()]);  // a stream that saw every third line
    }
    return b;
  }

  ManualClock clock_{kNow};
  DecodeOptions options_;
};

TEST_F(ColumnsChunk, ReadsBackAsItsRecordsOnEveryPath) {
  const proto::RecordBatch in = Mixed(300, 11);
  proto::RecordBatch fixed;  // within a chunk's rules: times and severities a header can hold
  for (const proto::LogRecord& r : in.records()) {
    proto::LogRecord* f = fixed.add_records();
    *f = r;
    f->set_ts_ms(kNow - 1000 + fixed.records_size());
    f->set_severity(SeverityCode(Severity::kWarn));
  }
  const proto::LogChunk c = Pack(fixed, proto::CODEC_ZSTD_COLUMNS);
  ASSERT_EQ(c.codec(), proto::CODEC_ZSTD_COLUMNS);
  EXPECT_EQ(c.uncompressed_size(), fixed.ByteSizeLong());
  auto chunk = DecodeChunk(c.SerializeAsString(), options_);
  ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
  for (PayloadCheck check : {PayloadCheck::kLengthHeader, PayloadCheck::kStream}) {
    EXPECT_TRUE(VerifyPayload(*chunk, options_, check).ok());
  }
  std::string scratch;
  EXPECT_TRUE(VerifyRecords(*chunk, options_, &scratch).ok());
  auto out = UnpackRecords(*chunk, options_, &scratch);
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_EQ(out->SerializeAsString(), fixed.SerializeAsString());
  RecordViews views;
  ASSERT_TRUE(ViewRecords(ChunkRef::Of(*chunk), options_, scratch, views).ok());
  ASSERT_EQ(views.records.size(), 300u);
  EXPECT_EQ(views.records[17].message, fixed.records(17).message());
}

TEST_F(ColumnsChunk, RecordsTheColumnsCannotHoldAreStoredAsPlainZstd) {
  proto::RecordBatch b = Lines(10);
  // A field this build does not know, as a newer producer would send it.
  ASSERT_TRUE(b.mutable_records(4)->ParseFromString(b.records(4).SerializeAsString() + "\x48\x01"));  // field 9: 1
  const proto::LogChunk c = Pack(b, proto::CODEC_ZSTD_COLUMNS);
  EXPECT_EQ(c.codec(), proto::CODEC_ZSTD);
  auto out = UnpackRecords(c, options_);
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  EXPECT_EQ(out->SerializeAsString(), b.SerializeAsString()) << "the unknown field kept";
}

TEST_F(ColumnsChunk, IsSmallerThanPlainZstdOnRealLogLines) {
  const proto::RecordBatch b = Lines(3000);
  for (int level : {1, 3}) {
    const size_t plain = Pack(b, proto::CODEC_ZSTD, level).payload().size();
    const size_t columns = Pack(b, proto::CODEC_ZSTD_COLUMNS, level).payload().size();
    std::printf("zstd-%d: %zu bytes plain, %zu by columns (%.3f)\n", level, plain, columns,
                static_cast<double>(columns) / static_cast<double>(plain));
    EXPECT_LT(columns, plain * 9 / 10) << "level " << level;
  }
}

// A stored row is read without ValidateChunk, and its header is not under
// the crc: a size over the limit there is refused before anything is
// allocated for it.
TEST_F(ColumnsChunk, AHeaderSizeOverTheLimitIsRefusedOnEveryReadPath) {
  proto::LogChunk c = Pack(Lines(100), proto::CODEC_ZSTD_COLUMNS);
  c.set_uncompressed_size(uint64_t{1} << 40);  // a flipped high bit
  auto r = UnpackRecords(c, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ChunkErrc::kTooLarge);
  std::string scratch;
  RecordViews views;
  auto v = ViewRecords(ChunkRef::Of(c), options_, scratch, views);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, ChunkErrc::kTooLarge);
  EXPECT_LT(scratch.capacity(), size_t{1} << 30);
  for (PayloadCheck check : {PayloadCheck::kLengthHeader, PayloadCheck::kStream}) {
    auto p = VerifyPayload(c, options_, check);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error().code, ChunkErrc::kTooLarge);
  }
}

TEST_F(ColumnsChunk, AFrameLargerThanTheRecordsOrColumnsThatDoNotGiveThemAreRefused) {
  const proto::RecordBatch b = Lines(200);
  const proto::LogChunk good = Pack(b, proto::CODEC_ZSTD_COLUMNS);
  auto with_payload = [&](const std::string& payload) {
    proto::LogChunk c = good;
    c.set_payload(payload);
    c.set_payload_crc32c(Crc32c(payload));
    return c;
  };
  const std::string records = b.SerializeAsString();
  std::string frame;
  {
    // The records themselves, and more, framed: larger than columns can be.
    ZstdCompress(records + "padding", 3, &frame);
    const proto::LogChunk c = with_payload(frame);
    auto v = VerifyPayload(c, options_, PayloadCheck::kLengthHeader);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error().code, ChunkErrc::kBadZstd);
    auto r = UnpackRecords(c, options_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ChunkErrc::kBadZstd);
  }
  {
    // A frame of a size that fits, whose columns are wrong: one record
    // more than they hold.
    std::string columns;
    ASSERT_TRUE(RecordsToColumns(records, &columns));
    columns[1] = static_cast<char>(columns[1] + 1);
    ZstdCompress(columns, 3, &frame);
    const proto::LogChunk c = with_payload(frame);
    EXPECT_TRUE(VerifyPayload(c, options_, PayloadCheck::kLengthHeader).ok()) << "the length check reads no columns";
    auto v = VerifyPayload(c, options_, PayloadCheck::kStream);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.error().code, ChunkErrc::kMalformed);
    auto r = UnpackRecords(c, options_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ChunkErrc::kMalformed);
    std::string scratch;
    EXPECT_FALSE(VerifyRecords(c, options_, &scratch).ok());
  }
}

}  // namespace
}  // namespace logdex
