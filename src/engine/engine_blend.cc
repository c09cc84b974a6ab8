// Selective recompute over reused KV (BlendOptions in engine.h) and the KV
// move that puts a segment's cached KV at a new position.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/engine_checks.h"
#include "engine/engine_impl.h"
#include "engine/kv_rows.h"

namespace kvtier::engine {

namespace {

using SteadyClock = std::chrono::steady_clock;

// Squared distance between the fresh K and V of one row and the KV in the pages at `pos`.
double kv_deviation(const BlockPool& pool, const SequenceKV& seq, LayerIdx layer, uint32_t pos, const float* k,
                    const float* v, uint32_t kv_dim, std::vector<float>& scratch) {
  const KVGeometry& geo = pool.geometry();
  const PageId page = seq.pages[pos / geo.page_tokens];
  const size_t off = size_t(pos % geo.page_tokens) * geo.token_kv_half_bytes();
  scratch.resize(2 * size_t(kv_dim));
  load_kv_row(geo.dtype, pool.k(page, layer) + off, scratch.data(), kv_dim);
  load_kv_row(geo.dtype, pool.v(page, layer) + off, scratch.data() + kv_dim, kv_dim);
  double d = 0;
  for (uint32_t i = 0; i < kv_dim; ++i) {
    const double dk = double(k[i]) - scratch[i], dv = double(v[i]) - scratch[kv_dim + i];
    d += dk * dk + dv * dv;
  }
  return d;
}

// Rows (indices into [0, n)) that go through the layers from check_layer
// on: every row not reused, and the ceil(ratio * reused) reused rows of
// largest deviation (ties: earlier first). Sorted.
std::vector<uint32_t> select_rows(std::span<const uint8_t> reused, std::span<const double> deviation, float ratio) {
  std::vector<uint32_t> selected, candidates;
  for (uint32_t i = 0; i < reused.size(); ++i) (reused[i] ? candidates : selected).push_back(i);
  const size_t take = std::min(candidates.size(), size_t(std::ceil(double(ratio) * double(candidates.size()))));
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](uint32_t a, uint32_t b) { return deviation[a] > deviation[b]; });
  selected.insert(selected.end(), candidates.begin(), candidates.begin() + take);
  std::sort(selected.begin(), selected.end());
  return selected;
}

// The selected rows (compacted: row r of the result is selected[r]) cut into
// passes of at most `chunk` rows; each pass is a list of runs of consecutive
// positions, with rows counted from the pass's first row.
struct Pass {
  uint32_t row0 = 0, rows = 0;
  std::vector<RowSpan> spans;
};
std::vector<Pass> passes_of(SequenceKV& seq, std::span<const uint32_t> selected, uint32_t start_pos, uint32_t chunk) {
  std::vector<Pass> passes;
  for (uint32_t r = 0; r < selected.size(); ++r) {
    if (passes.empty() || passes.back().rows == chunk) passes.push_back(Pass{.row0 = r});
    Pass& p = passes.back();
    const uint32_t pos = start_pos + selected[r];
    if (!p.spans.empty() && p.spans.back().pos0 + p.spans.back().n == pos) {
      ++p.spans.back().n;
    } else {
      p.spans.push_back(RowSpan{&seq, r - p.row0, 1, pos});
    }
    ++p.rows;
  }
  return passes;
}

}  // namespace

Status BlendOptions::validate(uint32_t num_layers, size_t positions) const {
  if (!(recompute_ratio >= 0.0f && recompute_ratio <= 1.0f))
    return Status::InvalidArgument("BlendOptions: recompute_ratio must be in [0, 1]");
  if (check_layer >= num_layers)
    return Status::InvalidArgument("BlendOptions: check_layer " + std::to_string(check_layer) + " must be below the " +
                                   std::to_string(num_layers) + " layers");
  if (reused.size() != positions)
    return Status::InvalidArgument("BlendOptions: " + std::to_string(reused.size()) + " reused flags for " +
                                   std::to_string(positions) + " positions");
  if (positions == 0 || reused.back()) return Status::InvalidArgument("BlendOptions: the last position must be computed");
  return Status::Ok();
}

Result<Logits> Engine::prefill_blend(SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                                     const PrefillOptions& options) {
  const ModelConfig& c = model_->config();
  BlendOptions& blend = *options.blend;
  const uint32_t n_total = uint32_t(tokens.size()), n = n_total - start_pos, H = c.hidden_size;
  KVTIER_RETURN_IF_ERROR(blend.validate(c.num_layers, n));
  if (options.all_logits) return Status::InvalidArgument("Engine: all_logits is not available with blending");
  const auto t_start = SteadyClock::now();
  Impl& im = *impl_;
  im.attention_seconds = 0;
  seq.num_tokens = start_pos;
  im.embed(*model_, tokens.subspan(start_pos), start_pos);
  const auto& layers = model_->weights().layers;
  const uint32_t chunk = options_.prefill_chunk;
  for (uint32_t l = 0; l <= blend.check_layer; ++l) {
    if (options.layer_hook) KVTIER_RETURN_IF_ERROR(options.layer_hook(LayerIdx(l)));
    if (l < blend.check_layer) im.contiguous_layer(pool_, layers[l], LayerIdx(l), seq, start_pos, n, chunk);
  }
  const std::vector<uint32_t> selected = select_rows(blend.reused, check_deviation(seq, blend, start_pos), blend.recompute_ratio);
  // Compact x and the RoPE table to the selected rows.
  std::vector<float> x_sel(size_t(selected.size()) * H), cs_sel(size_t(selected.size()) * c.head_dim);
  for (size_t r = 0; r < selected.size(); ++r) {
    std::copy_n(im.x.data() + size_t(selected[r]) * H, H, x_sel.data() + r * H);
    std::copy_n(im.rope_cs.data() + size_t(selected[r]) * c.head_dim, c.head_dim, cs_sel.data() + r * c.head_dim);
  }
  const std::vector<Pass> passes = passes_of(seq, selected, start_pos, chunk);
  for (uint32_t l = blend.check_layer; l < c.num_layers; ++l) {
    if (l > blend.check_layer && options.layer_hook) KVTIER_RETURN_IF_ERROR(options.layer_hook(LayerIdx(l)));
    for (const Pass& p : passes)
      im.layer_pass(pool_, layers[l], LayerIdx(l), x_sel.data() + size_t(p.row0) * H,
                    cs_sel.data() + size_t(p.row0) * c.head_dim, p.rows, p.spans);
  }
  Logits out = im.project_logits(*model_, x_sel.data() + (selected.size() - 1) * H, 1);
  seq.num_tokens = n_total;
  const uint32_t reused = uint32_t(std::count(blend.reused.begin(), blend.reused.end(), uint8_t(1)));
  blend.recomputed = uint32_t(selected.size()) - (n - reused);

  profile_.prefill_seconds += std::chrono::duration<double>(SteadyClock::now() - t_start).count();
  profile_.attention_seconds += im.attention_seconds;
  profile_.prefill_tokens += n;
  // Matrix FLOPs: every row below the check layer, the selected rows from it
  // on, and the check layer's QKV projection for the others (attention left out).
  const double per_layer = c.layer_flops_per_token() / c.num_layers;
  const double qkv = 2.0 * c.hidden_size * (double(c.q_dim()) + 2.0 * c.kv_dim());
  profile_.prefill_flops += per_layer * (double(n) * blend.check_layer +
                                         double(selected.size()) * (c.num_layers - blend.check_layer)) +
                            qkv * double(n - selected.size()) + c.head_flops();
  return out;
}

// K and V of every row at the check layer, compared with the reused KV in
// the pages; 0 for rows not reused. x and rope_cs hold every row.
std::vector<double> Engine::check_deviation(SequenceKV& seq, const BlendOptions& blend, uint32_t start_pos) {
  const ModelConfig& c = model_->config();
  Impl& im = *impl_;
  const uint32_t n = uint32_t(blend.reused.size()), Q = c.q_dim(), KV = c.kv_dim(), W = Q + 2 * KV;
  const LayerIdx layer(blend.check_layer);
  std::vector<double> deviation(n, 0.0);
  if (blend.random_seed != 0) {  // the baseline selection: no KV is compared
    std::mt19937_64 rng(blend.random_seed);
    for (double& d : deviation) d = double(rng() >> 11);
    return deviation;
  }
  std::vector<std::vector<float>> scratch(im.workers.size());
  for (uint32_t c0 = 0; c0 < n; c0 += options_.prefill_chunk) {
    const uint32_t m = std::min(options_.prefill_chunk, n - c0);
    im.reserve(m);
    im.qkv_rows(model_->weights().layers[blend.check_layer], im.x.data() + size_t(c0) * c.hidden_size,
                im.rope_cs.data() + size_t(c0) * c.head_dim, m);
    im.workers.run(m, [&](size_t r, uint32_t w) {
      if (!blend.reused[c0 + r]) return;
      const float* row = im.qkv.data() + r * W;
      deviation[c0 + r] = kv_deviation(pool_, seq, layer, start_pos + c0 + uint32_t(r), row + Q, row + Q + KV, KV, scratch[w]);
    });
  }
  return deviation;
}

Status move_kv(const ModelConfig& c, BlockPool& pool, LayerIdx layer, std::span<const PageId> src, uint32_t src_pos,
               std::span<const PageId> dst, uint32_t dst_pos, uint32_t n) {
  const KVGeometry& geo = pool.geometry();
  const uint32_t P = geo.page_tokens, KV = c.kv_dim();
  // In 64 bits: positions near 2^32 wrapped the check and read past the page table.
  const uint64_t src_pages = (uint64_t(src_pos) + n + P - 1) / P, dst_pages = (uint64_t(dst_pos) + n + P - 1) / P;
  if (src_pages > src.size() || dst_pages > dst.size() || uint64_t(src_pos) + n > UINT32_MAX ||
      uint64_t(dst_pos) + n > UINT32_MAX)
    return Status::InvalidArgument("move_kv: the page tables do not cover the positions moved");
  if (n > 0) {
    KVTIER_RETURN_IF_ERROR(check_pool_pages(pool, src.subspan(src_pos / P, src_pages - src_pos / P)));
    KVTIER_RETURN_IF_ERROR(check_pool_pages(pool, dst.subspan(dst_pos / P, dst_pages - dst_pos / P)));
  }
  // One rotation for every key: RoPE by the position difference.
  const double delta = double(dst_pos) - double(src_pos);
  std::vector<float> cs(c.head_dim);
  for (uint32_t i = 0; i < c.head_dim / 2; ++i) {
    cs[2 * i] = float(std::cos(delta * c.rope_rate(i)));
    cs[2 * i + 1] = float(std::sin(delta * c.rope_rate(i)));
  }
  const size_t tok_bytes = geo.token_kv_half_bytes();
  std::vector<float> k(KV);
  for (uint32_t t = 0; t < n; ++t) {
    const uint32_t from = src_pos + t, to = dst_pos + t;
    const size_t from_off = size_t(from % P) * tok_bytes, to_off = size_t(to % P) * tok_bytes;
    const PageId from_page = src[from / P], to_page = dst[to / P];
    load_kv_row(geo.dtype, pool.k(from_page, layer) + from_off, k.data(), KV);
    apply_rope(k.data(), c.num_kv_heads, c.head_dim, cs.data(), c.rope_style());
    store_kv_row(geo.dtype, k.data(), pool.k(to_page, layer) + to_off, KV);
    std::memcpy(pool.v(to_page, layer) + to_off, pool.v(from_page, layer) + from_off, tok_bytes);
  }
  return Status::Ok();
}

}  // namespace kvtier::engine
