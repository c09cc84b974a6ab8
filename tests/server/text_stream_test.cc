#include "server/text_stream.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

// Feeds `full` one character at a time and returns what was emitted.
std::string stream(const std::string& full, std::vector<std::string> stops, bool* stopped = nullptr) {
  CompletionText t(std::move(stops));
  std::string out;
  for (size_t i = 1; i <= full.size() && !t.stopped(); ++i) out += t.advance(std::string_view(full).substr(0, i));
  if (!t.stopped()) out += t.finish(full);
  if (stopped) *stopped = t.stopped();
  EXPECT_EQ(out, t.emitted());
  return out;
}

TEST(CompletionTextTest, NoStopsPassesEverythingThrough) { EXPECT_EQ(stream("hello world", {}), "hello world"); }

TEST(CompletionTextTest, CutsBeforeTheStopString) {
  bool stopped = false;
  EXPECT_EQ(stream("hello world", {"wor"}, &stopped), "hello ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream("abcabd", {"abd", "zz"}, &stopped), "abc");
  EXPECT_TRUE(stopped);
}

TEST(CompletionTextTest, EarliestOfSeveralStopsWins) {
  EXPECT_EQ(stream("one two three", {"three", "two"}), "one ");
}

TEST(CompletionTextTest, HoldsBackAPossibleStopPrefixThenReleasesIt) {
  CompletionText t({"xyz"});
  EXPECT_EQ(t.advance("abx"), "ab");   // "x" could start "xyz"
  EXPECT_EQ(t.advance("abxy"), "");
  EXPECT_EQ(t.advance("abxyq"), "xyq");  // it did not
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.finish("abxyqx"), "x");
}

TEST(CompletionTextTest, HoldsBackUnfinishedUtf8) {
  const std::string euro = "\xE2\x82\xAC";
  const std::string full = std::string("a").append(euro);
  CompletionText t({});
  EXPECT_EQ(t.advance(std::string_view(full).substr(0, 2)), "a");
  EXPECT_EQ(t.advance(std::string_view(full).substr(0, 3)), "");
  EXPECT_EQ(t.advance(full), euro);
  EXPECT_EQ(incomplete_utf8_tail("ok"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
}

}  // namespace
}  // namespace kvtier::server
