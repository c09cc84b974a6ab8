#include "cuda/cuda_memory.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/cuda_check.h"

namespace kvtier::cuda {

namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(std::byte* p, size_t n) : p_(p), n_(n) {}
  ~CudaDeviceMemory() override { (void)cudaFree(p_); }
  std::byte* data() override { return p_; }
  const std::byte* data() const override { return p_; }
  size_t size() const override { return n_; }
  MemoryBackend backend() const override { return MemoryBackend::kCuda; }
  bool host_accessible() const override { return false; }

 private:
  std::byte* p_;
  size_t n_;
};

class PinnedHostMemory final : public DeviceMemory {
 public:
  PinnedHostMemory(void* raw, std::byte* p, size_t n) : raw_(raw), p_(p), n_(n) {}
  ~PinnedHostMemory() override { (void)cudaFreeHost(raw_); }
  std::byte* data() override { return p_; }
  const std::byte* data() const override { return p_; }
  size_t size() const override { return n_; }
  MemoryBackend backend() const override { return MemoryBackend::kCpu; }
  bool host_accessible() const override { return true; }

 private:
  void* raw_;  // what cudaHostAlloc returned (p_ may be aligned past it)
  std::byte* p_;
  size_t n_;
};

}  // namespace

Result<std::unique_ptr<DeviceMemory>> allocate_device(size_t bytes, const DeviceMemoryOptions& o) {
  if (bytes == 0) return Status::InvalidArgument("CUDA DeviceMemory: zero-byte allocation");
  const size_t n = round_up(bytes, o.alignment);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, n);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status::NoSpace("CUDA DeviceMemory: cudaMalloc of " + std::to_string(n) + " bytes: out of device memory");
  }
  KVTIER_RETURN_IF_ERROR(cuda_status(err, "cudaMalloc"));
  if (reinterpret_cast<uintptr_t>(p) % o.alignment != 0) {
    (void)cudaFree(p);
    return Status::InvalidArgument("CUDA DeviceMemory: cudaMalloc cannot honour alignment " +
                                   std::to_string(o.alignment));
  }
  // The memset runs on the legacy stream; wait for it so work on any other
  // stream (ours are non-blocking) never races the zero fill.
  cudaError_t e = cudaMemset(p, 0, n);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) {
    (void)cudaFree(p);
    return cuda_status(e, "cudaMemset");
  }
  return std::unique_ptr<DeviceMemory>(new CudaDeviceMemory(static_cast<std::byte*>(p), n));
}

Result<std::unique_ptr<DeviceMemory>> allocate_pinned_host(size_t bytes, const DeviceMemoryOptions& o) {
  if (bytes == 0) return Status::InvalidArgument("pinned DeviceMemory: zero-byte allocation");
  const size_t n = round_up(bytes, o.alignment);
  void* raw = nullptr;
  // Portable: usable from every device context; pinned memory is always
  // mapped under unified addressing, so kernels may read it too.
  const cudaError_t err = cudaHostAlloc(&raw, n + o.alignment, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status::NoSpace("pinned DeviceMemory: cudaHostAlloc of " + std::to_string(n) + " bytes failed");
  }
  KVTIER_RETURN_IF_ERROR(cuda_status(err, "cudaHostAlloc"));
  const uintptr_t a = round_up(reinterpret_cast<uintptr_t>(raw), o.alignment);
  std::byte* p = reinterpret_cast<std::byte*>(a);
  std::memset(p, 0, n);
  return std::unique_ptr<DeviceMemory>(new PinnedHostMemory(raw, p, n));
}

void register_cuda_memory() { register_accelerator_memory(&allocate_device, &allocate_pinned_host); }

}  // namespace kvtier::cuda
