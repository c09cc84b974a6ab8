// CudaEngine: the reference Llama forward pass (engine/engine.h) on one CUDA
// device, reading and writing KV in a BlockPool that lives in device memory.
//
// Same contract as engine::Engine: the caller owns pages and page tables
// (engine::SequenceKV), prefill() computes positions >= start_pos and attends
// over KV already in the pages, decode() advances a batch by one token, and
// results come back as host engine::Logits. Projections and the MLP are
// cuBLAS GEMMs on f32 weights (pure f32 math, no TF32) or bf16 weights (f32
// accumulation, activations rounded to bf16 at each GEMM input); RMSNorm,
// RoPE, SwiGLU and the paged attention are our kernels (engine_kernels.cu).
//
// Layer-wise loads: PrefillOptions::layer_hook runs on the host before
// layer l is enqueued on stream(); a hook that calls
// LayerEvents::wait_on(l, engine.stream()) makes layer l's compute wait, on
// the device, for exactly layer l of a CopyEngine load.
//
// Thread safety: one thread at a time (the engine owns a stream, cuBLAS
// handle and scratch). The Model is shared read-only; its weights are copied
// to the device at create(). The pool must outlive the engine.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>

#include "engine/engine.h"

namespace kvtier::cuda {

struct CudaEngineOptions {
  uint32_t prefill_chunk = 4096;  // tokens per pass through a layer (bounds scratch memory)
  DType weights = DType::kF32;    // kF32 or kBF16 device copies of the matrices
  Status validate() const;
};

class CudaEngine final : public engine::Forward {
 public:
  // The pool must be in CUDA device memory (MemoryBackend::kCuda) with the
  // model's KV geometry; head_dim must be 16, 32, 64 or 128. Architectures:
  // llama, with any RoPE scaling (the RoPE table is the CPU engine's); qwen2
  // is Unimplemented (the CPU engine is the reference for it).
  static Result<std::unique_ptr<CudaEngine>> create(std::shared_ptr<const engine::Model> model, BlockPool& pool,
                                                    const CudaEngineOptions& options = {});
  ~CudaEngine();
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  Result<engine::Logits> prefill(engine::SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                                 const engine::PrefillOptions& options = {}) override;
  Result<engine::Logits> decode(std::span<engine::SequenceKV* const> seqs, std::span<const TokenId> tokens) override;

  const engine::Model& model() const override { return *model_; }
  const KVGeometry& geometry() const override { return geometry_; }
  // The compute stream (non-blocking); every kernel and GEMM of the engine runs on it.
  cudaStream_t stream() const;
  const engine::EngineProfile& profile() const override { return profile_; }
  void reset_profile() override { profile_ = {}; }

 private:
  struct Impl;
  CudaEngine(std::shared_ptr<const engine::Model> model, BlockPool& pool, const CudaEngineOptions& options);

  std::shared_ptr<const engine::Model> model_;
  BlockPool& pool_;
  KVGeometry geometry_;
  CudaEngineOptions options_;
  engine::EngineProfile profile_;
  std::unique_ptr<Impl> impl_;
};

// Makes engine::create_forward build a CudaEngine (default options) for pools in CUDA memory.
void register_cuda_engine();

}  // namespace kvtier::cuda
