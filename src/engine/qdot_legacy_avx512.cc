// AVX-512 VNNI (EVEX dpbusd/dpwssd on 256-bit registers, with AVX512VL's 32 of
// them) kernels for the legacy block types (Q4_0 .. Q8_0), F16/BF16 and
// quantize_q8: engine/qdot_legacy_x86.h with its VNNI primitives
// (engine/qdot_x86_isa.h). The file is compiled for AVX2 like the AVX2 set;
// only the kernels, inside the target region below, may use the VNNI
// instructions, so every header's inline functions stay AVX2 code. Called only
// after cpu_has(Isa::kAvx512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/half.h"
#include "engine/qdot_impl.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's 512-bit intrinsics leave a placeholder operand "uninitialized" on purpose (GCC bug
// 105593), which -Wmaybe-uninitialized reports once they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVTIER_QDOT_VNNI 1
#include "engine/qdot_legacy_x86.h"
#pragma GCC diagnostic pop
#pragma GCC pop_options

// Outside the target region: a plain call into the kernels, made only where
// the CPU has the set (engine/qdot.cc).
namespace kvtier::engine::qdot::impl {
void fill_legacy_avx512(Kernels& k) { fill_legacy(k); }
}  // namespace kvtier::engine::qdot::impl
