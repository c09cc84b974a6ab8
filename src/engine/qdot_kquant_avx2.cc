// AVX2 + FMA + F16C kernels for the K-quants (Q2_K .. Q6_K) and quantize_q8k:
// engine/qdot_kquant_x86.h with maddubs + madd. Compiled with -mavx2 -mfma
// -mf16c; called only after cpu_has(Isa::kAvx2).
#define KVTIER_QDOT_VNNI 0
#include "engine/qdot_kquant_x86.h"

namespace kvtier::engine::qdot::impl {
void fill_kquant_avx2(Kernels& k) { fill_kquant(k); }
}  // namespace kvtier::engine::qdot::impl
