// The cost model of DESIGN §6: how long it takes to recompute a run of
// tokens, and how long it takes to load its KV from a tier.
//
// A CostProfile holds measured machine figures (compute rates, and a latency
// and bandwidth per tier link); a ModelCost holds the model's per-token work.
// Both are plain values: build them, validate() them, share them freely.
// Profiles are written by `kvtier calibrate` as JSON (to_json/from_json).
#pragma once

#include <array>
#include <string>

#include "kvtier/types.h"

namespace kvtier {

struct TierLink {
  double latency_s = 0;      // fixed cost of one load from the tier (first byte)
  double bytes_per_s = 0;    // sustained bandwidth into device memory; 0 = tier absent
  bool present() const { return bytes_per_s > 0; }
};

struct CostProfile {
  double gemm_flops_per_s = 0;  // dense projection/MLP rate during prefill
  double attn_flops_per_s = 0;  // attention rate (scores + weighted sum)
  // Indexed by TierKind. Device is "in place": latency 0, infinite bandwidth.
  std::array<TierLink, kNumTiers> links{};
  std::string source;  // "calibrated <date>", "built-in", "preset h100" ...

  Status validate() const;
  const TierLink& link(TierKind t) const { return links[static_cast<size_t>(t)]; }
  TierLink& link(TierKind t) { return links[static_cast<size_t>(t)]; }

  std::string to_json() const;
  static Result<CostProfile> from_json(const std::string& text);
  static Result<CostProfile> load(const std::string& path);
  Status save(const std::string& path) const;
};

// How a tier stores KV (its chunk codec, tiers/kv_codec.h): bytes crossing
// the link per raw KV byte, and how fast the loading side turns them back
// into raw KV (0: no decode step).
struct TierEncoding {
  double stored_fraction = 1.0;
  double decode_bytes_per_s = 0;  // raw bytes out per second
};

struct ModelCost {
  double dense_flops_per_token = 0;  // ≈ 2 × (non-embedding parameters)
  double attn_flops_per_pair = 0;    // per (query, key) pair across all layers: 4 × n_heads × head_dim × layers
  uint32_t num_layers = 1;
  size_t kv_bytes_per_token = 0;     // KVGeometry::bytes_per_token()
  std::array<TierEncoding, kNumTiers> encoding{};  // by TierKind: raw everywhere unless a tier has a codec

  Status validate() const;
};

// Time to compute `n` new tokens that follow `context` tokens already in place
// (causal attention: each new token attends to the context and to the new
// tokens before it).
double recompute_seconds(const CostProfile& p, const ModelCost& m, size_t n, size_t context);

// Time to load the KV of `n` tokens from tier `t` in one aggregated transfer:
// its stored bytes over the link, plus decoding them (counted in full, as
// if decode did not overlap the I/O of later chunks: an upper bound).
double load_seconds(const CostProfile& p, const ModelCost& m, TierKind t, size_t n);

}  // namespace kvtier
