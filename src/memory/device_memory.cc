#include "memory/device_memory.h"

#include <sys/mman.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvtier {

namespace {
std::atomic<DeviceMemoryFactory> g_device_factory{nullptr};
std::atomic<DeviceMemoryFactory> g_pinned_factory{nullptr};
}  // namespace

void register_accelerator_memory(DeviceMemoryFactory device, DeviceMemoryFactory pinned_host) {
  g_device_factory.store(device);
  g_pinned_factory.store(pinned_host);
}

DeviceMemoryOptions pool_memory_options(MemoryBackend backend) {
  DeviceMemoryOptions o;
  o.backend = backend;
  if (backend != MemoryBackend::kCpu) o.alignment = 256;
  return o;
}

DeviceMemoryOptions host_memory_options(MemoryBackend backend) {
  DeviceMemoryOptions o;
  o.pinned = backend != MemoryBackend::kCpu;
  return o;
}

namespace {

// A batch this large leaves nothing of the destination worth caching (it is
// far past a core's L2 and a good share of L3): its copies of at least
// kStreamCopyBytes store around the cache. glibc's memcpy does the same for
// one copy past its own threshold, but a batch of page slices (16-64 KiB
// each: gathers into chunks, scatters into pages) stays below it and pays a
// read for ownership of every destination line: about 0.6 of memcpy's
// bandwidth on the development VM, where streaming stores reach it.
constexpr size_t kStreamBatchBytes = size_t(4) << 20;
constexpr size_t kStreamCopyBytes = 4096;

#if defined(__x86_64__)
// One 64-byte line with non-temporal stores (SSE2: every x86-64 CPU has
// them); dst 16-byte aligned.
inline void stream_line(std::byte* dst, const std::byte* src) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
}

// Copies streamed side by side, a line of each in turn. One slice at a time
// (16 KiB from a scattered page) kept too few reads in flight: a gather of
// 16 KiB slices ran at ~0.75 of one large memcpy on the Intel Xeon VM;
// four at once ran at ~1.0, the way glibc's large memcpy interleaves pages.
constexpr size_t kStreamWays = 4;

// n copies (n <= kStreamWays) of the same length >= kStreamCopyBytes whose
// destinations share their alignment mod 16.
void stream_copies(const ByteCopy* c, size_t n) {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(c[0].dst) & 15)) & 15;
  const size_t body = (c[0].bytes - head) / 64 * 64;
  std::byte* dst[kStreamWays];
  const std::byte* src[kStreamWays];
  for (size_t k = 0; k < n; ++k) {
    std::memcpy(c[k].dst, c[k].src, head);
    dst[k] = c[k].dst + head, src[k] = c[k].src + head;
  }
  for (size_t i = 0; i < body; i += 64)
    for (size_t k = 0; k < n; ++k) stream_line(dst[k] + i, src[k] + i);
  for (size_t k = 0; k < n; ++k) std::memcpy(dst[k] + body, src[k] + body, c[k].bytes - head - body);
}

// How many copies from `c` on can stream together (1 when `c` stands alone).
size_t stream_group(std::span<const ByteCopy> c) {
  size_t n = 1;
  const auto misalign = [](const ByteCopy& x) { return reinterpret_cast<uintptr_t>(x.dst) & 15; };
  while (n < std::min(kStreamWays, c.size()) && c[n].bytes == c[0].bytes && misalign(c[n]) == misalign(c[0])) ++n;
  return n;
}
#endif

}  // namespace

Status copy_host(std::span<const ByteCopy> copies) {
  size_t total = 0;
  for (const ByteCopy& c : copies) total += c.bytes;
#if defined(__x86_64__)
  if (total >= kStreamBatchBytes) {
    for (size_t i = 0; i < copies.size();) {
      if (copies[i].bytes < kStreamCopyBytes) {
        std::memcpy(copies[i].dst, copies[i].src, copies[i].bytes);
        ++i;
        continue;
      }
      const size_t n = stream_group(copies.subspan(i));
      stream_copies(&copies[i], n);
      i += n;
    }
    _mm_sfence();  // streaming stores are weakly ordered: visible before whoever waits on this copy reads
    return Status::Ok();
  }
#endif
  for (const ByteCopy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
  return Status::Ok();
}

Status DeviceMemory::copy(std::span<const ByteCopy> copies) { return copy_host(copies); }

Status DeviceMemoryOptions::validate() const {
  if (alignment < 64 || (alignment & (alignment - 1)) != 0)
    return Status::InvalidArgument("DeviceMemoryOptions: alignment must be a power of two >= 64");
  if (backend == MemoryBackend::kCuda && !g_device_factory.load())
    return Status::Unimplemented("DeviceMemory: this build has no CUDA backend");
  if (backend == MemoryBackend::kCuda && (lock || pinned))
    return Status::InvalidArgument("DeviceMemoryOptions: lock/pinned apply to host memory only");
  if (pinned && !g_pinned_factory.load())
    return Status::Unimplemented("DeviceMemory: pinned host memory needs an accelerator backend (CUDA build)");
  return Status::Ok();
}

namespace {

class CpuMemory final : public DeviceMemory {
 public:
  CpuMemory(std::byte* p, size_t n, bool locked) : p_(p), n_(n), locked_(locked) {}
  ~CpuMemory() override {
    if (locked_) munlock(p_, n_);
    std::free(p_);
  }
  std::byte* data() override { return p_; }
  const std::byte* data() const override { return p_; }
  size_t size() const override { return n_; }
  MemoryBackend backend() const override { return MemoryBackend::kCpu; }
  bool host_accessible() const override { return true; }

 private:
  std::byte* p_;
  size_t n_;
  bool locked_;
};

}  // namespace

Result<std::unique_ptr<DeviceMemory>> DeviceMemory::allocate(size_t bytes, const DeviceMemoryOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  if (bytes == 0) return Status::InvalidArgument("DeviceMemory: zero-byte allocation");
  if (o.backend == MemoryBackend::kCuda || o.pinned) {
    const DeviceMemoryFactory f = o.pinned ? g_pinned_factory.load() : g_device_factory.load();
    if (!f) return Status::Unimplemented("DeviceMemory: no accelerator backend registered");
    return f(bytes, o);
  }
  // Huge-page alignment lets the kernel back the range with 2 MiB pages.
  const size_t kHuge = size_t(2) << 20;
  const size_t align = (o.huge_pages && bytes >= kHuge) ? std::max(o.alignment, kHuge) : o.alignment;
  const size_t n = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, n);
  if (!p) return Status::NoSpace("DeviceMemory: cannot allocate " + std::to_string(n) + " bytes");
  if (o.huge_pages && n >= kHuge) madvise(p, n, MADV_HUGEPAGE);  // advice only
  std::memset(p, 0, n);
  if (o.lock && mlock(p, n) != 0) {
    int err = errno;
    std::free(p);
    return Status::FromErrno(err, "DeviceMemory: mlock of " + std::to_string(n) + " bytes");
  }
  return std::unique_ptr<DeviceMemory>(new CpuMemory(static_cast<std::byte*>(p), n, o.lock));
}

}  // namespace kvtier
