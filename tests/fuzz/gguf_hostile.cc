#include "gguf_hostile.h"

#include <cstring>
#include <string_view>

namespace kvtier::engine::fuzzing {
namespace {

// ggml / GGUF codes used below (see src/engine/gguf_format.h).
constexpr uint32_t kTypeF32 = 0, kTypeF16 = 1, kTypeQ8_0 = 8, kTypeQ4_K = 12, kTypeIQ2_XXS = 16;
constexpr uint32_t kValU32 = 4, kValF32 = 6, kValString = 8, kValArray = 9, kValU64 = 10, kValF64 = 12;

// Little-endian fields appended to a byte string.
class Bytes {
 public:
  template <class T>
  Bytes& pod(T v) {
    buf.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    pod<uint64_t>(s.size());
    buf.append(s);
    return *this;
  }
  std::vector<uint8_t> out() const { return {buf.begin(), buf.end()}; }

  std::string buf;
};

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = kTypeF32;
  uint64_t offset = 0;
};

// Everything of a GGUF image, each field overridable.
struct ImageSpec {
  std::vector<std::vector<uint8_t>> kvs;  // encoded metadata entries
  std::vector<TensorSpec> tensors;
  uint64_t data_bytes = 0;        // zero bytes after the aligned header
  uint64_t n_kv = UINT64_MAX;     // UINT64_MAX: the real count
  uint64_t n_tensors = UINT64_MAX;

  std::vector<uint8_t> bytes() const {
    Bytes b;
    b.pod<uint32_t>(0x46554747u).pod<uint32_t>(3);
    b.pod<uint64_t>(n_tensors != UINT64_MAX ? n_tensors : tensors.size());
    b.pod<uint64_t>(n_kv != UINT64_MAX ? n_kv : kvs.size());
    for (const auto& kv : kvs) b.buf.append(kv.begin(), kv.end());
    for (const TensorSpec& t : tensors) {
      b.str(t.name).pod<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) b.pod(d);
      b.pod(t.type).pod(t.offset);
    }
    b.buf.resize((b.buf.size() + 31) / 32 * 32 + data_bytes, '\0');
    return b.out();
  }
};

std::vector<uint8_t> kv_u32(std::string_view key, uint32_t v) { return Bytes().str(key).pod(kValU32).pod(v).out(); }
std::vector<uint8_t> kv_str(std::string_view key, std::string_view v) { return Bytes().str(key).pod(kValString).str(v).out(); }
std::vector<uint8_t> kv_strs(std::string_view key, const std::vector<std::string>& v) {
  Bytes b;
  b.str(key).pod(kValArray).pod(kValString).pod<uint64_t>(v.size());
  for (const auto& s : v) b.str(s);
  return b.out();
}

struct Hparams {
  uint32_t hidden = 32, heads = 2, kv_heads = 1, ffn = 32, layers = 1;
};
const std::vector<std::string> kTokens = {"<unk>", "<s>", "</s>", "a"};

std::vector<std::vector<uint8_t>> llama_metadata(const Hparams& h) {
  return {kv_str("general.architecture", "llama"), kv_u32("llama.embedding_length", h.hidden),
          kv_u32("llama.block_count", h.layers),   kv_u32("llama.attention.head_count", h.heads),
          kv_u32("llama.attention.head_count_kv", h.kv_heads), kv_u32("llama.feed_forward_length", h.ffn),
          kv_u32("llama.context_length", 64),      kv_str("tokenizer.ggml.model", "llama"),
          kv_strs("tokenizer.ggml.tokens", kTokens)};
}

// The tensors of `h` as F32, back to back (32-aligned), and the data bytes they need.
void add_llama_tensors(const Hparams& h, ImageSpec& spec) {
  const uint64_t head_dim = h.hidden / h.heads, q = h.heads * head_dim, kv = h.kv_heads * head_dim;
  auto add = [&](std::string name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    spec.tensors.push_back({std::move(name), std::move(ne), kTypeF32, spec.data_bytes});
    spec.data_bytes += (n * 4 + 31) / 32 * 32;
  };
  add("token_embd.weight", {h.hidden, kTokens.size()});
  add("output_norm.weight", {h.hidden});
  for (uint32_t i = 0; i < h.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {h.hidden});
    add(p + "attn_q.weight", {h.hidden, q});
    add(p + "attn_k.weight", {h.hidden, kv});
    add(p + "attn_v.weight", {h.hidden, kv});
    add(p + "attn_output.weight", {q, h.hidden});
    add(p + "ffn_norm.weight", {h.hidden});
    add(p + "ffn_gate.weight", {h.hidden, h.ffn});
    add(p + "ffn_up.weight", {h.hidden, h.ffn});
    add(p + "ffn_down.weight", {h.ffn, h.hidden});
  }
}

ImageSpec micro() {
  ImageSpec s;
  s.kvs = llama_metadata({});
  add_llama_tensors({}, s);
  return s;
}

TensorSpec& tensor(ImageSpec& s, std::string_view name) {
  for (TensorSpec& t : s.tensors)
    if (t.name == name) return t;
  return s.tensors.front();
}

// Claims a 64-layer-wide, 2^20-FFN model but holds only the embedding and the
// final norm: allocating what the header claims would take ~512 GiB.
HostileGguf huge_hparams_tiny_tensors() {
  ImageSpec s;
  Hparams h{.hidden = 65536, .heads = 64, .kv_heads = 64, .ffn = 1u << 20, .layers = 1};
  s.kvs = llama_metadata(h);
  s.tensors.push_back({"token_embd.weight", {h.hidden, kTokens.size()}, kTypeF16, 0});
  s.tensors.push_back({"output_norm.weight", {h.hidden}, kTypeF32, h.hidden * kTokens.size() * 2});
  s.data_bytes = h.hidden * kTokens.size() * 2 + h.hidden * 4;
  return {"huge_hparams_tiny_tensors", s.bytes(), "missing tensor 'blk.0.attn_norm.weight'"};
}

// The same claim with every tensor declared at its full size: the table must
// be refused for data past the end before anything is allocated.
HostileGguf huge_hparams_table_past_eof() {
  ImageSpec s;
  Hparams h{.hidden = 65536, .heads = 64, .kv_heads = 64, .ffn = 1u << 20, .layers = 4};
  s.kvs = llama_metadata(h);
  add_llama_tensors(h, s);
  s.data_bytes = 4096;
  return {"huge_hparams_table_past_eof", s.bytes(), "extends past the end"};
}

template <class Edit>
HostileGguf edited(std::string name, std::string expect, Edit edit) {
  ImageSpec s = micro();
  edit(s);
  return {std::move(name), s.bytes(), std::move(expect)};
}

}  // namespace

std::vector<uint8_t> spelled_out_micro_image() { return micro().bytes(); }

std::vector<HostileGguf> hostile_images() {
  std::vector<HostileGguf> out = {huge_hparams_tiny_tensors(), huge_hparams_table_past_eof()};
  out.push_back(edited("dim_2pow41", "impossible shape", [](ImageSpec& s) { tensor(s, "output_norm.weight").ne = {1ull << 41}; }));
  out.push_back(edited("dims_product_overflows", "impossible shape",
                       [](ImageSpec& s) { tensor(s, "token_embd.weight").ne = {1ull << 32, 1ull << 32}; }));
  out.push_back(edited("dims_product_wraps_u64", "impossible shape", [](ImageSpec& s) {
    tensor(s, "token_embd.weight").ne = {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16};
  }));
  out.push_back(edited("zero_dim", "impossible shape", [](ImageSpec& s) { tensor(s, "token_embd.weight").ne = {32, 0}; }));
  out.push_back(edited("five_dims", "dimensions", [](ImageSpec& s) { tensor(s, "output_norm.weight").ne = {1, 1, 1, 1, 32}; }));
  out.push_back(edited("offset_past_eof", "extends past the end",
                       [](ImageSpec& s) { tensor(s, "output_norm.weight").offset = s.data_bytes + 32; }));
  out.push_back(edited("offset_near_u64_max", "extends past the end",
                       [](ImageSpec& s) { tensor(s, "output_norm.weight").offset = UINT64_MAX - 31; }));
  out.push_back(edited("size_past_eof", "extends past the end", [](ImageSpec& s) { s.data_bytes -= 64; }));
  out.push_back(edited("overlapping_data", "overlap", [](ImageSpec& s) {
    tensor(s, "output_norm.weight").offset = tensor(s, "token_embd.weight").offset + 32;
  }));
  out.push_back(edited("misaligned_data", "not aligned", [](ImageSpec& s) { tensor(s, "output_norm.weight").offset += 4; }));
  out.push_back(edited("unsupported_type_iq2_xxs", "IQ2_XXS",
                       [](ImageSpec& s) { tensor(s, "output_norm.weight").type = kTypeIQ2_XXS; }));
  out.push_back(edited("q4_k_row_not_multiple_of_256", "Q4_K", [](ImageSpec& s) { tensor(s, "output_norm.weight").type = kTypeQ4_K; }));
  out.push_back(edited("unknown_type", "type (4096)", [](ImageSpec& s) { tensor(s, "output_norm.weight").type = 4096; }));
  out.push_back(edited("q8_row_not_multiple_of_32", "not a multiple of 32", [](ImageSpec& s) {
    TensorSpec& t = tensor(s, "output_norm.weight");
    t.type = kTypeQ8_0, t.ne = {33};
  }));
  out.push_back(edited("f16_shape_of_f32_data", "has shape", [](ImageSpec& s) {
    TensorSpec& t = tensor(s, "output_norm.weight");
    t.type = kTypeF16, t.ne = {64};  // same bytes, twice the elements: wrong shape for the model
  }));
  out.push_back(edited("unexpected_tensor", "unexpected tensor", [](ImageSpec& s) {
    s.tensors.push_back({"blk.7.attn_norm.weight", {32}, kTypeF32, s.data_bytes});
    s.data_bytes += 128;
  }));
  out.push_back(edited("huge_tensor_count", "more than the file can hold", [](ImageSpec& s) { s.n_tensors = 1ull << 62; }));
  out.push_back(edited("huge_metadata_count", "more than the file can hold", [](ImageSpec& s) { s.n_kv = UINT64_MAX - 1; }));
  out.push_back(edited("huge_string_length", "truncated file", [](ImageSpec& s) {
    s.kvs.insert(s.kvs.begin(), Bytes().str("general.name").pod(kValString).pod<uint64_t>(1ull << 62).out());
  }));
  out.push_back(edited("huge_string_array_count", "array of", [](ImageSpec& s) {
    s.kvs.push_back(Bytes().str("x.strings").pod(kValArray).pod(kValString).pod<uint64_t>(1ull << 60).out());
  }));
  out.push_back(edited("u64_array_count_past_eof", "array of", [](ImageSpec& s) {
    // Fits the file at one byte per element, not at eight.
    s.kvs.push_back(Bytes().str("x.numbers").pod(kValArray).pod(kValU64).pod<uint64_t>(s.data_bytes / 2).out());
  }));
  out.push_back(edited("nested_array_huge_inner_count", "array of", [](ImageSpec& s) {
    s.kvs.push_back(Bytes().str("x.nested").pod(kValArray).pod(kValArray).pod<uint64_t>(1)
                        .pod(kValU32).pod<uint64_t>(UINT64_MAX).out());
  }));
  // Counts no model has: each kept entry cost a few hundred bytes of memory against its 13 in
  // the file (a file of tiny entries took 11 times its size before any check).
  out.push_back(edited("metadata_entries_past_cap", "metadata entries; at most", [](ImageSpec& s) {
    for (int i = 0; i < 70000; ++i) s.kvs.push_back(kv_u32("x." + std::to_string(i), 0));
  }));
  // A vocabulary array longer than any vocabulary may be is refused before it is read (its
  // elements are kept; at the file's own bound they took up to 8 times its size).
  out.push_back(edited("token_array_past_vocabulary_cap", "a vocabulary may have", [](ImageSpec& s) {
    s.kvs.push_back(Bytes().str("tokenizer.ggml.scores").pod(kValArray).pod(kValF32).pod<uint64_t>((1u << 24) + 1).out());
  }));
  out.push_back(edited("arrays_nested_too_deep", "nested too deeply", [](ImageSpec& s) {
    Bytes b;
    b.str("x.deep");
    b.pod(kValArray);
    for (int d = 0; d < 4; ++d) b.pod(kValArray).pod<uint64_t>(1);
    b.pod(kValU32).pod<uint64_t>(0);
    s.kvs.push_back(b.out());
  }));
  out.push_back(edited("alignment_not_power_of_two", "power of two",
                       [](ImageSpec& s) { s.kvs.push_back(kv_u32("general.alignment", 48)); }));
  out.push_back(edited("vocab_size_disagrees", "disagrees", [](ImageSpec& s) { s.kvs.push_back(kv_u32("llama.vocab_size", 1u << 24)); }));
  out.push_back(edited("token_type_out_of_int32", "is not a token type", [](ImageSpec& s) {
    Bytes b;
    b.str("tokenizer.ggml.token_type").pod(kValArray).pod(kValF64).pod<uint64_t>(kTokens.size());
    for (size_t i = 0; i < kTokens.size(); ++i) b.pod(i == 1 ? 1e300 : 1.0);  // cast to int32: undefined
    s.kvs.push_back(b.out());
  }));
  out.push_back(edited("context_of_one_token", "max_context must be in [2,",  // serve failed later, obscurely
                       [](ImageSpec& s) { s.kvs[6] = kv_u32("llama.context_length", 1); }));
  out.push_back(edited("layers_claimed_not_present", "missing tensor 'blk.1.",
                       [](ImageSpec& s) { s.kvs[2] = kv_u32("llama.block_count", 1024); }));
  return out;
}

}  // namespace kvtier::engine::fuzzing
