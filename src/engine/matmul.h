// Internal: Y = X · Wᵀ for a weight matrix held in its file types
// (engine/weights.h), split across the engine's workers.
//
// Per part of W: F32 parts go to BLAS (gemv for one or two rows, sgemm
// otherwise). Other types take one of two paths, chosen per engine:
//  - quantized (the default): each row of X is quantized once per call into
//    the blocks the part's type pairs with (engine/qdot.h) and every output is
//    one integer dot product of a weight row with an activation row — the
//    same function whatever the batch, so a token's result never depends on
//    which other tokens share the call (what the cache's exactness relies on).
//    A part packed for a kernel set (qdot::Packing) runs the set's group dot,
//    which keeps that promise;
//  - exact: a panel of weight rows is dequantized into per-worker scratch and
//    multiplied in f32 (BLAS), as if the file had been widened to f32 at load.
// One caller at a time (the engine's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/qdot.h"
#include "engine/weights.h"
#include "engine/worker_pool.h"

namespace kvtier::engine {

class Matmul {
 public:
  // `split_gemm`: BLAS calls are single-threaded, one per worker (else one threaded call).
  Matmul(WorkerPool& workers, bool split_gemm, bool exact, const qdot::Kernels& kernels = qdot::best());

  // Y[r][0 .. W.rows()) = X[r] · Wᵀ + beta · Y[r] for rows r < m; X rows hold W.cols() floats, Y rows ldy.
  void run(const float* x, uint32_t m, const Linear& w, float* y, uint32_t ldy, float beta);

  const qdot::Kernels& kernels() const { return k_; }

  // Whether run() gives a row of X the same result bit for bit whatever the other rows of the call
  // (true of the dot-product paths; BLAS's GEMM rounds by batch).
  bool rounds_rows_alike(const Linear& w) const;

 private:
  enum class Path { kBlas, kPanel, kGroup, kDot };
  Path path(const WeightPart& p) const;
  void f32_part(const float* x, uint32_t m, const float* w, uint32_t k, uint32_t n, float* y, uint32_t ldy, float beta);
  // Runs fill(r0, rows, activations, count, tile) over 16 × 16 tiles of the tokens and w's rows.
  template <typename Fill>
  void tiled(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta, Fill&& fill);
  void dot_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta);
  void group_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta);
  void panel_part(const float* x, uint32_t m, const WeightPart& w, float* y, uint32_t ldy, float beta);
  // The activation rows of x for weights of type t: quantized into act_ (once per call per format).
  const std::byte* activations(const float* x, uint32_t m, uint32_t k, GgufType t, size_t& row_bytes);

  WorkerPool& workers_;
  bool split_gemm_, exact_;
  const qdot::Kernels& k_;
  std::vector<std::byte> act_[3];  // by qdot::ActType
  const float* act_src_[3] = {};   // the x each was made from in this call
  std::vector<std::vector<float>> panels_;
};

}  // namespace kvtier::engine
