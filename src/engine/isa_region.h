// Internal: brackets code compiled for instructions beyond the build's baseline
// (AVX2), for GCC and Clang alike. Between KVTIER_ISA_REGION_BEGIN("avx512f,…")
// and KVTIER_ISA_REGION_END every function defined may use those instructions;
// the file includes every header before the region, so no header's inline
// function is compiled for them, and calls into the region are made only after
// qdot::cpu_has() reports the set. GCC: push_options + target (and GCC 12's
// spurious -Wmaybe-uninitialized on 512-bit intrinsics, bug 105593, silenced
// inside); Clang, which has no `#pragma GCC target`: a target attribute on
// every function of the region.
#pragma once

#define KVTIER_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define KVTIER_ISA_REGION_BEGIN(features) \
  KVTIER_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define KVTIER_ISA_REGION_END KVTIER_PRAGMA(clang attribute pop)
#else
#define KVTIER_ISA_REGION_BEGIN(features) \
  KVTIER_PRAGMA(GCC push_options)         \
  KVTIER_PRAGMA(GCC target(features))     \
  KVTIER_PRAGMA(GCC diagnostic push)      \
  KVTIER_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define KVTIER_ISA_REGION_END KVTIER_PRAGMA(GCC diagnostic pop) KVTIER_PRAGMA(GCC pop_options)
#endif
