// Launchers of the copy-engine kernels (copy_kernels.cu). Plain types only,
// so g++-compiled code can call them without nvcc. The kernels move whole
// layer slices ([k|v][P][H][D] of one layer of one page, `slice_bytes`
// contiguous bytes) between page-first pages of a pool and a layer-major
// buffer [layer][page][slice] (tiers/chunk_format.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvtier::cuda {

// Page indices travel inside the kernel parameters (copied at launch), so a
// caller may reuse its list as soon as the launch returns.
inline constexpr uint32_t kMaxPagesPerLaunch = 960;
struct PageList {
  uint32_t n = 0;
  uint32_t index[kMaxPagesPerLaunch];
};

struct SliceCopy {
  std::byte* pool = nullptr;  // base of the page-first pool (device)
  size_t page_bytes = 0;
  size_t slice_bytes = 0;     // one layer of one page; multiple of 4
  uint32_t first_layer = 0;
  uint32_t num_layers = 0;
  std::byte* packed = nullptr;  // layer-major [num_layers][pages.n][slice] (device or mapped pinned host)
  size_t packed_layer_stride = 0;  // bytes between layers in `packed` (>= pages.n * slice_bytes)
};

// pool pages → packed (gather) and packed → pool pages (scatter).
cudaError_t launch_gather(const SliceCopy& c, const PageList& pages, cudaStream_t stream);
cudaError_t launch_scatter(const SliceCopy& c, const PageList& pages, cudaStream_t stream);

// Arbitrary byte copies by a kernel: each entry's addresses are device
// memory or pinned host memory (mapped under unified addressing), so one
// launch moves many small pieces across PCIe without a DMA per piece.
// Entries travel in the kernel parameters; they must not overlap.
inline constexpr uint32_t kMaxCopiesPerLaunch = 160;
struct CopyList {
  uint32_t n = 0;
  std::byte* dst[kMaxCopiesPerLaunch];
  const std::byte* src[kMaxCopiesPerLaunch];
  uint32_t bytes[kMaxCopiesPerLaunch];
};
cudaError_t launch_copy_list(const CopyList& list, cudaStream_t stream);

// Spins on the device for about `cycles` clock cycles (tests of stream ordering).
cudaError_t launch_spin(long long cycles, cudaStream_t stream);

}  // namespace kvtier::cuda
