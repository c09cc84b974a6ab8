// Model::synthetic's tensors by GGUF name. The tensor ids, means and scales
// below are Model::synthetic's (model.cc); synthetic_test checks every tensor
// of several configs against it value for value.
#include "engine/synthetic.h"

#include <cmath>
#include <cstring>

#include "common/mix.h"
#include "engine/half.h"

namespace kvtier::engine {
namespace {

constexpr uint64_t kGamma = kSplitMix64Gamma;
constexpr auto mix = splitmix64_mix;

// Rounds to a bf16 value, flushing magnitudes below 2^-17 to zero (as Model::synthetic does).
float representable(float x) {
  if (std::fabs(x) < 0x1p-17f) return 0.0f;
  return bf16_to_f32(f32_to_bf16(x));
}

// Model::synthetic's generator parameters of one tensor.
struct Draw {
  uint64_t id;
  float mean, sigma;
};

Draw draw_of(const ModelConfig& c, const GgufModelTensor& t) {
  using Slot = GgufModelTensor::Slot;
  const float inv_h = 1.0f / std::sqrt(float(c.hidden_size));
  const uint64_t first_layer_id = c.tied_embeddings ? 2 : 3;  // token_embd, output_norm, output
  const uint64_t layer_id = first_layer_id + 6 * uint64_t(t.layer);
  switch (t.slot) {
    case Slot::kTokenEmbd: return {0, 0.0f, c.tied_embeddings ? 2.0f * inv_h : 1.0f};
    case Slot::kOutputNorm: return {1, 1.0f, 0.05f};
    case Slot::kOutput: return {2, 0.0f, 2.0f * inv_h};
    case Slot::kAttnNorm: return {layer_id, 1.0f, 0.05f};
    case Slot::kWqkv: return {layer_id + 1, 0.0f, inv_h};
    case Slot::kWo: return {layer_id + 2, 0.0f, 1.0f / std::sqrt(float(c.q_dim()))};
    case Slot::kFfnNorm: return {layer_id + 3, 1.0f, 0.05f};
    case Slot::kWGateUp: return {layer_id + 4, 0.0f, inv_h};
    case Slot::kWDown: return {layer_id + 5, 0.0f, 1.0f / std::sqrt(float(c.ffn_size))};
    case Slot::kBqkv: return {first_layer_id + 6 * uint64_t(c.num_layers) + t.layer, 0.0f, 1.0f};
    case Slot::kRopeFreqs: break;  // not drawn: the config's factors
  }
  return {0, 0.0f, 0.0f};
}

}  // namespace

void synthetic_fill_range(float* out, uint64_t offset, size_t n, uint64_t seed, uint64_t tensor_id, float mean,
                          float sigma) {
  // synthetic_fill seeds the state, advances it once, then advances it before each value.
  const uint64_t start = seed ^ (tensor_id * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull);
  const float a = sigma * std::sqrt(3.0f);
  for (size_t i = 0; i < n; ++i) {
    // 24 random bits → a float in [-1, 1) exactly.
    const float u = float(int64_t(mix(start + (offset + i + 2) * kGamma) >> 40) - (1 << 23)) * 0x1p-23f;
    out[i] = representable(mean + a * u);
  }
}

void synthetic_rows(const ModelConfig& c, uint64_t seed, const GgufModelTensor& t, uint64_t first_row, uint64_t rows,
                    float* out) {
  if (t.slot == GgufModelTensor::Slot::kRopeFreqs) {
    std::memcpy(out, c.rope_freq_factors.data(), c.rope_freq_factors.size() * sizeof(float));
    return;
  }
  const Draw d = draw_of(c, t);
  // A vector's first_row counts elements (the Q, K and V biases share one draw).
  const uint64_t offset = t.rows == 0 ? t.first_row : (t.first_row + first_row) * t.cols;
  const uint64_t n = t.rows == 0 ? t.cols : rows * t.cols;
  synthetic_fill_range(out, offset, size_t(n), seed, d.id, d.mean, d.sigma);
}

Result<std::vector<float>> synthetic_tensor(const ModelConfig& c, uint64_t seed, std::string_view name) {
  for (const GgufModelTensor& t : gguf_model_tensors(c)) {
    if (t.name != name) continue;
    std::vector<float> v(size_t(t.cols * std::max<uint64_t>(t.rows, 1)));
    synthetic_rows(c, seed, t, 0, std::max<uint64_t>(t.rows, 1), v.data());
    return v;
  }
  return Status::NotFound("synthetic model has no tensor '" + std::string(name) + "'");
}

Status write_synthetic_gguf(const ModelConfig& c, uint64_t seed, const Vocab& vocab, const std::string& path,
                            const GgufWriteOptions& options, const GgufStreamOptions& stream) {
  KVTIER_RETURN_IF_ERROR(c.validate());
  KVTIER_RETURN_IF_ERROR(vocab.validate(c.vocab_size));
  const std::vector<GgufModelTensor> layout = gguf_model_tensors(c);
  KVTIER_ASSIGN_OR_RETURN(std::vector<GgufTensorSpec> specs, gguf_tensor_specs(c, layout, options.weight_type));
  auto source = [&](size_t index, uint64_t first_row, uint64_t rows, float* out) {
    synthetic_rows(c, seed, layout[index], first_row, rows, out);
    return Status::Ok();
  };
  return write_gguf_stream(path, gguf_model_metadata(c, vocab, options), specs, source, stream);
}

}  // namespace kvtier::engine
