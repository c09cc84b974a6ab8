// Weight matrices held in the type their file stores them in.
//
// A Linear is a matrix [rows][cols] (row-major [out][in], GGUF ne = [in, out])
// made of one or more parts stacked by rows, each part one GGUF type: a
// Q4_K_M file stores attn_q and attn_k as Q4_K but attn_v as Q6_K, so the
// fused QKV projection is two parts; adjacent tensors of one type are merged
// into one part. Parts own 64-byte-aligned copies of the file's blocks
// (never widened to f32); an F32 part is plain floats that BLAS reads. A part
// may hold its rows regrouped as a kernel set wants (qdot::Packing, by
// Linear::pack once the matrix is whole); its file rows stay readable.
//
// Immutable once built; safe to read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/qdot.h"
#include "engine/quant.h"

namespace kvtier::engine {

// One part: `rows` rows of `cols` elements of `type`, row after row (packing kRows), or in
// groups of qdot::kGroupRows rows in a packed layout.
class WeightPart {
 public:
  WeightPart() = default;
  // Copies `bytes` (exactly rows * row_bytes of the type) into an aligned buffer.
  static Result<WeightPart> from_bytes(GgufType type, uint64_t rows, uint64_t cols, std::span<const std::byte> bytes);
  // Takes `values` as rows of `cols` floats (a trailing partial row is not part of the matrix).
  static WeightPart from_f32(std::vector<float> values, uint64_t cols);
  // Rows [r0, r0 + n) of `from` in layout p (p's type, n a multiple of kGroupRows) or, for kRows,
  // as the file stores them.
  static WeightPart repacked(const WeightPart& from, uint64_t r0, uint64_t n, qdot::Packing p);

  GgufType type() const { return type_; }
  qdot::Packing packing() const { return packing_; }
  uint64_t rows() const { return rows_; }
  uint64_t cols() const { return cols_; }
  size_t row_bytes() const { return size_t(quant::row_bytes(quant::info(type_), cols_)); }
  size_t bytes() const { return size_t(qdot::packed_matrix_bytes(packing_, type_, rows_, cols_)); }
  // Row r's bytes (packing kRows only).
  const std::byte* row(uint64_t r) const { return data_.get() + size_t(r) * row_bytes(); }
  // Group g's bytes (a packed part only).
  const std::byte* group(uint64_t g) const { return data_.get() + size_t(g) * qdot::group_bytes(packing_, cols_); }
  // Row r as the file stores it, whatever the packing: row(r), or unpacked into `scratch`
  // (row_bytes() of it).
  const std::byte* file_row(uint64_t r, std::byte* scratch) const;
  // The floats of an F32 part (nullptr for other types).
  const float* f32() const { return type_ == GgufType::kF32 ? reinterpret_cast<const float*>(data_.get()) : nullptr; }

 private:
  GgufType type_ = GgufType::kF32;
  qdot::Packing packing_ = qdot::Packing::kRows;
  uint64_t rows_ = 0, cols_ = 0;
  std::shared_ptr<std::byte> data_;
};

class Linear {
 public:
  Linear() = default;
  // An F32 matrix of rows of `cols` floats (synthetic models); empty values give an empty matrix.
  static Linear f32(std::vector<float> values, uint64_t cols);
  // Appends `part` below the rows already held; a part of the last part's type is merged into it
  // (one part per run of a type). cols must agree.
  Status append(WeightPart part);
  // Regroups each part whose type `kernels` wants packed: its whole groups of rows into one
  // packed part, the rows past them (fewer than kGroupRows) into a part as the file stores them.
  // Call once the matrix is whole (append merges parts as the file stores them).
  void pack(const qdot::Kernels& kernels);

  uint64_t rows() const { return rows_; }
  uint64_t cols() const { return cols_; }
  bool empty() const { return parts_.empty(); }
  std::span<const WeightPart> parts() const { return parts_; }
  // Bytes held in memory.
  uint64_t bytes() const;
  // The floats when the whole matrix is one F32 part, else nullptr.
  const float* f32() const { return parts_.size() == 1 ? parts_[0].f32() : nullptr; }

  // Rows [r0, r0 + n) as f32 into out[n][cols] (dequantized; exactly ggml's values).
  void rows_f32(uint64_t r0, uint64_t n, float* out) const;
  // The whole matrix as f32 (one tensor at a time: Python's accessors, CUDA upload, tests).
  std::vector<float> to_f32() const;

 private:
  uint64_t rows_ = 0, cols_ = 0;
  std::vector<WeightPart> parts_;
};

}  // namespace kvtier::engine
