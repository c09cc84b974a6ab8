// Prefill's chunked attention (engine/attention_chunked.h) on 16-lane vectors,
// for CPUs with AVX-512: twice the lanes of the AVX2 kernel, four query rows
// per register tile instead of two. The file is compiled for AVX2 like the
// rest of the engine; only the kernel, inside the ISA region below, may use
// AVX-512, and every header (under Clang, all but simd.h's forced-inline
// templates) is included before it, so no inline function of a header is ever
// compiled for AVX-512. Called only after qdot::cpu_has(qdot::Isa::kAvx512)
// (engine/attention.cc).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/attention.h"
#include "engine/isa_region.h"
#include "engine/kv_rows.h"
#if !defined(__clang__)
#include "engine/simd.h"  // GCC: before the region like every header (its default width stays 8 lanes)
#endif

KVTIER_ISA_REGION_BEGIN("avx512f,avx512bw,avx512vl,avx512dq")
// Clang includes simd.h here instead: it refuses a 512-bit vector passed between a function of the
// region and one outside it, even a forced-inline one. simd.h holds only forced-inline templates,
// so no copy of them is ever emitted out of line, and a target attribute changes no macro there.
#include "engine/simd.h"
#include "engine/attention_chunked.h"

namespace kvtier::engine {
namespace {

void run_avx512(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                const AttentionBuffers& b) {
  using V = simd::vfloat16;
  switch (sh.head_dim / simd::lanes<V>) {
    case 4: return attend_chunked<V, 4>(sh, job, kvh, t_begin, t_end, b);
    case 8: return attend_chunked<V, 8>(sh, job, kvh, t_begin, t_end, b);
    case 16: return attend_chunked<V, 16>(sh, job, kvh, t_begin, t_end, b);
    default: return attend_chunked<V, 0>(sh, job, kvh, t_begin, t_end, b);
  }
}

}  // namespace
}  // namespace kvtier::engine
KVTIER_ISA_REGION_END

namespace kvtier::engine {

// Outside the ISA region: a plain call into the kernel, made only where the CPU has AVX-512.
void attend_chunked_avx512(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin,
                           uint32_t t_end, const AttentionBuffers& b) {
  run_avx512(sh, job, kvh, t_begin, t_end, b);
}

}  // namespace kvtier::engine
