// GGUF v3 writer: metadata llama.cpp needs to load a llama or qwen2 model,
// then the tensors, each aligned to 32 bytes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/gguf.h"
#include "engine/gguf_format.h"
#include "engine/half.h"

namespace kvtier::engine {

using gguf::ValueType;

Status GgufWriteOptions::validate() const {
  switch (weight_type) {
    case GgufType::kF32:
    case GgufType::kF16:
    case GgufType::kBF16:
    case GgufType::kQ8_0: return Status::Ok();
    default: break;
  }
  return Status::InvalidArgument("GgufWriteOptions: cannot write weight type " + std::string(gguf_type_name(weight_type)) +
                                 " (f32, f16, bf16 or q8_0)");
}

namespace {

class Buffer {
 public:
  template <class T>
  void pod(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void str(std::string_view s) {
    pod<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void key(std::string_view k, ValueType t) {
    str(k);
    pod<uint32_t>(uint32_t(t));
    ++kv_count_;
  }
  void kv_u32(std::string_view k, uint32_t v) { key(k, ValueType::kU32), pod(v); }
  void kv_f32(std::string_view k, float v) { key(k, ValueType::kF32), pod(v); }
  void kv_bool(std::string_view k, bool v) { key(k, ValueType::kBool), pod<uint8_t>(v ? 1 : 0); }
  void kv_str(std::string_view k, std::string_view v) { key(k, ValueType::kString), str(v); }
  void pad(size_t alignment) {
    while (bytes_.size() % alignment) bytes_.push_back(0);
  }

  std::vector<char>& bytes() { return bytes_; }
  uint64_t kv_count() const { return kv_count_; }

 private:
  std::vector<char> bytes_;
  uint64_t kv_count_ = 0;
};

struct Tensor {
  std::string name;
  const float* data;
  uint64_t cols, rows;  // rows 0: a vector
  GgufType type;
  uint64_t offset = 0;
};

uint64_t tensor_bytes(const Tensor& t) {
  const uint64_t n = t.cols * std::max<uint64_t>(t.rows, 1);
  switch (t.type) {
    case GgufType::kF32: return n * 4;
    case GgufType::kF16:
    case GgufType::kBF16: return n * 2;
    case GgufType::kQ8_0: return n / gguf::kQ8Block * gguf::kQ8BlockBytes;
    default: return 0;  // refused by GgufWriteOptions::validate
  }
}

void encode(const Tensor& t, std::vector<char>& out) {
  const size_t n = t.cols * std::max<uint64_t>(t.rows, 1);
  out.resize(tensor_bytes(t));
  switch (t.type) {
    case GgufType::kF32: std::memcpy(out.data(), t.data, n * 4); break;
    case GgufType::kF16: f32_to_f16(t.data, reinterpret_cast<uint16_t*>(out.data()), n); break;
    case GgufType::kBF16: f32_to_bf16(t.data, reinterpret_cast<uint16_t*>(out.data()), n); break;
    case GgufType::kQ8_0:
      for (size_t b = 0; b < n / gguf::kQ8Block; ++b) {
        const float* x = t.data + b * gguf::kQ8Block;
        float amax = 0.0f;
        for (uint32_t k = 0; k < gguf::kQ8Block; ++k) amax = std::max(amax, std::fabs(x[k]));
        const float d = amax / 127.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        char* blk = out.data() + b * gguf::kQ8BlockBytes;
        const uint16_t d16 = f32_to_f16(d);
        std::memcpy(blk, &d16, 2);
        for (uint32_t k = 0; k < gguf::kQ8Block; ++k) blk[2 + k] = char(int8_t(std::lround(x[k] * id)));
      }
      break;
    default: break;  // refused by GgufWriteOptions::validate
  }
}

// The tensors llama.cpp reads for the model's architecture; matrices of `mt`, vectors F32.
std::vector<Tensor> model_tensors(const Model& model, GgufType mt) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const uint64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_size, v = c.vocab_size;
  std::vector<Tensor> tensors;
  auto add = [&](std::string name, const float* data, uint64_t cols, uint64_t rows) {
    tensors.push_back({std::move(name), data, cols, rows, rows == 0 ? GgufType::kF32 : mt});
  };
  add("token_embd.weight", w.token_embd.data(), h, v);
  add("output_norm.weight", w.output_norm.data(), h, 0);
  if (!c.tied_embeddings) add("output.weight", w.output.data(), h, v);
  if (!c.rope_freq_factors.empty()) add("rope_freqs.weight", c.rope_freq_factors.data(), c.head_dim / 2, 0);
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const LayerWeights& l = w.layers[i];
    add(p + "attn_norm.weight", l.attn_norm.data(), h, 0);
    add(p + "attn_q.weight", l.wqkv.data(), h, q);
    add(p + "attn_k.weight", l.wqkv.data() + q * h, h, kv);
    add(p + "attn_v.weight", l.wqkv.data() + (q + kv) * h, h, kv);
    if (c.has_qkv_bias()) {
      add(p + "attn_q.bias", l.bqkv.data(), q, 0);
      add(p + "attn_k.bias", l.bqkv.data() + q, kv, 0);
      add(p + "attn_v.bias", l.bqkv.data() + q + kv, kv, 0);
    }
    add(p + "attn_output.weight", l.wo.data(), q, h);
    add(p + "ffn_norm.weight", l.ffn_norm.data(), h, 0);
    add(p + "ffn_gate.weight", l.w_gate_up.data(), h, f);
    add(p + "ffn_up.weight", l.w_gate_up.data() + f * h, h, f);
    add(p + "ffn_down.weight", l.w_down.data(), f, h);
  }
  return tensors;
}

// general.* and the architecture's hyper-parameter keys.
void put_hparams(const Model& model, const GgufWriteOptions& options, Buffer& meta) {
  const ModelConfig& c = model.config();
  const GgufType mt = options.weight_type;
  uint32_t file_type = gguf::kFileTypeF32;
  if (mt == GgufType::kF16) file_type = gguf::kFileTypeF16;
  if (mt == GgufType::kBF16) file_type = gguf::kFileTypeBF16;
  if (mt == GgufType::kQ8_0) file_type = gguf::kFileTypeQ8_0;
  const std::string arch(arch_name(c.arch));
  const std::string p = arch + ".";
  meta.kv_str("general.architecture", arch);
  meta.kv_str("general.name", options.name.empty() ? (c.name.empty() ? "kvtier" : c.name) : options.name);
  meta.kv_u32("general.file_type", file_type);
  meta.kv_u32("general.alignment", gguf::kDefaultAlignment);
  meta.kv_u32(p + "vocab_size", c.vocab_size);
  meta.kv_u32(p + "context_length", c.max_context);
  meta.kv_u32(p + "embedding_length", c.hidden_size);
  meta.kv_u32(p + "block_count", c.num_layers);
  meta.kv_u32(p + "feed_forward_length", c.ffn_size);
  meta.kv_u32(p + "rope.dimension_count", c.head_dim);
  meta.kv_u32(p + "attention.head_count", c.num_heads);
  meta.kv_u32(p + "attention.head_count_kv", c.num_kv_heads);
  meta.kv_u32(p + "attention.key_length", c.head_dim);
  meta.kv_u32(p + "attention.value_length", c.head_dim);
  meta.kv_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
  meta.kv_f32(p + "rope.freq_base", c.rope_theta);
  if (c.rope_freq_scale != 1.0f) {
    meta.kv_str(p + "rope.scaling.type", "linear");
    meta.kv_f32(p + "rope.scaling.factor", 1.0f / c.rope_freq_scale);
  }
}

// tokenizer.ggml.* and the chat template.
void put_vocab(const Vocab& vocab, Buffer& meta) {
  meta.kv_str("tokenizer.ggml.model", vocab.model);
  if (!vocab.pre.empty()) meta.kv_str("tokenizer.ggml.pre", vocab.pre);
  meta.key("tokenizer.ggml.tokens", ValueType::kArray);
  meta.pod<uint32_t>(uint32_t(ValueType::kString));
  meta.pod<uint64_t>(vocab.tokens.size());
  for (const auto& t : vocab.tokens) meta.str(t);
  meta.key("tokenizer.ggml.scores", ValueType::kArray);
  meta.pod<uint32_t>(uint32_t(ValueType::kF32));
  meta.pod<uint64_t>(vocab.scores.size());
  for (float s : vocab.scores) meta.pod(s);
  meta.key("tokenizer.ggml.token_type", ValueType::kArray);
  meta.pod<uint32_t>(uint32_t(ValueType::kI32));
  meta.pod<uint64_t>(vocab.types.size());
  for (int32_t t : vocab.types) meta.pod(t);
  if (!vocab.merges.empty()) {
    meta.key("tokenizer.ggml.merges", ValueType::kArray);
    meta.pod<uint32_t>(uint32_t(ValueType::kString));
    meta.pod<uint64_t>(vocab.merges.size());
    for (const auto& m : vocab.merges) meta.str(m);
  }
  meta.kv_u32("tokenizer.ggml.bos_token_id", uint32_t(vocab.bos));
  meta.kv_u32("tokenizer.ggml.eos_token_id", uint32_t(vocab.eos));
  if (vocab.unk != text::kNoToken) meta.kv_u32("tokenizer.ggml.unknown_token_id", uint32_t(vocab.unk));
  if (vocab.eot != text::kNoToken) meta.kv_u32("tokenizer.ggml.eot_token_id", uint32_t(vocab.eot));
  if (vocab.eom != text::kNoToken) meta.kv_u32("tokenizer.ggml.eom_token_id", uint32_t(vocab.eom));
  meta.kv_bool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  meta.kv_bool("tokenizer.ggml.add_eos_token", false);
  if (vocab.model == "llama") meta.kv_bool("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix);
  if (!vocab.chat_template.empty()) meta.kv_str("tokenizer.chat_template", vocab.chat_template);
}

}  // namespace

Status write_gguf(const Model& model, const std::string& path, const GgufWriteOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  std::vector<Tensor> tensors = model_tensors(model, options.weight_type);
  for (const Tensor& t : tensors)
    if (t.type == GgufType::kQ8_0 && t.cols % gguf::kQ8Block != 0)
      return Status::InvalidArgument("q8_0 needs rows whose length is a multiple of 32; tensor '" + t.name + "' has " +
                                     std::to_string(t.cols));
  Buffer meta;
  put_hparams(model, options, meta);
  put_vocab(model.vocab(), meta);

  Buffer head;
  head.pod<uint32_t>(gguf::kMagic);
  head.pod<uint32_t>(gguf::kVersion);
  head.pod<uint64_t>(tensors.size());
  head.pod<uint64_t>(meta.kv_count());
  head.bytes().insert(head.bytes().end(), meta.bytes().begin(), meta.bytes().end());
  uint64_t offset = 0;
  for (Tensor& t : tensors) {
    t.offset = offset;
    offset += (tensor_bytes(t) + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
    head.str(t.name);
    head.pod<uint32_t>(t.rows == 0 ? 1 : 2);
    head.pod<uint64_t>(t.cols);
    if (t.rows != 0) head.pod<uint64_t>(t.rows);
    head.pod<uint32_t>(uint32_t(t.type));
    head.pod<uint64_t>(t.offset);
  }
  head.pad(gguf::kDefaultAlignment);

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError("cannot create " + path);
  out.write(head.bytes().data(), std::streamsize(head.bytes().size()));
  std::vector<char> buf;
  const char zeros[gguf::kDefaultAlignment] = {};
  for (const Tensor& t : tensors) {
    encode(t, buf);
    out.write(buf.data(), std::streamsize(buf.size()));
    const size_t padding = (gguf::kDefaultAlignment - buf.size() % gguf::kDefaultAlignment) % gguf::kDefaultAlignment;
    out.write(zeros, std::streamsize(padding));
  }
  out.flush();
  if (!out) return Status::IOError("write failed: " + path);
  return Status::Ok();
}

}  // namespace kvtier::engine
