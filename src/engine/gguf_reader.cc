// GGUF v3 reader: a bounds-checked cursor over the mapped bytes, then
// validation of the llama/qwen2 hyper-parameters and tensor table, then
// dequantisation into Model weights.
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf.h"

#include "engine/memory_budget.h"
#include "engine/gguf_cursor.h"
#include "engine/gguf_format.h"
#include "engine/half.h"

namespace kvtier::engine {

using gguf::ValueType;

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kF32: return "f32";
    case GgufType::kF16: return "f16";
    case GgufType::kQ4_0: return "q4_0";
    case GgufType::kQ4_1: return "q4_1";
    case GgufType::kQ5_0: return "q5_0";
    case GgufType::kQ5_1: return "q5_1";
    case GgufType::kQ8_0: return "q8_0";
    case GgufType::kQ2_K: return "q2_k";
    case GgufType::kQ3_K: return "q3_k";
    case GgufType::kQ4_K: return "q4_k";
    case GgufType::kQ5_K: return "q5_k";
    case GgufType::kQ6_K: return "q6_k";
    case GgufType::kBF16: return "bf16";
  }
  return "?";
}

namespace {

// The metadata arrays the loader reads; the elements of others are checked but not kept (a u8 array
// kept as doubles took eight times its bytes, before the memory check counted anything).
bool array_is_read(std::string_view key) {
  return key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" || key == "tokenizer.ggml.token_type" ||
         key == "tokenizer.ggml.merges";
}

using gguf_detail::Cursor;
using gguf_detail::Value;

std::string ggml_type_label(uint32_t t) {
  // ggml types the engine does not read (quant::find_type has the others).
  static const std::map<uint32_t, const char*> names = {
      {9, "Q8_1"},     {15, "Q8_K"},   {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},
      {20, "IQ4_NL"},  {21, "IQ3_S"},  {22, "IQ2_S"},   {23, "IQ4_XS"}, {24, "I8"},      {25, "I16"},
      {26, "I32"},     {27, "I64"},    {28, "F64"},     {29, "IQ1_M"},  {34, "TQ1_0"},   {35, "TQ2_0"}};
  auto it = names.find(t);
  return (it != names.end() ? std::string(it->second) : std::string("type")) + " (" + std::to_string(t) + ")";
}

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint64_t count = 0;
};


class Parser {
 public:
  Parser(std::span<const std::byte> bytes, std::string_view what, GgufLoadOptions options = {})
      : bytes_(bytes), what_(what), cur_(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what),
        options_(options) {}

  Result<std::shared_ptr<const Model>> run() {
    KVTIER_RETURN_IF_ERROR(header());
    KVTIER_RETURN_IF_ERROR(tensor_table());
    KVTIER_ASSIGN_OR_RETURN(ModelConfig config, hparams());
    KVTIER_ASSIGN_OR_RETURN(Vocab vocab, vocabulary());
    KVTIER_ASSIGN_OR_RETURN(ModelWeights weights, tensors(config));
    pack(weights);
    return Model::from_parts(std::move(config), std::move(weights), std::move(vocab));
  }

 private:
  Status bad(const std::string& m) const { return Status::Corruption(what_ + ": " + m); }
  Status unsupported(const std::string& m) const { return Status::Unimplemented(what_ + ": " + m); }

  Status header() {
    uint32_t magic = 0, version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    if (bytes_.size() < 4) return bad("file too short to be GGUF (" + std::to_string(bytes_.size()) + " bytes)");
    KVTIER_RETURN_IF_ERROR(cur_.pod(magic, "magic"));
    if (magic != gguf::kMagic) return bad("bad magic: not a GGUF file");
    KVTIER_RETURN_IF_ERROR(cur_.pod(version, "version"));
    if (version != gguf::kVersion)
      return unsupported("GGUF version " + std::to_string(version) + " is not supported (only version 3)");
    KVTIER_RETURN_IF_ERROR(cur_.pod(n_tensors, "tensor count"));
    KVTIER_RETURN_IF_ERROR(cur_.pod(n_kv, "metadata count"));
    // A metadata entry takes at least 13 bytes (key length, type, one byte),
    // a tensor entry 32 (name length, dims, one dimension, type, offset):
    // counts the file cannot hold are corrupt.
    if (n_kv > cur_.remaining() / 13 || n_tensors > cur_.remaining() / 32)
      return bad("truncated file: header claims " + std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) +
                 " metadata entries, more than the file can hold");
    // Each entry kept costs a few hundred bytes of memory against its 13 or 32 in the file: counts
    // no model has are refused before anything is read (a file of tiny entries took 11 times its size).
    if (n_kv > gguf::kMaxMetadataEntries || n_tensors > gguf::kMaxTensors)
      return bad("header claims " + std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) +
                 " metadata entries; at most " + std::to_string(gguf::kMaxTensors) + " and " +
                 std::to_string(gguf::kMaxMetadataEntries) + " are read");
    for (uint64_t k = 0; k < n_kv; ++k) {
      std::string key;
      uint32_t t = 0;
      KVTIER_RETURN_IF_ERROR(cur_.str(key, "metadata key"));
      KVTIER_RETURN_IF_ERROR(cur_.pod(t, "metadata value type"));
      if (t > uint32_t(ValueType::kF64)) return cur_.corrupt("metadata '" + key + "' has unknown value type " + std::to_string(t));
      Value v;
      KVTIER_RETURN_IF_ERROR(cur_.value(ValueType(t), v, 0, array_is_read(key)));
      if (!kv_.emplace(key, std::move(v)).second) return bad("duplicate metadata key '" + key + "'");
    }
    uint64_t alignment = gguf::kDefaultAlignment;
    if (auto it = kv_.find("general.alignment"); it != kv_.end()) {
      if (!it->second.is_int || it->second.i <= 0 || it->second.i > (1 << 16) || (it->second.i & (it->second.i - 1)))
        return bad("general.alignment must be a power of two up to 65536");
      alignment = uint64_t(it->second.i);
    }
    for (uint64_t k = 0; k < n_tensors; ++k) {
      TensorInfo ti;
      uint32_t n_dims = 0;
      KVTIER_RETURN_IF_ERROR(cur_.str(ti.name, "tensor name"));
      KVTIER_RETURN_IF_ERROR(cur_.pod(n_dims, "tensor dimension count"));
      if (n_dims == 0 || n_dims > gguf::kMaxDims)
        return bad("tensor '" + ti.name + "' has " + std::to_string(n_dims) + " dimensions (1..4 allowed)");
      ti.count = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne = 0;
        KVTIER_RETURN_IF_ERROR(cur_.pod(ne, "tensor dimension"));
        if (ne == 0 || ne > (uint64_t(1) << 40) || ti.count > (uint64_t(1) << 40) / ne)
          return bad("tensor '" + ti.name + "' has an impossible shape");
        ti.count *= ne;
        ti.ne.push_back(ne);
      }
      KVTIER_RETURN_IF_ERROR(cur_.pod(ti.type, "tensor type"));
      KVTIER_RETURN_IF_ERROR(cur_.pod(ti.offset, "tensor offset"));
      if (tensors_.count(ti.name)) return bad("duplicate tensor '" + ti.name + "'");
      tensors_.emplace(ti.name, std::move(ti));
    }
    alignment_ = alignment;
    return Status::Ok();
  }

  // Sizes, bounds and overlaps of the tensor table (not needed to read the vocabulary).
  Status tensor_table() {
    const uint64_t alignment = alignment_;
    data_start_ = (cur_.offset() + alignment - 1) / alignment * alignment;
    if (data_start_ > bytes_.size()) return bad("truncated file: no tensor data section");
    const uint64_t data_bytes = bytes_.size() - data_start_;
    std::vector<const TensorInfo*> by_offset;
    for (auto& [name, ti] : tensors_) {
      const quant::TypeInfo* type = quant::find_type(ti.type);
      if (!type)
        return unsupported("tensor '" + name + "' has type " + ggml_type_label(ti.type) +
                           "; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K");
      if (ti.ne[0] % type->block_elems != 0)
        return bad(std::string(type->name) + " tensor '" + name + "' has rows of " + std::to_string(ti.ne[0]) +
                   " (not a multiple of " + std::to_string(type->block_elems) + ")");
      ti.nbytes = quant::row_bytes(*type, ti.count);
      if (ti.offset % alignment != 0) return bad("tensor '" + name + "' data offset is not aligned");
      if (ti.offset > data_bytes || ti.nbytes > data_bytes - ti.offset)
        return bad("truncated file: tensor '" + name + "' extends past the end (" + std::to_string(ti.offset) + " + " +
                   std::to_string(ti.nbytes) + " > " + std::to_string(data_bytes) + " data bytes)");
      by_offset.push_back(&ti);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k)
      if (by_offset[k - 1]->offset + by_offset[k - 1]->nbytes > by_offset[k]->offset)
        return bad("tensors '" + by_offset[k - 1]->name + "' and '" + by_offset[k]->name + "' overlap");
    // Disjoint ranges inside the data section: together they fit in it, so the
    // f32 weights decoded from them take at most 1024 / 84 bytes (Q2_K) per
    // byte of file; tensors() also checks them against the memory available.
    return Status::Ok();
  }

  const Value* find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }
  Result<uint32_t> u32(const std::string& key, std::optional<uint32_t> dflt = std::nullopt) const {
    const Value* v = find(key);
    if (!v) {
      if (dflt) return *dflt;
      return bad("missing metadata '" + key + "'");
    }
    if (!v->is_int || v->i < 0 || v->i > int64_t(UINT32_MAX)) return bad("metadata '" + key + "' must be an unsigned 32-bit integer");
    return uint32_t(v->i);
  }
  Result<float> f32(const std::string& key, float dflt) const {
    const Value* v = find(key);
    if (!v) return dflt;
    if (v->type != ValueType::kF32 && v->type != ValueType::kF64 && !v->is_int) return bad("metadata '" + key + "' must be a number");
    return float(v->f);
  }

  Result<ModelConfig> hparams() const {
    const Value* arch = find("general.architecture");
    if (!arch || arch->type != ValueType::kString) return bad("missing metadata 'general.architecture'");
    ModelConfig c;
    if (Result<Arch> a = parse_arch(arch->str); a.ok()) {
      c.arch = *a;
    } else {
      return unsupported(a.status().message());
    }
    const std::string p = std::string(arch_name(c.arch)) + ".";
    if (const Value* n = find("general.name"); n && n->type == ValueType::kString) c.name = n->str;
    KVTIER_ASSIGN_OR_RETURN(c.hidden_size, u32(p + "embedding_length"));
    KVTIER_ASSIGN_OR_RETURN(c.num_layers, u32(p + "block_count"));
    KVTIER_ASSIGN_OR_RETURN(c.num_heads, u32(p + "attention.head_count"));
    KVTIER_ASSIGN_OR_RETURN(c.num_kv_heads, u32(p + "attention.head_count_kv", c.num_heads));
    KVTIER_ASSIGN_OR_RETURN(c.ffn_size, u32(p + "feed_forward_length"));
    KVTIER_ASSIGN_OR_RETURN(c.max_context, u32(p + "context_length"));
    KVTIER_ASSIGN_OR_RETURN(c.rope_theta, f32(p + "rope.freq_base", 10000.0f));
    KVTIER_ASSIGN_OR_RETURN(c.rms_eps, f32(p + "attention.layer_norm_rms_epsilon", 1e-5f));
    if (c.num_heads == 0 || c.hidden_size % c.num_heads != 0)
      if (!find(p + "attention.key_length")) return bad("embedding_length is not a multiple of head_count");
    KVTIER_ASSIGN_OR_RETURN(c.head_dim, u32(p + "attention.key_length", c.num_heads ? c.hidden_size / c.num_heads : 0));
    KVTIER_ASSIGN_OR_RETURN(uint32_t vdim, u32(p + "attention.value_length", c.head_dim));
    if (vdim != c.head_dim) return unsupported("value_length != key_length is not supported");
    KVTIER_ASSIGN_OR_RETURN(uint32_t rot, u32(p + "rope.dimension_count", c.head_dim));
    if (rot != c.head_dim) return unsupported("partial RoPE (rope.dimension_count " + std::to_string(rot) + " < head_dim " + std::to_string(c.head_dim) + ") is not supported");
    KVTIER_ASSIGN_OR_RETURN(uint32_t experts, u32(p + "expert_count", 0));
    if (experts > 0) return unsupported("mixture-of-experts models are not supported");
    KVTIER_ASSIGN_OR_RETURN(c.rope_freq_scale, rope_scaling(p));
    const Value* toks = find("tokenizer.ggml.tokens");
    if (!toks || toks->type != ValueType::kArray || toks->elem != ValueType::kString)
      return bad("missing metadata 'tokenizer.ggml.tokens' (an array of strings)");
    c.vocab_size = uint32_t(std::min<size_t>(toks->strs.size(), UINT32_MAX));
    KVTIER_ASSIGN_OR_RETURN(uint32_t vs, u32(p + "vocab_size", c.vocab_size));
    if (vs != c.vocab_size) return bad(p + "vocab_size " + std::to_string(vs) + " disagrees with " + std::to_string(c.vocab_size) + " tokens");
    c.tied_embeddings = tensors_.count("output.weight") == 0;
    if (Status st = c.validate(); !st.ok()) return bad("hyper-parameters: " + st.message());
    return c;
  }

  // The position multiplier of the rope.scaling.* keys under prefix `p`, as
  // llama.cpp reads them: none, or linear (1 / factor; also the older
  // rope.scale_linear key). Llama 3.1's scaling arrives as rope_freqs.weight
  // instead; YaRN and LongRoPE are refused by name.
  Result<float> rope_scaling(const std::string& p) const {
    KVTIER_ASSIGN_OR_RETURN(std::string type, string_key(p + "rope.scaling.type", ""));
    KVTIER_ASSIGN_OR_RETURN(float factor, f32(p + "rope.scaling.factor", 0.0f));
    if (factor == 0.0f) {
      KVTIER_ASSIGN_OR_RETURN(factor, f32(p + "rope.scale_linear", 0.0f));
    }
    if (type == "none" || factor == 0.0f || factor == 1.0f) return 1.0f;  // 0: unset, as in llama.cpp
    if (!type.empty() && type != "linear") return unsupported("RoPE scaling type '" + type + "' is not supported (none, linear, or llama3's rope_freqs.weight)");
    if (!(factor > 0.0f) || !std::isfinite(factor)) return bad("metadata '" + p + "rope.scaling.factor' must be a finite number > 0");
    return 1.0f / factor;
  }

  Result<std::string> string_key(const std::string& key, std::string dflt) const {
    const Value* v = find(key);
    if (!v) return dflt;
    if (v->type != ValueType::kString) return bad("metadata '" + key + "' must be a string");
    return v->str;
  }
  Result<bool> bool_key(const std::string& key, bool dflt) const {
    const Value* v = find(key);
    if (!v) return dflt;
    if (!v->is_int) return bad("metadata '" + key + "' must be a bool");
    return v->i != 0;
  }
  Result<TokenId> token_key(const std::string& key, TokenId dflt, size_t vocab_size) const {
    const Value* v = find(key);
    if (!v) return dflt;
    if (!v->is_int) return bad("metadata '" + key + "' must be an integer");
    if (v->i < 0 || uint64_t(v->i) >= vocab_size)
      return bad("metadata '" + key + "' = " + std::to_string(v->i) + " is outside the vocabulary of " + std::to_string(vocab_size));
    return TokenId(v->i);
  }

 public:
  // The tokenizer.ggml.* keys and the chat template, with llama.cpp's defaults.
  Result<Vocab> vocabulary() const {
    const Value* toks = find("tokenizer.ggml.tokens");
    if (!toks || toks->type != ValueType::kArray || toks->elem != ValueType::kString)
      return bad("missing metadata 'tokenizer.ggml.tokens' (an array of strings)");
    const size_t n = toks->strs.size();
    KVTIER_ASSIGN_OR_RETURN(std::string model, string_key("tokenizer.ggml.model", ""));
    if (model.empty()) return bad("missing metadata 'tokenizer.ggml.model'");
    KVTIER_ASSIGN_OR_RETURN(std::string pre, string_key("tokenizer.ggml.pre", ""));
    Vocab v = Vocab::defaults_for(model, pre);
    v.tokens = toks->strs;
    v.scores.assign(n, 0.0f);
    v.types.assign(n, int32_t(TokenType::kNormal));
    if (const Value* s = find("tokenizer.ggml.scores")) {
      if (s->type != ValueType::kArray || s->nums.size() != n) return bad("tokenizer.ggml.scores must have one number per token");
      for (size_t k = 0; k < n; ++k) v.scores[k] = float(s->nums[k]);
    }
    if (const Value* t = find("tokenizer.ggml.token_type")) {
      if (t->type != ValueType::kArray || t->nums.size() != n) return bad("tokenizer.ggml.token_type must have one value per token");
      for (size_t k = 0; k < n; ++k) {
        if (!(t->nums[k] >= INT32_MIN && t->nums[k] <= INT32_MAX))  // a double out of int32's range casts to UB
          return bad("tokenizer.ggml.token_type[" + std::to_string(k) + "] is not a token type");
        v.types[k] = int32_t(t->nums[k]);
      }
    }
    if (const Value* m = find("tokenizer.ggml.merges")) {
      if (m->type != ValueType::kArray || m->elem != ValueType::kString) return bad("tokenizer.ggml.merges must be an array of strings");
      v.merges = m->strs;
    }
    KVTIER_ASSIGN_OR_RETURN(v.bos, token_key("tokenizer.ggml.bos_token_id", v.bos, n));
    KVTIER_ASSIGN_OR_RETURN(v.eos, token_key("tokenizer.ggml.eos_token_id", v.eos, n));
    KVTIER_ASSIGN_OR_RETURN(v.unk, token_key("tokenizer.ggml.unknown_token_id", v.unk, n));
    KVTIER_ASSIGN_OR_RETURN(v.eot, token_key("tokenizer.ggml.eot_token_id", v.eot, n));
    KVTIER_ASSIGN_OR_RETURN(v.eom, token_key("tokenizer.ggml.eom_token_id", v.eom, n));
    KVTIER_ASSIGN_OR_RETURN(v.add_bos, bool_key("tokenizer.ggml.add_bos_token", v.add_bos));
    KVTIER_ASSIGN_OR_RETURN(v.add_space_prefix, bool_key("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
    KVTIER_ASSIGN_OR_RETURN(v.chat_template, string_key("tokenizer.chat_template", ""));
    if (Status st = v.validate(uint32_t(n)); !st.ok())
      return st.code() == StatusCode::kUnimplemented ? unsupported(st.message()) : bad(st.message());
    return v;
  }

  // Reads only the header and the tokenizer keys (any architecture, any tensor types).
  Result<Vocab> run_vocab_only() {
    KVTIER_RETURN_IF_ERROR(header());
    return vocabulary();
  }

  // The checked tensor table of any architecture, optionally with each tensor's values.
  Result<std::vector<GgufTensor>> run_tensors(bool dequantize) {
    KVTIER_RETURN_IF_ERROR(header());
    KVTIER_RETURN_IF_ERROR(tensor_table());
    std::vector<std::string> names;
    for (const auto& [name, ti] : tensors_) names.push_back(name);
    if (dequantize) KVTIER_RETURN_IF_ERROR(check_memory(names, true));
    std::vector<GgufTensor> out;
    for (const auto& [name, ti] : tensors_) {
      GgufTensor t{.name = name, .shape = ti.ne, .type = GgufType(ti.type), .file_offset = data_start_ + ti.offset,
                   .bytes = ti.nbytes};
      if (dequantize) {
        t.values.resize(size_t(ti.count));
        KVTIER_RETURN_IF_ERROR(load(name, t.values.data()));
      }
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  // Dequantises tensor `name` of shape [rows][cols] (ne = [cols, rows]; rows 0: a vector, ne = [cols]) into `dst`.
  // One weight the llama graph reads: [rows][cols] (rows 0: a vector of cols).
  struct Wanted {
    std::string name;
    uint64_t cols = 0, rows = 0;
  };

  // `rope_freqs`: the file has Llama 3.1's rope_freqs.weight (llama only, as in llama.cpp).
  static std::vector<Wanted> wanted_tensors(const ModelConfig& c, bool rope_freqs) {
    const uint64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_size, v = c.vocab_size;
    std::vector<Wanted> w = {{"token_embd.weight", h, v}, {"output_norm.weight", h, 0}};
    if (!c.tied_embeddings) w.push_back({"output.weight", h, v});
    if (rope_freqs && c.arch == Arch::kLlama) w.push_back({"rope_freqs.weight", c.head_dim / 2, 0});
    for (uint32_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "blk." + std::to_string(i) + ".";
      for (Wanted t : std::initializer_list<Wanted>{{"attn_norm.weight", h, 0}, {"attn_q.weight", h, q},
                                                     {"attn_k.weight", h, kv}, {"attn_v.weight", h, kv},
                                                     {"attn_output.weight", q, h}, {"ffn_norm.weight", h, 0},
                                                     {"ffn_gate.weight", h, f}, {"ffn_up.weight", h, f},
                                                     {"ffn_down.weight", f, h}}) {
        t.name = p + t.name;
        w.push_back(std::move(t));
      }
      if (c.has_qkv_bias())
        for (Wanted t : std::initializer_list<Wanted>{{"attn_q.bias", q, 0}, {"attn_k.bias", kv, 0}, {"attn_v.bias", kv, 0}}) {
          t.name = p + t.name;
          w.push_back(std::move(t));
        }
    }
    return w;
  }

  // Every tensor the model reads is present with the shape the
  // hyper-parameters imply (tensor_table checked its type, size and data
  // range), and there is no other. Runs before anything is allocated, so the
  // weights allocated are bounded by the tensor bytes the file holds, however
  // large the hyper-parameters claim to be.
  Status check_wanted(const std::vector<Wanted>& wanted, Arch arch, uint32_t num_layers) const {
    for (const Wanted& t : wanted) {
      auto it = tensors_.find(t.name);
      if (it == tensors_.end()) return bad("missing tensor '" + t.name + "'");
      const TensorInfo& ti = it->second;
      const bool shape_ok = t.rows == 0 ? (ti.ne.size() == 1 && ti.ne[0] == t.cols)
                                        : (ti.ne.size() == 2 && ti.ne[0] == t.cols && ti.ne[1] == t.rows);
      if (shape_ok) continue;
      std::string got;
      for (uint64_t d : ti.ne) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return bad("tensor '" + t.name + "' has shape [" + got + "], expected [" + std::to_string(t.cols) +
                 (t.rows == 0 ? "" : ", " + std::to_string(t.rows)) + "]");
    }
    if (wanted.size() != tensors_.size()) {  // names are unique on both sides: some tensor is not wanted
      std::map<std::string, bool> names;
      for (const Wanted& t : wanted) names[t.name] = true;
      for (const auto& [name, ti] : tensors_)
        if (!names.count(name))
          return unsupported("unexpected tensor '" + name + "' for a " + std::string(arch_name(arch)) + " model with " +
                             std::to_string(num_layers) + " layers");
    }
    return Status::Ok();
  }

  // The data of tensor `name` (checked by tensor_table), refused when a value is not finite.
  Result<std::span<const std::byte>> checked_data(const std::string& name) const {
    const TensorInfo& ti = tensors_.at(name);
    const auto data = bytes_.subspan(data_start_ + ti.offset, ti.nbytes);
    if (quant::first_nonfinite(GgufType(ti.type), data, size_t(ti.count)) != size_t(ti.count))
      return bad("tensor '" + name + "' holds a NaN or infinite value" +
                 (quant::info(GgufType(ti.type)).block_elems > 1 ? " (a block scale)" : ""));
    return data;
  }

  // Dequantises tensor `name` (checked by check_wanted) into `dst`, which holds its element count.
  Status load(const std::string& name, float* dst) {
    KVTIER_ASSIGN_OR_RETURN(auto data, checked_data(name));
    const TensorInfo& ti = tensors_.at(name);
    return quant::dequantize_row(GgufType(ti.type), data, size_t(ti.count), dst);
  }
  Status load(const std::string& name, std::vector<float>& dst) {
    dst.resize(size_t(tensors_.at(name).count));
    return load(name, dst.data());
  }

  // Appends matrix `name` (checked by check_wanted) to `dst` in its file type.
  Status load(const std::string& name, Linear& dst) {
    KVTIER_ASSIGN_OR_RETURN(auto data, checked_data(name));
    const TensorInfo& ti = tensors_.at(name);
    KVTIER_ASSIGN_OR_RETURN(WeightPart part, WeightPart::from_bytes(GgufType(ti.type), ti.ne[1], ti.ne[0], data));
    release(data);
    return dst.append(std::move(part));
  }

  // A mapped file's pages of `data`, now copied, leave this process's resident set (the page
  // cache keeps them), so loading peaks near the file's size, not twice it. In-memory images
  // (the fuzzer's) are never touched.
  void release(std::span<const std::byte> data) const {
    if (!options_.mapped_file) return;
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data.data()) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data.data()) + data.size()) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

  // The bytes tensors `tensor_names` (checked by tensor_table) take in memory: matrices in
  // their file type, vectors as f32 (`as_f32`: every tensor as f32).
  uint64_t resident_bytes(const std::vector<std::string>& tensor_names, bool as_f32) const {
    uint64_t n = 0;
    for (const std::string& name : tensor_names) {
      const TensorInfo& ti = tensors_.at(name);
      const GgufType t = GgufType(ti.type);
      n += as_f32 || ti.ne.size() == 1 ? ti.count * sizeof(float)
                                       : qdot::packed_matrix_bytes(qdot::best().packing[uint32_t(t)], t, ti.ne[1], ti.ne[0]);
    }
    return n;
  }

  // The weights and what the caller will allocate beside them fit in the memory limit.
  Status check_memory(const std::vector<std::string>& tensor_names, bool as_f32) const {
    std::vector<MemoryPart> parts = {{as_f32 ? "weights as f32" : "weights", resident_bytes(tensor_names, as_f32)}};
    parts.insert(parts.end(), options_.also_needed.begin(), options_.also_needed.end());
    return check_fits(what_, parts, options_.memory_limit_bytes);
  }

  // The weights, and the config's rope_freq_factors when the file has them.
  Result<ModelWeights> tensors(ModelConfig& c) {
    const std::vector<Wanted> wanted = wanted_tensors(c, tensors_.count("rope_freqs.weight") > 0);
    KVTIER_RETURN_IF_ERROR(check_wanted(wanted, c.arch, c.num_layers));
    std::vector<std::string> names;
    for (const Wanted& t : wanted) names.push_back(t.name);
    KVTIER_RETURN_IF_ERROR(check_memory(names, false));
    ModelWeights w;
    KVTIER_RETURN_IF_ERROR(load("token_embd.weight", w.token_embd));
    KVTIER_RETURN_IF_ERROR(load("output_norm.weight", w.output_norm));
    if (!c.tied_embeddings) KVTIER_RETURN_IF_ERROR(load("output.weight", w.output));
    if (tensors_.count("rope_freqs.weight")) KVTIER_RETURN_IF_ERROR(load("rope_freqs.weight", c.rope_freq_factors));
    w.layers.resize(c.num_layers);
    for (uint32_t i = 0; i < c.num_layers; ++i) KVTIER_RETURN_IF_ERROR(layer(c, "blk." + std::to_string(i) + ".", w.layers[i]));
    return w;
  }

  // Each matrix in the layout the engine's kernels want (engine/weights.h), once it is whole.
  static void pack(ModelWeights& w) {
    const qdot::Kernels& k = qdot::best();
    w.token_embd.pack(k), w.output.pack(k);
    for (LayerWeights& l : w.layers) l.wqkv.pack(k), l.wo.pack(k), l.w_gate_up.pack(k), l.w_down.pack(k);
  }

  Status layer(const ModelConfig& c, const std::string& p, LayerWeights& l) {
    if (c.has_qkv_bias()) {
      std::vector<float> b;
      for (const char* t : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
        KVTIER_RETURN_IF_ERROR(load(p + t, b));
        l.bqkv.insert(l.bqkv.end(), b.begin(), b.end());
      }
    }
    KVTIER_RETURN_IF_ERROR(load(p + "attn_norm.weight", l.attn_norm));
    for (const char* t : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) KVTIER_RETURN_IF_ERROR(load(p + t, l.wqkv));
    KVTIER_RETURN_IF_ERROR(load(p + "attn_output.weight", l.wo));
    KVTIER_RETURN_IF_ERROR(load(p + "ffn_norm.weight", l.ffn_norm));
    KVTIER_RETURN_IF_ERROR(load(p + "ffn_gate.weight", l.w_gate_up));
    KVTIER_RETURN_IF_ERROR(load(p + "ffn_up.weight", l.w_gate_up));
    return load(p + "ffn_down.weight", l.w_down);
  }

  std::span<const std::byte> bytes_;
  std::string what_;
  Cursor cur_;
  std::map<std::string, Value> kv_;
  std::map<std::string, TensorInfo> tensors_;
  uint64_t alignment_ = gguf::kDefaultAlignment;
  uint64_t data_start_ = 0;
  GgufLoadOptions options_;
};

}  // namespace

Result<std::shared_ptr<const Model>> parse_gguf(std::span<const std::byte> bytes, std::string_view what,
                                                const GgufLoadOptions& options) {
  return Parser(bytes, what, options).run();
}

namespace {

// Maps `path` read-only and runs `parse` over its bytes.
template <class Parse>
auto with_mapped_file(const std::string& path, Parse parse) -> decltype(parse(std::span<const std::byte>())) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = Status::FromErrno(errno, "stat " + path);
    ::close(fd);
    return s;
  }
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    return Status::Corruption(path + ": empty file, not GGUF");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return Status::FromErrno(map_err, "mmap " + path);
  auto result = parse(std::span<const std::byte>(static_cast<const std::byte*>(map), size));
  ::munmap(map, size);
  return result;
}

}  // namespace

Result<std::shared_ptr<const Model>> load_gguf(const std::string& path, const GgufLoadOptions& options) {
  GgufLoadOptions mapped = options;
  mapped.mapped_file = true;
  auto model = with_mapped_file(path, [&](std::span<const std::byte> bytes) { return parse_gguf(bytes, path, mapped); });
  ::malloc_trim(0);  // hand back what loading freed (merged parts' staging, the parser's tables)
  return model;
}

Result<std::vector<GgufTensor>> parse_gguf_tensors(std::span<const std::byte> bytes, bool dequantize, std::string_view what) {
  return Parser(bytes, what).run_tensors(dequantize);
}

Result<std::vector<GgufTensor>> load_gguf_tensors(const std::string& path, bool dequantize) {
  return with_mapped_file(path, [&](std::span<const std::byte> bytes) { return parse_gguf_tensors(bytes, dequantize, path); });
}

Result<Vocab> parse_gguf_vocab(std::span<const std::byte> bytes, std::string_view what) {
  return Parser(bytes, what).run_vocab_only();
}

Result<Vocab> load_gguf_vocab(const std::string& path) {
  return with_mapped_file(path, [&](std::span<const std::byte> bytes) { return parse_gguf_vocab(bytes, path); });
}

}  // namespace kvtier::engine
