// The AVX-512 VNNI kernel set (engine/qdot.h): EVEX dpbusd/dpwssd, AVX512VL's
// 32 registers, and 512-bit many-row kernels in place of the AVX2 set's maddubs
// + madd, from the same x86 kernel source (qdot_legacy_x86.h,
// qdot_kquant_x86.h; engine/qdot_x86_isa.h). The file is compiled for AVX2 like
// the AVX2 set; only the kernels, inside the ISA region below, may use the
// VNNI instructions, and every header is included before it, so no header's
// inline function is ever compiled for them. Called only after
// cpu_has(Isa::kAvx512).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/half.h"
#include "engine/isa_region.h"
#include "engine/qdot_impl.h"

KVTIER_ISA_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#define KVTIER_QDOT_VNNI 1
#include "engine/qdot_kquant_x86.h"
#include "engine/qdot_legacy_x86.h"
#include "engine/qdot_packed_x86.h"
KVTIER_ISA_REGION_END

// Outside the ISA region: a plain call into the kernels, made only where
// the CPU has the set (engine/qdot.cc).
namespace kvtier::engine::qdot::impl {
void fill_avx512(Kernels& k) { legacy_x86::fill(k), kquant_x86::fill(k), packed_x86::fill(k); }
}  // namespace kvtier::engine::qdot::impl
