#include "engine/model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>

#include "common/page_hash.h"
#include "engine/synthetic.h"

namespace kvtier::engine {

void synthetic_fill(std::vector<float>& v, size_t n, uint64_t seed, uint64_t tensor_id, float mean, float sigma) {
  v.resize(n);
  synthetic_fill_range(v.data(), 0, n, seed, tensor_id, mean, sigma);  // the one generator (engine/synthetic.h)
}

namespace {

std::string tensor_name(const char* what, int layer) {
  return layer >= 0 ? "layer " + std::to_string(layer) + " " + what : std::string(what);
}

Status size_is(const std::vector<float>& v, size_t n, const char* what, int layer) {
  if (v.size() == n) return Status::Ok();
  return Status::InvalidArgument("model weights: " + tensor_name(what, layer) + " has " + std::to_string(v.size()) +
                                 " values, expected " + std::to_string(n));
}

// `rows` 0: the matrix must be empty.
Status shape_is(const Linear& m, uint64_t rows, uint64_t cols, const char* what, int layer) {
  if (rows == 0 ? m.empty() : (m.rows() == rows && m.cols() == cols)) return Status::Ok();
  return Status::InvalidArgument("model weights: " + tensor_name(what, layer) + " is [" + std::to_string(m.rows()) +
                                 "][" + std::to_string(m.cols()) + "], expected [" + std::to_string(rows) + "][" +
                                 std::to_string(cols) + "]");
}

// hash_bytes(kXXH3_128) of the matrix's f32 values, dequantized a few rows at a time.
PageHash hash_f32_rows(const Linear& m) {
  StreamHash128 h;
  const uint64_t step = std::max<uint64_t>(1, (uint64_t(1) << 16) / std::max<uint64_t>(1, m.cols()));
  std::vector<float> rows(size_t(step * m.cols()));
  for (uint64_t r = 0; r < m.rows(); r += step) {
    const uint64_t n = std::min(step, m.rows() - r);
    if (const float* f = m.f32()) {
      h.update(f + size_t(r) * m.cols(), size_t(n * m.cols()) * sizeof(float));
      continue;
    }
    m.rows_f32(r, n, rows.data());
    h.update(rows.data(), size_t(n * m.cols()) * sizeof(float));
  }
  return h.digest();
}

}  // namespace

Status ModelWeights::validate(const ModelConfig& c) const {
  const size_t h = c.hidden_size;
  KVTIER_RETURN_IF_ERROR(shape_is(token_embd, c.vocab_size, h, "token_embd", -1));
  KVTIER_RETURN_IF_ERROR(size_is(output_norm, h, "output_norm", -1));
  KVTIER_RETURN_IF_ERROR(shape_is(output, c.tied_embeddings ? 0 : c.vocab_size, h, "output", -1));
  if (layers.size() != c.num_layers)
    return Status::InvalidArgument("model weights: " + std::to_string(layers.size()) + " layers, config says " +
                                   std::to_string(c.num_layers));
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const int li = int(i);
    KVTIER_RETURN_IF_ERROR(size_is(l.attn_norm, h, "attn_norm", li));
    KVTIER_RETURN_IF_ERROR(shape_is(l.wqkv, size_t(c.q_dim()) + 2 * c.kv_dim(), h, "wqkv", li));
    KVTIER_RETURN_IF_ERROR(size_is(l.bqkv, c.has_qkv_bias() ? size_t(c.q_dim()) + 2 * c.kv_dim() : 0, "bqkv", li));
    KVTIER_RETURN_IF_ERROR(shape_is(l.wo, h, c.q_dim(), "wo", li));
    KVTIER_RETURN_IF_ERROR(size_is(l.ffn_norm, h, "ffn_norm", li));
    KVTIER_RETURN_IF_ERROR(shape_is(l.w_gate_up, 2 * size_t(c.ffn_size), h, "w_gate_up", li));
    KVTIER_RETURN_IF_ERROR(shape_is(l.w_down, h, c.ffn_size, "w_down", li));
  }
  return Status::Ok();
}

uint64_t ModelWeights::bytes() const {
  auto vec = [](const std::vector<float>& v) { return uint64_t(v.size()) * sizeof(float); };
  uint64_t n = token_embd.bytes() + vec(output_norm) + output.bytes();
  for (const LayerWeights& l : layers)
    n += vec(l.attn_norm) + l.wqkv.bytes() + vec(l.bqkv) + l.wo.bytes() + vec(l.ffn_norm) + l.w_gate_up.bytes() +
         l.w_down.bytes();
  return n;
}

PageHash model_fingerprint(const ModelConfig& c, const ModelWeights& w) {
  std::vector<unsigned char> buf;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    buf.insert(buf.end(), b, b + n);
  };
  const char tag[] = "kvtier-model-v1";
  put(tag, sizeof tag);
  const uint32_t ints[] = {c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads,
                           c.head_dim,   c.ffn_size,    c.max_context, uint32_t(c.tied_embeddings)};
  for (uint32_t v : ints) put(&v, 4);  // little-endian hosts only (x86-64, aarch64)
  put(&c.rope_theta, 4);
  put(&c.rms_eps, 4);
  auto put_hash = [&](const PageHash& h) {
    put(&h.lo, 8);
    put(&h.hi, 8);
  };
  auto tensor = [&](const std::vector<float>& t) {
    put_hash(hash_bytes(HashAlgo::kXXH3_128, t.data(), t.size() * sizeof(float)));
  };
  auto matrix = [&](const Linear& m) { put_hash(hash_f32_rows(m)); };
  matrix(w.token_embd);
  tensor(w.output_norm);
  matrix(w.output);
  for (const auto& l : w.layers) {
    tensor(l.attn_norm), matrix(l.wqkv), matrix(l.wo), tensor(l.ffn_norm), matrix(l.w_gate_up), matrix(l.w_down);
  }
  // Added after v1's fields only when they differ from a plain llama model,
  // so the fingerprints of those (and the caches keyed by them) are unchanged.
  if (c.arch != Arch::kLlama || c.rope_freq_scale != 1.0f || !c.rope_freq_factors.empty()) {
    const char ext[] = "arch-rope-v1";
    put(ext, sizeof ext);
    const uint32_t arch = uint32_t(c.arch);
    put(&arch, 4);
    put(&c.rope_freq_scale, 4);
    tensor(c.rope_freq_factors);
    for (const auto& l : w.layers) tensor(l.bqkv);
  }
  return hash_bytes(HashAlgo::kXXH3_128, buf.data(), buf.size());
}

Result<std::shared_ptr<const Model>> Model::synthetic(const ModelConfig& c, uint64_t seed) {
  KVTIER_RETURN_IF_ERROR(c.validate());
  KVTIER_ASSIGN_OR_RETURN(Vocab vocab, Vocab::synthetic(c.vocab_size));
  return synthetic(c, seed, std::move(vocab));
}

Result<std::shared_ptr<const Model>> Model::synthetic(const ModelConfig& c, uint64_t seed, Vocab vocab) {
  KVTIER_RETURN_IF_ERROR(c.validate());
  KVTIER_RETURN_IF_ERROR(vocab.validate(c.vocab_size));
  const size_t h = c.hidden_size;
  const float inv_h = 1.0f / std::sqrt(float(h));
  ModelWeights w;
  uint64_t id = 0;
  // Scales keep the residual stream O(1) per layer and the logits at a
  // standard deviation of about 2: peaked enough for a stable greedy choice,
  // never one-hot.
  auto matrix = [&](uint64_t rows, uint64_t cols, float sigma) {
    std::vector<float> v;
    synthetic_fill(v, rows * cols, seed, id++, 0.0f, sigma);
    return Linear::f32(std::move(v), cols);
  };
  w.token_embd = matrix(c.vocab_size, h, c.tied_embeddings ? 2.0f * inv_h : 1.0f);
  synthetic_fill(w.output_norm, h, seed, id++, 1.0f, 0.05f);
  if (!c.tied_embeddings) w.output = matrix(c.vocab_size, h, 2.0f * inv_h);
  w.layers.resize(c.num_layers);
  for (auto& l : w.layers) {
    synthetic_fill(l.attn_norm, h, seed, id++, 1.0f, 0.05f);
    l.wqkv = matrix(size_t(c.q_dim()) + 2 * c.kv_dim(), h, inv_h);
    l.wo = matrix(h, c.q_dim(), 1.0f / std::sqrt(float(c.q_dim())));
    synthetic_fill(l.ffn_norm, h, seed, id++, 1.0f, 0.05f);
    l.w_gate_up = matrix(2 * size_t(c.ffn_size), h, inv_h);
    l.w_down = matrix(h, c.ffn_size, 1.0f / std::sqrt(float(c.ffn_size)));
  }
  // Biases draw ids after every other tensor, so a llama model's weights do
  // not depend on whether the architecture has them. Qwen2's K biases are
  // large; these are as large as the projections' outputs, so they matter.
  if (c.has_qkv_bias())
    for (auto& l : w.layers) synthetic_fill(l.bqkv, size_t(c.q_dim()) + 2 * c.kv_dim(), seed, id++, 0.0f, 1.0f);
  return from_parts(c, std::move(w), std::move(vocab));
}

Result<std::shared_ptr<const Model>> Model::from_parts(ModelConfig c, ModelWeights w, Vocab v) {
  KVTIER_RETURN_IF_ERROR(c.validate());
  KVTIER_RETURN_IF_ERROR(w.validate(c));
  KVTIER_RETURN_IF_ERROR(v.validate(c.vocab_size));
  const PageHash fp = model_fingerprint(c, w);
  return std::shared_ptr<const Model>(new Model(std::move(c), std::move(w), std::move(v), fp));
}

}  // namespace kvtier::engine
