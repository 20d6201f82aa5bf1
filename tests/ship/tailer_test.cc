#include "ship/tailer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace logdex::ship {
namespace {

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << text;
}

// Reads everything available now.
std::vector<std::string> Drain(FileTailer& t) {
  std::vector<std::string> lines;
  for (;;) {
    auto n = t.Read([&](std::string_view l) {
      lines.emplace_back(l);
      return Status::Ok();
    });
    EXPECT_TRUE(n.ok()) << n.error().ToString();
    if (!n.ok() || *n == 0) break;
  }
  return lines;
}

using Lines = std::vector<std::string>;

TEST(FileTailer, ReadsAWholeFileIncludingAnUnterminatedLastLine) {
  TempDir dir;
  const std::string f = dir.path() + "/a.log";
  Append(f, "one\r\ntwo\nthree");
  FileTailer t(f, TailerOptions{});
  EXPECT_EQ(Drain(t), (Lines{"one\r", "two", "three"}));  // the parser drops the '\r'
  EXPECT_TRUE(t.done());
}

TEST(FileTailer, FollowSurvivesRotationByRenameAndANewFile) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "a1\na2\n");
  TailerOptions o;
  o.follow = true;
  FileTailer t(f, o);
  EXPECT_EQ(Drain(t), (Lines{"a1", "a2"}));
  Append(f, "a3\na4");  // a4 is not complete yet: it waits
  EXPECT_EQ(Drain(t), (Lines{"a3"}));
  std::filesystem::rename(f, f + ".1");
  Append(f + ".1", "-end\na5\n");  // the writer still has the old file open
  EXPECT_EQ(Drain(t), (Lines{"a4-end", "a5"}));  // renamed, no new file yet: keep reading the old one
  Append(f, "b1\nb2\n");
  EXPECT_EQ(Drain(t), (Lines{"b1", "b2"}));
  EXPECT_EQ(t.stats().rotations, 1u);
  Append(f, "b3\n");
  EXPECT_EQ(Drain(t), (Lines{"b3"}));
}

TEST(FileTailer, FollowSurvivesTruncation) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "x1 long line\nx2 long line\n");
  TailerOptions o;
  o.follow = true;
  FileTailer t(f, o);
  EXPECT_EQ(Drain(t), (Lines{"x1 long line", "x2 long line"}));
  std::filesystem::resize_file(f, 0);
  Append(f, "y1\n");
  EXPECT_EQ(Drain(t), (Lines{"y1"}));
  EXPECT_EQ(t.stats().truncations, 1u);
  EXPECT_EQ(t.position().offset, 3u);
}

TEST(FileTailer, FollowNoticesACopyTruncateThatWroteMoreThanBefore) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "2026-11-29 00:00:01 first\n");
  TailerOptions o;
  o.follow = true;
  FileTailer t(f, o);
  EXPECT_EQ(Drain(t), (Lines{"2026-11-29 00:00:01 first"}));
  // Truncated, then more written than was there before the tailer looks again.
  std::filesystem::resize_file(f, 0);
  Append(f, "2026-11-29 00:00:09 second, longer than the first line\n");
  EXPECT_EQ(Drain(t), (Lines{"2026-11-29 00:00:09 second, longer than the first line"}));
  EXPECT_EQ(t.stats().truncations, 1u);
}

TEST(FileTailer, ResumeNoticesAFileRewrittenInPlaceWhileStopped) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "old 1\nold 2\n");
  TailerOptions o;
  o.follow = true;
  FilePosition pos;
  {
    FileTailer t(f, o);
    Drain(t);
    pos = t.position();
    EXPECT_EQ(pos.fingerprint_len, 12u);
  }
  std::filesystem::resize_file(f, 0);
  Append(f, "new 1\nnew 2\nnew 3\n");  // same inode, longer than the checkpoint offset
  FileTailer t(f, o, pos);
  EXPECT_EQ(Drain(t), (Lines{"new 1", "new 2", "new 3"}));
}

TEST(FileTailer, ResumesFromACheckpointWithNoLossAndNoDuplication) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "l1\nl2\nl3\n");
  TailerOptions o;
  o.follow = true;
  CheckpointStore store(dir.path() + "/state");
  {
    FileTailer t(f, o);
    EXPECT_EQ(Drain(t), (Lines{"l1", "l2", "l3"}));
    store.Set(f, t.position());
    ASSERT_TRUE(store.Save().ok());
  }
  Append(f, "l4\nl5\n");
  CheckpointStore loaded(dir.path() + "/state");
  ASSERT_TRUE(loaded.Load().ok());
  ASSERT_TRUE(loaded.Get(f).has_value());
  FileTailer t(f, o, loaded.Get(f));
  EXPECT_EQ(Drain(t), (Lines{"l4", "l5"}));
}

TEST(FileTailer, ResumeFindsAFileRotatedWhileStopped) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "l1\nl2\n");
  TailerOptions o;
  o.follow = true;
  FilePosition pos;
  {
    FileTailer t(f, o);
    EXPECT_EQ(Drain(t), (Lines{"l1", "l2"}));
    pos = t.position();
  }
  Append(f, "l3\n");
  std::filesystem::rename(f, f + ".1");
  Append(f, "n1\n");
  FileTailer t(f, o, pos);
  EXPECT_EQ(Drain(t), (Lines{"l3", "n1"}));
}

TEST(FileTailer, ResumeAfterTruncationWhileStoppedStartsOver) {
  TempDir dir;
  const std::string f = dir.path() + "/app.log";
  Append(f, "long line one\nlong line two\n");
  TailerOptions o;
  o.follow = true;
  FilePosition pos;
  {
    FileTailer t(f, o);
    Drain(t);
    pos = t.position();
  }
  std::filesystem::resize_file(f, 0);
  Append(f, "new\n");
  FileTailer t(f, o, pos);
  EXPECT_EQ(Drain(t), (Lines{"new"}));
}

TEST(FileTailer, CutsOverlongLines) {
  TempDir dir;
  const std::string f = dir.path() + "/a.log";
  Append(f, "abcdefghij\nxy\n");
  TailerOptions o;
  o.max_line_bytes = 4;
  FileTailer t(f, o);
  EXPECT_EQ(Drain(t), (Lines{"abcd", "efgh", "ij", "xy"}));
}

TEST(FileTailer, AMissingFileIsAnErrorUnlessFollowing) {
  TempDir dir;
  FileTailer t(dir.path() + "/nope.log", TailerOptions{});
  auto r = t.Read([](std::string_view) { return Status::Ok(); });
  EXPECT_FALSE(r.ok());
  TailerOptions o;
  o.follow = true;
  FileTailer f(dir.path() + "/later.log", o);
  EXPECT_TRUE(Drain(f).empty());
  Append(dir.path() + "/later.log", "here\n");
  EXPECT_EQ(Drain(f), (Lines{"here"}));
}

}  // namespace
}  // namespace logdex::ship
