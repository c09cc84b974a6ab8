#include "memory/device_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvtier {

Status DeviceMemoryOptions::validate() const {
  if (alignment < 64 || (alignment & (alignment - 1)) != 0)
    return Status::InvalidArgument("DeviceMemoryOptions: alignment must be a power of two >= 64");
  if (backend == MemoryBackend::kCuda) return Status::Unimplemented("DeviceMemory: this build has no CUDA backend");
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
