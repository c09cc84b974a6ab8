#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../tiers/tier_test_util.h"
#include "transfer/tier_bench.h"

namespace kvtier {
namespace {

TEST(TierBench, SmallRunReportsEveryFieldAndCleansUp) {
  testing_util::TempDir dir;
  TierBenchOptions o{.dir = dir.path(), .disk_bytes = size_t(64) << 20, .memory_bytes = size_t(16) << 20,
                     .load_bytes = size_t(16) << 20, .queue_depth = 8, .region_bytes = size_t(16) << 20};
  auto r = run_tier_bench(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto j = nlohmann::json::parse(r->to_json());
  for (const char* k : {"memcpy_gbps", "host_gather_gbps", "raw_write_gbps", "raw_read_gbps", "disk_write_gbps",
                        "disk_read_gbps", "per_page_read_gbps", "first_layer_ms", "all_layers_ms", "disk_write_vs_raw",
                        "disk_read_vs_raw", "aggregated_vs_per_page", "aggregated_vs_per_page_qd1"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  }
  EXPECT_LE(r->first_layer_ms, r->all_layers_ms);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_FALSE(run_tier_bench(TierBenchOptions{}).ok());  // no dir
  o.read_threads = 0;
  EXPECT_EQ(run_tier_bench(o).status().code(), StatusCode::kInvalidArgument);
  o.read_threads = o.queue_depth + 1;  // each reader needs a queue entry
  EXPECT_EQ(run_tier_bench(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
