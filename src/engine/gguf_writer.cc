// GGUF v3 writer: the metadata llama.cpp needs to load a llama or qwen2 model
// (or a copy of another file's), the tensor table, then the tensors streamed
// a chunk of rows at a time, each encoded to its type and aligned to 32 bytes.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/gguf_cursor.h"
#include "engine/gguf_format.h"

namespace kvtier::engine {

using gguf::ValueType;

namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION: the block layouts of quant.h

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
  // A whole entry (key, type, value) as another file stores it.
  void raw_entry(const uint8_t* p, size_t n) {
    bytes_.insert(bytes_.end(), p, p + n);
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
  GgufMetadata take() { return {std::move(bytes_), kv_count_}; }

 private:
  std::vector<char> bytes_;
  uint64_t kv_count_ = 0;
};

bool is_float(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF16 || t == GgufType::kBF16; }

// general.* and the architecture's hyper-parameter keys.
void put_hparams(const ModelConfig& c, const GgufWriteOptions& options, Buffer& meta) {
  const std::string arch(arch_name(c.arch));
  const std::string p = arch + ".";
  meta.kv_str("general.architecture", arch);
  meta.kv_str("general.name", options.name.empty() ? (c.name.empty() ? "kvtier" : c.name) : options.name);
  meta.kv_u32("general.file_type", options.weight_type.file_type());
  if (options.weight_type.q4_k_m || !is_float(options.weight_type.type))
    meta.kv_u32("general.quantization_version", kQuantizationVersion);
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

uint64_t padded(uint64_t n) {
  return (n + gguf::kDefaultAlignment - 1) / gguf::kDefaultAlignment * gguf::kDefaultAlignment;
}

uint64_t tensor_bytes(const GgufTensorSpec& t) { return quant::row_bytes(quant::info(t.type), t.shape[0]) * t.rows(); }

// Magic, version, counts, metadata and the tensor table, padded to the alignment.
Result<std::vector<char>> header(const GgufMetadata& metadata, std::span<const GgufTensorSpec> tensors) {
  Buffer head;
  head.pod<uint32_t>(gguf::kMagic);
  head.pod<uint32_t>(gguf::kVersion);
  head.pod<uint64_t>(tensors.size());
  head.pod<uint64_t>(metadata.count);
  head.bytes().insert(head.bytes().end(), metadata.bytes.begin(), metadata.bytes.end());
  uint64_t offset = 0;
  for (const GgufTensorSpec& t : tensors) {
    if (t.shape.empty() || t.shape.size() > gguf::kMaxDims)
      return Status::InvalidArgument("tensor '" + t.name + "' has " + std::to_string(t.shape.size()) +
                                     " dimensions (1 to 4)");
    const quant::TypeInfo& info = quant::info(t.type);
    if (t.shape[0] % info.block_elems != 0)
      return Status::InvalidArgument(std::string(info.name) + " needs rows whose length is a multiple of " +
                                     std::to_string(info.block_elems) + "; tensor '" + t.name + "' has " +
                                     std::to_string(t.shape[0]));
    head.str(t.name);
    head.pod<uint32_t>(uint32_t(t.shape.size()));
    for (uint64_t d : t.shape) head.pod<uint64_t>(d);
    head.pod<uint32_t>(uint32_t(t.type));
    head.pod<uint64_t>(offset);
    offset += padded(tensor_bytes(t));
  }
  head.pad(gguf::kDefaultAlignment);
  return std::move(head.bytes());
}

// Finite values can overflow a narrower type (an f16 value, a block's f16 scale) to
// infinity, which the loader refuses: such a file is not written.
Status check_encoded(const GgufTensorSpec& t, std::span<const std::byte> encoded, uint64_t n) {
  if (quant::first_nonfinite(t.type, encoded, size_t(n)) == n) return Status::Ok();
  return Status::InvalidArgument("tensor '" + t.name + "' holds a value outside the range of " +
                                 std::string(quant::info(t.type).name) + " (it would be stored as infinite)");
}

// Fills and encodes rows [r0, r0 + rows) of tensor `index` into `f32` and `out`, split
// across `threads` threads; the first error wins.
Status encode_rows(const GgufTensorSpec& t, size_t index, uint64_t r0, uint64_t rows, const GgufRowSource& source,
                   unsigned threads, float* f32, std::byte* out) {
  const uint64_t cols = t.shape[0];
  const size_t row_bytes = size_t(quant::row_bytes(quant::info(t.type), cols));
  auto part = [&](uint64_t begin, uint64_t end) -> Status {
    if (begin == end) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(source(index, r0 + begin, end - begin, f32 + begin * cols));
    for (uint64_t r = begin; r < end; ++r)
      KVTIER_RETURN_IF_ERROR(quantize_row(t.type, f32 + r * cols, size_t(cols), out + r * row_bytes));
    return check_encoded(t, {out + begin * row_bytes, size_t(end - begin) * row_bytes}, (end - begin) * cols);
  };
  const unsigned n = unsigned(std::min<uint64_t>(threads, rows));
  if (n <= 1) return part(0, rows);
  std::vector<Status> status(n);
  std::vector<std::thread> workers;
  for (unsigned k = 0; k < n; ++k)
    workers.emplace_back([&, k] { status[k] = part(rows * k / n, rows * (k + 1) / n); });
  for (std::thread& w : workers) w.join();
  for (Status& s : status)
    if (!s.ok()) return s;
  return Status::Ok();
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

Status write_all(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n != 0 && std::fwrite(p, 1, n, f) != n) return Status::FromErrno(errno, "write " + path);
  return Status::Ok();
}

// The data of every tensor, each padded to the alignment.
Status write_tensors(std::FILE* f, const std::string& path, std::span<const GgufTensorSpec> tensors,
                     const GgufRowSource& source, const GgufStreamOptions& options) {
  const unsigned threads = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> f32;
  std::vector<std::byte> out;
  const char zeros[gguf::kDefaultAlignment] = {};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorSpec& t = tensors[i];
    if (options.on_tensor) options.on_tensor(i, tensors.size(), t);
    const uint64_t cols = t.shape[0], rows = t.rows();
    const uint64_t chunk_rows =
        std::max<uint64_t>(1, std::min(rows, options.chunk_elements / std::max<uint64_t>(cols, 1)));
    const size_t row_bytes = size_t(quant::row_bytes(quant::info(t.type), cols));
    f32.resize(size_t(chunk_rows * cols));
    out.resize(size_t(chunk_rows) * row_bytes);
    for (uint64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const uint64_t n = std::min(chunk_rows, rows - r0);
      KVTIER_RETURN_IF_ERROR(encode_rows(t, i, r0, n, source, threads, f32.data(), out.data()));
      KVTIER_RETURN_IF_ERROR(write_all(f, out.data(), size_t(n) * row_bytes, path));
    }
    KVTIER_RETURN_IF_ERROR(write_all(f, zeros, size_t(padded(tensor_bytes(t)) - tensor_bytes(t)), path));
  }
  return Status::Ok();
}

}  // namespace

uint64_t GgufTensorSpec::rows() const {
  uint64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

namespace {

// Where a written file ends up: through symbolic links to their target, as cp writes (a dangling
// link's target too), followed by hand, at most 40 deep.
std::string final_destination(const std::string& path) {
  std::filesystem::path p = path;
  std::error_code ec;
  for (int hops = 0; hops < 40 && std::filesystem::is_symlink(p, ec); ++hops) {
    const std::filesystem::path target = std::filesystem::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p.string();
}

// The header and tensors into `f`, flushed (and synced when `sync`).
Status write_whole(std::FILE* f, const std::string& name, const std::vector<char>& head,
                   std::span<const GgufTensorSpec> tensors, const GgufRowSource& source,
                   const GgufStreamOptions& options, bool sync) {
  KVTIER_RETURN_IF_ERROR(write_all(f, head.data(), head.size(), name));
  KVTIER_RETURN_IF_ERROR(write_tensors(f, name, tensors, source, options));
  if (std::fflush(f) != 0) return Status::FromErrno(errno, "write " + name);
  if (sync && ::fsync(::fileno(f)) != 0) return Status::FromErrno(errno, "sync " + name);
  return Status::Ok();
}

// Into the file at `dest` itself: what is not a regular file (a device, a pipe as /dev/stdout),
// or a file whose directory takes no new file. A failure leaves what was written.
Status write_in_place(const std::string& dest, const std::vector<char>& head, std::span<const GgufTensorSpec> tensors,
                      const GgufRowSource& source, const GgufStreamOptions& options) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(dest.c_str(), "wb"));
  if (!f) return Status::FromErrno(errno, "create " + dest);
  KVTIER_RETURN_IF_ERROR(write_whole(f.get(), dest, head, tensors, source, options, false));
  if (std::fclose(f.release()) != 0) return Status::FromErrno(errno, "close " + dest);
  return Status::Ok();
}

}  // namespace

Status write_gguf_stream(const std::string& path, const GgufMetadata& metadata, std::span<const GgufTensorSpec> tensors,
                         const GgufRowSource& source, const GgufStreamOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<char> head, header(metadata, tensors));
  // A regular file (or none yet) is written beside its place and renamed over it once whole: a
  // failed or killed run leaves the file that was there (a bad tensor half way truncated it).
  struct stat old {};
  const bool exists = ::stat(path.c_str(), &old) == 0;  // through links, /proc's too
  if (exists && !S_ISREG(old.st_mode)) return write_in_place(path, head, tensors, source, options);
  const std::string dest = final_destination(path);
  const std::string partial = dest + ".partial-" + std::to_string(::getpid());
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(partial.c_str(), "wbx"));
  if (!f && exists && (errno == EACCES || errno == EPERM || errno == EROFS))
    return write_in_place(dest, head, tensors, source, options);  // a writable file in a closed directory
  if (!f) return Status::FromErrno(errno, "create " + partial);
  if (exists) {  // the file keeps its mode and, where this process may give it, its owner
    (void)::fchmod(::fileno(f.get()), old.st_mode & 07777);
    (void)::fchown(::fileno(f.get()), old.st_uid, old.st_gid);
  }
  Status s = write_whole(f.get(), path, head, tensors, source, options, true);
  if (s.ok() && std::fclose(f.release()) != 0) s = Status::FromErrno(errno, "close " + partial);
  if (s.ok() && std::rename(partial.c_str(), dest.c_str()) != 0) s = Status::FromErrno(errno, "rename to " + dest);
  if (!s.ok()) {
    f.reset();
    std::remove(partial.c_str());
  }
  return s;
}

std::vector<GgufModelTensor> gguf_model_tensors(const ModelConfig& c) {
  using Slot = GgufModelTensor::Slot;
  const uint64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_size, v = c.vocab_size;
  std::vector<GgufModelTensor> t;
  auto add = [&](std::string name, uint64_t cols, uint64_t rows, Slot slot, uint32_t layer, uint64_t first_row) {
    t.push_back({std::move(name), cols, rows, slot, layer, first_row});
  };
  add("token_embd.weight", h, v, Slot::kTokenEmbd, 0, 0);
  add("output_norm.weight", h, 0, Slot::kOutputNorm, 0, 0);
  if (!c.tied_embeddings) add("output.weight", h, v, Slot::kOutput, 0, 0);
  if (!c.rope_freq_factors.empty()) add("rope_freqs.weight", c.head_dim / 2, 0, Slot::kRopeFreqs, 0, 0);
  for (uint32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", h, 0, Slot::kAttnNorm, i, 0);
    add(p + "attn_q.weight", h, q, Slot::kWqkv, i, 0);
    add(p + "attn_k.weight", h, kv, Slot::kWqkv, i, q);
    add(p + "attn_v.weight", h, kv, Slot::kWqkv, i, q + kv);
    if (c.has_qkv_bias()) {
      add(p + "attn_q.bias", q, 0, Slot::kBqkv, i, 0);
      add(p + "attn_k.bias", kv, 0, Slot::kBqkv, i, q);
      add(p + "attn_v.bias", kv, 0, Slot::kBqkv, i, q + kv);
    }
    add(p + "attn_output.weight", q, h, Slot::kWo, i, 0);
    add(p + "ffn_norm.weight", h, 0, Slot::kFfnNorm, i, 0);
    add(p + "ffn_gate.weight", h, f, Slot::kWGateUp, i, 0);
    add(p + "ffn_up.weight", h, f, Slot::kWGateUp, i, f);
    add(p + "ffn_down.weight", f, h, Slot::kWDown, i, 0);
  }
  return t;
}

Result<std::vector<GgufTensorSpec>> gguf_tensor_specs(const ModelConfig& c, std::span<const GgufModelTensor> layout,
                                                      const WeightFormat& format) {
  std::vector<GgufTensorSpec> specs;
  for (const GgufModelTensor& t : layout) {
    if (t.rows == 0) {
      specs.push_back({t.name, {t.cols}, GgufType::kF32});
      continue;
    }
    const MatrixRole role{.name = t.name, .layer = t.layer, .n_layers = c.num_layers, .row_length = t.cols,
                          .has_output = !c.tied_embeddings, .model_70b = is_llama_cpp_70b(c)};
    KVTIER_ASSIGN_OR_RETURN(GgufType type, matrix_type(format, role));
    specs.push_back({t.name, {t.cols, t.rows}, type});
  }
  return specs;
}

GgufMetadata gguf_model_metadata(const ModelConfig& config, const Vocab& vocab, const GgufWriteOptions& options) {
  Buffer meta;
  put_hparams(config, options, meta);
  put_vocab(vocab, meta);
  return meta.take();
}

Result<GgufMetadata> gguf_copy_metadata(std::span<const std::byte> file, const WeightFormat& format,
                                        std::string_view what) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(file.data());
  gguf_detail::Cursor cur(bytes, file.size(), what);
  uint32_t magic = 0, version = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  KVTIER_RETURN_IF_ERROR(cur.pod(magic, "magic"));
  if (magic != gguf::kMagic) return cur.corrupt("bad magic: not a GGUF file");
  KVTIER_RETURN_IF_ERROR(cur.pod(version, "version"));
  if (version != gguf::kVersion) return cur.corrupt("GGUF version " + std::to_string(version) + " (only 3)");
  KVTIER_RETURN_IF_ERROR(cur.pod(n_tensors, "tensor count"));
  KVTIER_RETURN_IF_ERROR(cur.pod(n_kv, "metadata count"));
  const bool quantized = format.q4_k_m || !is_float(format.type);
  // The keys the copy rewrites, with their new values (quantization_version only for a quantised copy).
  std::vector<std::pair<std::string, uint32_t>> rewritten = {{"general.file_type", format.file_type()},
                                                             {"general.alignment", gguf::kDefaultAlignment}};
  if (quantized) rewritten.emplace_back("general.quantization_version", kQuantizationVersion);
  std::vector<bool> seen(rewritten.size(), false);
  Buffer meta;
  for (uint64_t k = 0; k < n_kv; ++k) {
    const size_t start = cur.offset();
    std::string key;
    uint32_t type = 0;
    gguf_detail::Value value;
    KVTIER_RETURN_IF_ERROR(cur.str(key, "metadata key"));
    KVTIER_RETURN_IF_ERROR(cur.pod(type, "metadata value type"));
    if (type > uint32_t(ValueType::kF64)) return cur.corrupt("metadata '" + key + "' has unknown value type");
    KVTIER_RETURN_IF_ERROR(cur.value(ValueType(type), value, 0));  // walked, not kept: its bytes are copied
    const auto it = std::find_if(rewritten.begin(), rewritten.end(), [&](const auto& kv) { return kv.first == key; });
    if (it == rewritten.end()) {
      meta.raw_entry(bytes + start, cur.offset() - start);
    } else if (!seen[size_t(it - rewritten.begin())]) {
      seen[size_t(it - rewritten.begin())] = true;
      meta.kv_u32(key, it->second);
    }
  }
  for (size_t i = 0; i < rewritten.size(); ++i)
    if (!seen[i]) meta.kv_u32(rewritten[i].first, rewritten[i].second);
  return meta.take();
}

Status write_gguf(const Model& model, const std::string& path, const GgufWriteOptions& options,
                  const GgufStreamOptions& stream) {
  using Slot = GgufModelTensor::Slot;
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  const std::vector<GgufModelTensor> layout = gguf_model_tensors(c);
  KVTIER_ASSIGN_OR_RETURN(std::vector<GgufTensorSpec> specs, gguf_tensor_specs(c, layout, options.weight_type));
  auto source = [&](size_t index, uint64_t r0, uint64_t rows, float* out) {
    const GgufModelTensor& t = layout[index];
    const LayerWeights* l = t.layer < w.layers.size() ? &w.layers[t.layer] : nullptr;
    const Linear* matrix = nullptr;
    const std::vector<float>* vec = nullptr;
    switch (t.slot) {
      case Slot::kTokenEmbd: matrix = &w.token_embd; break;
      case Slot::kOutput: matrix = &w.output; break;
      case Slot::kWqkv: matrix = &l->wqkv; break;
      case Slot::kWo: matrix = &l->wo; break;
      case Slot::kWGateUp: matrix = &l->w_gate_up; break;
      case Slot::kWDown: matrix = &l->w_down; break;
      case Slot::kOutputNorm: vec = &w.output_norm; break;
      case Slot::kRopeFreqs: vec = &c.rope_freq_factors; break;
      case Slot::kAttnNorm: vec = &l->attn_norm; break;
      case Slot::kFfnNorm: vec = &l->ffn_norm; break;
      case Slot::kBqkv: vec = &l->bqkv; break;
    }
    if (matrix != nullptr) matrix->rows_f32(t.first_row + r0, rows, out);
    else std::memcpy(out, vec->data() + t.first_row, size_t(t.cols) * sizeof(float));
    return Status::Ok();
  };
  return write_gguf_stream(path, gguf_model_metadata(c, model.vocab(), options), specs, source, stream);
}

}  // namespace kvtier::engine
