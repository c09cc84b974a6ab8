// The CUDA backends of DeviceMemory (memory/device_memory.h):
//  * kCuda: one plain cudaMalloc allocation on the current device (no
//    managed memory); host_accessible() is false, so a BlockPool on it needs
//    BlockPoolOptions::allow_device_only and its pages are device addresses.
//  * pinned host (kCpu with `pinned`): cudaHostAlloc, page-locked and mapped
//    into the device address space, so copies DMA from it at full link
//    speed; used for the HostTier arena and copy-engine chunks.
// register_cuda_memory() plugs both into DeviceMemory::allocate; linking
// kvtier_cuda registers them at start-up (cuda_register.cc), and every
// src/cuda factory calls it again, so callers rarely need to.
//
// Thread safety: registration is idempotent and thread-safe; the objects are
// immutable after construction and free their memory on destruction.
#pragma once

#include <cstddef>
#include <memory>

#include <cuda_runtime_api.h>

#include <span>

#include "memory/device_memory.h"

namespace kvtier::cuda {

void register_cuda_memory();

// Enqueues `copies` on `stream` as one batched DMA submission
// (cudaMemcpyBatchAsync; unified addressing tells each copy's direction),
// or one cudaMemcpyAsync each where the driver has no batched copies.
// Returns once enqueued; the caller synchronises.
Status enqueue_copies(std::span<const ByteCopy> copies, cudaStream_t stream);

// Direct factories (what the registered hooks call).
Result<std::unique_ptr<DeviceMemory>> allocate_device(size_t bytes, const DeviceMemoryOptions& options);
Result<std::unique_ptr<DeviceMemory>> allocate_pinned_host(size_t bytes, const DeviceMemoryOptions& options);

}  // namespace kvtier::cuda
