// Small CUDA glue shared by src/cuda: CUDA runtime errors as Status values
// and "is there a device?" queries that never throw or abort (a machine
// without a GPU or driver simply reports zero devices).
//
// Only src/cuda and tests/cuda include this header; no other module sees a
// CUDA type. Thread-safe (the CUDA runtime is).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kvtier/status.h"

namespace kvtier::cuda {

// OK for cudaSuccess, else kInternal "<what>: <cuda error name>: <text>".
Status cuda_status(cudaError_t err, const char* what);

// Devices the runtime can use; 0 when there is no device, no driver, or the
// driver is older than the runtime (the error is cleared, never reported).
int device_count();
inline bool device_present() { return device_count() > 0; }
// One line describing device 0 ("NVIDIA H200, sm_90, 139.8 GiB") or why there is none.
std::string device_description();

}  // namespace kvtier::cuda

#define KVTIER_CUDA_RETURN_IF_ERROR(expr)                                             \
  do {                                                                                \
    const cudaError_t kvtier_cuda_err_ = (expr);                                      \
    if (kvtier_cuda_err_ != cudaSuccess) return ::kvtier::cuda::cuda_status(kvtier_cuda_err_, #expr); \
  } while (0)
