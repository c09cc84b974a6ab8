#include "engine/matmul.h"

#include <cblas.h>

#include <algorithm>

namespace kvtier::engine {

namespace {

// Y[M][n0:n1] = X[M][K] · W[n0:n1][K]^T + beta · Y[M][n0:n1] (row stride of Y: ldy).
void blas_cols(const float* x, uint32_t m, uint32_t k, const float* w, uint32_t n0, uint32_t n1, float* y, uint32_t ldy,
               float beta) {
  const float* wb = w + size_t(n0) * k;
  // For one or two rows (decode), sgemm would pack the whole weight block on
  // every call; gemv streams it once per row instead.
  if (m <= 2) {
    for (uint32_t r = 0; r < m; ++r)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(n1 - n0), int(k), 1.0f, wb, int(k), x + size_t(r) * k, 1, beta,
                  y + size_t(r) * ldy + n0, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n1 - n0), int(k), 1.0f, x, int(k), wb, int(k), beta,
              y + n0, int(ldy));
}

// Output columns per task: enough tasks for the workers to balance, blocks a multiple of 16.
uint32_t column_block(uint32_t n, uint32_t workers) {
  const uint32_t tasks = std::max(1u, workers * 4);
  return std::max(16u, (n + tasks * 16 - 1) / (tasks * 16) * 16);
}

// y[j][0..rows) = tile[j][0..rows) (+ beta · y) for tokens j < count: contiguous runs, which
// the compiler vectorizes.
template <uint32_t T, uint32_t R>
void store_tile(const float (&tile)[T][R], uint32_t rows, uint32_t count, float* y, uint32_t ldy, float beta) {
  for (uint32_t j = 0; j < count; ++j) {
    float* out = y + size_t(j) * ldy;
    if (beta == 0.0f) {
      for (uint32_t i = 0; i < rows; ++i) out[i] = tile[j][i];
    } else {
      for (uint32_t i = 0; i < rows; ++i) out[i] = tile[j][i] + beta * out[i];
    }
  }
}

}  // namespace

Matmul::Matmul(WorkerPool& workers, bool split_gemm, bool exact, const qdot::Kernels& kernels)
    : workers_(workers), split_gemm_(split_gemm), exact_(exact), k_(kernels), panels_(workers.size()) {}

void Matmul::run(const float* x, uint32_t m, const Linear& w, float* y, uint32_t ldy, float beta) {
  std::fill(std::begin(act_src_), std::end(act_src_), nullptr);
  uint32_t c0 = 0;
  for (const WeightPart& p : w.parts()) {
    switch (path(p)) {
      case Path::kBlas: f32_part(x, m, p.f32(), uint32_t(p.cols()), uint32_t(p.rows()), y + c0, ldy, beta); break;
      case Path::kPanel: panel_part(x, m, p, y + c0, ldy, beta); break;
      case Path::kGroup: group_part(x, m, p, y + c0, ldy, beta); break;
      case Path::kDot: dot_part(x, m, p, y + c0, ldy, beta); break;
    }
    c0 += uint32_t(p.rows());
  }
}

Matmul::Path Matmul::path(const WeightPart& p) const {
  if (p.f32()) return Path::kBlas;
  if (exact_ || (!k_.dot[uint32_t(p.type())] && p.packing() == qdot::Packing::kRows)) return Path::kPanel;
  return p.packing() != qdot::Packing::kRows ? Path::kGroup : Path::kDot;
}

bool Matmul::rounds_rows_alike(const Linear& w) const {
  return std::all_of(w.parts().begin(), w.parts().end(), [&](const WeightPart& p) {
    const Path x = path(p);
    return x == Path::kGroup || x == Path::kDot;
  });
}

void Matmul::f32_part(const float* x, uint32_t m, const float* w, uint32_t k, uint32_t n, float* y, uint32_t ldy,
                      float beta) {
  const uint32_t T = workers_.size();
  if (!split_gemm_ || T == 1 || double(m) * n * k < 1e6) return blas_cols(x, m, k, w, 0, n, y, ldy, beta);
  const uint32_t block = (n + T * 16 - 1) / (T * 16) * 16;  // multiples of 16 columns keep rows aligned
  workers_.run((n + block - 1) / block, [&](size_t t, uint32_t) {
    const uint32_t n0 = uint32_t(t) * block;
    blas_cols(x, m, k, w, n0, std::min(n, n0 + block), y, ldy, beta);
  });
}

const std::byte* Matmul::activations(const float* x, uint32_t m, uint32_t k, GgufType t, size_t& row_bytes) {
  const qdot::ActType a = qdot::act_type(t);
  row_bytes = qdot::act_row_bytes(a, k);
  if (a == qdot::ActType::kF32) return reinterpret_cast<const std::byte*>(x);
  const int i = int(a);
  if (act_src_[i] != x) {
    act_[i].resize(size_t(m) * row_bytes);
    const qdot::QuantizeFn q = a == qdot::ActType::kQ8 ? k_.quantize_q8 : k_.quantize_q8k;
    workers_.run(m, [&](size_t r, uint32_t) { q(x + r * k, k, act_[i].data() + r * row_bytes); });
    act_src_[i] = x;
  }
  return act_[i].data();
}

// Tiles of 16 tokens × 16 weight rows: a block of weight rows and its tokens' activations stay in
// L1 (16 tokens measured faster than 8, 32 and 64 on small Q4_K_M's prefill), each weight row is
// unpacked once per token block, and a tile is written out token-major.
namespace {
constexpr uint32_t kTileTokens = qdot::kDotN, kTileRows = qdot::kGroupRows;
using Tile = float[kTileTokens][kTileRows];  // [token][row]: a token's outputs are contiguous in y
}  // namespace

template <typename Fill>
void Matmul::tiled(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta, Fill&& fill) {
  const uint32_t k = uint32_t(w.cols()), n = uint32_t(w.rows());
  size_t arow = 0;
  const std::byte* act = activations(x, m, k, w.type(), arow);
  const uint32_t block = column_block(n, workers_.size());  // a multiple of kTileRows
  workers_.run((n + block - 1) / block, [&](size_t t, uint32_t) {
    const uint32_t n0 = uint32_t(t) * block, n1 = std::min(n, n0 + block);
    for (uint32_t t0 = 0; t0 < m; t0 += kTileTokens) {
      const uint32_t count = std::min(m - t0, kTileTokens);
      const void* a[kTileTokens];
      for (uint32_t j = 0; j < count; ++j) a[j] = act + size_t(t0 + j) * arow;
      for (uint32_t r0 = n0; r0 < n1; r0 += kTileRows) {
        const uint32_t rows = std::min(n1 - r0, kTileRows);
        Tile tile;
        fill(r0, rows, a, count, tile);
        store_tile(tile, rows, count, y + size_t(t0) * ldy + r0, ldy, beta);
      }
    }
  });
}

void Matmul::dot_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta) {
  const size_t k = w.cols();
  const qdot::DotFn dot = k_.dot[uint32_t(w.type())];
  const qdot::DotNFn dot_n = k_.dot_n[uint32_t(w.type())];
  tiled(x, m, w, y, ldy, beta, [&](uint32_t r0, uint32_t rows, const void* const* a, uint32_t count, Tile& tile) {
    for (uint32_t i = 0; i < rows; ++i) {
      if (dot_n && count > 1) {  // bit for bit dot per token (qdot.h)
        dot_n(k, w.row(r0 + i), a, int(count), &tile[0][i], kTileRows);
      } else {
        for (uint32_t j = 0; j < count; ++j) tile[j][i] = dot(k, w.row(r0 + i), a[j]);
      }
    }
  });
}

// A packed part's rows are whole groups, so each tile is one group.
void Matmul::group_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta) {
  const size_t k = w.cols();
  const qdot::GroupDotFn dot = k_.group_dot[int(w.packing())];
  tiled(x, m, w, y, ldy, beta, [&](uint32_t r0, uint32_t, const void* const* a, uint32_t count, Tile& tile) {
    dot(k, w.group(r0 / kTileRows), a, int(count), &tile[0][0], kTileRows);
  });
}

void Matmul::panel_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta) {
  const uint32_t k = uint32_t(w.cols()), n = uint32_t(w.rows());
  const uint32_t block = std::min(column_block(n, workers_.size()), std::max(16u, (1u << 18) / k / 16 * 16));
  workers_.run((n + block - 1) / block, [&](size_t t, uint32_t worker) {
    const uint32_t n0 = uint32_t(t) * block, n1 = std::min(n, n0 + block);
    std::vector<float>& panel = panels_[worker];
    panel.resize(size_t(block) * k);
    std::vector<std::byte> row(w.row_bytes());
    for (uint32_t r = n0; r < n1; ++r)
      (void)quant::dequantize_row(w.type(), std::span(w.file_row(r, row.data()), w.row_bytes()), k,
                                  panel.data() + size_t(r - n0) * k);
    blas_cols(x, m, k, panel.data(), 0, n1 - n0, y + n0, ldy, beta);
  });
}

}  // namespace kvtier::engine
