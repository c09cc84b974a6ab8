// Shared by the CUDA tests: a visible skip when the machine has no usable
// CUDA device, and helpers to move bytes between host and device.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_check.h"

// Every GPU test starts with this; CTest reports the binary as Skipped
// (SKIP_REGULAR_EXPRESSION in tests/cuda/CMakeLists.txt) when it fires.
#define KVTIER_REQUIRE_CUDA_DEVICE()                                                      \
  do {                                                                                    \
    if (!::kvtier::cuda::device_present())                                                \
      GTEST_SKIP() << "no CUDA device: " << ::kvtier::cuda::device_description();         \
  } while (0)

namespace kvtier::cuda::testing {

inline std::vector<std::byte> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

// Random finite values of the dtype (so f16/bf16 round trips stay bit-exact and NaN-free).
inline std::vector<std::byte> random_kv(size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    const float f = u(rng);
    std::memcpy(v.data() + i, &f, 4);  // as f16/bf16 pairs these are arbitrary but finite-ish bit patterns
  }
  return v;
}

inline void to_device(void* dst, const void* src, size_t n) {
  ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
}
inline void to_host(void* dst, const void* src, size_t n) {
  ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), cudaSuccess);
}

}  // namespace kvtier::cuda::testing
