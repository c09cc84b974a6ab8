// Internal: each kernel file fills its part of a qdot::Kernels table
// (engine/qdot.h). The AVX2 files are compiled with -mavx2 -mfma -mf16c and
// only ever called after cpu_has(Isa::kAvx2). Not a public header.
#pragma once

#include "engine/qdot.h"

namespace kvtier::engine::qdot::impl {

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 against BlockQ8; F16 and BF16 against f32; quantize_q8.
void fill_legacy_scalar(Kernels& k);
void fill_legacy_avx2(Kernels& k);
// Q2_K .. Q6_K against BlockQ8K; quantize_q8k.
void fill_kquant_scalar(Kernels& k);
void fill_kquant_avx2(Kernels& k);

}  // namespace kvtier::engine::qdot::impl
