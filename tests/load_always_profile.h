// A cost profile under which loading always beats recomputing, for tests whose meaning is "served
// from a tier": what the tier holds decides, not how loaded the machine was when a runtime
// calibrated itself (a stalled calibration priced the links so low that the planner recomputed).
#pragma once

#include <fstream>
#include <string>

namespace kvtier::testing {

// Writes the profile into `dir` and returns its path (for --profile or RuntimeOptions::profile_path).
inline std::string write_load_always_profile(const std::string& dir) {
  const std::string path = dir + "/load-always-profile.json";
  std::ofstream(path) << R"({"format": "kvtier-cost-profile-v1", "source": "kvtier tests",
    "gemm_flops_per_s": 1e6, "attn_flops_per_s": 1e6,
    "tiers": {"host": {"latency_s": 0, "bytes_per_s": 1e12}, "disk": {"latency_s": 0, "bytes_per_s": 1e12},
              "remote": {"latency_s": 0, "bytes_per_s": 1e12}}})";
  return path;
}

}  // namespace kvtier::testing
