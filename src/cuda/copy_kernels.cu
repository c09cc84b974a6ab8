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

// Block (i, part) copies part `part` of `splits` of entry i; each thread
// keeps kUnroll loads in flight (one side is often host memory over PCIe).
template <class Word>
__global__ void copy_list_kernel(CopyList list, uint32_t splits) {
  constexpr uint32_t kUnroll = 4;
  const uint32_t i = blockIdx.x;
  const size_t words = list.bytes[i] / sizeof(Word);
  const size_t per = (words + splits - 1) / splits;
  const size_t begin = size_t(blockIdx.y) * per;
  const size_t end = begin + per < words ? begin + per : words;
  const Word* __restrict__ src = reinterpret_cast<const Word*>(list.src[i]);
  Word* __restrict__ dst = reinterpret_cast<Word*>(list.dst[i]);
  for (size_t base = begin + threadIdx.x; base < end; base += size_t(blockDim.x) * kUnroll) {
    Word r[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const size_t w = base + size_t(u) * blockDim.x;
      if (w < end) r[u] = src[w];
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const size_t w = base + size_t(u) * blockDim.x;
      if (w < end) dst[w] = r[u];
    }
  }
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
cudaError_t launch_copy_list(const CopyList& list, cudaStream_t stream) {
  if (list.n == 0) return cudaSuccess;
  if (list.n > kMaxCopiesPerLaunch) return cudaErrorInvalidValue;
  uintptr_t bits = 0;  // OR of every address and size: its low bits bound the word size
  uint32_t largest = 0;
  for (uint32_t i = 0; i < list.n; ++i) {
    bits |= reinterpret_cast<uintptr_t>(list.dst[i]) | reinterpret_cast<uintptr_t>(list.src[i]) | list.bytes[i];
    largest = list.bytes[i] > largest ? list.bytes[i] : largest;
  }
  // About 16 KiB per block, at most 64 blocks per entry.
  const uint32_t splits = largest / 16384 + 1 < 64 ? largest / 16384 + 1 : 64;
  const dim3 grid(list.n, splits);
  if (bits % 16 == 0)
    copy_list_kernel<uint4><<<grid, 256, 0, stream>>>(list, splits);
  else if (bits % 4 == 0)
    copy_list_kernel<uint32_t><<<grid, 256, 0, stream>>>(list, splits);
  else
    copy_list_kernel<unsigned char><<<grid, 256, 0, stream>>>(list, splits);
  return cudaGetLastError();
}

cudaError_t launch_spin(long long cycles, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError();
}

}  // namespace kvtier::cuda
