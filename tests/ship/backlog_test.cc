#include "ship/backlog.h"

#include <gtest/gtest.h>

namespace logdex::ship {
namespace {

OutgoingChunk C(uint64_t seq, size_t bytes = 10) {
  OutgoingChunk c;
  c.sequence = seq;
  c.value = std::string(bytes, 'v');
  c.records = 1;
  return c;
}

TEST(Backlog, GivesTheNewestFirst) {
  Backlog b(0, 0);
  for (uint64_t s : {3, 1, 2, 5, 4}) EXPECT_TRUE(b.Push(C(s)).empty());
  std::vector<uint64_t> order;
  while (auto c = b.PopNewest()) order.push_back(c->sequence);
  EXPECT_EQ(order, (std::vector<uint64_t>{5, 4, 3, 2, 1}));
}

TEST(Backlog, DropsTheOldestOverTheChunkBound) {
  Backlog b(0, 3);
  for (uint64_t s = 1; s <= 3; ++s) EXPECT_TRUE(b.Push(C(s)).empty());
  auto dropped = b.Push(C(4));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].sequence, 1u);
  // A chunk older than everything (a failed delivery coming back) is the one dropped.
  dropped = b.Push(C(0));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].sequence, 0u);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b.lowest_sequence(), 2u);
}

TEST(Backlog, DropsTheOldestOverTheByteBound) {
  Backlog b(100, 0);
  EXPECT_TRUE(b.Push(C(1, 40)).empty());
  EXPECT_TRUE(b.Push(C(2, 40)).empty());
  auto dropped = b.Push(C(3, 40));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].sequence, 1u);
  EXPECT_EQ(b.bytes(), 80u);
}

}  // namespace
}  // namespace logdex::ship
