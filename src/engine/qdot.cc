#include "engine/qdot.h"

#include <cpuid.h>

#include "engine/qdot_impl.h"

namespace kvtier::engine::qdot {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512vnni";
  }
  return "?";
}

namespace {

// CPUID leaf 1's F16C bit (not every compiler's __builtin_cpu_supports knows "f16c").
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
// CPUID leaf 7, sub-leaf 1, EAX bit 4: AVX-VNNI (Clang 14's __builtin_cpu_supports lacks "avxvnni").
bool has_avxvnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

}  // namespace

bool cpu_has(Isa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvxVnni: return avx2 && has_avxvnni();
    case Isa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni");
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
  impl::fill_packed_scalar(k);
  switch (isa) {
    case Isa::kScalar: impl::fill_legacy_scalar(k), impl::fill_kquant_scalar(k); break;
    case Isa::kAvx2: impl::fill_avx2(k); break;
    case Isa::kAvxVnni: impl::fill_avxvnni(k); break;
    case Isa::kAvx512: impl::fill_avx512(k); break;
  }
  return k;
}

// Built on first use and only where the CPU has the set: filling one runs code compiled for it.
template <Isa kIsa>
const Kernels* set() {
  static const Kernels k = make(kIsa);
  return &k;
}

}  // namespace

const Kernels* kernels(Isa isa) {
  if (!cpu_has(isa)) return nullptr;
  switch (isa) {
    case Isa::kScalar: return set<Isa::kScalar>();
    case Isa::kAvx2: return set<Isa::kAvx2>();
    case Isa::kAvxVnni: return set<Isa::kAvxVnni>();
    case Isa::kAvx512: return set<Isa::kAvx512>();
  }
  return nullptr;
}

// The AVX-512 set first: the same products as AVX-VNNI with twice the registers.
const Kernels& best() {
  static const Kernels* k = [] {
    for (Isa isa : {Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2})
      if (const Kernels* set = kernels(isa)) return set;
    return kernels(Isa::kScalar);
  }();
  return *k;
}

}  // namespace kvtier::engine::qdot
