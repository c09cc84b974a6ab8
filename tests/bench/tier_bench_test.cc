#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../tiers/tier_test_util.h"
#include "tier_bench.h"
#include "ttft_bench.h"
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

// A directory that cannot be made is an error (it threw filesystem_error: an abort), and nothing is left.
TEST(TierBench, ADirectoryThatCannotBeMadeIsAnError) {
  testing_util::TempDir dir;
  const std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "x";
  TierBenchOptions o{.dir = file, .disk_bytes = size_t(64) << 20, .memory_bytes = size_t(16) << 20,
                     .load_bytes = size_t(16) << 20, .queue_depth = 8, .region_bytes = size_t(16) << 20};
  EXPECT_FALSE(run_tier_bench(o).ok());
}

// bench ttft works in a directory of its own inside the one it is given, and removes only that (it
// emptied the directory it was given: `--dir /tmp` would have). Lengths that do not fit are refused.
TEST(TtftBench, WorksInADirectoryOfItsOwn) {
  testing_util::TempDir dir;
  std::ofstream(dir.path() + "/keep.txt") << "mine";
  TtftBenchOptions o;
  o.model = "tiny";
  o.prefixes = {32};
  o.suffix = 16;
  o.threads = 1;
  o.dir = dir.path();
  auto r = run_ttft_bench(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/keep.txt"));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1u);  // its own directory is gone
  o.prefixes = {UINT32_MAX};  // prefix + suffix wrapped to a 15-token prompt: a crash
  EXPECT_EQ(run_ttft_bench(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.prefixes = {40000};  // past tiny's context of 32,768
  EXPECT_EQ(run_ttft_bench(o, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
