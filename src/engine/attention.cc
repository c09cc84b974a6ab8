#include "engine/attention.h"

#include <algorithm>

#include "engine/attention_rows.h"
#include "engine/qdot.h"

namespace kvtier::engine {

static_assert(simd::kLanes == 8, "attention.cc is built for AVX2 (engine/CMakeLists.txt)");

namespace {

// Query rows per task. A task converts every key and value it reads from the
// page dtype to f32 once, for all its rows: with 64 rows that conversion was
// the larger half of attention over a long cached context; 256 rows (q and
// o blocks of 64 KiB at head_dim 64, still in L2) made a 64-token suffix
// over 16384 cached tokens about 1.5x faster (docs/PERF.md, bench ttft).
constexpr uint32_t kTargetRows = 256;

}  // namespace

AttentionScratch::AttentionScratch(const AttentionShape& sh, uint32_t max_rows)
    : q_(size_t(max_rows) * sh.head_dim),
      o_(size_t(max_rows) * sh.head_dim),
      m_(max_rows),
      l_(max_rows),
      k_(size_t(sh.head_dim) * kChunkKeys),
      v_(size_t(sh.head_dim) * kChunkKeys),
      p_(4 * kChunkKeys) {}

AttentionBuffers AttentionScratch::buffers() {
  return {q_.data(), o_.data(), m_.data(), l_.data(), k_.data(), v_.data(), p_.data()};
}

uint32_t attention_block_tokens(const AttentionShape& sh) {
  const uint32_t g = sh.num_heads / sh.num_kv_heads;
  return std::max<uint32_t>(1, kTargetRows / g);
}

void attend(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
            AttentionScratch& s) {
  // The two compute the same bits; the wide one is faster where the CPU has it.
  static const bool wide = qdot::cpu_has(qdot::Isa::kAvx512);
  if (wide) return attend_avx512(sh, job, kvh, t_begin, t_end, s);
  attend_avx2(sh, job, kvh, t_begin, t_end, s);
}

void attend_avx2(const AttentionShape& sh, const AttentionJob& job, uint32_t kvh, uint32_t t_begin, uint32_t t_end,
                 AttentionScratch& s) {
  attend_rows(sh, job, kvh, t_begin, t_end, s.buffers(), [](uint32_t, uint32_t, auto&&) { return 0u; });
}

}  // namespace kvtier::engine
