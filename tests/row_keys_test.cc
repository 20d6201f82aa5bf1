#include "common/row_keys.h"

#include <gtest/gtest.h>

#include <random>
#include <tuple>

namespace logdex {
namespace {

// Draws field values from a small range half of the time, so that pairs
// often tie on leading fields and the later fields decide the order.
class Gen {
 public:
  uint64_t U64() { return coin() ? rng_() % 4 : rng_(); }
  uint8_t U8() { return static_cast<uint8_t>(coin() ? rng_() % 3 : rng_()); }
  int64_t Ts() { return static_cast<int64_t>(coin() ? 1'700'000'000'000 + rng_() % 3 : rng_() >> 1); }
  Severity Sev() { return kAllSeverities[rng_() % kAllSeverities.size()]; }

 private:
  bool coin() { return rng_() & 1; }
  std::mt19937_64 rng_{20261129};
};

auto Fields(const MainKey& k) { return std::tuple(k.salt, k.app, k.severity, k.first_ts_ms, k.host, k.chunk); }
auto Fields(const LevelIndexKey& k) { return std::tuple(k.app, k.ts_ms, k.host, k.chunk); }
auto Fields(const HostIndexKey& k) { return std::tuple(k.host, k.app, k.ts_ms, k.severity, k.chunk); }
auto Fields(const TagIndexKey& k) { return std::tuple(k.tag, k.ts_ms, k.app, k.host, k.severity, k.chunk); }
auto Fields(const MetaKey& k) { return std::tuple(k.kind, k.id, k.app, k.severity); }
auto Fields(const OutboxKey& k) { return std::tuple(k.due_ms, k.alert_id); }

MainKey Make(Gen& g, MainKey*) { return {g.U8(), AppId(g.U64()), g.Sev(), g.Ts(), HostId(g.U64()), ChunkId(g.U64())}; }
LevelIndexKey Make(Gen& g, LevelIndexKey*) { return {AppId(g.U64()), g.Ts(), HostId(g.U64()), ChunkId(g.U64())}; }
HostIndexKey Make(Gen& g, HostIndexKey*) { return {HostId(g.U64()), AppId(g.U64()), g.Ts(), g.Sev(), ChunkId(g.U64())}; }
TagIndexKey Make(Gen& g, TagIndexKey*) { return {TagId(g.U64()), g.Ts(), AppId(g.U64()), HostId(g.U64()), g.Sev(), ChunkId(g.U64())}; }
MetaKey Make(Gen& g, MetaKey*) { return {MetaKind::kStream, g.U64(), g.U64(), g.Sev()}; }
OutboxKey Make(Gen& g, OutboxKey*) { return {g.Ts(), g.U64()}; }

template <class K>
class RowKeyOrder : public ::testing::Test {};
using KeyTypes = ::testing::Types<MainKey, LevelIndexKey, HostIndexKey, TagIndexKey, MetaKey, OutboxKey>;
TYPED_TEST_SUITE(RowKeyOrder, KeyTypes);

TYPED_TEST(RowKeyOrder, ByteOrderEqualsFieldOrderOver10000RandomPairs) {
  Gen g;
  int less = 0, equal = 0;
  for (int i = 0; i < 10000; ++i) {
    TypeParam a = Make(g, static_cast<TypeParam*>(nullptr));
    TypeParam b = Make(g, static_cast<TypeParam*>(nullptr));
    std::string ea = a.Encode(), eb = b.Encode();
    ASSERT_EQ(Fields(a) < Fields(b), ea < eb) << "pair " << i;
    ASSERT_EQ(Fields(a) == Fields(b), ea == eb) << "pair " << i;
    less += Fields(a) < Fields(b);
    equal += Fields(a) == Fields(b);
  }
  // The generator must exercise both outcomes, or the test proves little.
  EXPECT_GT(less, 1000);
  EXPECT_LT(less, 9000);
}

TYPED_TEST(RowKeyOrder, RoundTripsAndHasFixedWidth) {
  Gen g;
  for (int i = 0; i < 1000; ++i) {
    TypeParam k = Make(g, static_cast<TypeParam*>(nullptr));
    std::string e = k.Encode();
    auto back = TypeParam::Decode(e);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, k);
    EXPECT_FALSE(TypeParam::Decode(e.substr(0, e.size() - 1)).has_value());
    EXPECT_FALSE(TypeParam::Decode(e + "x").has_value());
  }
}

TEST(RowKeys, WidthsMatchTheDesign) {
  EXPECT_EQ(MainKey{}.Encode().size(), 34u);
  EXPECT_EQ(LevelIndexKey{}.Encode().size(), 32u);
  EXPECT_EQ(HostIndexKey{}.Encode().size(), 33u);
  EXPECT_EQ(TagIndexKey{}.Encode().size(), 41u);
  EXPECT_EQ((MetaKey{MetaKind::kAppName, 7, 0, Severity::kInfo}.Encode().size()), 9u);
  EXPECT_EQ(OutboxKey{}.Encode().size(), 16u);
}

// A ledger key names its value's format (indexer/merge_ledger.h): format 1,
// the first, has no byte for it; its keys and the others' sort together, so
// a scan between two format-1 bounds finds both.
TEST(RowKeys, MergedKeysNameTheirValuesFormat) {
  MergedKey k{HostId(1), AppId(2), Severity::kError, 1'700'000'000'000, ChunkId(3)};
  const std::string first = k.Encode();
  EXPECT_EQ(first.size(), 33u);
  EXPECT_EQ(MergedKey::Decode(first), k);
  k.format = 2;
  const std::string second = k.Encode();
  EXPECT_EQ(second.size(), 34u);
  EXPECT_EQ(second.substr(0, 33), first);
  EXPECT_EQ(MergedKey::Decode(second), k);
  EXPECT_FALSE(MergedKey::Decode(first + '\x01').has_value()) << "format 1 has no byte";
  EXPECT_FALSE(MergedKey::Decode(second + '\x02').has_value());
  EXPECT_FALSE(MergedKey::Decode(first.substr(0, 32)).has_value());
  MergedKey before = k, after = k;
  before.format = after.format = 1;
  before.chunk = ChunkId(2), after.chunk = ChunkId(4);
  EXPECT_LT(before.Encode(), second);
  EXPECT_LT(second, after.Encode());
}

TEST(RowKeys, RejectsBadSeverityByte) {
  std::string e = MainKey{}.Encode();
  e[9] = 31;  // severity byte
  EXPECT_FALSE(MainKey::Decode(e).has_value());
}

TEST(RowKeys, SaltSpreadsStreamsAndIsStable) {
  std::vector<int> per_bucket(16);
  for (int a = 0; a < 20; ++a) {
    for (int h = 0; h < 50; ++h) {
      uint8_t s = SaltOf(AppIdOf("app" + std::to_string(a)), HostIdOf("h" + std::to_string(h)), 16);
      ASSERT_LT(s, 16);
      ++per_bucket[s];
    }
  }
  for (int n : per_bucket) EXPECT_GT(n, 30);  // 1000 streams over 16 buckets: ~62 each
  EXPECT_EQ(SaltOf(AppIdOf("a"), HostIdOf("b"), 16), SaltOf(AppIdOf("a"), HostIdOf("b"), 16));
  EXPECT_NE(ChunkIdOf(1, 2), ChunkIdOf(2, 1));
  EXPECT_EQ(TagIdOf("k", "v"), TagId(Hash64("k=v")));
}

}  // namespace
}  // namespace logdex
