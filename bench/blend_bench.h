// `kvtier bench blend`: non-prefix reuse on a RAG workload. A pool of
// documents is cached (each on its own); each request is a system prompt,
// `docs_per_request` documents drawn in random order, and a question. Per
// request, in one run on one warm engine: TTFT of a full prefill (no reuse),
// of prefix caching only (the system prompt hits), and of blending (forced,
// at the default ratio), and what the planner would have chosen. Then, on
// the first `quality_requests` requests, the quality of blending at each
// recompute ratio against the full prefill — KL(full ‖ blended) of the
// next-token distribution, top-1 agreement, greedy agreement over
// `greedy_tokens` tokens — by KV deviation and, as the baseline, at random.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::bench {

struct BlendBenchOptions {
  std::string model = "small";  // preset or .gguf
  std::string text;             // prompt text (prompt_text.h); empty: the default for the model
  uint32_t docs_pool = 50;
  uint32_t docs_per_request = 6;
  uint32_t doc_tokens = 512;
  uint32_t system_tokens = 128;
  uint32_t question_tokens = 64;
  uint32_t requests = 8;
  uint32_t quality_requests = 3;
  uint32_t greedy_tokens = 32;
  std::vector<float> ratios = {0.0f, 0.05f, 0.15f, 0.3f, 1.0f};
  float ratio = 0.15f;  // the TTFT runs
  uint32_t check_layer = 1;
  uint32_t threads = 0;
  uint64_t seed = 1;

  Status validate() const;
};

struct BlendQuality {
  float ratio = 0;
  bool random = false;
  double kl_mean = 0;         // nats, over the quality requests
  double top1 = 0;            // share of requests whose first token agrees
  double greedy = 0;          // share of the greedy tokens that agree, position by position
};

struct BlendBenchResult {
  std::string model;
  std::string text;  // where the prompts came from
  uint32_t prompt_tokens = 0;
  double ttft_full_ms = 0, ttft_prefix_ms = 0, ttft_blend_ms = 0;  // medians
  uint32_t planner_chose_blend = 0, blend_was_faster = 0, planner_right = 0;  // of `requests`
  uint32_t requests = 0;
  double warmup_s = 0;  // caching the document pool
  std::vector<BlendQuality> quality;

  std::string to_json() const;
  std::string to_table() const;
};

Result<BlendBenchResult> run_blend_bench(const BlendBenchOptions& options, std::FILE* progress);

}  // namespace kvtier::bench
