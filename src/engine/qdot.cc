#include "engine/qdot.h"

#include <cpuid.h>

#include "engine/qdot_impl.h"

namespace kvtier::engine::qdot {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

namespace {

// CPUID leaf 1's F16C bit (not every compiler's __builtin_cpu_supports knows "f16c").
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

}  // namespace

bool cpu_has(Isa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

ActType act_type(GgufType w) {
  switch (w) {
    case GgufType::kF32: case GgufType::kF16: case GgufType::kBF16: return ActType::kF32;
    case GgufType::kQ4_0: case GgufType::kQ4_1: case GgufType::kQ5_0: case GgufType::kQ5_1: case GgufType::kQ8_0:
      return ActType::kQ8;
    default: return ActType::kQ8K;
  }
}

size_t act_row_bytes(ActType a, size_t n) {
  switch (a) {
    case ActType::kF32: return n * sizeof(float);
    case ActType::kQ8: return n / 32 * sizeof(BlockQ8);
    case ActType::kQ8K: return n / 256 * sizeof(BlockQ8K);
  }
  return 0;
}

namespace {

Kernels make(Isa isa) {
  Kernels k{};
  k.isa = isa;
  if (isa == Isa::kScalar) {
    impl::fill_legacy_scalar(k);
    impl::fill_kquant_scalar(k);
  } else {  // AVX-512 has no kernels of its own yet: it runs the AVX2 ones
    impl::fill_legacy_avx2(k);
    impl::fill_kquant_avx2(k);
  }
  return k;
}

}  // namespace

const Kernels* kernels(Isa isa) {
  static const Kernels scalar = make(Isa::kScalar);
  static const Kernels avx2 = make(Isa::kAvx2);
  switch (isa) {
    case Isa::kScalar: return &scalar;
    case Isa::kAvx2: return cpu_has(Isa::kAvx2) ? &avx2 : nullptr;
    case Isa::kAvx512: return nullptr;  // no AVX-512 kernels in this build
  }
  return nullptr;
}

const Kernels& best() {
  static const Kernels* k = kernels(Isa::kAvx2) ? kernels(Isa::kAvx2) : kernels(Isa::kScalar);
  return *k;
}

}  // namespace kvtier::engine::qdot
