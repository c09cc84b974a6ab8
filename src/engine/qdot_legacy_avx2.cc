// AVX2 + FMA + F16C kernels for the legacy block types (Q4_0 .. Q8_0), F16/BF16
// and quantize_q8: engine/qdot_legacy_x86.h with maddubs + madd. Compiled with
// -mavx2 -mfma -mf16c; called only after cpu_has(Isa::kAvx2).
#define KVTIER_QDOT_VNNI 0
#include "engine/qdot_legacy_x86.h"

namespace kvtier::engine::qdot::impl {
void fill_legacy_avx2(Kernels& k) { fill_legacy(k); }
}  // namespace kvtier::engine::qdot::impl
