#include "sim/timing_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>

#include "model/model_config.h"
#include "model/model_cost.h"

namespace kvtier {

namespace {

// Published shapes of Meta's Llama 3 models (config.json of the HF releases).
engine::ModelConfig llama3(uint32_t hidden, uint32_t layers, uint32_t heads, uint32_t ffn, const char* name) {
  engine::ModelConfig c;
  c.name = name;
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.ffn_size = ffn;
  c.rope_theta = 500000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = false;
  c.max_context = 131072;
  return c;
}

Result<engine::ModelConfig> config_for(std::string_view name) {
  if (name == "llama-3-8b") return llama3(4096, 32, 32, 14336, "llama-3-8b");
  if (name == "llama-3-70b") return llama3(8192, 80, 64, 28672, "llama-3-70b");
  auto c = engine::model_preset(name);
  if (!c.ok())
    return Status::InvalidArgument("unknown model preset '" + std::string(name) +
                                   "' (expected llama-3-8b, llama-3-70b, tiny, small or 1b)");
  return c;
}

}  // namespace

Result<ReplayModel> replay_model_preset(std::string_view name, DType kv_dtype, uint32_t page_tokens) {
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig c, config_for(name));
  ReplayModel m;
  m.name = std::string(name);
  m.geometry = c.kv_geometry(kv_dtype, page_tokens);
  KVTIER_RETURN_IF_ERROR(m.geometry.validate());
  m.cost = model_cost(c, m.geometry);
  m.params = double(c.num_params());
  return m;
}

std::vector<std::string> replay_model_names() { return {"llama-3-8b", "llama-3-70b", "tiny", "small", "1b"}; }

Result<ReplayModel> custom_replay_model(const KVGeometry& g, double dense_flops_per_token, double attn_flops_per_pair) {
  KVTIER_RETURN_IF_ERROR(g.validate());
  ReplayModel m;
  m.name = "custom";
  m.geometry = g;
  m.cost.dense_flops_per_token = dense_flops_per_token;
  m.cost.attn_flops_per_pair =
      attn_flops_per_pair > 0 ? attn_flops_per_pair : 4.0 * g.num_layers * (4.0 * g.num_kv_heads) * g.head_dim;
  m.cost.num_layers = g.num_layers;
  m.cost.kv_bytes_per_token = g.bytes_per_token();
  KVTIER_RETURN_IF_ERROR(m.cost.validate());
  m.params = dense_flops_per_token / 2;
  return m;
}

Result<CostProfile> hardware_preset(std::string_view name) {
  // Figures and their sources are in docs/REPLAY.md ("Hardware presets").
  CostProfile p;
  p.link(TierKind::kDevice) = TierLink{0, std::numeric_limits<double>::infinity()};
  if (name == "h100-pcie5") {
    p.gemm_flops_per_s = 0.5 * 989e12;  // BF16 dense peak at 50% MFU
    p.attn_flops_per_s = 0.35 * 989e12;
    p.link(TierKind::kHost) = TierLink{10e-6, 50e9};     // PCIe 5.0 x16, pinned DMA
    p.link(TierKind::kDisk) = TierLink{100e-6, 12e9};    // 2 NVMe Gen4 drives striped
    p.link(TierKind::kRemote) = TierLink{500e-6, 10e9};  // 100 Gb/s network at ~80%
  } else if (name == "a100-pcie4") {
    p.gemm_flops_per_s = 0.5 * 312e12;
    p.attn_flops_per_s = 0.35 * 312e12;
    p.link(TierKind::kHost) = TierLink{10e-6, 25e9};    // PCIe 4.0 x16
    p.link(TierKind::kDisk) = TierLink{100e-6, 6e9};    // 1 NVMe Gen4 drive
    p.link(TierKind::kRemote) = TierLink{500e-6, 5e9};  // 50 Gb/s network at ~80%
  } else {
    return Status::InvalidArgument("unknown hardware preset '" + std::string(name) +
                                   "' (expected h100-pcie5 or a100-pcie4, or give --profile FILE)");
  }
  p.source = "preset " + std::string(name);
  KVTIER_RETURN_IF_ERROR(p.validate());
  return p;
}

std::vector<std::string> hardware_preset_names() { return {"h100-pcie5", "a100-pcie4"}; }

std::vector<double> simulate_prefill_queue(std::span<const double> arrival_s, std::span<const double> service_s,
                                           uint32_t workers) {
  std::vector<double> ttft(arrival_s.size());
  // Min-heap of the times at which each worker becomes free.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  // More workers than requests answer as that many (4e9 workers were a heap of 4e9 entries).
  const size_t n = std::clamp<size_t>(workers, 1, std::max<size_t>(arrival_s.size(), 1));
  for (size_t w = 0; w < n; ++w) free_at.push(0.0);
  for (size_t i = 0; i < arrival_s.size(); ++i) {
    const double start = std::max(arrival_s[i], free_at.top());
    free_at.pop();
    const double done = start + service_s[i];
    free_at.push(done);
    ttft[i] = done - arrival_s[i];
  }
  return ttft;
}

LatencySummary summarize_latency(std::vector<double> s) {
  LatencySummary r;
  if (s.empty()) return r;
  double sum = 0;
  for (double x : s) sum += x;
  r.mean = sum / double(s.size());
  auto rank = [&](double q) {
    const size_t k = std::min(s.size() - 1, static_cast<size_t>(std::ceil(q * double(s.size()))) - (q > 0 ? 1 : 0));
    std::nth_element(s.begin(), s.begin() + k, s.end());
    return s[k];
  };
  r.p50 = rank(0.50);
  r.p99 = rank(0.99);
  return r;
}

}  // namespace kvtier
