// Block quantisers: ggml's reference (no importance matrix) algorithms,
// written from their published descriptions in ggml-quants.c. Each *_block
// function encodes one block into ggml's block layout (the layouts quant.cc
// decodes). Compiled with -ffp-contract=off: every float operation rounds on
// its own, in the order ggml writes it, which is what bit-identity needs.
#include "engine/quantize.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>

#include "engine/half.h"

namespace kvtier::engine {
namespace {

constexpr int kBlock = 32;        // QK4_0 .. QK8_0
constexpr int kSuperBlock = 256;  // QK_K
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the low
// mantissa bits (ggml's nearest_int): exact for |v| < 2^22, and what ggml
// computes beyond that too.
int nearest(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Stores `v` as f16 at `p` and returns the stored value widened back.
float put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
  return f16_to_f32(h);
}

// ---- 32-element blocks -------------------------------------------------------

// The element of largest magnitude (the first one on ties), with its sign.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  return max;
}

// Q4_0 and Q5_0: d = max / -2^(bits-1) (the extreme element maps to the most
// negative level), q = trunc(x / d + 2^(bits-1) + 0.5) capped at 2^bits - 1.
void symmetric_levels(const float* x, int bits, uint8_t* b, int* q) {
  const float half = float(1 << (bits - 1));
  const float d = signed_absmax(x, kBlock) / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  const int top = (1 << bits) - 1;
  for (int j = 0; j < kBlock; ++j) q[j] = std::min(top, int(int8_t(x[j] * id + (half + 0.5f))));
}

// Q4_1 and Q5_1: d = (max - min) / (2^bits - 1), m = min, q = trunc((x - min) / d + 0.5).
void affine_levels(const float* x, int bits, uint8_t* b, int* q) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kBlock; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
  const float d = (max - min) / float((1 << bits) - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  put_f16(b + 2, min);
  for (int j = 0; j < kBlock; ++j) {
    const float v = (x[j] - min) * id + 0.5f;
    q[j] = bits == 4 ? std::min(15, int(int8_t(v))) : int(uint8_t(v));
  }
}

// Element j in the low nibble of byte j, element j + 16 in the high nibble;
// with `high_bits`, bit 4 of element j as bit j of a little-endian u32.
void pack_nibbles(const int* q, uint8_t* qs, uint8_t* high_bits) {
  uint32_t qh = 0;
  for (int j = 0; j < kBlock / 2; ++j) {
    qs[j] = uint8_t((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  if (high_bits != nullptr) std::memcpy(high_bits, &qh, 4);
}

void q4_0_block(const float* x, uint8_t* b) {
  int q[kBlock];
  symmetric_levels(x, 4, b, q);
  pack_nibbles(q, b + 2, nullptr);
}

void q5_0_block(const float* x, uint8_t* b) {
  int q[kBlock];
  symmetric_levels(x, 5, b, q);
  pack_nibbles(q, b + 6, b + 2);
}

void q4_1_block(const float* x, uint8_t* b) {
  int q[kBlock];
  affine_levels(x, 4, b, q);
  pack_nibbles(q, b + 4, nullptr);
}

void q5_1_block(const float* x, uint8_t* b) {
  int q[kBlock];
  affine_levels(x, 5, b, q);
  pack_nibbles(q, b + 8, b + 4);
}

// Q8_0: d = amax / 127, q = round(x / d) (halves away from zero).
void q8_0_block(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < kBlock; ++j) b[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

// ---- scale searches of the K-quants --------------------------------------------

// ggml's make_qx_quants with weights x^2 (rmse_type 1): symmetric levels
// l in [-nmax, nmax), L = l + nmax; starts from the scale that maps the
// extreme element to -nmax, then tries 18 nearby ones and keeps the
// least-squares scale of the best. Returns the scale (0 for an all-zero group).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  // Weighted sums of x*l and l*l over the levels that `iscale` gives.
  auto sums = [&](float iscale, float& sumlx, float& suml2, bool store) {
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest(iscale * x[i])));
      if (store) L[i] = int8_t(l + nmax);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
  };
  float sumlx, suml2;
  sums(float(-nmax) / max, sumlx, suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sums(iscale, sumlx, suml2, false);
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      sums(iscale, sumlx, suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml's make_q3_quants with rmse: symmetric levels in [-nmax, nmax) weighted
// by x^2, refined by up to five passes that move one element at a time to the
// level that improves the fit. L = l + nmax; returns the scale.
float fit_symmetric_refined(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  const float iscale = float(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = int8_t(std::max(-nmax, std::min(nmax - 1, nearest(iscale * x[i]))));
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(L[i]);
    suml2 += w * float(L[i]) * float(L[i]);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (!(slx > 0.0f)) continue;
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      const int l = std::max(-nmax, std::min(nmax - 1, nearest(x[i] * sl2 / slx)));
      if (l == L[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l), sumlx = slx, suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The search settings of ggml's make_qkx2_quants.
struct AffineSearch {
  int nmax;  // levels 0..nmax
  float rmin, rdelta;
  int nstep;     // candidate scales (nmax + rmin + rdelta * k) / (max - min), k = 0..nstep
  bool use_mad;  // weighted absolute error instead of squared
};

// Weighted error of x against scale * L + min.
float affine_error(int n, const float* x, const float* w, const uint8_t* L, float scale, float min, bool use_mad) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    err += w[i] * diff;
  }
  return err;
}

// ggml's make_qkx2_quants: x ~ scale * L - the_min with L in [0, nmax] and
// the_min >= 0, the scale and min fitted by weighted least squares for each
// candidate level assignment, keeping the one of least weighted error.
float fit_affine(int n, const float* x, const float* w, const AffineSearch& s, uint8_t* L, float* the_min) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, uint8_t(0));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = float(s.nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::max(0, std::min(s.nmax, nearest(iscale * (x[i] - min)))));
  float best_error = affine_error(n, x, w, L, scale, min, s.use_mad);
  uint8_t Laux[kBlock];
  for (int is = 0; is <= s.nstep; ++is) {
    iscale = (s.rmin + s.rdelta * float(is) + float(s.nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(s.nmax, nearest(iscale * (x[i] - min))));
      Laux[i] = uint8_t(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l) * float(l);
      sum_xl += w[i] * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0.0f) this_min = 0.0f, this_scale = sum_xl / sum_l2;
    const float err = affine_error(n, x, w, Laux, this_scale, this_min, s.use_mad);
    if (err < best_error) {
      std::copy(Laux, Laux + n, L);
      best_error = err, scale = this_scale, min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// ---- 256-element super-blocks --------------------------------------------------

// Q2_K: 16 groups of 16, levels 0..3, 4-bit scale and min per group (fitted by
// absolute error, weights |x|), d and dmin as f16. Layout: scales[16], qs[64], d, dmin.
void q2_k_block(const float* x, uint8_t* b) {
  uint8_t L[kSuperBlock];
  float scales[16], mins[16], w[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_affine(16, x + 16 * j, w, {3, -0.5f, 0.1f, 15, true}, L + 16 * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = b;
  std::fill(sc, sc + 16, uint8_t(0));
  if (max_scale > 0.0f)
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(nearest(15.0f / max_scale * scales[j]));
  if (max_min > 0.0f)
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(sc[j] | (nearest(15.0f / max_min * mins[j]) << 4));
  const float d = put_f16(b + 80, max_scale > 0.0f ? max_scale / 15.0f : 0.0f);
  const float dmin = put_f16(b + 82, max_min > 0.0f ? max_min / 15.0f : 0.0f);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(sc[j] & 0xF);
    if (dl == 0.0f) continue;
    const float ml = dmin * float(sc[j] >> 4);
    for (int i = 0; i < 16; ++i) L[16 * j + i] = uint8_t(std::max(0, std::min(3, nearest((x[16 * j + i] + ml) / dl))));
  }
  uint8_t* qs = b + 16;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
    }
}

// The 16 signed 6-bit scales of Q3_K, stored + 32: low nibbles in bytes j % 8
// (nibble j / 8), high 2 bits in byte 8 + j % 4 (bits 2 (j / 4)).
void pack_q3_k_scales(const int* ls, uint8_t* packed) {
  std::fill(packed, packed + 12, uint8_t(0));
  for (int j = 0; j < 16; ++j) {
    const int v = ls[j] + 32;
    packed[j % 8] = uint8_t(packed[j % 8] | ((v & 0xF) << (4 * (j / 8))));
    packed[8 + j % 4] = uint8_t(packed[8 + j % 4] | ((v >> 4) << (2 * (j / 4))));
  }
}

// Q3_K: 16 groups of 16, levels -4..3, a signed 6-bit scale per group, d as f16.
// Layout: hmask[32] (bit 4h + s of byte l: high bit of element 128h + 32s + l),
// qs[64] (low 2 bits as Q2_K), scales[12], d.
void q3_k_block(const float* x, uint8_t* b) {
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0.0f, amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_refined(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) amax = std::fabs(scales[j]), max_scale = scales[j];
  }
  int ls[16];
  std::fill(ls, ls + 16, -32);  // stored as 0: what an all-zero block gets
  const float iscale = max_scale != 0.0f ? -32.0f / max_scale : 0.0f;
  if (max_scale != 0.0f)
    for (int j = 0; j < 16; ++j) ls[j] = std::max(-32, std::min(31, int(int8_t(nearest(iscale * scales[j])))));
  pack_q3_k_scales(ls, b + 96);
  const float d = put_f16(b + 108, max_scale != 0.0f ? 1.0f / iscale : 0.0f);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(ls[j]);
    if (dl == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = int8_t(std::max(-4, std::min(3, nearest(x[16 * j + i] / dl))) + 4);
  }
  uint8_t* hmask = b;
  uint8_t* qs = b + 32;
  std::fill(hmask, hmask + 32, uint8_t(0));
  for (int e = 0; e < kSuperBlock; ++e) {
    if (L[e] > 3) {
      hmask[e % 32] = uint8_t(hmask[e % 32] | (1 << (e / 32)));
      L[e] = int8_t(L[e] - 4);
    }
  }
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int8_t* q = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(q[0] | (q[32] << 2) | (q[64] << 4) | (q[96] << 6));
    }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with levels 0..nmax, each fitted (weights
// rms + |x|) to a scale and a min that are then quantised to 6 bits against
// the largest of each (d = max_scale / 63, dmin = max_min / 63), and every
// element re-levelled with the stored values. Writes d, dmin and the 12 bytes
// of packed scales at `b`, the levels to L.
void k_affine_levels(const float* x, const AffineSearch& search, uint8_t* b, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_affine(32, xs, w, search, L + 32 * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min(uint8_t(63), uint8_t(nearest(inv_scale * scales[j])));
    lm[j] = std::min(uint8_t(63), uint8_t(nearest(inv_min * mins[j])));
  }
  quant::pack_k4_scales(ls, lm, b + 4);
  const float d = put_f16(b, max_scale / 63.0f);
  const float dmin = put_f16(b + 2, max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * float(ls[j]);
    if (dl == 0.0f) continue;
    const float ml = dmin * float(lm[j]);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = uint8_t(std::max(0, std::min(search.nmax, nearest((x[32 * j + i] + ml) / dl))));
  }
}

// Q4_K: d, dmin, scales[12], qs[128]: sub-block 2k in the low nibbles of bytes 32k.., 2k + 1 in the high ones.
void q4_k_block(const float* x, uint8_t* b) {
  uint8_t L[kSuperBlock];
  k_affine_levels(x, {15, -1.0f, 0.1f, 20, false}, b, L);
  uint8_t* qs = b + 16;
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 32; ++l) qs[32 * k + l] = uint8_t(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
}

// Q5_K: d, dmin, scales[12], qh[32] (bit s of byte l: bit 4 of element 32s + l), qs[128] as Q4_K.
void q5_k_block(const float* x, uint8_t* b) {
  uint8_t L[kSuperBlock];
  k_affine_levels(x, {31, -0.5f, 0.1f, 15, false}, b, L);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::fill(qh, qh + 32, uint8_t(0));
  for (int e = 0; e < kSuperBlock; ++e)
    if (L[e] > 15) qh[e % 32] = uint8_t(qh[e % 32] | (1 << (e / 32)));
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 32; ++l) qs[32 * k + l] = uint8_t((L[64 * k + l] & 0xF) | ((L[64 * k + 32 + l] & 0xF) << 4));
}

// Q6_K: 16 groups of 16 with levels -32..31, a signed 8-bit scale per group
// (-128 for the group of largest scale), d as f16. Layout: ql[128], qh[64], scales[16], d.
void q6_k_block(const float* x, uint8_t* b) {
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > max_abs_scale) max_abs_scale = std::fabs(scales[j]), max_scale = scales[j];
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::fill(b, b + 210, uint8_t(0));
    return;
  }
  const float iscale = -128.0f / max_scale;
  const float d = put_f16(b + 208, 1.0f / iscale);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int j = 0; j < 16; ++j) sc[j] = int8_t(std::min(127, nearest(iscale * scales[j])));
  for (int j = 0; j < 16; ++j) {
    const float dl = d * float(sc[j]);
    if (dl == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = int8_t(std::max(-32, std::min(31, nearest(x[16 * j + i] / dl))) + 32);
  }
  // Element 128h + 32s + l: low nibble in byte 64h + 32(s % 2) + l (high nibble when s >= 2),
  // top 2 bits at bits 2s of byte 32h + l.
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int8_t* q = L + 128 * h + l;
      ql[64 * h + l] = uint8_t((q[0] & 0xF) | ((q[64] & 0xF) << 4));
      ql[64 * h + 32 + l] = uint8_t((q[32] & 0xF) | ((q[96] & 0xF) << 4));
      qh[32 * h + l] = uint8_t((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) | ((q[96] >> 4) << 6));
    }
}

using BlockEncoder = void (*)(const float*, uint8_t*);

BlockEncoder block_encoder(GgufType type) {
  switch (type) {
    case GgufType::kQ4_0: return q4_0_block;
    case GgufType::kQ4_1: return q4_1_block;
    case GgufType::kQ5_0: return q5_0_block;
    case GgufType::kQ5_1: return q5_1_block;
    case GgufType::kQ8_0: return q8_0_block;
    case GgufType::kQ2_K: return q2_k_block;
    case GgufType::kQ3_K: return q3_k_block;
    case GgufType::kQ4_K: return q4_k_block;
    case GgufType::kQ5_K: return q5_k_block;
    case GgufType::kQ6_K: return q6_k_block;
    default: return nullptr;
  }
}

// F16 or BF16 (round to nearest even) into `out` at any alignment, through the bulk conversions.
void narrow_16bit(bool is_f16, const float* x, size_t n, uint8_t* out) {
  uint16_t chunk[1024];
  for (size_t done = 0; done < n; done += std::size(chunk)) {
    const size_t count = std::min(std::size(chunk), n - done);
    if (is_f16) f32_to_f16(x + done, chunk, count);
    else f32_to_bf16(x + done, chunk, count);
    std::memcpy(out + 2 * done, chunk, 2 * count);
  }
}

}  // namespace

Status quantize_row(GgufType type, const float* x, size_t n, std::byte* out) {
  const quant::TypeInfo* t = quant::find_type(uint32_t(type));
  if (t == nullptr) return Status::InvalidArgument("quantize_row: unknown type " + std::to_string(uint32_t(type)));
  if (n % t->block_elems != 0)
    return Status::InvalidArgument("quantize_row: " + std::string(t->name) + " rows hold multiples of " +
                                   std::to_string(t->block_elems) + " elements, not " + std::to_string(n));
  auto* dst = reinterpret_cast<uint8_t*>(out);
  switch (type) {
    case GgufType::kF32: std::memcpy(dst, x, n * sizeof(float)); return Status::Ok();
    case GgufType::kF16:
    case GgufType::kBF16: narrow_16bit(type == GgufType::kF16, x, n, dst); return Status::Ok();
    default: break;
  }
  const BlockEncoder encode = block_encoder(type);
  for (size_t blk = 0; blk < n / t->block_elems; ++blk) encode(x + blk * t->block_elems, dst + blk * t->block_bytes);
  return Status::Ok();
}

}  // namespace kvtier::engine

namespace kvtier::engine {

std::string WeightFormat::name() const {
  if (q4_k_m) return "q4_k_m";
  std::string n(quant::info(type).name);
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

uint32_t WeightFormat::file_type() const {
  if (q4_k_m) return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  switch (type) {
    case GgufType::kF32: return 0;
    case GgufType::kF16: return 1;
    case GgufType::kQ4_0: return 2;
    case GgufType::kQ4_1: return 3;
    case GgufType::kQ8_0: return 7;
    case GgufType::kQ5_0: return 8;
    case GgufType::kQ5_1: return 9;
    case GgufType::kQ2_K: return 10;
    case GgufType::kQ3_K: return 11;  // Q3_K_S
    case GgufType::kQ4_K: return 14;  // Q4_K_S
    case GgufType::kQ5_K: return 16;  // Q5_K_S
    case GgufType::kQ6_K: return 18;
    case GgufType::kBF16: return 32;
  }
  return 0;
}

Result<WeightFormat> parse_weight_format(std::string_view name) {
  if (name == "q4_k_m") return WeightFormat::Q4_K_M();
  std::string names;
  for (const quant::TypeInfo& t : quant::all_types()) {
    const WeightFormat f(t.type);
    if (f.name() == name) return f;
    names += f.name() + ", ";
  }
  return Status::InvalidArgument("unknown weight type '" + std::string(name) + "' (expected " + names + "or q4_k_m)");
}

bool is_llama_cpp_70b(const ModelConfig& c) {
  return c.num_layers == 80 && (c.arch == Arch::kQwen2 || c.num_heads != c.num_kv_heads);
}

namespace {

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between.
// In 64 bits: a file's block numbers are any uint32 (7 * n_layers would overflow an int).
bool use_more_bits(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// llama.cpp's replacement for `type` when its block does not divide the row
// length: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, F16 if the 32-element block
// does not divide it either. Legacy types (which llama.cpp refuses there)
// become F16; Q2_K and Q3_K (IQ4_NL in llama.cpp) are the caller's to refuse.
GgufType row_fallback(GgufType type, uint64_t row_length) {
  if (row_length % quant::info(type).block_elems == 0) return type;
  GgufType f = GgufType::kF16;
  if (type == GgufType::kQ4_K) f = GgufType::kQ5_0;
  if (type == GgufType::kQ5_K) f = GgufType::kQ5_1;
  if (type == GgufType::kQ6_K) f = GgufType::kQ8_0;
  return row_length % quant::info(f).block_elems == 0 ? f : GgufType::kF16;
}

}  // namespace

GgufType q4_k_m_type(const MatrixRole& r) {
  const std::string_view name = r.name;
  const int64_t layer = r.layer, n = r.n_layers;
  GgufType t = GgufType::kQ4_K;
  if (name == "output.weight" || (!r.has_output && name == "token_embd.weight")) {
    t = r.row_length % 256 != 0 ? GgufType::kQ8_0 : GgufType::kQ6_K;
  } else if (name.find("attn_v.weight") != std::string_view::npos) {
    if (use_more_bits(layer, n)) t = GgufType::kQ6_K;
    if (r.model_70b && t == GgufType::kQ4_K) t = GgufType::kQ5_K;
  } else if (name.find("ffn_down") != std::string_view::npos) {
    if (use_more_bits(layer, n)) t = GgufType::kQ6_K;
  }
  return row_fallback(t, r.row_length);
}

Result<GgufType> matrix_type(const WeightFormat& format, const MatrixRole& r) {
  if (format.q4_k_m) return q4_k_m_type(r);
  const GgufType t = format.type;
  if ((t == GgufType::kQ2_K || t == GgufType::kQ3_K) && r.row_length % 256 != 0)
    return Status::InvalidArgument(std::string(r.name) + " has rows of " + std::to_string(r.row_length) +
                                   " elements, not a multiple of 256: " + format.name() +
                                   " cannot store it (llama.cpp falls back to IQ4_NL, which kvtier does not write)");
  return row_fallback(t, r.row_length);
}

}  // namespace kvtier::engine
