// Launchers of the CUDA engine's kernels (engine_kernels.cu): the parts of
// the reference Llama forward pass that are not GEMMs. Plain types only, so
// the g++-compiled engine can call them. All row-major f32 activations;
// semantics match src/engine (RMSNorm, adjacent-pair RoPE, GQA, SwiGLU,
// causal paged attention over the page-first pool).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::cuda {

// Where one layer's K and V of a page-first pool live.
struct KVPoolView {
  std::byte* base = nullptr;  // pool base (device)
  size_t page_bytes = 0;
  size_t layer_offset = 0;  // offset of the layer's slice in a page
  size_t v_offset = 0;      // offset of V inside a layer slice
  size_t token_bytes = 0;   // bytes of K (or V) of one token: kv_heads * head_dim * elem
  uint32_t page_tokens = 0;
  int dtype = 0;            // DType: 0 f32, 1 f16, 2 bf16
};

// x[r] = table[tokens[r]] (rows of `width`).
cudaError_t launch_embed(const float* table, const int32_t* tokens, uint32_t rows, uint32_t width, float* x,
                         cudaStream_t s);
// out[r] = x[r] / rms(x[r]) * w.
cudaError_t launch_rmsnorm(const float* x, const float* w, float* out, uint32_t rows, uint32_t width, float eps,
                           cudaStream_t s);
// Rotates the Q and K heads of each qkv row (row r at position pos[r], angles
// cs[r][D/2][2]) and stores K and V of row r into the pool at pos[r], through
// page table tables + table_off[r].
struct RopeStoreArgs {
  float* qkv = nullptr;
  uint32_t rows = 0;
  uint32_t row_stride = 0;  // q_dim + 2 kv_dim
  uint32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const float* cs = nullptr;
  const uint32_t* pos = nullptr;
  const uint32_t* table_off = nullptr;
  const uint32_t* tables = nullptr;
  KVPoolView kv;
};
cudaError_t launch_rope_store(const RopeStoreArgs& a, cudaStream_t s);
// act[r][i] = silu(gu[r][i]) * gu[r][F + i].
cudaError_t launch_swiglu(const float* gu, float* act, uint32_t rows, uint32_t ffn, cudaStream_t s);

// Causal attention of n_tokens query tokens at positions pos0.. over the
// keys [0, pos0 + t] held in the pool through `table`.
struct AttentionArgs {
  const float* q = nullptr;  // token t, head h at q[t * q_stride + h * head_dim]
  uint32_t q_stride = 0;
  float* out = nullptr;  // same indexing with out_stride
  uint32_t out_stride = 0;
  uint32_t n_tokens = 0, pos0 = 0;
  uint32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  const uint32_t* table = nullptr;
  KVPoolView kv;
};
// Head dims the kernel is instantiated for (16, 32, 64, 128); group size <= 64.
bool attention_supported(uint32_t head_dim, uint32_t group_size);
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t s);

// out[i] = bf16(in[i]) (round to nearest even), for bf16 GEMM inputs.
cudaError_t launch_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t s);

}  // namespace kvtier::cuda
