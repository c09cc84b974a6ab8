#include "model/model_config.h"

#include <cmath>

namespace kvtier::engine {

namespace {
Status bad(const std::string& what) { return Status::InvalidArgument("ModelConfig: " + what); }
}  // namespace

std::string_view arch_name(Arch a) { return a == Arch::kQwen2 ? "qwen2" : "llama"; }

Result<Arch> parse_arch(std::string_view name) {
  if (name == "llama") return Arch::kLlama;
  if (name == "qwen2") return Arch::kQwen2;
  return Status::Unimplemented("architecture '" + std::string(name) + "' is not supported (llama or qwen2)");
}

Status ModelConfig::validate() const {
  if (vocab_size == 0 || vocab_size > (1u << 24)) return bad("vocab_size must be in [1, 2^24]");
  if (hidden_size == 0 || hidden_size > 65536) return bad("hidden_size must be in [1, 65536]");
  if (num_layers == 0 || num_layers > 1024) return bad("num_layers must be in [1, 1024]");
  if (num_heads == 0 || num_heads > 1024) return bad("num_heads must be in [1, 1024]");
  if (num_kv_heads == 0 || num_heads % num_kv_heads != 0)
    return bad("num_kv_heads (" + std::to_string(num_kv_heads) + ") must divide num_heads (" +
               std::to_string(num_heads) + ")");
  if (head_dim == 0 || head_dim % 2 != 0 || head_dim > 1024) return bad("head_dim must be even and in [2, 1024]");
  if (ffn_size == 0 || ffn_size > (1u << 20)) return bad("ffn_size must be in [1, 2^20]");
  if (!(rope_theta > 1.0f) || !std::isfinite(rope_theta)) return bad("rope_theta must be finite and > 1");
  if (!(rope_freq_scale > 0.0f) || !std::isfinite(rope_freq_scale)) return bad("rope_freq_scale must be finite and > 0");
  if (!rope_freq_factors.empty() && rope_freq_factors.size() != head_dim / 2)
    return bad("rope_freq_factors has " + std::to_string(rope_freq_factors.size()) + " values, expected head_dim / 2 = " +
               std::to_string(head_dim / 2));
  if (!rope_freq_factors.empty() && arch != Arch::kLlama)
    return bad("rope_freq_factors (Llama 3.1 RoPE scaling) apply to the llama architecture only, as in llama.cpp");
  for (float f : rope_freq_factors)
    if (!(f > 0.0f) || !std::isfinite(f)) return bad("rope_freq_factors must be finite and > 0");
  if (!(rms_eps > 0.0f) || !(rms_eps < 1.0f)) return bad("rms_eps must be in (0, 1)");
  if (max_context < 2 || max_context > (1u << 24))  // a prompt's token and one generated
    return bad("max_context must be in [2, 2^24]");
  return Status::Ok();
}

double ModelConfig::rope_rate(uint32_t pair) const {
  const double rate = double(rope_freq_scale) * std::pow(double(rope_theta), -2.0 * pair / double(head_dim));
  return rope_freq_factors.empty() ? rate : rate / double(rope_freq_factors[pair]);
}

Status ModelConfig::apply_llama3_rope_scaling(const Llama3RopeScaling& s) {
  if (!(s.factor >= 1.0f) || !(s.low_freq_factor > 0.0f) || !(s.high_freq_factor > s.low_freq_factor) ||
      s.original_context == 0 || !std::isfinite(s.factor) || !std::isfinite(s.high_freq_factor))
    return bad("llama3 RoPE scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor, original_context > 0");
  // Wavelengths (in positions) below which a pair is kept, above which it is slowed by `factor`.
  const double keep_below = double(s.original_context) / s.high_freq_factor;
  const double slow_above = double(s.original_context) / s.low_freq_factor;
  rope_freq_factors.assign(head_dim / 2, 1.0f);
  for (uint32_t i = 0; i < head_dim / 2; ++i) {
    const double wavelength = 2.0 * M_PI / std::pow(double(rope_theta), -2.0 * i / double(head_dim));
    if (wavelength < keep_below) continue;
    if (wavelength > slow_above) {
      rope_freq_factors[i] = s.factor;
      continue;
    }
    const double blend = (double(s.original_context) / wavelength - s.low_freq_factor) /
                         double(s.high_freq_factor - s.low_freq_factor);
    rope_freq_factors[i] = float(1.0 / ((1.0 - blend) / s.factor + blend));
  }
  return Status::Ok();
}

void rope_cos_sin(const ModelConfig& c, const uint32_t* pos, size_t n, std::vector<float>& out) {
  const uint32_t half = c.head_dim / 2;
  out.resize(n * half * 2);
  std::vector<double> rate(half);
  for (uint32_t i = 0; i < half; ++i) rate[i] = c.rope_rate(i);
  for (size_t r = 0; r < n; ++r)
    for (uint32_t i = 0; i < half; ++i) {
      const double angle = double(pos[r]) * rate[i];
      out[(r * half + i) * 2] = float(std::cos(angle));
      out[(r * half + i) * 2 + 1] = float(std::sin(angle));
    }
}

KVGeometry ModelConfig::kv_geometry(DType kv_dtype, uint32_t page_tokens) const {
  return KVGeometry{.num_layers = num_layers,
                    .num_kv_heads = num_kv_heads,
                    .head_dim = head_dim,
                    .dtype = kv_dtype,
                    .page_tokens = page_tokens};
}

uint64_t ModelConfig::layer_params() const {
  const uint64_t h = hidden_size;
  const uint64_t attn = h * (uint64_t(q_dim()) + 2ull * kv_dim()) + uint64_t(q_dim()) * h;
  const uint64_t mlp = 3ull * h * ffn_size;
  return uint64_t(num_layers) * (attn + mlp);
}

uint64_t ModelConfig::num_params() const {
  const uint64_t emb = uint64_t(vocab_size) * hidden_size;
  const uint64_t norms = uint64_t(hidden_size) * (2ull * num_layers + 1);
  const uint64_t biases = has_qkv_bias() ? uint64_t(num_layers) * (q_dim() + 2ull * kv_dim()) : 0;
  return layer_params() + emb * (tied_embeddings ? 1 : 2) + norms + biases;
}

double ModelConfig::attention_flops(uint64_t begin, uint64_t end) const {
  if (end <= begin) return 0.0;
  // Query at position p attends p+1 keys: sum over p of (p+1).
  const double keys = (double(end) * double(end + 1) - double(begin) * double(begin + 1)) / 2.0;
  return 4.0 * double(head_dim) * num_heads * num_layers * keys;
}

Result<ModelConfig> model_preset(std::string_view name) {
  ModelConfig c;
  c.name = std::string(name);
  if (name == "tiny") {
    c.vocab_size = 512, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2;
    c.head_dim = 16, c.ffn_size = 128, c.rope_theta = 10000.0f, c.tied_embeddings = false;
    c.max_context = 32768;
  } else if (name == "small") {
    c.vocab_size = 32000, c.hidden_size = 512, c.num_layers = 8, c.num_heads = 8, c.num_kv_heads = 4;
    c.head_dim = 64, c.ffn_size = 1408, c.rope_theta = 10000.0f, c.tied_embeddings = false;
    c.max_context = 32768;
  } else if (name == "1b") {
    c.vocab_size = 128256, c.hidden_size = 2048, c.num_layers = 16, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 64, c.ffn_size = 8192, c.rope_theta = 500000.0f, c.tied_embeddings = true;
    c.max_context = 131072;
  } else if (name == "8b") {
    c.vocab_size = 128256, c.hidden_size = 4096, c.num_layers = 32, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 128, c.ffn_size = 14336, c.rope_theta = 500000.0f, c.tied_embeddings = false;
    c.max_context = 131072;
  } else {
    return Status::InvalidArgument("unknown model preset '" + std::string(name) + "' (expected tiny, small, 1b or 8b)");
  }
  c.rms_eps = 1e-5f;
  return c;
}

std::vector<std::string> model_preset_names() { return {"tiny", "small", "1b", "8b"}; }

}  // namespace kvtier::engine
