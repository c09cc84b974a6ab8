// The AVX2 + FMA + F16C kernel set (engine/qdot.h): the x86 kernel source
// (qdot_legacy_x86.h: Q4_0 .. Q8_0, F16/BF16, quantize_q8; qdot_kquant_x86.h:
// Q2_K .. Q6_K, quantize_q8k) with maddubs + madd. Compiled with -mavx2 -mfma
// -mf16c; called only after cpu_has(Isa::kAvx2).
#define KVTIER_QDOT_VNNI 0
#include "engine/qdot_kquant_x86.h"
#include "engine/qdot_legacy_x86.h"
#include "engine/qdot_packed_x86.h"

namespace kvtier::engine::qdot::impl {
void fill_avx2(Kernels& k) { legacy_x86::fill(k), kquant_x86::fill(k), packed_x86::fill(k); }
}  // namespace kvtier::engine::qdot::impl
