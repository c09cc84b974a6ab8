#include "sim/mooncake_trace.h"
#include "sim/kvtier_trace.h"

#include <gtest/gtest.h>

#include <set>

namespace kvtier {
namespace {

Result<ReplayTrace> parse_mooncake_trace(std::string_view text) { return parse_replay_trace(text, TraceReadOptions{}); }

TEST(MooncakeTrace, ParsesRequests) {
  auto t = parse_mooncake_trace(
      "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 6, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 12.5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->requests[0].input_length, 700u);
  EXPECT_EQ(t->requests[0].output_length, 6u);
  EXPECT_EQ(t->ids(t->requests[0]).size(), 2u);
  EXPECT_EQ(t->ids(t->requests[0])[1], 1u);
  EXPECT_DOUBLE_EQ(t->requests[1].timestamp_ms, 12.5);
  std::vector<TokenId> a, b;
  ASSERT_TRUE(expand_request(*t, t->requests[0], a).ok());
  ASSERT_TRUE(expand_request(*t, t->requests[1], b).ok());
  ASSERT_EQ(a.size(), 700u);
  ASSERT_EQ(b.size(), 10u);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));  // same id, same tokens
  ReplayRequest beyond = t->requests[0];
  beyond.input_length = 1025;  // more than its two ids of 512
  EXPECT_FALSE(expand_request(*t, beyond, a).ok());
}

TEST(MooncakeTrace, ReportsMalformedLinesWithTheirNumber) {
  const char* bad[] = {
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\nnot json\n",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n{\"timestamp\": 0}\n",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 0, \"input_length\": -1, \"output_length\": 1, \"hash_ids\": [0]}\n",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"x\"]}\n",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [0, 1]}\n",
      "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n[1, 2]\n",
  };
  for (const char* text : bad) {
    auto t = parse_mooncake_trace(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().to_string();
  }
  EXPECT_EQ(read_replay_trace("/nonexistent/trace.jsonl", {}).status().code(), StatusCode::kNotFound);
  // A request past 2^24 tokens is refused by its line: a replay holds each request's tokens, and
  // input_length 2^32-1 aborted with bad_alloc.
  std::string ids = "0";
  for (int i = 0; i < 32768; ++i) ids += ",0";
  auto huge = parse_mooncake_trace("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
                                   "{\"timestamp\": 0, \"input_length\": 16777217, \"output_length\": 1, \"hash_ids\": [" +
                                   ids + "]}\n");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("line 2"), std::string::npos) << huge.status().to_string();
  EXPECT_NE(huge.status().message().find("2^24"), std::string::npos) << huge.status().to_string();
}

TEST(MooncakeTrace, ExpansionIsDeterministicAndCollisionFree) {
  std::vector<TokenId> a(512), b(512);
  expand_block(7, a);
  expand_block(7, b);
  EXPECT_EQ(a, b);
  // Ids far apart, including ones above 128,000 and near 2^31, never share a first token.
  std::set<TokenId> firsts;
  std::vector<TokenId> blk(512);
  const uint64_t ids[] = {0, 1, 2, 128000, 128000 + 512, 131072, 1u << 20, (1u << 20) + 256, (1ull << 31) - 1};
  for (uint64_t id : ids) {
    expand_block(id, blk);
    EXPECT_TRUE(firsts.insert(blk[0]).second) << id;
    for (TokenId tok : blk) ASSERT_GE(tok, 0);
  }
  for (uint64_t id = 0; id < 200000; ++id) {
    expand_block(id, std::span<TokenId>(blk.data(), 1));
    firsts.insert(blk[0]);
  }
  EXPECT_GE(firsts.size(), 200000u);
  ReplayTrace t;
  t.hash_ids = {1ull << 40};
  ReplayRequest r;
  r.input_length = 10;
  r.count = 1;
  std::vector<TokenId> out;
  EXPECT_FALSE(expand_request(t, r, out).ok());  // beyond the collision-free range
}

}  // namespace
}  // namespace kvtier
