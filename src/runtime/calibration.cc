#include "runtime/calibration.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include "memory/device_memory.h"
#include "transfer/tier_bench.h"

namespace kvtier {

Status CalibrationOptions::validate() const {
  if (remote_bytes_per_s < 0 || remote_latency_s < 0)
    return Status::InvalidArgument("calibration: remote figures must be >= 0");
  return Status::Ok();
}

ModelCost model_cost(const engine::ModelConfig& c, const KVGeometry& g) {
  ModelCost m;
  m.dense_flops_per_token = c.layer_flops_per_token();
  m.attn_flops_per_pair = 4.0 * c.num_heads * c.head_dim * c.num_layers;
  m.num_layers = c.num_layers;
  m.kv_bytes_per_token = g.bytes_per_token();
  return m;
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Host DRAM → device pool copy rate: one large memcpy (the CPU device is DRAM).
double memcpy_bytes_per_s(size_t bytes) {
  auto a = DeviceMemory::allocate(bytes, {});
  auto b = DeviceMemory::allocate(bytes, {});
  if (!a.ok() || !b.ok()) return 1e9;
  std::memcpy((*b)->data(), (*a)->data(), bytes);  // touch
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy((*b)->data(), (*a)->data(), bytes);
    best = std::max(best, double(bytes) / seconds_since(t0));
  }
  return best;
}

}  // namespace

Result<CostProfile> calibrate(engine::Engine& engine, BlockPool& pool, const CalibrationOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const auto& cfg = engine.model().config();
  const ModelCost mc = model_cost(cfg, engine.geometry());
  // Enough tokens for a stable rate, few enough to stay quick on large models.
  const double budget = o.quick ? 4e10 : 4e11;
  uint32_t n = static_cast<uint32_t>(std::clamp(budget / mc.dense_flops_per_token, 64.0, o.quick ? 512.0 : 2048.0));
  n = std::min(n, cfg.max_context - 1);
  engine::SequenceKV seq;
  const uint32_t pages = engine.pages_for(n);
  if (pool.free_pages() < pages) n = std::max<uint32_t>(1, pool.free_pages()) * engine.geometry().page_tokens - 1;
  Status st = pool.allocate(engine.pages_for(n), seq.pages);
  if (!st.ok()) return Status::FailedPrecondition("calibration: device pool too small for a calibration prefill");
  std::mt19937 rng(42);
  std::vector<TokenId> toks(n);
  for (auto& t : toks) t = static_cast<TokenId>(rng() % cfg.vocab_size);

  // Warm-up, then a measured prefill; the engine splits attention time out.
  (void)engine.prefill(seq, std::span(toks).first(std::min<uint32_t>(n, 32)), 0);
  engine.reset_profile();
  seq.num_tokens = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto r = engine.prefill(seq, toks, 0);
  const double total = seconds_since(t0);
  const engine::EngineProfile prof = engine.profile();
  for (PageId p : seq.pages) pool.unref(p);
  if (!r.ok()) return r.status();

  CostProfile p;
  const double attn_flops = cfg.attention_flops(0, n);
  const double attn_s = std::max(prof.attention_seconds, 1e-6);
  const double dense_s = std::max(total - prof.attention_seconds, 1e-6);
  p.gemm_flops_per_s = mc.dense_flops_per_token * n / dense_s;
  p.attn_flops_per_s = std::max(attn_flops / attn_s, 1e6);
  p.link(TierKind::kDevice) = {0, std::numeric_limits<double>::infinity()};
  p.link(TierKind::kHost) = {10e-6, memcpy_bytes_per_s(size_t(o.quick ? 32 : 256) << 20)};
  if (!o.disk_dir.empty()) {
    TierBenchOptions tb;
    tb.dir = (std::filesystem::path(o.disk_dir) / ".calibration").string();
    tb.disk_bytes = size_t(o.quick ? 16 : 512) << 20;
    tb.memory_bytes = size_t(o.quick ? 4 : 64) << 20;
    tb.load_bytes = size_t(o.quick ? 4 : 64) << 20;
    tb.geometry = engine.geometry();
    auto res = run_tier_bench(tb);
    std::error_code ec;
    std::filesystem::remove_all(tb.dir, ec);
    if (res.ok() && res->disk_read_gbps > 0) {
      // Latency of one chunk read: the time to first layer of a load is a fair upper bound.
      p.link(TierKind::kDisk) = {std::max(res->first_layer_ms, 0.05) * 1e-3, res->disk_read_gbps * 1e9};
    }
  }
  if (o.remote_bytes_per_s > 0) p.link(TierKind::kRemote) = {o.remote_latency_s, o.remote_bytes_per_s};
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  p.source = std::string(o.quick ? "quick calibration " : "calibration ") + date;
  KVTIER_RETURN_IF_ERROR(p.validate());
  return p;
}

}  // namespace kvtier
