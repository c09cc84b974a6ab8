// DeviceMemory: one large allocation on the memory that holds the hot KV
// pages ("device" memory: CPU DRAM in the CPU build, GPU HBM in a CUDA build).
//
// The interface knows nothing about a backend: callers get a base address, a
// size, and whether the CPU may dereference it. Backends: kCpu (aligned,
// transparent huge pages when available, optional mlock). Allocation happens
// once at construction; the object owns it and frees it on destruction.
// Thread safety: immutable after construction; the bytes themselves are
// synchronised by their users.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "kvtier/status.h"

namespace kvtier {

enum class MemoryBackend : uint8_t { kCpu = 0, kCuda = 1 };

struct DeviceMemoryOptions {
  MemoryBackend backend = MemoryBackend::kCpu;
  bool huge_pages = true;   // ask for transparent huge pages (advice; never fails)
  bool lock = false;        // mlock the allocation; failure is an error when set
  size_t alignment = 4096;  // power of two, >= 64; O_DIRECT needs 4096
  // kCpu only: page-locked host memory registered with the accelerator driver
  // so device copies DMA straight from it (the HostTier arena on a GPU box).
  // Needs an accelerator backend (see register_accelerator_memory).
  bool pinned = false;

  Status validate() const;
};

// One copy of `bytes` bytes; see DeviceMemory::copy.
struct ByteCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  size_t bytes = 0;
};

// Runs host-to-host copies (what DeviceMemory::copy does for host memory):
// memcpy, or, for a batch of 4 MiB or more, streaming stores that bypass the
// cache for each copy of 4 KiB or more (a bulk move's destination is not
// read back soon; the copies are visible to other threads on return).
Status copy_host(std::span<const ByteCopy> copies);

// Options for memory on `backend` that holds KV pages (device allocations
// ask only the 256-byte alignment cudaMalloc guarantees).
DeviceMemoryOptions pool_memory_options(MemoryBackend backend);
// Options for host buffers that exchange bytes with memory on `backend`:
// pinned beside an accelerator, so its copies reach them directly.
DeviceMemoryOptions host_memory_options(MemoryBackend backend);

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Allocates `bytes` (rounded up to the alignment). Zero-filled.
  static Result<std::unique_ptr<DeviceMemory>> allocate(size_t bytes, const DeviceMemoryOptions& options);

  virtual std::byte* data() = 0;
  virtual const std::byte* data() const = 0;
  virtual size_t size() const = 0;
  virtual MemoryBackend backend() const = 0;
  // True when the CPU may read and write data() directly.
  virtual bool host_accessible() const = 0;
  // Runs `copies`, each between this allocation and host memory (or within
  // either), and returns once every byte has landed: how code that is not
  // the accelerator's reads and writes memory it may not dereference. Host
  // memory: memcpy. Copies must not overlap one another. Callable from any
  // thread for disjoint bytes.
  virtual Status copy(std::span<const ByteCopy> copies);

 protected:
  DeviceMemory() = default;
};

// Optional accelerator backends (src/cuda) plug in here at start-up, so this
// module never includes a vendor header. `device` serves kCuda allocations,
// `pinned_host` serves kCpu allocations with `pinned` set. Either may be null.
// Registration is thread-safe; the last registration wins.
using DeviceMemoryFactory = Result<std::unique_ptr<DeviceMemory>> (*)(size_t bytes, const DeviceMemoryOptions& options);
void register_accelerator_memory(DeviceMemoryFactory device, DeviceMemoryFactory pinned_host);

}  // namespace kvtier
