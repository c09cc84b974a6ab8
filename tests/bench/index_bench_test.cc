// The index benchmark's correctness figures on the shared Mooncake trace
// (issue 2): token hit ratio 0.651 ± 0.005 without a capacity limit, and
// between 0.30 and 0.34 with 3,000,000 tokens of capacity under LRU.
// Only ratios are asserted, never speed.
#include "index_bench.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "sim/kvtier_trace.h"
#include "test_data.h"

namespace kvtier {
namespace {

class IndexBenchOnSharedTrace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = read_replay_trace(testdata::mooncake_trace_path(), TraceReadOptions{});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    trace_ = new ReplayTrace(std::move(t).value());
  }
  static void TearDownTestSuite() {
    delete trace_;
    trace_ = nullptr;
  }
  static IndexBenchReport run(uint64_t capacity) {
    EXPECT_NE(trace_, nullptr) << "the shared trace did not load";
    if (trace_ == nullptr) return IndexBenchReport{};
    IndexBenchOptions o;
    o.capacity_tokens = capacity;
    PromptSource src;
    src.count = trace_->requests.size();
    src.fill = [](size_t i, std::vector<TokenId>& out) { return expand_request(*trace_, trace_->requests[i], out); };
    auto r = run_index_bench(o, src);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value() : IndexBenchReport{};
  }
  static ReplayTrace* trace_;
};
ReplayTrace* IndexBenchOnSharedTrace::trace_ = nullptr;

TEST_F(IndexBenchOnSharedTrace, UnlimitedCapacityHitRatio) {
  const IndexBenchReport r = run(0);
  EXPECT_EQ(r.requests, 3993u);
  EXPECT_NEAR(r.token_hit_ratio, 0.651, 0.005);
  EXPECT_EQ(r.evicted_pages, 0u);
  EXPECT_LT(r.bytes_per_cached_token, 8.0);
}

TEST_F(IndexBenchOnSharedTrace, LruCapacityHitRatio) {
  const IndexBenchReport r = run(3000000);
  EXPECT_GE(r.token_hit_ratio, 0.30);
  EXPECT_LE(r.token_hit_ratio, 0.34);
  EXPECT_LE(r.cached_tokens, 3000000u);
  EXPECT_GT(r.evicted_pages, 0u);
}

TEST(IndexBench, RejectsBadOptions) {
  IndexBenchOptions o;
  o.page_tokens = 0;
  EXPECT_FALSE(run_index_bench(o, PromptSource{}).ok());
  o.page_tokens = 16;
  o.capacity_tokens = 3;
  EXPECT_FALSE(run_index_bench(o, PromptSource{}).ok());
}

}  // namespace
}  // namespace kvtier
