// The main job (`kvtier demo`, what `make demo` runs): an in-process
// multi-turn chat workload. Several conversations share a long system prompt
// (English prose, tokenized by the model's own tokenizer; `make demo` uses a
// model carrying a real vocabulary and chat template, and then every prompt is
// the template's rendering of the conversation, through ChatPrompts as the
// server does); every turn appends a user message and the model's
// answer to its history. The same prompts run through a Runtime with the
// tiered cache (device pool and host tier sized so older conversations fall
// to disk) and through one without any cache; per turn and in total it
// reports TTFT both ways, hit tokens by tier, bytes loaded per tier, the
// planner's decisions, and whether the outputs are identical.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace kvtier {

struct DemoOptions {
  std::string model = "small";
  std::string device = "cpu";  // RuntimeOptions::device: cpu | cuda
  uint32_t conversations = 8;
  uint32_t turns = 4;
  uint32_t system_tokens = 512;
  uint32_t user_tokens = 192;
  uint32_t answer_tokens = 8;
  DType kv_dtype = DType::kF16;
  size_t device_bytes = size_t(14) << 20;  // small/f16: 112 pages: the longest conversation and a little more
  size_t host_bytes = size_t(12) << 20;    // 96 pages: older conversations fall through to disk
  size_t disk_bytes = size_t(1) << 30;
  std::string disk_dir = "kvtier-demo-cache";  // emptied at start
  uint64_t seed = 1;

  Status validate() const;
};

struct DemoTurn {
  uint32_t conversation = 0, turn = 0;
  uint32_t prompt_tokens = 0;
  uint32_t cached_by_tier[kNumTiers] = {};
  double ttft_cache_s = 0, ttft_nocache_s = 0;
  bool same_output = false;
};

struct DemoResult {
  std::vector<DemoTurn> turns;
  double ttft_cache_s = 0, ttft_nocache_s = 0;  // sums
  uint64_t prompt_tokens = 0;
  uint64_t cached_by_tier[kNumTiers] = {};
  uint64_t bytes_loaded_by_tier[kNumTiers] = {};
  uint64_t plan_in_place = 0, plan_load = 0, plan_recompute = 0;  // pages
  uint64_t text_bytes = 0, text_tokens = 0;  // the system prompt and user turns, as text and as tokens
  bool all_same = true;
  double speedup() const { return ttft_cache_s > 0 ? ttft_nocache_s / ttft_cache_s : 0; }
};

// Runs the workload; writes one line per turn to `out` as it goes and a
// progress bar to `progress` (may be null).
Result<DemoResult> run_demo(const DemoOptions& options, std::FILE* out, std::FILE* progress);
// The closing summary: totals and the final speed-up line.
std::string demo_summary(const DemoResult& r);

}  // namespace kvtier
