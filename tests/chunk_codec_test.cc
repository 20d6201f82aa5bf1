#include "common/chunk_codec.h"

#include <gtest/gtest.h>
#include <snappy.h>
#include <zstd.h>

#include <optional>
#include <random>
#include <set>

#include "common/crc32c.h"
#include "common/severity.h"
#include "common/zstd_codec.h"

namespace logdex {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;  // 2027-01-15
constexpr int64_t kBase = kNow - 3'600'000;

class ChunkCodecTest : public ::testing::Test {
 protected:
  ChunkCodecTest() { options_.clock = &clock_; }

  static proto::RecordBatch Records(int n, Severity sev = Severity::kInfo) {
    proto::RecordBatch b;
    for (int i = 0; i < n; ++i) {
      proto::LogRecord* r = b.add_records();
      r->set_ts_ms(kBase + i);
      r->set_severity(SeverityCode(sev));
      r->set_message("record " + std::to_string(i) + " of a chunk, with some text to compress");
      if (i % 3 == 0) {
        proto::Tag* t = r->add_tags();
        t->set_key("dc");
        t->set_value(i % 2 ? "east" : "west");
      }
    }
    return b;
  }

  proto::LogChunk Pack(const proto::RecordBatch& b) {
    PackOptions po;
    po.producer_id = 7;
    po.sequence = 42;
    return PackChunk("billing", "web-1", b, po);
  }

  // Re-signs the payload after a test changed it, so only the intended check fails.
  static void Resign(proto::LogChunk& c) { c.set_payload_crc32c(Crc32c(c.payload())); }

  // `good` (50 records from kBase), then copies whose header lies about its
  // records: their count, their times, their severity.
  static std::vector<std::pair<proto::LogChunk, std::string>> WithLyingHeaders(const proto::LogChunk& good) {
    std::vector<std::pair<proto::LogChunk, std::string>> out(4, {good, ""});
    out[0].second = "well-formed";
    out[1].first.set_record_count(49);
    out[1].second = "count";
    out[2].first.set_last_ts_ms(kBase + 10);
    out[2].second = "times";
    out[3].first.set_severity(SeverityCode(Severity::kError));
    out[3].second = "severity";
    return out;
  }

  // A copy of `c` (codec none) whose payload has 1-3 random bytes changed
  // and, one time in four, is cut short; its size and crc fit the new bytes.
  static proto::LogChunk Damaged(const proto::LogChunk& c, std::mt19937& rng) {
    proto::LogChunk out = c;
    std::string* p = out.mutable_payload();
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) (*p)[rng() % p->size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) p->resize(rng() % p->size());
    out.set_uncompressed_size(p->size());
    Resign(out);
    return out;
  }

  ChunkErrc DecodeError(const std::string& bytes) {
    auto r = DecodeChunk(bytes, options_);
    EXPECT_FALSE(r.ok());
    return r.ok() ? ChunkErrc::kMalformed : r.error().code;
  }

  ChunkErrc FullError(const proto::LogChunk& c) {
    auto header = DecodeChunk(c.SerializeAsString(), options_);
    if (!header.ok()) return header.error().code;
    auto records = UnpackRecords(*header, options_);
    EXPECT_FALSE(records.ok());
    return records.ok() ? ChunkErrc::kMalformed : records.error().code;
  }

  void RoundTrip(int n) {
    proto::RecordBatch in = Records(n);
    std::string wire = Pack(in).SerializeAsString();
    auto chunk = DecodeChunk(wire, options_);
    ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
    EXPECT_EQ(chunk->app(), "billing");
    EXPECT_EQ(chunk->host(), "web-1");
    EXPECT_EQ(chunk->record_count(), static_cast<uint32_t>(n));
    EXPECT_EQ(chunk->producer_id(), 7u);
    EXPECT_EQ(chunk->sequence(), 42u);
    EXPECT_EQ(chunk->codec(), proto::CODEC_SNAPPY);
    if (n > 0) {
      EXPECT_EQ(chunk->first_ts_ms(), kBase);
      EXPECT_EQ(chunk->last_ts_ms(), kBase + n - 1);
      EXPECT_EQ(chunk->severity(), SeverityCode(Severity::kInfo));
    }
    auto out = UnpackRecords(*chunk, options_);
    ASSERT_TRUE(out.ok()) << out.error().ToString();
    ASSERT_EQ(out->records_size(), n);
    EXPECT_EQ(out->SerializeAsString(), in.SerializeAsString());
  }

  ManualClock clock_{kNow};
  DecodeOptions options_;
};

// record_count 0 is proto3's default: a producer that forgot the field. Such
// a chunk used to be dropped without a row, a dead letter or a count.
TEST_F(ChunkCodecTest, RejectsAZeroRecordCountWhateverThePayloadHolds) {
  EXPECT_EQ(DecodeError(Pack(Records(0)).SerializeAsString()), ChunkErrc::kCountMismatch);
  proto::LogChunk forgot = Pack(Records(5));
  forgot.clear_record_count();
  EXPECT_EQ(DecodeError(forgot.SerializeAsString()), ChunkErrc::kCountMismatch);
  auto r = DecodeChunk(forgot.SerializeAsString(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().detail.find("record_count is 0"), std::string::npos) << r.error().detail;
}
TEST_F(ChunkCodecTest, RoundTripsOneRecord) { RoundTrip(1); }
TEST_F(ChunkCodecTest, RoundTrips100000Records) { RoundTrip(100000); }

TEST_F(ChunkCodecTest, SummarizesDistinctTagsAndMarksMixedSeverity) {
  proto::RecordBatch b = Records(10);
  b.mutable_records(4)->set_severity(SeverityCode(Severity::kError));
  proto::LogChunk c = Pack(b);
  EXPECT_EQ(c.severity(), kMixedSeverity);
  ASSERT_TRUE(c.has_tag_summary());
  ASSERT_EQ(c.tag_summary().tags_size(), 2);  // in the order first seen: records 0 and 3
  EXPECT_EQ(c.tag_summary().tags(0).value(), "west");
  EXPECT_EQ(c.tag_summary().tags(1).value(), "east");
  EXPECT_TRUE(UnpackRecords(*DecodeChunk(c.SerializeAsString(), options_), options_).ok());
}

TEST_F(ChunkCodecTest, PacksUncompressedWhenAsked) {
  PackOptions po;
  po.codec = proto::CODEC_NONE;
  proto::LogChunk c = PackChunk("a", "h", Records(5), po);
  EXPECT_EQ(c.codec(), proto::CODEC_NONE);
  auto out = UnpackRecords(*DecodeChunk(c.SerializeAsString(), options_), options_);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->records_size(), 5);
}

TEST_F(ChunkCodecTest, IgnoresUnknownFields) {
  std::string wire = Pack(Records(3)).SerializeAsString();
  wire += std::string("\xa0\x06\x2a", 3);  // field 100, varint 42: from a newer minor version
  auto chunk = DecodeChunk(wire, options_);
  ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
  EXPECT_TRUE(UnpackRecords(*chunk, options_).ok());
}

TEST_F(ChunkCodecTest, RejectsCrcMismatch) {
  proto::LogChunk c = Pack(Records(50));
  (*c.mutable_payload())[c.payload().size() / 2] ^= 0x01;
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kCrcMismatch);
}

TEST_F(ChunkCodecTest, RejectsTruncatedProtobuf) {
  std::string wire = Pack(Records(50)).SerializeAsString();
  EXPECT_EQ(DecodeError(wire.substr(0, wire.size() - 17)), ChunkErrc::kMalformed);
}

TEST_F(ChunkCodecTest, RejectsGarbageBytes) {
  EXPECT_EQ(DecodeError(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11)), ChunkErrc::kMalformed);
  EXPECT_FALSE(DecodeChunk("hello, world", options_).ok());
  // Bytes that parse as an (empty) protobuf still fail validation.
  EXPECT_EQ(DecodeError(""), ChunkErrc::kUnsupportedVersion);
}

TEST_F(ChunkCodecTest, RejectsGarbagePayloadProtobuf) {
  proto::LogChunk c = Pack(Records(2));
  std::string garbage = "\x0a\xff\xff\xff\x0f";  // a length-delimited field claiming ~4 GiB
  snappy::Compress(garbage.data(), garbage.size(), c.mutable_payload());
  c.set_uncompressed_size(garbage.size());  // sized right: only the protobuf inside is wrong
  Resign(c);
  EXPECT_EQ(FullError(c), ChunkErrc::kMalformed);
}

TEST_F(ChunkCodecTest, RejectsBadSnappy) {
  proto::LogChunk c = Pack(Records(5));
  c.set_payload("\x10this is not snappy at all");
  Resign(c);
  EXPECT_EQ(FullError(c), ChunkErrc::kBadSnappy);
}

TEST_F(ChunkCodecTest, VerifyPayloadCatchesBadSnappyWithoutUnpacking) {
  proto::LogChunk good = Pack(Records(20));
  EXPECT_TRUE(VerifyPayload(good, options_).ok());
  proto::LogChunk bad = good;
  bad.set_payload("\x10this is not snappy at all");
  Resign(bad);
  ASSERT_TRUE(DecodeChunk(bad.SerializeAsString(), options_).ok()) << "the header alone looks fine";
  auto v = VerifyPayload(bad, options_);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, ChunkErrc::kBadSnappy);
  proto::LogChunk lying = good;
  lying.set_uncompressed_size(good.uncompressed_size() - 1);
  EXPECT_EQ(VerifyPayload(lying, options_).error().code, ChunkErrc::kBadSnappy);
  EXPECT_EQ(VerifyPayload(lying, options_, PayloadCheck::kLengthHeader).error().code, ChunkErrc::kBadSnappy)
      << "the length header alone catches a size that lies";

  // The right length header over a broken stream: only the stream pass sees it.
  proto::LogChunk broken = good;
  std::string stream;
  for (uint64_t n = good.uncompressed_size();; n >>= 7) {
    stream.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) break;
  }
  stream += std::string("\x0a\x01\x00", 3);  // copies 3 bytes from before the start
  broken.set_payload(stream);
  Resign(broken);
  EXPECT_TRUE(VerifyPayload(broken, options_, PayloadCheck::kLengthHeader).ok());
  EXPECT_EQ(VerifyPayload(broken, options_, PayloadCheck::kStream).error().code, ChunkErrc::kBadSnappy);
}

// zstd (CODEC_ZSTD): one frame that records its content size.

proto::LogChunk ZstdChunk(const proto::RecordBatch& b, int level = kDefaultZstdLevel) {
  PackOptions po;
  po.codec = proto::CODEC_ZSTD;
  po.zstd_level = level;
  po.producer_id = 7;
  po.sequence = 42;
  return PackChunk("billing", "web-1", b, po);
}

TEST_F(ChunkCodecTest, ZstdRoundTripsAtEveryLevelAndIsSmallerThanSnappy) {
  const proto::RecordBatch in = Records(500);
  const proto::LogChunk snappy = Pack(in);
  for (int level : {kMinZstdLevel, kDefaultZstdLevel, 9, kMaxZstdLevel}) {
    proto::LogChunk c = ZstdChunk(in, level);
    EXPECT_EQ(c.codec(), proto::CODEC_ZSTD);
    EXPECT_EQ(c.uncompressed_size(), snappy.uncompressed_size());
    EXPECT_LT(c.payload().size(), snappy.payload().size()) << "level " << level;
    auto chunk = DecodeChunk(c.SerializeAsString(), options_);
    ASSERT_TRUE(chunk.ok()) << chunk.error().ToString();
    EXPECT_TRUE(VerifyPayload(*chunk, options_, PayloadCheck::kStream).ok());
    std::string scratch;
    EXPECT_TRUE(VerifyRecords(*chunk, options_, &scratch).ok());
    auto out = UnpackRecords(*chunk, options_, &scratch);
    ASSERT_TRUE(out.ok()) << out.error().ToString();
    EXPECT_EQ(out->SerializeAsString(), in.SerializeAsString());
  }
}

TEST_F(ChunkCodecTest, ZstdPayloadThatIsNotOneSizedFrameIsBadZstd) {
  const proto::LogChunk good = ZstdChunk(Records(50));
  auto expect_bad = [&](const std::string& payload, const char* what) {
    proto::LogChunk c = good;
    c.set_payload(payload);
    Resign(c);
    ASSERT_TRUE(DecodeChunk(c.SerializeAsString(), options_).ok()) << what << ": the header alone looks fine";
    for (PayloadCheck check : {PayloadCheck::kLengthHeader, PayloadCheck::kStream}) {
      auto v = VerifyPayload(c, options_, check);
      ASSERT_FALSE(v.ok()) << what;
      EXPECT_EQ(v.error().code, ChunkErrc::kBadZstd) << what;
    }
    EXPECT_EQ(FullError(c), ChunkErrc::kBadZstd) << what;
  };
  expect_bad("this is not zstd at all", "garbage");
  expect_bad(good.payload().substr(0, good.payload().size() - 3), "truncated");
  expect_bad(good.payload() + good.payload(), "two frames");
  expect_bad(good.payload() + "x", "a trailing byte");
  expect_bad(std::string("\x50\x2a\x4d\x18\x00\x00\x00\x00", 8), "a skippable frame (content size 0)");
  {
    std::string legacy = good.payload();  // the v0.7 magic: libzstd would hand it to its legacy decoder
    legacy[0] = '\x27';
    expect_bad(legacy, "a legacy magic");
  }
  // A frame written without its content size (streaming, no pledged size).
  {
    const std::string raw = Records(50).SerializeAsString();
    std::string frame(ZSTD_compressBound(raw.size()) + 64, '\0');
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
    const size_t n = ZSTD_compress2(cctx, frame.data(), frame.size(), raw.data(), raw.size());
    ZSTD_freeCCtx(cctx);
    ASSERT_FALSE(ZSTD_isError(n));
    frame.resize(n);
    expect_bad(frame, "no content size");
  }
  // The right frame over a header that lies about the size.
  proto::LogChunk lying = good;
  lying.set_uncompressed_size(good.uncompressed_size() + 1);
  EXPECT_EQ(VerifyPayload(lying, options_, PayloadCheck::kLengthHeader).error().code, ChunkErrc::kBadZstd);
  EXPECT_EQ(FullError(lying), ChunkErrc::kBadZstd);
}

TEST_F(ChunkCodecTest, ZstdCorruptBlockIsCaughtByTheStreamPassOnly) {
  const proto::LogChunk good = ZstdChunk(Records(300));
  // Flip bytes inside the compressed block (past the frame header) until the
  // frame header still parses but the block does not decode (zstd frames
  // written by ZstdCompress carry no checksum, so a flip usually breaks the
  // entropy stream; try a few positions).
  bool found = false;
  for (size_t at = good.payload().size() / 2; at < good.payload().size() && !found; ++at) {
    proto::LogChunk c = good;
    (*c.mutable_payload())[at] = static_cast<char>(c.payload()[at] ^ 0x5a);
    Resign(c);
    if (!VerifyPayload(c, options_, PayloadCheck::kLengthHeader).ok()) continue;
    auto v = VerifyPayload(c, options_, PayloadCheck::kStream);
    if (v.ok()) continue;  // this flip still decodes (to other bytes): the records check catches those
    EXPECT_EQ(v.error().code, ChunkErrc::kBadZstd);
    EXPECT_EQ(FullError(c), ChunkErrc::kBadZstd);
    found = true;
  }
  EXPECT_TRUE(found) << "no flipped byte broke the stream";
}

TEST_F(ChunkCodecTest, ZstdBombIsRefusedBeforeItIsExpanded) {
  options_.max_uncompressed_bytes = 64 * 1024;
  proto::LogChunk c = ZstdChunk(Records(1));
  const std::string zeros(64 << 20, '\0');  // 64 MiB of zeros: a few KiB of zstd
  ZstdCompress(zeros, 1, c.mutable_payload());
  EXPECT_LT(c.payload().size(), 8u << 10);
  c.set_uncompressed_size(100);  // the header lies
  Resign(c);
  EXPECT_EQ(FullError(c), ChunkErrc::kTooLarge);
  EXPECT_EQ(VerifyPayload(c, options_, PayloadCheck::kLengthHeader).error().code, ChunkErrc::kTooLarge);
}

TEST_F(ChunkCodecTest, RejectsDeclaredSizeOverLimit) {
  options_.max_uncompressed_bytes = 1000;
  proto::LogChunk c = Pack(Records(100));
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kTooLarge);
}

TEST_F(ChunkCodecTest, RejectsCompressionBombThatLiesAboutItsSize) {
  options_.max_uncompressed_bytes = 64 * 1024;
  proto::LogChunk c = Pack(Records(1));
  std::string zeros(4 << 20, '\0');  // 4 MiB of zeros compress to ~200 KiB... of snappy
  snappy::Compress(zeros.data(), zeros.size(), c.mutable_payload());
  c.set_uncompressed_size(100);  // the header lies
  Resign(c);
  EXPECT_EQ(FullError(c), ChunkErrc::kTooLarge);
}

TEST_F(ChunkCodecTest, RejectsRecordCountMismatch) {
  proto::LogChunk c = Pack(Records(5));
  c.set_record_count(6);
  EXPECT_EQ(FullError(c), ChunkErrc::kCountMismatch);
}

TEST_F(ChunkCodecTest, RejectsTimestampsOutsideSaneBounds) {
  proto::LogChunk old = Pack(Records(5));
  old.set_first_ts_ms(123);  // 1970
  EXPECT_EQ(DecodeError(old.SerializeAsString()), ChunkErrc::kBadTimestamp);

  proto::LogChunk future = Pack(Records(5));
  future.set_last_ts_ms(kNow + 2 * 86'400'000);
  EXPECT_EQ(DecodeError(future.SerializeAsString()), ChunkErrc::kBadTimestamp);

  proto::LogChunk inverted = Pack(Records(5));
  inverted.set_first_ts_ms(inverted.last_ts_ms() + 1);
  EXPECT_EQ(DecodeError(inverted.SerializeAsString()), ChunkErrc::kBadTimestamp);

  proto::LogChunk outside = Pack(Records(5));
  outside.set_first_ts_ms(kBase + 2);  // records 0 and 1 fall before the header's range
  EXPECT_EQ(FullError(outside), ChunkErrc::kBadTimestamp);
}

TEST_F(ChunkCodecTest, RejectsEmptyAppAndHost) {
  proto::LogChunk c = Pack(Records(1));
  c.clear_app();
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kEmptyApp);
  c = Pack(Records(1));
  c.clear_host();
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kEmptyHost);
}

TEST_F(ChunkCodecTest, RejectsUnsupportedVersion) {
  proto::LogChunk c = Pack(Records(1));
  c.set_format_major(kChunkFormatMajor + 1);
  auto r = DecodeChunk(c.SerializeAsString(), options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ChunkErrc::kUnsupportedVersion);
  EXPECT_NE(r.error().ToString().find("newer"), std::string::npos) << r.error().ToString();
  c.set_format_major(0);
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kUnsupportedVersion);
}

TEST_F(ChunkCodecTest, AcceptsNewerMinorVersion) {
  proto::LogChunk c = Pack(Records(1));
  c.set_format_minor(kChunkFormatMinor + 5);
  EXPECT_TRUE(DecodeChunk(c.SerializeAsString(), options_).ok());
}

TEST_F(ChunkCodecTest, RejectsBadSeverities) {
  proto::LogChunk c = Pack(Records(3));
  c.set_severity(35);
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kBadSeverity);

  proto::RecordBatch b = Records(3);
  b.mutable_records(1)->set_severity(99);
  EXPECT_EQ(FullError(Pack(b)), ChunkErrc::kBadSeverity);

  proto::LogChunk lying = Pack(Records(3, Severity::kError));
  lying.set_severity(SeverityCode(Severity::kInfo));  // header says INFO, records say ERROR
  EXPECT_EQ(FullError(lying), ChunkErrc::kBadSeverity);
}

TEST_F(ChunkCodecTest, RejectsUnknownCodec) {
  proto::LogChunk c = Pack(Records(3));
  c.set_codec(static_cast<proto::Codec>(7));
  EXPECT_EQ(DecodeError(c.SerializeAsString()), ChunkErrc::kBadCodec);
}

// VerifyRecords (the ingest check of indexer.verify: full) must reach the
// same verdict as UnpackRecords, which builds the records, on every chunk:
// well-formed, lying headers, and payload bytes mutated at random.
TEST_F(ChunkCodecTest, VerifyRecordsAgreesWithUnpackRecordsOnEveryVerdict) {
  // The reason must match too where one thing is wrong; with random bytes
  // several may be, and the walk (record by record) can meet another first.
  auto agree = [&](const proto::LogChunk& c, const std::string& what, bool same_reason = true) {
    std::string scratch;
    auto walked = VerifyRecords(c, options_, &scratch);
    auto built = UnpackRecords(c, options_);
    ASSERT_EQ(walked.ok(), built.ok()) << what << ": " << (walked.ok() ? built.error().ToString() : walked.error().ToString());
    if (!walked.ok() && same_reason) {
      EXPECT_EQ(walked.error().code, built.error().code) << what << ": " << walked.error().ToString();
    }
  };
  for (const auto& [c, what] : WithLyingHeaders(Pack(Records(50)))) agree(c, what);

  PackOptions raw;
  raw.codec = proto::CODEC_NONE;
  const proto::LogChunk plain = PackChunk("billing", "web-1", Records(20), raw);
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    agree(Damaged(plain, rng), "mutation " + std::to_string(i), false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Encodings at the edges of the parser's rules: a record length padded to 6
// bytes, and unknown groups nested past what is left of the parser's depth
// budget inside a record (each passed ingest once, and was then hidden from
// every query), then varint and tag widths at their limits, which must be
// read as the parser reads them.
TEST_F(ChunkCodecTest, VerifyRecordsRefusesWhatTheParserRefuses) {
  PackOptions raw;
  raw.codec = proto::CODEC_NONE;
  proto::LogChunk base = PackChunk("billing", "web-1", Records(1), raw);
  const std::string record = base.payload().substr(2);  // one record: 0x0a, a 1-byte length, the record
  ASSERT_LT(static_cast<unsigned char>(base.payload()[1]), 0x80u);
  auto with_payload = [&](std::string payload) {
    proto::LogChunk c = base;
    c.set_payload(std::move(payload));
    c.set_uncompressed_size(c.payload().size());
    Resign(c);
    return c;
  };
  const char len = static_cast<char>(record.size());
  proto::LogChunk padded = with_payload(std::string("\x0a", 1) + std::string({static_cast<char>(len | 0x80), '\x80',
                                                                               '\x80', '\x80', '\x80', '\x00'}) +
                                        record);
  std::string scratch;
  EXPECT_FALSE(UnpackRecords(padded, options_).ok());
  EXPECT_FALSE(VerifyRecords(padded, options_, &scratch).ok()) << "a 6-byte length";
  proto::LogChunk over = with_payload(std::string("\x0a", 1) + std::string({static_cast<char>(len | 0x80), '\x80',
                                                                             '\x80', '\x80', '\x10'}) +
                                      record);
  EXPECT_FALSE(UnpackRecords(over, options_).ok());
  EXPECT_FALSE(VerifyRecords(over, options_, &scratch).ok()) << "a length of 2^32 + its low bits";
  for (int depth : {99, 100}) {
    std::string groups;
    for (int i = 0; i < depth; ++i) groups += '\x2b';  // field 5, start group
    for (int i = 0; i < depth; ++i) groups += '\x2c';  // field 5, end group
    const std::string rec = record + groups;
    proto::LogChunk c = with_payload(std::string("\x0a", 1) + static_cast<char>(0x80 | (rec.size() & 0x7f)) +
                                     static_cast<char>(rec.size() >> 7) + rec);
    EXPECT_EQ(VerifyRecords(c, options_, &scratch).ok(), UnpackRecords(c, options_).ok()) << depth << " groups";
  }
  // Varint widths at their limits, in an unknown field the record carries
  // (field 6, a varint): a value of 10 bytes is read, one of 11 is refused;
  // a tag padded to 5 bytes is read, one of 6 is refused.
  const struct {
    std::string field;
    bool ok;
    const char* what;
  } widths[] = {
      {std::string("\x30\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11), true, "a 10-byte varint"},
      {std::string("\x30\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11), true, "a 10-byte varint, high bits dropped"},
      {std::string("\x30\xff\xff\xff\xff\xff\xff\xff\xff\xff\x80\x01", 12), false, "an 11-byte varint"},
      {std::string("\xb0\x80\x80\x80\x00\x01", 6), true, "a 5-byte tag"},
      {std::string("\xb0\x80\x80\x80\x80\x00\x01", 7), false, "a 6-byte tag"},
      {std::string("\x30\xff", 2), false, "a varint cut by the record's end"},
  };
  for (const auto& w : widths) {
    const std::string rec = record + w.field;
    ASSERT_LT(rec.size(), 0x80u);
    proto::LogChunk c = with_payload(std::string("\x0a", 1) + static_cast<char>(rec.size()) + rec);
    EXPECT_EQ(UnpackRecords(c, options_).ok(), w.ok) << w.what;
    EXPECT_EQ(VerifyRecords(c, options_, &scratch).ok(), w.ok) << w.what;
  }
  // A varint cut by the record's end, with bytes after the record that would
  // complete it: a walk that read past the record would end the varint there
  // and take the rest (valid unknown fields at the top level) as a field.
  std::string after("\x30\x32\x30\x81\x01", 5);  // top level: field 6 = 0x32, field 6 = 0x81
  for (int i = 0; i < 23; ++i) after += std::string("\x30\x01", 2);
  const std::string cut = record + std::string("\x30\xff", 2);
  proto::LogChunk c = with_payload(std::string("\x0a", 1) + static_cast<char>(cut.size()) + cut + after);
  EXPECT_FALSE(UnpackRecords(c, options_).ok());
  EXPECT_FALSE(VerifyRecords(c, options_, &scratch).ok()) << "a varint cut by the record's end, not the payload's";
}

// Queries read records in place (ViewRecords) instead of building them: on
// every chunk it must reach UnpackRecords' verdict (with the same reason
// where one thing is wrong) and read the records UnpackRecords builds, field for field: well-formed
// chunks, lying headers, protobuf's odd but legal encodings (a repeated
// singular field's last value counts; unknown fields are skipped), and
// random damage.
TEST_F(ChunkCodecTest, ViewRecordsReadsWhatUnpackRecordsBuilds) {
  std::string scratch;
  RecordViews views;
  auto agree = [&](const proto::LogChunk& c, const std::string& what, bool same_reason = true) {
    auto viewed = ViewRecords(ChunkRef::Of(c), options_, scratch, views);
    auto built = UnpackRecords(c, options_);
    ASSERT_EQ(viewed.ok(), built.ok()) << what << ": " << (viewed.ok() ? built.error().ToString() : viewed.error().ToString());
    if (!built.ok()) {
      if (same_reason) {
        EXPECT_EQ(viewed.error().code, built.error().code) << what << ": " << viewed.error().ToString();
      }
      EXPECT_TRUE(views.records.empty() && views.tags.empty()) << what << ": nothing is left from a refused chunk";
      return;
    }
    ASSERT_EQ(views.records.size(), static_cast<size_t>(built->records_size())) << what;
    for (int i = 0; i < built->records_size(); ++i) {
      const proto::LogRecord& want = built->records(i);
      const RecordView& got = views.records[static_cast<size_t>(i)];
      EXPECT_EQ(got.ts_ms, want.ts_ms()) << what << " #" << i;
      EXPECT_EQ(got.severity, want.severity()) << what << " #" << i;
      EXPECT_EQ(got.message, want.message()) << what << " #" << i;
      const auto tags = views.TagsOf(got);
      ASSERT_EQ(tags.size(), static_cast<size_t>(want.tags_size())) << what << " #" << i;
      for (int t = 0; t < want.tags_size(); ++t) {
        EXPECT_EQ(tags[static_cast<size_t>(t)].key, want.tags(t).key()) << what << " #" << i << " tag " << t;
        EXPECT_EQ(tags[static_cast<size_t>(t)].value, want.tags(t).value()) << what << " #" << i << " tag " << t;
      }
      // Its stored bytes are the record: parsed, they give what the parser
      // built (unknown fields kept), which the compactor relies on when it
      // writes them into a merged chunk.
      proto::LogRecord reparsed;
      ASSERT_TRUE(reparsed.ParseFromArray(got.wire.data(), static_cast<int>(got.wire.size()))) << what << " #" << i;
      EXPECT_EQ(reparsed.SerializeAsString(), want.SerializeAsString()) << what << " #" << i;
    }
  };
  for (const auto& [c, what] : WithLyingHeaders(Pack(Records(50)))) agree(c, what);

  PackOptions raw;
  raw.codec = proto::CODEC_NONE;
  const proto::LogChunk plain = PackChunk("billing", "web-1", Records(20), raw);
  agree(plain, "well-formed, codec none");
  // One record (ts kBase, INFO) followed by `extra` inside it.
  const proto::LogChunk one = PackChunk("billing", "web-1", Records(1), raw);
  const std::string record = one.payload().substr(2);
  ASSERT_LT(record.size(), 0x70u);  // with its extra, a 1-byte length
  auto with_record_extra = [&](const std::string& extra) {
    proto::LogChunk c = one;
    const std::string rec = record + extra;
    EXPECT_LT(rec.size(), 0x80u);
    c.set_payload(std::string("\x0a", 1) + static_cast<char>(rec.size()) + rec);
    c.set_uncompressed_size(c.payload().size());
    Resign(c);
    return c;
  };
  // What each must read (agreeing on a refusal alone would pass if every
  // case were refused): the record's message and its second tag (its first
  // is dc=west), or the reason it is refused.
  const std::string message = Records(1).records(0).message();
  const struct {
    std::string extra;
    const char* what;
    std::optional<ChunkErrc> refused;
    std::string message, key, value;
  } odd[] = {
      {std::string("\x1a\x03" "new", 5), "a second message field: the last counts", {}, "new", "", ""},
      {std::string("\x18\x05", 2), "field 3 as a varint: unknown, skipped", {}, message, "", ""},
      {std::string("\x22\x0a\x0a\x01" "a\x0a\x01" "b\x12\x02" "vv", 12), "a tag whose key comes twice: the last counts", {},
       message, "b", "vv"},
      {std::string("\x22\x05\x12\x01" "v\x18\x07", 7), "a tag without a key, with an unknown field", {}, message, "", "v"},
      {std::string("\x22\x00", 2), "an empty tag", {}, message, "", ""},
      {std::string("\x22\x03\x0a\x05" "a", 5), "a tag key longer than its tag", ChunkErrc::kMalformed, "", "", ""},
      {std::string("\x1a\x7f", 2), "a message longer than its record", ChunkErrc::kMalformed, "", "", ""},
      {std::string("\x08\x01", 2), "a second time, outside the header's range", ChunkErrc::kBadTimestamp, "", "", ""},
  };
  for (const auto& o : odd) {
    const proto::LogChunk c = with_record_extra(o.extra);
    agree(c, o.what);
    auto viewed = ViewRecords(ChunkRef::Of(c), options_, scratch, views);
    if (o.refused) {
      ASSERT_FALSE(viewed.ok()) << o.what;
      EXPECT_EQ(viewed.error().code, *o.refused) << o.what;
      continue;
    }
    ASSERT_TRUE(viewed.ok()) << o.what << ": " << viewed.error().ToString();
    ASSERT_EQ(views.records.size(), 1u) << o.what;
    EXPECT_EQ(views.records[0].message, o.message) << o.what;
    const auto tags = views.TagsOf(views.records[0]);
    ASSERT_EQ(tags.size(), o.extra[0] == '\x22' ? 2u : 1u) << o.what;
    EXPECT_EQ(tags[0].key, "dc") << o.what;
    if (tags.size() == 2) {
      EXPECT_EQ(tags[1].key, o.key) << o.what;
      EXPECT_EQ(tags[1].value, o.value) << o.what;
    }
  }

  std::mt19937 rng(13);
  for (int i = 0; i < 20000; ++i) {
    agree(Damaged(plain, rng), "mutation " + std::to_string(i), false);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The ingest path decodes chunks without copying their payloads
// (DecodeChunkView): it must pass and refuse exactly what DecodeChunk does,
// with the same reason, and its header must be DecodeChunk's chunk less the
// payload, on well-formed chunks, protobuf's odd but legal encodings, and
// random damage.
TEST_F(ChunkCodecTest, DecodeChunkViewAgreesWithDecodeChunkOnEveryInput) {
  auto agree = [&](const std::string& bytes, const std::string& what) {
    auto whole = DecodeChunk(bytes, options_);
    auto view = DecodeChunkView(bytes, options_);
    ASSERT_EQ(whole.ok(), view.ok()) << what << ": " << (whole.ok() ? view.error().ToString() : whole.error().ToString());
    if (!whole.ok()) {
      EXPECT_EQ(whole.error().code, view.error().code) << what;
      return;
    }
    EXPECT_EQ(view->payload, whole->payload()) << what;
    if (!view->payload.empty()) {  // no payload field: an empty view (a chunk of codec none may pass)
      EXPECT_GE(view->payload.data(), bytes.data()) << what << ": the payload is viewed where it was decoded";
      EXPECT_LE(view->payload.data() + view->payload.size(), bytes.data() + bytes.size()) << what;
    }
    EXPECT_TRUE(view->header.payload().empty()) << what;
    proto::LogChunk header = *whole;
    header.clear_payload();
    EXPECT_EQ(view->header.SerializeAsString(), header.SerializeAsString()) << what;
    auto a = UnpackRecords(*whole, options_);
    auto b = UnpackRecords(view->ref(), options_);
    ASSERT_EQ(a.ok(), b.ok()) << what;
    if (a.ok()) {
      EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString()) << what;
    }
  };
  const proto::LogChunk good = Pack(Records(30));
  const std::string bytes = good.SerializeAsString();
  agree(bytes, "well-formed");
  agree("", "empty");
  agree(std::string("\x52\x00", 2) + bytes, "an empty payload field first: the last one counts");
  agree(bytes + std::string("\x52\x03" "abc", 5), "a second payload field after the first: it counts (crc fails)");
  agree(bytes + std::string("\x50\x07", 2), "field 10 as a varint: an unknown field, ignored");
  agree(bytes + std::string("\xa3\x06\xa4\x06", 4), "an unknown group at the top level");
  agree(bytes + std::string("\xa4\x06", 2), "an end-group tag at the top level");
  agree(bytes + std::string("\x52\x7f", 2), "a payload field longer than the bytes left");
  agree(bytes + std::string("\x52\x85\x80\x80\x80\x80\x00", 7), "a payload length in 6 bytes");
  // 2^32 + 3 in 5 bytes: the parser refuses it; cut to 32 bits it would be 3.
  {
    proto::LogChunk c = good;
    c.clear_payload();
    std::string tail = std::string("\x52\x83\x80\x80\x80\x10", 6) + "abc";
    c.set_payload_crc32c(Crc32c("abc"));
    agree(c.SerializeAsString() + tail, "a payload length over 2^32, signed as its low bits");
  }
  agree(bytes + std::string("\x00", 1), "tag 0");
  std::string deep = bytes;
  for (int i = 0; i < 100; ++i) deep += "\xa3\x06";
  for (int i = 0; i < 100; ++i) deep += "\xa4\x06";
  agree(deep, "groups nested past the parser's depth");

  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    std::string b = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<char>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    agree(b, "mutation " + std::to_string(i));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_F(ChunkCodecTest, ErrorNamesAreStableAndDistinct) {
  std::set<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(ChunkErrc::kBadSeverity); ++i) {
    names.insert(ChunkErrcName(static_cast<ChunkErrc>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ChunkErrc::kBadSeverity) + 1);
  EXPECT_EQ(ChunkErrcName(ChunkErrc::kCrcMismatch), "crc_mismatch");
}

TEST(Crc32c, MatchesKnownVectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the standard check value
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
  std::string s = "hello world, crc32c across word boundaries";
  EXPECT_EQ(Crc32c(s.data() + 5, s.size() - 5, Crc32c(s.data(), 5)), Crc32c(s));
}

}  // namespace
}  // namespace logdex
