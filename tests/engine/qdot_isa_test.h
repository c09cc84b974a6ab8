// Fixtures of the quantized-dot tests, one run per kernel set (qdot::Isa).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "engine/qdot.h"

namespace kvtier::engine::qdot::testing {

// k_: the set under test; a set the CPU (or this build) lacks skips, naming the ISA.
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    k_ = kernels(GetParam());
    if (!k_)
      GTEST_SKIP() << "no " << isa_name(GetParam()) << " kernels: the CPU does not report the ISA "
                   << "(AVX2 needs avx2, fma and f16c)";
  }
  const Kernels* k_ = nullptr;
};

// A SIMD set (k_) checked against the scalar one on the same inputs.
class SimdIsaTest : public IsaTest {
 protected:
  const Kernels& scalar_ = *kernels(Isa::kScalar);
};

inline constexpr Isa kSimdIsas[] = {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512};

inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) {
  return std::string(isa_name(info.param));
}

}  // namespace kvtier::engine::qdot::testing
