// `kvtier model quantize`: a GGUF file of float matrices re-encoded in another
// weight format, streamed from the mapped input one chunk of rows at a time.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <memory>
#include <optional>

#include "engine/gguf.h"

namespace kvtier::engine {
namespace {

// A file mapped read-only for the life of the object.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size == 0) {
      const int err = errno;
      ::close(fd);
      return st.st_size == 0 ? Status::Corruption(path + ": empty file, not GGUF")
                             : Status::FromErrno(err, "stat " + path);
    }
    void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map == MAP_FAILED) return Status::FromErrno(err, "mmap " + path);
    return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const std::byte*>(map), size_t(st.st_size)));
  }
  ~MappedFile() { ::munmap(const_cast<std::byte*>(data_), size_); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  MappedFile(const std::byte* data, size_t size) : data_(data), size_(size) {}
  const std::byte* data_;
  size_t size_;
};

// N of a "blk.N." tensor name; nullopt for model-wide tensors.
std::optional<uint32_t> block_of(std::string_view name) {
  if (!name.starts_with("blk.")) return std::nullopt;
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), n);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return std::nullopt;
  return n;
}

const GgufTensor* find(const std::vector<GgufTensor>& tensors, std::string_view name) {
  for (const GgufTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// The specs of the output file: matrices (2+ dimensions) in the type `format`
// gives their role (as llama.cpp would see the file's blocks), the others as stored.
Result<std::vector<GgufTensorSpec>> output_specs(const std::vector<GgufTensor>& tensors, const WeightFormat& format,
                                                 const std::string& in) {
  uint32_t blocks = 0;
  for (const GgufTensor& t : tensors)
    if (auto b = block_of(t.name)) blocks = std::max(blocks, *b + 1);
  // is_llama_cpp_70b from the tensors: 80 blocks, and Q/K/V biases (qwen2) or fewer K rows than Q rows.
  const GgufTensor* q = find(tensors, "blk.0.attn_q.weight");
  const GgufTensor* k = find(tensors, "blk.0.attn_k.weight");
  const bool gqa = q && k && q->shape.size() > 1 && k->shape.size() > 1 && k->shape[1] < q->shape[1];
  const bool model_70b = blocks == 80 && (gqa || find(tensors, "blk.0.attn_q.bias") != nullptr);
  std::vector<GgufTensorSpec> specs;
  for (const GgufTensor& t : tensors) {
    if (t.shape.size() < 2) {
      specs.push_back({t.name, t.shape, t.type});
      continue;
    }
    if (t.type != GgufType::kF32 && t.type != GgufType::kF16 && t.type != GgufType::kBF16)
      return Status::InvalidArgument(in + ": tensor '" + t.name + "' is already " +
                                     std::string(quant::info(t.type).name) +
                                     "; model quantize converts files whose matrices are f32, f16 or bf16");
    const MatrixRole role{.name = t.name, .layer = block_of(t.name).value_or(0), .n_layers = blocks,
                          .row_length = t.shape[0], .has_output = find(tensors, "output.weight") != nullptr,
                          .model_70b = model_70b};
    KVTIER_ASSIGN_OR_RETURN(GgufType type, matrix_type(format, role));
    specs.push_back({t.name, t.shape, type});
  }
  return specs;
}

}  // namespace

Status quantize_gguf(const std::string& in, const std::string& out, const WeightFormat& format,
                     const GgufStreamOptions& stream) {
  std::error_code ec;
  if (std::filesystem::equivalent(in, out, ec))
    return Status::InvalidArgument("model quantize: the output " + out + " is the input file");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> map, MappedFile::open(in));
  const std::span<const std::byte> bytes = map->bytes();
  KVTIER_ASSIGN_OR_RETURN(std::vector<GgufTensor> tensors, parse_gguf_tensors(bytes, /*dequantize=*/false, in));
  std::sort(tensors.begin(), tensors.end(),
            [](const GgufTensor& a, const GgufTensor& b) { return a.file_offset < b.file_offset; });
  KVTIER_ASSIGN_OR_RETURN(std::vector<GgufTensorSpec> specs, output_specs(tensors, format, in));
  KVTIER_ASSIGN_OR_RETURN(GgufMetadata metadata, gguf_copy_metadata(bytes, format, in));
  auto source = [&](size_t index, uint64_t first_row, uint64_t rows, float* values) {
    const GgufTensor& t = tensors[index];
    const uint64_t row_bytes = quant::row_bytes(quant::info(t.type), t.shape[0]);
    const auto rows_bytes = bytes.subspan(size_t(t.file_offset + first_row * row_bytes), size_t(rows * row_bytes));
    const size_t n = size_t(rows * t.shape[0]);
    if (quant::first_nonfinite(t.type, rows_bytes, n) != n)  // as the loader refuses it (a NaN quantized to 0 loaded)
      return Status::Corruption(in + ": tensor '" + t.name + "' holds a NaN or infinite value");
    return quant::dequantize_row(t.type, rows_bytes, n, values);
  };
  return write_gguf_stream(out, metadata, specs, source, stream);
}

}  // namespace kvtier::engine
