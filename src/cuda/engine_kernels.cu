// Non-GEMM kernels of the CUDA engine. Accurate libm functions (expf,
// rsqrtf is avoided) and round-to-nearest-even conversions keep results
// within float rounding of the CPU engine; no fast-math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/engine_kernels.h"

namespace kvtier::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0.0f;
  if (warp == 0) {
    t = lane < int(blockDim.x / 32) ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) red[0] = t;
  }
  __syncthreads();
  t = red[0];
  __syncthreads();
  return t;
}

__global__ void embed_kernel(const float* table, const int32_t* tokens, uint32_t width, float* x) {
  const float* src = table + size_t(tokens[blockIdx.x]) * width;
  float* dst = x + size_t(blockIdx.x) * width;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
}

__global__ void rmsnorm_kernel(const float* x, const float* w, float* out, uint32_t width, float eps) {
  __shared__ float red[32];
  const float* row = x + size_t(blockIdx.x) * width;
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) ss += row[i] * row[i];
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / float(width) + eps);
  float* o = out + size_t(blockIdx.x) * width;
  for (uint32_t i = threadIdx.x; i < width; i += blockDim.x) o[i] = row[i] * inv * w[i];
}

__device__ inline void store_elem(int dtype, std::byte* dst, uint32_t i, float v) {
  switch (dtype) {
    case 0: reinterpret_cast<float*>(dst)[i] = v; break;
    case 1: reinterpret_cast<__half*>(dst)[i] = __float2half_rn(v); break;
    default: reinterpret_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v); break;
  }
}

__device__ inline float load_elem(int dtype, const std::byte* src, uint32_t i) {
  switch (dtype) {
    case 0: return reinterpret_cast<const float*>(src)[i];
    case 1: return __half2float(reinterpret_cast<const __half*>(src)[i]);
    default: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(src)[i]);
  }
}

__device__ inline size_t elem_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

__global__ void rope_store_kernel(RopeStoreArgs a) {
  const uint32_t r = blockIdx.x;
  float* row = a.qkv + size_t(r) * a.row_stride;
  const uint32_t D = a.head_dim, half = D / 2;
  const uint32_t q_dim = a.num_heads * D, kv_dim = a.num_kv_heads * D;
  const float* cs = a.cs + size_t(r) * D;
  const uint32_t pos = a.pos[r];
  const uint32_t page = a.tables[a.table_off[r] + pos / a.kv.page_tokens];
  std::byte* k_dst = a.kv.base + size_t(page) * a.kv.page_bytes + a.kv.layer_offset +
                     size_t(pos % a.kv.page_tokens) * a.kv.token_bytes;
  std::byte* v_dst = k_dst + a.kv.v_offset;
  const uint32_t pairs = (a.num_heads + a.num_kv_heads) * half;
  for (uint32_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const uint32_t head = p / half, i = p % half;
    float* v = row + size_t(head) * D;  // K heads follow the Q heads in the row
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
    v[2 * i] = y0;
    v[2 * i + 1] = y1;
    if (head >= a.num_heads) {
      const uint32_t e = (head - a.num_heads) * D + 2 * i;
      store_elem(a.kv.dtype, k_dst, e, y0);
      store_elem(a.kv.dtype, k_dst, e + 1, y1);
    }
  }
  const float* vrow = row + q_dim + kv_dim;
  for (uint32_t e = threadIdx.x; e < kv_dim; e += blockDim.x) store_elem(a.kv.dtype, v_dst, e, vrow[e]);
}

__global__ void swiglu_kernel(const float* gu, float* act, uint32_t ffn) {
  const float* g = gu + size_t(blockIdx.x) * 2 * ffn;
  float* o = act + size_t(blockIdx.x) * ffn;
  for (uint32_t i = threadIdx.x; i < ffn; i += blockDim.x) o[i] = g[i] / (1.0f + expf(-g[i])) * g[ffn + i];
}

// ---- paged attention ----
// A block owns one KV head and a tile of query tokens: kRows query rows
// (token, head-in-group) share every K/V chunk it stages in shared memory.
// 4 threads per row: each scores 16 of the 64 keys of a chunk and
// accumulates D/4 output dims, with an online softmax across chunks.
constexpr uint32_t kRows = 64;
constexpr uint32_t kKeys = 64;

template <uint32_t D>
__global__ void __launch_bounds__(kRows * 4) attention_kernel(AttentionArgs a) {
  extern __shared__ float smem[];
  float* Qs = smem;                     // [kRows][D + 1]
  float* Ks = Qs + kRows * (D + 1);     // [kKeys][D + 1]
  float* Vs = Ks + kKeys * (D + 1);     // [kKeys][D]
  float* Ps = Vs + kKeys * D;           // [kRows][kKeys + 1]
  const uint32_t g = a.num_heads / a.num_kv_heads;
  const uint32_t T = kRows / g;  // tokens per block
  const uint32_t t0 = blockIdx.x * T, kvh = blockIdx.y;
  const uint32_t nt = min(T, a.n_tokens - t0), rows = nt * g;
  const uint32_t tid = threadIdx.x, r = tid / 4, sub = tid % 4;
  const size_t esz = elem_bytes(a.kv.dtype);

  for (uint32_t e = tid; e < rows * D; e += blockDim.x) {
    const uint32_t rr = e / D, d = e % D;
    const uint32_t tt = rr / g, hh = rr % g;
    Qs[rr * (D + 1) + d] = a.q[size_t(t0 + tt) * a.q_stride + size_t(kvh * g + hh) * D + d] * a.scale;
  }
  const bool valid = r < rows;
  const uint32_t my_pos = a.pos0 + t0 + (valid ? r / g : 0);
  const uint32_t n_keys = a.pos0 + t0 + nt;
  float m = -INFINITY, l = 0.0f;
  float acc[D / 4];
#pragma unroll
  for (uint32_t j = 0; j < D / 4; ++j) acc[j] = 0.0f;

  for (uint32_t kp = 0; kp < n_keys; kp += kKeys) {
    const uint32_t clen = min(kKeys, n_keys - kp);
    __syncthreads();  // previous chunk fully consumed (and Qs written, first time)
    for (uint32_t e = tid; e < clen * D; e += blockDim.x) {
      const uint32_t j = e / D, d = e % D, pos = kp + j;
      const uint32_t page = a.table[pos / a.kv.page_tokens];
      const std::byte* k = a.kv.base + size_t(page) * a.kv.page_bytes + a.kv.layer_offset +
                           size_t(pos % a.kv.page_tokens) * a.kv.token_bytes + size_t(kvh) * D * esz;
      Ks[j * (D + 1) + d] = load_elem(a.kv.dtype, k, d);
      Vs[j * D + d] = load_elem(a.kv.dtype, k + a.kv.v_offset, d);
    }
    __syncthreads();
    float s[kKeys / 4];
    float mx = -INFINITY;
#pragma unroll
    for (uint32_t jj = 0; jj < kKeys / 4; ++jj) {
      const uint32_t j = sub + 4 * jj;
      float v = -INFINITY;
      if (valid && j < clen && kp + j <= my_pos) {
        float dot = 0.0f;
#pragma unroll 16
        for (uint32_t d = 0; d < D; ++d) dot += Qs[r * (D + 1) + d] * Ks[j * (D + 1) + d];
        v = dot;
      }
      s[jj] = v;
      mx = fmaxf(mx, v);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
#pragma unroll
    for (uint32_t jj = 0; jj < kKeys / 4; ++jj) {
      const float p = s[jj] == -INFINITY ? 0.0f : expf(s[jj] - m_new);
      sum += p;
      Ps[r * (kKeys + 1) + sub + 4 * jj] = p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * alpha + sum;
    m = m_new;
    __syncwarp();  // a row's P is written and read by the same 4 lanes
#pragma unroll
    for (uint32_t j = 0; j < D / 4; ++j) acc[j] *= alpha;
    for (uint32_t j = 0; j < clen; ++j) {
      const float p = Ps[r * (kKeys + 1) + j];
#pragma unroll
      for (uint32_t jd = 0; jd < D / 4; ++jd) acc[jd] += p * Vs[j * D + sub + 4 * jd];
    }
  }
  if (!valid) return;
  const uint32_t tt = r / g, hh = r % g;
  float* out = a.out + size_t(t0 + tt) * a.out_stride + size_t(kvh * g + hh) * D;
  const float inv = 1.0f / l;
#pragma unroll
  for (uint32_t jd = 0; jd < D / 4; ++jd) out[sub + 4 * jd] = acc[jd] * inv;
}

template <uint32_t D>
cudaError_t attention_launch(const AttentionArgs& a, cudaStream_t s) {
  const size_t smem = sizeof(float) * (kRows * (D + 1) + kKeys * (D + 1) + kKeys * D + kRows * (kKeys + 1));
  // Above 48 KiB of dynamic shared memory a kernel must opt in (once per process is enough).
  static const cudaError_t attr =
      cudaFuncSetAttribute(attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (attr != cudaSuccess) return attr;
  const uint32_t g = a.num_heads / a.num_kv_heads;
  const uint32_t T = kRows / g;
  const dim3 grid((a.n_tokens + T - 1) / T, a.num_kv_heads);
  attention_kernel<D><<<grid, kRows * 4, smem, s>>>(a);
  return cudaGetLastError();
}

__global__ void to_bf16_kernel(const float* in, uint16_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 b = __float2bfloat16_rn(in[i]);
    out[i] = *reinterpret_cast<const uint16_t*>(&b);
  }
}

}  // namespace

cudaError_t launch_embed(const float* table, const int32_t* tokens, uint32_t rows, uint32_t width, float* x,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  embed_kernel<<<rows, kThreads, 0, s>>>(table, tokens, width, x);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm(const float* x, const float* w, float* out, uint32_t rows, uint32_t width, float eps,
                           cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<rows, kThreads, 0, s>>>(x, w, out, width, eps);
  return cudaGetLastError();
}

cudaError_t launch_rope_store(const RopeStoreArgs& a, cudaStream_t s) {
  if (a.rows == 0) return cudaSuccess;
  if (a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  rope_store_kernel<<<a.rows, 128, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_swiglu(const float* gu, float* act, uint32_t rows, uint32_t ffn, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  swiglu_kernel<<<rows, kThreads, 0, s>>>(gu, act, ffn);
  return cudaGetLastError();
}

bool attention_supported(uint32_t head_dim, uint32_t group_size) {
  const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
  return dim_ok && group_size >= 1 && group_size <= kRows;
}

cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.n_tokens == 0) return cudaSuccess;
  if (a.num_kv_heads == 0 || !attention_supported(a.head_dim, a.num_heads / a.num_kv_heads)) return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 16: return attention_launch<16>(a, s);
    case 32: return attention_launch<32>(a, s);
    case 64: return attention_launch<64>(a, s);
    default: return attention_launch<128>(a, s);
  }
}

cudaError_t launch_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 65535));
  to_bf16_kernel<<<blocks, kThreads, 0, s>>>(in, out, n);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
