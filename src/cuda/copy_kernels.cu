// Gather/scatter of layer slices between page-first pages and a layer-major
// buffer. One thread block per (layer, page) slice; threads stride over the
// slice in 16-byte words when every address allows it, else 4-byte words.
#include <cstdint>

#include "cuda/copy_kernels.h"

namespace kvtier::cuda {

namespace {

template <class Word, bool kGather>
__global__ void slice_copy_kernel(SliceCopy c, PageList pages) {
  const uint32_t s = blockIdx.x;  // slice index = layer_rel * n + page
  const uint32_t layer_rel = s / pages.n;
  const uint32_t i = s % pages.n;
  const uint32_t layer = c.first_layer + layer_rel;
  std::byte* page = c.pool + size_t(pages.index[i]) * c.page_bytes + size_t(layer) * c.slice_bytes;
  std::byte* packed = c.packed + size_t(layer_rel) * c.packed_layer_stride + size_t(i) * c.slice_bytes;
  const size_t words = c.slice_bytes / sizeof(Word);
  Word* dst = reinterpret_cast<Word*>(kGather ? packed : page);
  const Word* src = reinterpret_cast<const Word*>(kGather ? page : packed);
  for (size_t w = threadIdx.x; w < words; w += blockDim.x) dst[w] = src[w];
}

bool aligned16(const SliceCopy& c) {
  const auto a = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return a(c.pool) && a(c.packed) && c.page_bytes % 16 == 0 && c.slice_bytes % 16 == 0 && c.packed_layer_stride % 16 == 0;
}

template <bool kGather>
cudaError_t launch(const SliceCopy& c, const PageList& pages, cudaStream_t stream) {
  if (pages.n == 0 || c.num_layers == 0) return cudaSuccess;
  if (pages.n > kMaxPagesPerLaunch || c.slice_bytes % 4 != 0) return cudaErrorInvalidValue;
  const dim3 grid(pages.n * c.num_layers);
  const dim3 block(256);
  if (aligned16(c))
    slice_copy_kernel<uint4, kGather><<<grid, block, 0, stream>>>(c, pages);
  else
    slice_copy_kernel<uint32_t, kGather><<<grid, block, 0, stream>>>(c, pages);
  return cudaGetLastError();
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

}  // namespace

cudaError_t launch_gather(const SliceCopy& c, const PageList& pages, cudaStream_t stream) {
  return launch<true>(c, pages, stream);
}
cudaError_t launch_scatter(const SliceCopy& c, const PageList& pages, cudaStream_t stream) {
  return launch<false>(c, pages, stream);
}
cudaError_t launch_spin(long long cycles, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
