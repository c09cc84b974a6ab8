// External memory: a DeviceMemory over host memory that the caller owns (a
// NumPy array, a torch CPU tensor, a buffer registered by an inference
// engine), so a BlockPool's pages — and every load into them — land where
// the caller's own code reads them, with no copy after the load.
//
// The object does not own the bytes: the caller keeps them alive (and does
// not move them) for the lifetime of the object and of anything built on it.
// The memory is not zero-filled. Thread safety: immutable after construction.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "memory/device_memory.h"

namespace kvtier {

// The least alignment adopted memory must have: what malloc guarantees, so
// any NumPy array or torch tensor qualifies. Nothing here needs more: pool
// bytes move with memcpy and the engine's kernels use unaligned loads.
inline constexpr size_t kExternalMemoryAlignment = 16;

// Checks that `bytes` can back a pool: non-empty and kExternalMemoryAlignment-aligned.
Status validate_external_memory(std::span<const std::byte> bytes);

// A kCpu, host-accessible DeviceMemory whose data() is bytes.data().
Result<std::unique_ptr<DeviceMemory>> adopt_host_memory(std::span<std::byte> bytes);

}  // namespace kvtier
