// Compiled into every target that links kvtier_cuda (an INTERFACE source),
// so DeviceMemory::allocate and engine::create_forward know the CUDA
// backends before main() even when nothing else in the program names a
// kvtier_cuda symbol.
#include "cuda/cuda_engine.h"
#include "cuda/cuda_memory.h"

namespace {
[[maybe_unused]] const bool kRegistered = (kvtier::cuda::register_cuda_memory(), kvtier::cuda::register_cuda_engine(), true);
}  // namespace
