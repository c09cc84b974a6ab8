#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../tiers/tier_test_util.h"
#include "tier_bench.h"
#include "transfer/transfer_engine.h"

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
  // The headline figures are the default load mode's, and in layer-major
  // mode the first layer is in place while the rest of the load is still in
  // flight (counted by the bench at the moment layer 0 was ready, not timed).
  const bool layer_default = TransferEngineOptions{}.load_mode == LoadMode::kLayerMajor;
  EXPECT_EQ(r->first_layer_ms, layer_default ? r->first_layer_ms_layer : r->first_layer_ms_whole);
  EXPECT_EQ(r->all_layers_ms, layer_default ? r->all_layers_ms_layer : r->all_layers_ms_whole);
  EXPECT_GT(r->first_layer_early_layer, 0u) << "layer-major loads published layer 0 only with the last layer";
  EXPECT_EQ(j["first_layer_early_layer_major"].get<uint32_t>(), r->first_layer_early_layer);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_FALSE(run_tier_bench(TierBenchOptions{}).ok());  // no dir
  o.read_threads = 0;
  EXPECT_EQ(run_tier_bench(o).status().code(), StatusCode::kInvalidArgument);
  o.read_threads = o.queue_depth + 1;  // each reader needs a queue entry
  EXPECT_EQ(run_tier_bench(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
