#include "client/loadgen.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

TEST(LoadgenTest, Percentiles) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({3, 1, 2}, 50), 2);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(percentile(v, 99), 99);
  EXPECT_EQ(percentile(v, 100), 100);
  EXPECT_EQ(percentile(v, 0), 1);
}

TEST(LoadgenTest, SseParserHandlesSplitsAndMultipleEvents) {
  std::vector<std::string> got;
  SseParser p([&](std::string_view d) { got.emplace_back(d); });
  p.feed("data: {\"a\":1}\n");
  p.feed("\ndata: x\n\n: comment\n\ndata:");
  p.feed(" [DONE]\n\n");
  EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "x", "[DONE]"}));
}

TEST(LoadgenTest, OptionsAreValidated) {
  LoadgenOptions o;
  EXPECT_TRUE(o.validate().ok());
  o.users = 0;
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.url = "ftp://x";
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.agent = o.prefetch = true;
  o.retain_s = 60;
  EXPECT_TRUE(o.validate().ok());
  o.chat = true;  // one workload at a time
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.prefetch = true;  // agent hints without agent sessions
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.agent = true;
  o.tools = 0;
  EXPECT_FALSE(o.validate().ok());
}

TEST(LoadgenTest, UnreachableServerIsAnError) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:1";
  EXPECT_FALSE(run_loadgen(o).ok());
}

}  // namespace
}  // namespace kvtier::server
