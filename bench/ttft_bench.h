// `kvtier bench ttft`: time to first token for a prompt whose prefix is
// cached on one tier (device, host, disk) plus a short new suffix, with
// layer-wise overlap on and off, against a full recompute (each figure the
// median of three requests on the same warm engine) and against the
// floor under perfect overlap: max(bytes to load / that tier's raw bandwidth,
// the suffix's compute time with the prefix in place), all measured in the
// same run. Single-threaded driver; uses files under `dir` and removes them.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "kvtier/types.h"

namespace kvtier {

struct TtftBenchOptions {
  std::string model = "small";
  std::string device = "cpu";  // cpu | cuda: where the pool and the engine live (RuntimeOptions::device)
  std::vector<uint32_t> prefixes = {1024, 4096, 16384};
  uint32_t suffix = 64;
  DType kv_dtype = DType::kF16;
  std::string dir = ".";  // the bench works in a directory of its own inside it, removed afterwards
  uint32_t threads = 0;

  Status validate() const;
};

struct TtftRow {
  TierKind tier = TierKind::kDevice;
  uint32_t prefix = 0;
  bool layerwise = true;
  double ttft_ms = 0, recompute_ms = 0, floor_ms = 0;
  double load_floor_ms = 0;  // bytes to load / the tier's raw bandwidth (0 on the device)
  double load_wait_ms = 0;   // of the median run: time compute was blocked waiting for loads
  uint32_t loaded_tokens = 0, recomputed_tokens = 0;  // what the planner chose for the cached prefix
};

struct TtftBenchResult {
  std::string model;
  std::string device;
  // The bandwidths behind floor_ms. memcpy_gbps is the host → pool copy: a
  // memcpy on the CPU, a pinned host → GPU copy with --device cuda.
  double memcpy_gbps = 0, raw_read_gbps = 0;
  std::vector<TtftRow> rows;

  std::string to_json() const;
  std::string to_table() const;
};

Result<TtftBenchResult> run_ttft_bench(const TtftBenchOptions& options, std::FILE* progress);

}  // namespace kvtier
