// The replay simulator's timing model: what a model costs per token and how
// fast a machine computes and moves KV, as the planner's ModelCost and
// CostProfile (src/planner/cost_model.h), plus the prefill queue that turns
// per-request prefill times into time to first token.
//
// Model presets: Llama-3-8B and Llama-3-70B (their published shapes) and the
// reference engine's presets (tiny, small, 1b); or a custom KVGeometry with
// FLOPs per token. Hardware presets describe a GPU and its links (see
// docs/REPLAY.md for every figure and why); a profile written by `kvtier
// calibrate` can be loaded instead (CostProfile::load).
//
// Everything here is a pure function or a plain value; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "planner/cost_model.h"

namespace kvtier {

struct ReplayModel {
  std::string name;
  KVGeometry geometry;  // page_tokens is the cache's page size
  ModelCost cost;
  double params = 0;  // parameter count (informational)
};

// "llama-3-8b", "llama-3-70b", "tiny", "small", "1b". The KV cache holds
// `kv_dtype` values in pages of `page_tokens` tokens.
Result<ReplayModel> replay_model_preset(std::string_view name, DType kv_dtype, uint32_t page_tokens);
std::vector<std::string> replay_model_names();

// Any model: a KV geometry and the dense FLOPs of one token. When
// attn_flops_per_pair is 0 it is estimated as 4·layers·(4·kv_heads)·head_dim
// (grouped-query attention with 4 query heads per KV head).
Result<ReplayModel> custom_replay_model(const KVGeometry& geometry, double dense_flops_per_token,
                                        double attn_flops_per_pair = 0);

// "h100-pcie5", "a100-pcie4". Device is in place; host, disk and remote
// links carry a latency and a bandwidth.
Result<CostProfile> hardware_preset(std::string_view name);
std::vector<std::string> hardware_preset_names();

// First-come first-served prefill on `workers` identical workers: request i
// arrives at arrival_s[i] (non-decreasing) and occupies a worker for
// service_s[i]. Returns each request's time to first token (waiting +
// service). Event-driven: O(n log workers).
std::vector<double> simulate_prefill_queue(std::span<const double> arrival_s, std::span<const double> service_s,
                                           uint32_t workers);

struct LatencySummary {
  double mean = 0, p50 = 0, p99 = 0;
};
// Nearest-rank percentiles; all zero for no samples.
LatencySummary summarize_latency(std::vector<double> samples);

}  // namespace kvtier
