#include "engine/engine.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/attention.h"
#include "engine/engine_checks.h"
#include "engine/engine_impl.h"
#include "engine/half.h"
#include "engine/qdot.h"
#include "engine/kv_rows.h"
#include "engine/simd.h"
#include "engine/worker_pool.h"

namespace kvtier::engine {

namespace {

using SteadyClock = std::chrono::steady_clock;
double seconds_since(SteadyClock::time_point t0) { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); }

void rmsnorm(const float* x, const float* w, float* out, uint32_t n, float eps) {
  float ss = 0.0f;
  for (uint32_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void add_bias(float* row, const std::vector<float>& bias) {
  for (size_t i = 0; i < bias.size(); ++i) row[i] += bias[i];
}

// act[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* act, uint32_t n) {
  uint32_t i = 0;
  for (; i + simd::kLanes <= n; i += simd::kLanes) {
    const simd::vfloat g = simd::load(gate + i);
    simd::store(act + i, g / (simd::splat(1.0f) + simd::vexp(-g)) * simd::load(up + i));
  }
  for (; i < n; ++i) act[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace

Status EngineOptions::validate() const {
  if (threads > 256) return Status::InvalidArgument("EngineOptions: threads must be <= 256");
  if (blas_threads > 256) return Status::InvalidArgument("EngineOptions: blas_threads must be <= 256");
  if (prefill_chunk == 0 || prefill_chunk > 65536) return Status::InvalidArgument("EngineOptions: prefill_chunk must be in [1, 65536]");
  return Status::Ok();
}

Engine::Impl::Impl(const ModelConfig& c, uint32_t threads, bool split_gemm, bool exact_weights)
    : cfg(c),
      shape{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))},
      workers(threads),
      mm(workers, split_gemm, exact_weights) {
  const uint32_t rows = attention_block_tokens(shape) * c.group_size();
  for (uint32_t w = 0; w < workers.size(); ++w) scratch.emplace_back(shape, rows);
}

void Engine::Impl::reserve(uint32_t m) {
  const size_t qkv_w = size_t(cfg.q_dim()) + 2 * cfg.kv_dim();
  if (h.size() < size_t(m) * cfg.hidden_size) h.resize(size_t(m) * cfg.hidden_size);
  if (qkv.size() < size_t(m) * qkv_w) qkv.resize(size_t(m) * qkv_w);
  if (attn.size() < size_t(m) * cfg.q_dim()) attn.resize(size_t(m) * cfg.q_dim());
  if (gu.size() < size_t(m) * 2 * cfg.ffn_size) gu.resize(size_t(m) * 2 * cfg.ffn_size);
  if (act.size() < size_t(m) * cfg.ffn_size) act.resize(size_t(m) * cfg.ffn_size);
}

void Engine::Impl::matmul(const float* x, uint32_t m, const Linear& w, float* y, float beta) {
  mm.run(x, m, w, y, uint32_t(w.rows()), beta);
}

void Engine::Impl::embed_rows(const Model& model, std::span<const TokenId> tokens, float* out) const {
  const uint32_t H = cfg.hidden_size;
  for (size_t i = 0; i < tokens.size(); ++i) model.weights().token_embd.rows_f32(uint64_t(tokens[i]), 1, out + i * H);
}

Engine::Engine(std::shared_ptr<const Model> model, BlockPool& pool, const EngineOptions& options)
    : model_(std::move(model)), pool_(pool), geometry_(pool.geometry()), options_(options) {
  if (options_.threads == 0) options_.threads = std::max(1u, std::thread::hardware_concurrency());
  if (options_.blas_threads == 0) options_.blas_threads = options_.threads;
  openblas_set_num_threads(int(options_.blas_threads));
  impl_ = std::make_unique<Impl>(model_->config(), options_.threads, options_.blas_threads == 1, options_.exact_weights);
  // The layers' matrices write the KV (the output matrix only the logits).
  batch_invariant_ = std::all_of(model_->weights().layers.begin(), model_->weights().layers.end(), [&](const LayerWeights& lw) {
    const Matmul& mm = impl_->mm;
    return mm.rounds_rows_alike(lw.wqkv) && mm.rounds_rows_alike(lw.wo) && mm.rounds_rows_alike(lw.w_gate_up) &&
           mm.rounds_rows_alike(lw.w_down);
  });
}

Engine::~Engine() = default;

void Engine::Impl::qkv_rows(const LayerWeights& lw, const float* x, const float* rope_cs, uint32_t m) {
  const ModelConfig& c = cfg;
  const uint32_t H = c.hidden_size, Q = c.q_dim(), W = Q + 2 * c.kv_dim();
  rows_parallel(m, [&](uint32_t r) { rmsnorm(x + size_t(r) * H, lw.attn_norm.data(), h.data() + size_t(r) * H, H, c.rms_eps); });
  matmul(h.data(), m, lw.wqkv, qkv.data(), 0.0f);
  rows_parallel(m, [&](uint32_t r) {
    float* row = qkv.data() + size_t(r) * W;
    const float* cs = rope_cs + size_t(r) * c.head_dim;
    add_bias(row, lw.bqkv);
    apply_rope(row, c.num_heads, c.head_dim, cs, c.rope_style());
    apply_rope(row + Q, c.num_kv_heads, c.head_dim, cs, c.rope_style());
  });
}

void Engine::Impl::store_rows(BlockPool& pool, LayerIdx layer, std::span<const RowSpan> spans) {
  const uint32_t Q = cfg.q_dim(), KV = cfg.kv_dim(), W = Q + 2 * KV;
  const KVGeometry& geo = pool.geometry();
  const size_t tok_bytes = geo.token_kv_half_bytes();
  for (const RowSpan& s : spans) {
    rows_parallel(s.n, [&](uint32_t i) {
      const uint32_t pos = s.pos0 + i;
      const float* row = qkv.data() + size_t(s.row0 + i) * W;
      const PageId page = s.seq->pages[pos / geo.page_tokens];
      const size_t off = size_t(pos % geo.page_tokens) * tok_bytes;
      store_kv_row(geo.dtype, row + Q, pool.k(page, layer) + off, KV);
      store_kv_row(geo.dtype, row + Q + KV, pool.v(page, layer) + off, KV);
    });
  }
}

void Engine::Impl::attend_and_mlp(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, float* x, uint32_t m,
                                  std::span<const RowSpan> spans) {
  const ModelConfig& c = cfg;
  const uint32_t H = c.hidden_size, Q = c.q_dim(), F = c.ffn_size, W = Q + 2 * c.kv_dim();
  // Attention: one task per (span, KV head, block of query tokens), costliest first.
  const auto t0 = SteadyClock::now();
  struct Task {
    uint32_t span, kvh, t0, t1;
    double cost;
  };
  std::vector<Task> tasks;
  std::vector<AttentionJob> jobs;
  const uint32_t bt = attention_block_tokens(shape);
  for (uint32_t si = 0; si < spans.size(); ++si) {
    const RowSpan& s = spans[si];
    jobs.push_back(AttentionJob{.pool = &pool,
                                .pages = s.seq->pages,
                                .layer = layer,
                                .q = qkv.data() + size_t(s.row0) * W,
                                .q_stride = W,
                                .out = attn.data() + size_t(s.row0) * Q,
                                .out_stride = Q,
                                .n_tokens = s.n,
                                .pos0 = s.pos0});
    for (uint32_t t = 0; t < s.n; t += bt)
      for (uint32_t k = 0; k < c.num_kv_heads; ++k) {
        const uint32_t t1 = std::min(s.n, t + bt);
        tasks.push_back({si, k, t, t1, double(t1 - t) * double(s.pos0 + t1)});
      }
  }
  std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.cost > b.cost; });
  workers.run(tasks.size(), [&](size_t i, uint32_t w) {
    const Task& t = tasks[i];
    attend(shape, jobs[t.span], t.kvh, t.t0, t.t1, scratch[w]);
  });
  attention_seconds += seconds_since(t0);

  matmul(attn.data(), m, lw.wo, x, 1.0f);
  rows_parallel(m, [&](uint32_t r) { rmsnorm(x + size_t(r) * H, lw.ffn_norm.data(), h.data() + size_t(r) * H, H, c.rms_eps); });
  matmul(h.data(), m, lw.w_gate_up, gu.data(), 0.0f);
  rows_parallel(m, [&](uint32_t r) {
    const float* g = gu.data() + size_t(r) * 2 * F;
    swiglu(g, g + F, act.data() + size_t(r) * F, F);
  });
  matmul(act.data(), m, lw.w_down, x, 1.0f);
}

void Engine::Impl::layer_pass(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, float* x, const float* rope_cs,
                              uint32_t m, std::span<const RowSpan> spans) {
  reserve(m);
  qkv_rows(lw, x, rope_cs, m);
  store_rows(pool, layer, spans);
  attend_and_mlp(pool, lw, layer, x, m, spans);
}

void Engine::Impl::embed(const Model& model, std::span<const TokenId> tokens, uint32_t first_pos) {
  const uint32_t n = uint32_t(tokens.size()), H = cfg.hidden_size;
  x.resize(size_t(n) * H);
  embed_rows(model, tokens, x.data());
  std::vector<uint32_t> pos(n);
  for (uint32_t i = 0; i < n; ++i) pos[i] = first_pos + i;
  rope_cos_sin(cfg, pos.data(), n, rope_cs);
}

void Engine::Impl::contiguous_layer(BlockPool& pool, const LayerWeights& lw, LayerIdx layer, SequenceKV& seq,
                                    uint32_t pos0, uint32_t n, uint32_t chunk) {
  for (uint32_t c0 = 0; c0 < n; c0 += chunk) {
    const uint32_t m = std::min(chunk, n - c0);
    const RowSpan span{&seq, 0, m, pos0 + c0};
    layer_pass(pool, lw, layer, x.data() + size_t(c0) * cfg.hidden_size, rope_cs.data() + size_t(c0) * cfg.head_dim,
               m, std::span(&span, 1));
  }
}

Logits Engine::Impl::project_logits(const Model& model, const float* rows_x, uint32_t rows) {
  const uint32_t H = cfg.hidden_size;
  Logits out;
  out.vocab = cfg.vocab_size;
  out.rows = rows;
  std::vector<float> normed(size_t(rows) * H);
  rows_parallel(rows, [&](uint32_t r) {
    rmsnorm(rows_x + size_t(r) * H, model.weights().output_norm.data(), normed.data() + size_t(r) * H, H, cfg.rms_eps);
  });
  out.data.resize(size_t(rows) * cfg.vocab_size);
  matmul(normed.data(), rows, model.output_matrix(), out.data.data(), 0.0f);
  return out;
}

Result<Logits> Engine::prefill(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                               const PrefillOptions& options) {
  const ModelConfig& c = model_->config();
  KVTIER_RETURN_IF_ERROR(check_prefill(c, pool_, seq, tokens, start_pos));
  if (options.blend) return prefill_blend(seq, tokens, start_pos, options);
  const uint32_t n_total = uint32_t(tokens.size());  // <= max_context

  const auto t_start = SteadyClock::now();
  Impl& im = *impl_;
  im.attention_seconds = 0;
  seq.num_tokens = start_pos;  // KV past start_pos is rewritten from here on
  const uint32_t n = n_total - start_pos;
  im.embed(*model_, tokens.subspan(start_pos), start_pos);
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    if (options.layer_hook) KVTIER_RETURN_IF_ERROR(options.layer_hook(LayerIdx(l)));
    im.contiguous_layer(pool_, model_->weights().layers[l], LayerIdx(l), seq, start_pos, n, options_.prefill_chunk);
  }
  const uint32_t rows = options.all_logits ? n : 1;
  Logits out = im.project_logits(*model_, im.x.data() + size_t(n - rows) * c.hidden_size, rows);
  seq.num_tokens = n_total;

  profile_.prefill_seconds += seconds_since(t_start);
  profile_.attention_seconds += im.attention_seconds;
  profile_.prefill_tokens += n;
  profile_.prefill_flops += c.layer_flops_per_token() * n + c.attention_flops(start_pos, n_total) + c.head_flops() * out.rows;
  return out;
}

Result<Logits> Engine::decode(std::span<SequenceKV* const> seqs, std::span<const TokenId> tokens) {
  const ModelConfig& c = model_->config();
  KVTIER_RETURN_IF_ERROR(check_decode(c, pool_, seqs, tokens));
  const auto t_start = SteadyClock::now();
  Impl& im = *impl_;
  im.attention_seconds = 0;
  const uint32_t b = uint32_t(seqs.size()), H = c.hidden_size;
  im.x.resize(size_t(b) * H);
  std::vector<uint32_t> pos(b);
  std::vector<RowSpan> spans(b);
  im.embed_rows(*model_, tokens, im.x.data());
  for (uint32_t i = 0; i < b; ++i) {
    pos[i] = seqs[i]->num_tokens;
    spans[i] = RowSpan{seqs[i], i, 1, pos[i]};
  }
  rope_cos_sin(c, pos.data(), b, im.rope_cs);
  for (uint32_t l = 0; l < c.num_layers; ++l)
    im.layer_pass(pool_, model_->weights().layers[l], LayerIdx(l), im.x.data(), im.rope_cs.data(), b, spans);

  Logits out = im.project_logits(*model_, im.x.data(), b);
  for (SequenceKV* s : seqs) ++s->num_tokens;
  profile_.decode_seconds += seconds_since(t_start);
  profile_.decode_attention_seconds += im.attention_seconds;
  profile_.decode_tokens += b;
  return out;
}

}  // namespace kvtier::engine
