// The compactor's ledger values (indexer/merge_ledger.h): every part found
// again, nothing else; pairs kept only when they make the id; the former
// format read as before; a value no format allows is refused, never trusted.
#include "indexer/merge_ledger.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "common/bytes.h"
#include "common/varint.h"

namespace logdex {
namespace {

LedgerPart Paired(uint64_t a, uint64_t b) { return LedgerPart{ChunkIdOf(a, b), true, a, b}; }

TEST(MergeLedger, EveryPartIsFoundAgainAndNoOtherChunk) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 300; ++round) {
    std::vector<LedgerPart> parts;
    std::set<ChunkId> ids;
    const int producers = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < producers; ++p) {
      const uint64_t producer = round % 7 == 0 ? p : rng();  // small producer ids too
      uint64_t sequence = round % 5 == 0 ? UINT64_MAX - 300 : rng() % 1000;
      for (int n = 1 + static_cast<int>(rng() % 60); n > 0; --n) {
        parts.push_back(Paired(producer, sequence));
        ids.insert(parts.back().id);
        sequence += rng() % 3 == 0 ? 1 + rng() % 100'000 : 1 + rng() % 4;
        if (round % 5 == 0) sequence = std::min(sequence, UINT64_MAX - 1);
      }
    }
    for (int n = static_cast<int>(rng() % 6); n > 0; --n) {  // split parts: ids only
      parts.push_back(LedgerPart{ChunkId(rng()), false, 0, 0});
      ids.insert(parts.back().id);
    }
    if (round % 3 == 0 && !parts.empty()) parts.push_back(parts[rng() % parts.size()]);  // a duplicate
    std::shuffle(parts.begin(), parts.end(), rng);
    const std::string value = EncodeLedger(parts);
    for (ChunkId id : ids) ASSERT_EQ(LedgerHolds(2, value, id), std::optional<bool>(true)) << round;
    for (int i = 0; i < 50; ++i) ASSERT_EQ(LedgerHolds(2, value, ChunkId(rng())), std::optional<bool>(false)) << round;
    for (const LedgerPart& p : parts) {  // a neighbour's sequence is another chunk
      if (p.paired && !ids.contains(ChunkIdOf(p.a, p.b + 1))) {
        ASSERT_EQ(LedgerHolds(2, value, ChunkIdOf(p.a, p.b + 1)), std::optional<bool>(false));
      }
    }
  }
}

// What the format is for: one producer's sequences, close together, take
// about a byte each where an id takes 8.
TEST(MergeLedger, OneProducersPartsTakeAboutAByteEach) {
  std::vector<LedgerPart> parts;
  std::vector<uint64_t> sorted_ids;
  for (uint64_t s = 1'000'000; s < 1'000'000 + 200 * 37; s += 37) {
    parts.push_back(Paired(0x1234'5678'9abc'def0, s));
    sorted_ids.push_back(parts.back().id.value());
  }
  const std::string value = EncodeLedger(parts);
  EXPECT_LE(value.size(), 1 + 8 + 2 + 3 + 199u) << "a count, the producer, n, the first, a byte a gap";
  EXPECT_LT(value.size() * 7, sorted_ids.size() * 8);
}

// The check with the chunk's own pair answers as the check by id: a pair
// that does not make the id (a chunk split at ingest keeps its original's
// producer and sequence) is not used.
TEST(MergeLedger, ACheckByTheChunksPairAnswersAsTheCheckById) {
  const LedgerPart split{ChunkIdOf(ChunkIdOf(7, 3).value() ^ 4, 2), true, 7, 3};
  const std::string value = EncodeLedger(std::vector<LedgerPart>{Paired(7, 1), Paired(7, 2), split, Paired(9, 40)});
  using Pair = std::pair<uint64_t, uint64_t>;
  for (const auto& [id, pair, held] : std::vector<std::tuple<ChunkId, Pair, bool>>{
           {ChunkIdOf(7, 2), {7, 2}, true},
           {ChunkIdOf(9, 40), {9, 40}, true},
           {ChunkIdOf(7, 3), {7, 3}, false},  // the split chunk's original: not merged
           {split.id, {7, 3}, true},          // the split part: by its id
           {ChunkIdOf(9, 41), {9, 41}, false},
           {ChunkIdOf(7, 2), {9, 40}, true},  // a pair that is not the id's: the id decides
       }) {
    EXPECT_EQ(LedgerHolds(2, value, id, pair), std::optional<bool>(held)) << pair.first << "," << pair.second;
    EXPECT_EQ(LedgerHolds(2, value, id), std::optional<bool>(held)) << pair.first << "," << pair.second;
  }
}

TEST(MergeLedger, APairThatDoesNotMakeItsIdKeepsTheId) {
  const LedgerPart wrong{ChunkId(42), true, 7, 8};  // ChunkIdOf(7, 8) is not 42
  const std::string value = EncodeLedger(std::vector<LedgerPart>{wrong, Paired(7, 9)});
  EXPECT_EQ(LedgerHolds(2, value, ChunkId(42)), std::optional<bool>(true));
  EXPECT_EQ(LedgerHolds(2, value, ChunkIdOf(7, 8)), std::optional<bool>(false));
  EXPECT_EQ(LedgerHolds(2, value, ChunkIdOf(7, 9)), std::optional<bool>(true));
  EXPECT_EQ(LedgerHolds(2, EncodeLedger({}), ChunkId(42)), std::optional<bool>(false)) << "an empty ledger";
}

TEST(MergeLedger, TheFormerFormatIsReadAsBefore) {
  std::string value;
  for (uint64_t id : {3u, 9u, 27u, 81u}) AppendBigEndian64(value, id);
  for (uint64_t id : {3u, 9u, 27u, 81u}) EXPECT_EQ(LedgerHolds(1, value, ChunkId(id)), std::optional<bool>(true));
  for (uint64_t id : {0u, 4u, 80u, 82u}) EXPECT_EQ(LedgerHolds(1, value, ChunkId(id)), std::optional<bool>(false));
  EXPECT_FALSE(LedgerHolds(1, value + "x", ChunkId(3)).has_value()) << "not whole ids";
  EXPECT_FALSE(LedgerHolds(3, value, ChunkId(3)).has_value()) << "a format this build does not know";
  EXPECT_FALSE(LedgerHolds(0, value, ChunkId(3)).has_value());
}

TEST(MergeLedger, AValueNoFormatAllowsIsRefusedWhateverItHolds) {
  const ChunkId id = ChunkIdOf(5, 10);
  auto refused = [&](const std::string& value) { return !LedgerHolds(2, value, id).has_value(); };
  auto run = [](uint64_t producer, std::initializer_list<uint64_t> varints) {
    std::string s;
    AppendBigEndian64(s, producer);
    for (uint64_t v : varints) AppendVarint(s, v);
    return s;
  };
  const std::string none(1, '\0');  // no bare ids
  EXPECT_FALSE(refused(none + run(5, {2, 9, 1}))) << "(5, 9), (5, 10)";
  EXPECT_EQ(LedgerHolds(2, none + run(5, {2, 9, 1}), id), std::optional<bool>(true));
  EXPECT_TRUE(refused(none + run(5, {0, 10}))) << "a run of no sequences";
  EXPECT_TRUE(refused(none + run(5, {2, 10, 0}))) << "a gap of 0: a sequence twice";
  EXPECT_TRUE(refused(none + run(5, {2, UINT64_MAX, 1}))) << "past the last sequence";
  EXPECT_TRUE(refused(none + run(5, {3, 9, 1}))) << "fewer sequences than counted";
  EXPECT_TRUE(refused(none + run(5, {1, 10}) + run(5, {1, 11}))) << "a producer twice";
  EXPECT_TRUE(refused(none + run(6, {1, 10}) + run(5, {1, 10}))) << "producers out of order";
  EXPECT_TRUE(refused(none + run(5, {1, 10}) + "\x01\x02")) << "bytes after the last run";
  EXPECT_TRUE(refused(std::string("\x02", 1) + std::string(8, '\x01'))) << "fewer bare ids than counted";
  std::string descending("\x02", 1);
  AppendBigEndian64(descending, 9);
  AppendBigEndian64(descending, 3);
  EXPECT_TRUE(refused(descending));
  EXPECT_TRUE(refused(none + run(5, {1}) + std::string(10, '\xff') + "\x01")) << "a varint past 64 bits";
  EXPECT_TRUE(refused("")) << "not even the count";

  // Whatever bytes: an answer or a refusal, nothing read past the end (ASan).
  std::mt19937_64 rng(9);
  const std::string valid = EncodeLedger(std::vector<LedgerPart>{Paired(5, 10), Paired(5, 12), Paired(77, 1),
                                                                 LedgerPart{ChunkId(3), false, 0, 0}});
  for (size_t cut = 0; cut < valid.size(); ++cut) (void)LedgerHolds(2, valid.substr(0, cut), id);
  for (int i = 0; i < 20'000; ++i) {
    std::string junk(rng() % 40, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 == 0 ? rng() % 3 : rng());
    (void)LedgerHolds(2, junk, id);
    (void)LedgerHolds(1, junk, id);
  }
}

}  // namespace
}  // namespace logdex
