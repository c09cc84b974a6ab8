// The engine benchmark behind `kvtier bench engine`: prefill throughput and
// achieved FLOP rate per prompt length, the share of prefill time spent in
// attention, decode throughput, and the FLOP rate of one large cblas_sgemm
// measured in the same run (the machine's floor for the ratio); the resident
// and weight bytes, the decode ceiling that memory bandwidth allows (memcpy
// bytes/s measured in the same run ÷ weight bytes read per decoded token), and
// the GB/s of the quantized matrix–vector kernel per weight type.
// Runs on the calling thread plus the engine's workers.
#pragma once

#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::engine {

struct EngineBenchOptions {
  std::string model = "small";  // a preset name, or a path to a .gguf file
  std::string text;             // prompt text (bench/prompt_text.h); empty: the default for the model
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

// One weight type's matrix–vector product on the model's largest matrix of that type.
struct KernelBenchRow {
  std::string type;  // "q4_K", ...
  std::string op;    // "gemv" (one token: decode), "gemm" (kGemmTokens tokens: prefill)
  std::string isa;   // the kernel set: "avx2", "avxvnni", "avx512vnni"; "blas" for F32
  std::string layout;  // the weights as the set wants them: "rows" (the file's) or a packing
  double gbps = 0;   // weight bytes streamed per second (median of runs)
  double gmacs = 0;  // multiply-adds per second / 1e9 (tokens × rows × columns)
};

struct EngineBenchReport {
  std::string model;
  std::string text;  // where the prompts came from
  std::string kv_dtype;
  std::string isa;  // the quantized kernel set the engine ran (qdot::best())
  uint32_t threads = 0;
  double sgemm_peak_gflops = 0;
  uint64_t rss_bytes = 0;     // resident set after loading and running the prompts (VmRSS), before the sgemm,
                              // memcpy and kernel measurements allocate their buffers
  uint64_t baseline_rss_bytes = 0;  // before the model loaded: the program and its libraries (CUDA's, when linked)
  uint64_t weight_bytes = 0;  // the weights as held in memory
  uint64_t decode_weight_bytes = 0;  // weight bytes one decoded token reads (every matrix but the embedding)
  double memcpy_gbps = 0;            // memcpy over `threads` threads, median
  double decode_ceiling_tokens_per_s = 0;  // memcpy_gbps / decode_weight_bytes
  std::vector<KernelBenchRow> kernels;
  std::vector<EngineBenchRow> rows;
};

Result<EngineBenchReport> run_engine_bench(const EngineBenchOptions& options);

// Bytes/s of memcpy between two buffers much larger than the caches, split over `threads`
// threads (median of runs).
double measure_memcpy_gbps(uint32_t threads);
// Resident set size of this process (VmRSS), 0 when unknown.
uint64_t resident_bytes();

// GFLOP/s of the best of a few M=N=K=`n` cblas_sgemm calls.
// OpenBLAS runs it on `threads` threads (0: all cores); its own setting is restored after.
double measure_sgemm_gflops(uint32_t n = 2048, uint32_t threads = 0);

}  // namespace kvtier::engine
