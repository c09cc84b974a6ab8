// AVX-VNNI (VEX dpbusd/dpwssd, for CPUs with VNNI but no AVX-512) kernels for
// the K-quants (Q2_K .. Q6_K) and quantize_q8k: engine/qdot_kquant_x86.h with
// its VNNI primitives (engine/qdot_x86_isa.h). The file is compiled for AVX2
// like the AVX2 set; only the kernels, inside the target region below, may use
// the VNNI instructions, so every header's inline functions stay AVX2 code.
// Called only after cpu_has(Isa::kAvxVnni).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/half.h"
#include "engine/qdot_impl.h"

#pragma GCC push_options
#pragma GCC target("avxvnni")
#define KVTIER_QDOT_VNNI 2
#include "engine/qdot_kquant_x86.h"
#pragma GCC pop_options

// Outside the target region: a plain call into the kernels, made only where
// the CPU has the set (engine/qdot.cc).
namespace kvtier::engine::qdot::impl {
void fill_kquant_avxvnni(Kernels& k) { fill_kquant(k); }
}  // namespace kvtier::engine::qdot::impl
