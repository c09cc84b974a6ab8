// The engine benchmark behind `kvtier bench engine`: prefill throughput and
// achieved FLOP rate per prompt length, the share of prefill time spent in
// attention, decode throughput, and the FLOP rate of one large cblas_sgemm
// measured in the same run (the machine's floor for the ratio).
// Runs on the calling thread plus the engine's workers.
#pragma once

#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::engine {

struct EngineBenchOptions {
  std::string model = "small";  // a preset name, or a path to a .gguf file
  std::vector<uint32_t> prompts = {512, 2048};
  uint32_t decode_tokens = 32;
  DType kv_dtype = DType::kF16;
  uint32_t threads = 0;  // 0: hardware concurrency
  uint32_t repeats = 3;  // prefill runs per prompt; the median is reported
  uint64_t seed = 1;

  Status validate() const;
};

struct EngineBenchRow {
  uint32_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double prefill_tokens_per_s = 0;
  double prefill_gflops = 0;
  double attention_share = 0;
  double decode_tokens_per_s = 0;
  double decode_attention_share = 0;
  double ratio_to_sgemm = 0;  // prefill_gflops / sgemm_peak_gflops
};

struct EngineBenchReport {
  std::string model;
  std::string kv_dtype;
  uint32_t threads = 0;
  double sgemm_peak_gflops = 0;
  std::vector<EngineBenchRow> rows;
};

Result<EngineBenchReport> run_engine_bench(const EngineBenchOptions& options);

// GFLOP/s of the best of a few M=N=K=`n` cblas_sgemm calls.
// OpenBLAS runs it on `threads` threads (0: all cores); its own setting is restored after.
double measure_sgemm_gflops(uint32_t n = 2048, uint32_t threads = 0);

}  // namespace kvtier::engine
