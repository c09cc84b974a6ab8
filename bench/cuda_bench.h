// The GPU benchmark behind `kvtier bench cuda`. Every figure is paired with
// its limit measured in the same run:
//  * host→device chunk loads (CopyEngine::load, layer-wise, into scattered
//    pool pages) vs one plain cudaMemcpy of the same bytes from pinned memory
//    (and, for reference, from pageable memory);
//  * device→host stores (CopyEngine::store) vs plain pinned cudaMemcpy;
//  * the gather kernel (pages → packed) vs a device-to-device cudaMemcpy;
//  * TTFT of a prefix loaded from pinned host chunks with layer-wise overlap
//    vs a full GPU recompute, and vs max(load alone, suffix compute alone).
// Needs a CUDA device (returns kUnavailable otherwise). Runs on the calling thread.
#pragma once

#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier::cuda {

struct CudaBenchOptions {
  std::string model = "1b";                  // preset whose KV geometry (and weights, for TTFT) are used
  DType kv_dtype = DType::kF16;
  size_t copy_bytes = size_t(256) << 20;    // bytes per bandwidth measurement
  uint32_t chunk_pages = 16;                 // pages per chunk (256 tokens at 16 tokens per page)
  std::vector<uint32_t> prefixes = {4096, 16384};  // TTFT prefix lengths; empty: skip TTFT
  uint32_t suffix = 64;                      // tokens computed after the prefix
  uint32_t repeats = 3;                      // the median is reported
  Status validate() const;
};

struct CopyFigure {
  std::string what;
  double gbps = 0;        // our path
  double limit_gbps = 0;  // the same-run limit
  std::string limit;      // what the limit is
  double ratio() const { return limit_gbps > 0 ? gbps / limit_gbps : 0; }
};

struct TtftFigure {
  uint32_t prefix = 0;
  double recompute_ms = 0;       // full prefill of prefix + suffix on the GPU
  double load_only_ms = 0;       // CopyEngine::load of the prefix alone
  double suffix_only_ms = 0;     // suffix prefill with the prefix already resident
  double load_overlap_ms = 0;    // load + suffix prefill waiting per layer
  double overlap_ratio() const { return load_overlap_ms / std::max(load_only_ms, suffix_only_ms); }
};

struct CudaBenchReport {
  std::string device;
  std::string model;
  std::string kv_dtype;
  size_t copy_bytes = 0;
  std::vector<CopyFigure> copies;
  std::vector<TtftFigure> ttft;
};

Result<CudaBenchReport> run_cuda_bench(const CudaBenchOptions& options);

}  // namespace kvtier::cuda
