#include "cuda/cuda_memory.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cuda/copy_kernels.h"
#include "cuda/cuda_check.h"

namespace kvtier::cuda {

namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Address ranges of live pinned allocations: copies whose host side lies in
// one may be done by a kernel (the device can address that memory).
class PinnedRanges {
 public:
  void add(const void* p, size_t n) {
    std::unique_lock lock(mu_);
    ranges_[addr(p)] = addr(p) + n;
  }
  void remove(const void* p) {
    std::unique_lock lock(mu_);
    ranges_.erase(addr(p));
  }
  bool contains(const void* p, size_t n) const {
    std::shared_lock lock(mu_);
    auto it = ranges_.upper_bound(addr(p));
    return it != ranges_.begin() && addr(p) + n <= (--it)->second;
  }

 private:
  static uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, uintptr_t> ranges_;  // start -> end
};

PinnedRanges& pinned_ranges() {
  static PinnedRanges r;
  return r;
}

// One non-blocking stream per calling thread (transfer workers copy concurrently).
struct ThreadStream {
  cudaStream_t s = nullptr;
  ~ThreadStream() {
    if (s) (void)cudaStreamDestroy(s);
  }
};

Result<cudaStream_t> thread_stream() {
  thread_local ThreadStream ts;
  if (!ts.s) KVTIER_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ts.s, cudaStreamNonBlocking));
  return ts.s;
}

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(std::byte* p, size_t n) : p_(p), n_(n) {}
  ~CudaDeviceMemory() override { (void)cudaFree(p_); }
  std::byte* data() override { return p_; }
  const std::byte* data() const override { return p_; }
  size_t size() const override { return n_; }
  MemoryBackend backend() const override { return MemoryBackend::kCuda; }
  bool host_accessible() const override { return false; }
  // Many small copies out of the device whose every address the device can
  // reach (this allocation or pinned host memory) go through one kernel
  // launch per kMaxCopiesPerLaunch: gathering 16 KiB slices into a pinned
  // chunk ran at 0.76 of a D2H cudaMemcpy that way, 0.29 as DMAs. Copies
  // into the device (loads, which race the prefill they feed), large ones,
  // or any touching pageable memory go through one batched DMA submission
  // (unified addressing tells each copy's direction): a kernel there took
  // SMs from the prefill (host-hit TTFT at 16k tokens 1.17 x the floor
  // against 1.06 with DMA). Either way on a per-thread stream, then a wait.
  Status copy(std::span<const ByteCopy> copies) override {
    if (copies.empty()) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(cudaStream_t s, thread_stream());
    size_t total = 0;
    bool out_to_pinned = true;  // every copy leaves the device for memory the device can address
    for (const ByteCopy& c : copies) {
      total += c.bytes;
      out_to_pinned = out_to_pinned && c.bytes <= UINT32_MAX && !inside(c.dst, c.bytes) &&
                      addressable(c.dst, c.bytes) && addressable(c.src, c.bytes);
    }
    const Status queued = out_to_pinned && total / copies.size() < kKernelBelowBytes ? launch_copy_lists(copies, s)
                                                                                       : enqueue_copies(copies, s);
    // Waited for even when queuing failed part-way: the copies already queued would otherwise land
    // after the caller has given the pages (or this thread's staging buffer) to something else.
    const Status synced = cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    KVTIER_RETURN_IF_ERROR(queued);
    return synced;
  }

 private:
  static Status launch_copy_lists(std::span<const ByteCopy> copies, cudaStream_t s) {
    CopyList list;
    for (size_t i = 0; i < copies.size(); ++i) {
      list.dst[list.n] = copies[i].dst;
      list.src[list.n] = copies[i].src;
      list.bytes[list.n] = uint32_t(copies[i].bytes);
      if (++list.n == kMaxCopiesPerLaunch || i + 1 == copies.size()) {
        KVTIER_CUDA_RETURN_IF_ERROR(launch_copy_list(list, s));
        list.n = 0;
      }
    }
    return Status::Ok();
  }
  // Average copy size from which DMA beats the copy kernel.
  static constexpr size_t kKernelBelowBytes = size_t(1) << 20;
  bool inside(const std::byte* p, size_t n) const { return p >= p_ && p + n <= p_ + n_; }
  bool addressable(const std::byte* p, size_t n) const { return inside(p, n) || pinned_ranges().contains(p, n); }
  std::byte* p_;
  size_t n_;
};

class PinnedHostMemory final : public DeviceMemory {
 public:
  PinnedHostMemory(void* raw, std::byte* p, size_t n) : raw_(raw), p_(p), n_(n) { pinned_ranges().add(p_, n_); }
  ~PinnedHostMemory() override {
    pinned_ranges().remove(p_);
    (void)cudaFreeHost(raw_);
  }
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

Status enqueue_copies(std::span<const ByteCopy> copies, cudaStream_t stream) {
  if (copies.empty()) return Status::Ok();
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  for (const ByteCopy& c : copies) {
    dsts.push_back(c.dst);
    srcs.push_back(c.src);
    sizes.push_back(c.bytes);
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_idx = 0;
  if (cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr, &attr_idx, 1, stream) ==
      cudaSuccess)
    return Status::Ok();
  (void)cudaGetLastError();  // a driver without batched copies: one at a time
  for (const ByteCopy& c : copies)
    KVTIER_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream));
  return Status::Ok();
}

void register_cuda_memory() { register_accelerator_memory(&allocate_device, &allocate_pinned_host); }

}  // namespace kvtier::cuda
