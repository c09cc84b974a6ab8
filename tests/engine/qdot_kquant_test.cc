// The K-quant dot kernels (engine/qdot.h: Q2_K .. Q6_K against BlockQ8K
// activations) and quantize_q8k, for every kernel set the CPU runs: against a
// double-precision reference built from quant::dequantize_row, AVX2 against
// scalar, and the quantized activations' error against the f32 ones. Inputs
// are random blocks from seeded generators.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/half.h"
#include "engine/qdot.h"
#include "engine/quant.h"
#include "qdot_isa_test.h"

namespace kvtier::engine::qdot {
namespace {

constexpr size_t kQK = 256;
// One super-block, an even count, and an odd count past 4096.
constexpr size_t kLengths[] = {256, 2048, 4096 + 256};
constexpr int kTrials = 4;

// Where a type's f16 super-block scale d and min scale dmin sit in its block (-1: no dmin).
struct Layout {
  GgufType type;
  int d_offset, dmin_offset;
};
constexpr Layout kLayouts[] = {
    {GgufType::kQ2_K, 80, 82}, {GgufType::kQ3_K, 108, -1}, {GgufType::kQ4_K, 0, 2},
    {GgufType::kQ5_K, 0, 2},   {GgufType::kQ6_K, 208, -1},
};

// A dot's error from f32 rounding alone, against the exact (double) dot of the
// same values. The kernels' integer sums are exact; per super-block they round
// d_a · d_w, the int32 → f32 conversion (sums can pass 2^24), the product and
// the add into the running sum, each by ≤ 2^-24 ≈ 6e-8 relative, and the ≤ 17
// super-block terms of the longest row add ≲ 17 more: ≲ 25 · 6e-8 = 1.5e-6 of
// the magnitude summed, Σ|scale part · a| + Σ|min part · a| (the kernels round
// the two parts apart; the reference's f32 dequantisation rounds w once within
// the same magnitude). 1e-5 leaves > 6x margin (the worst measured over these
// inputs is 3e-8); the absolute term covers rows whose magnitude is ~0.
double rounding_bound(double magnitude) { return 1e-5 * magnitude + 1e-6; }

// quantize_q8k rounds x / d in f32 (relative error 2^-24 on |x / d| ≤ 127), so
// q is the nearest integer to x / d within 127 · 2^-24 < 2^-16 of a step.
constexpr double kHalfStep = 0.5 + 1.0 / 65536;

std::string name(GgufType t) { return std::string(quant::info(t).name); }

float log_uniform(std::mt19937& rng, float lo, float hi) {
  return std::exp(std::uniform_real_distribution<float>(std::log(lo), std::log(hi))(rng));
}

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// A random row of n elements: random bytes for the quants and packed scales,
// a realistic f16 d and dmin (1e-3 .. 1e-1) per (super-)block.
std::vector<uint8_t> random_row(const Layout& layout, size_t n, std::mt19937& rng) {
  const quant::TypeInfo& info = quant::info(layout.type);
  const size_t block_bytes = info.block_bytes;
  std::vector<uint8_t> row(n / info.block_elems * block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : row) b = uint8_t(byte(rng));
  for (size_t at = 0; at < row.size(); at += block_bytes) {
    store_f16(&row[at + layout.d_offset], log_uniform(rng, 1e-3f, 1e-1f));
    if (layout.dmin_offset >= 0) store_f16(&row[at + layout.dmin_offset], log_uniform(rng, 1e-3f, 1e-1f));
  }
  return row;
}

// Random activation blocks: qs over the whole int8 range, a realistic d, bsums to match.
std::vector<BlockQ8K> random_activations(size_t n, std::mt19937& rng) {
  std::vector<BlockQ8K> a(n / kQK);
  std::uniform_int_distribution<int> q(-128, 127);
  for (BlockQ8K& blk : a) {
    blk.d = log_uniform(rng, 1e-3f, 1e-1f);
    for (int8_t& v : blk.qs) v = int8_t(q(rng));
    for (size_t g = 0; g < 16; ++g) {
      int s = 0;
      for (size_t l = 0; l < 16; ++l) s += blk.qs[16 * g + l];
      blk.bsums[g] = int16_t(s);
    }
  }
  return a;
}

std::vector<float> dequantize(GgufType type, const std::vector<uint8_t>& row, size_t n) {
  std::vector<float> w(n);
  const Status st = quant::dequantize_row(type, std::as_bytes(std::span(row)), n, w.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return w;
}

// `row` with the f16 at `offset` of every block set to 0.
std::vector<uint8_t> zero_field(std::vector<uint8_t> row, const Layout& layout, int offset) {
  const size_t block_bytes = quant::info(layout.type).block_bytes;
  for (size_t at = 0; at < row.size(); at += block_bytes) store_f16(&row[at + offset], 0.0f);
  return row;
}

struct Reference {
  double dot;        // Σ w_i a_i in double, w from quant::dequantize_row
  double magnitude;  // Σ |scale part_i · a_i| + Σ |min part_i · a_i|
};

// The exact dot of the dequantized row with the activations x_i (f32 or d · qs).
Reference reference_dot(const Layout& layout, const std::vector<uint8_t>& row, std::span<const double> x) {
  const size_t n = x.size();
  const std::vector<float> w = dequantize(layout.type, row, n);
  // With a min, the scale part is the value with dmin = 0 and the min part the value with d = 0.
  std::vector<float> scale_part = w, min_part(n, 0.0f);
  if (layout.dmin_offset >= 0) {
    scale_part = dequantize(layout.type, zero_field(row, layout, layout.dmin_offset), n);
    min_part = dequantize(layout.type, zero_field(row, layout, layout.d_offset), n);
  }
  Reference ref{0.0, 0.0};
  for (size_t i = 0; i < n; ++i) {
    ref.dot += double(w[i]) * x[i];
    ref.magnitude += std::fabs(double(scale_part[i]) * x[i]) + std::fabs(double(min_part[i]) * x[i]);
  }
  return ref;
}

std::vector<double> dequantize_activations(const std::vector<BlockQ8K>& a) {
  std::vector<double> x;
  for (const BlockQ8K& blk : a)
    for (int8_t q : blk.qs) x.push_back(double(blk.d) * q);
  return x;
}

// Activation-like floats: normal values, one in 64 an 8x outlier, with a random
// spread (1e-2 .. 1e2) per row, or per block to exercise d over its range.
std::vector<float> random_floats(size_t n, std::mt19937& rng, bool spread_per_block) {
  std::vector<float> x(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  float spread = log_uniform(rng, 1e-2f, 1e2f);
  for (size_t b = 0; b < n / kQK; ++b) {
    if (spread_per_block) spread = log_uniform(rng, 1e-2f, 1e2f);
    for (size_t i = b * kQK; i < (b + 1) * kQK; ++i) x[i] = spread * normal(rng) * (pick(rng) == 0 ? 8.0f : 1.0f);
  }
  return x;
}

class QdotKquant : public testing::IsaTest {
 protected:
  void SetUp() override {
    IsaTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_NE(k_->quantize_q8k, nullptr);
    for (const Layout& l : kLayouts) ASSERT_NE(k_->dot[uint32_t(l.type)], nullptr) << name(l.type);
  }
};

TEST_P(QdotKquant, DotMatchesDequantizedReference) {
  std::mt19937 rng(20240611);
  for (const Layout& layout : kLayouts)
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        SCOPED_TRACE(name(layout.type) + " n=" + std::to_string(n) + " trial " + std::to_string(trial));
        const std::vector<uint8_t> row = random_row(layout, n, rng);
        const std::vector<BlockQ8K> act = random_activations(n, rng);
        const Reference ref = reference_dot(layout, row, dequantize_activations(act));
        const float got = k_->dot[uint32_t(layout.type)](n, row.data(), act.data());
        EXPECT_NEAR(got, ref.dot, rounding_bound(ref.magnitude)) << "magnitude " << ref.magnitude;
      }
}

// The many-row kernels (prefill) give each row's dot bit for bit (qdot.h's contract: what
// keeps a token's logits independent of the tokens sharing its prefill).
TEST_P(QdotKquant, DotNIsBitIdenticalToDotPerRow) {
  std::mt19937 rng(99);
  int checked = 0;
  for (const Layout& layout : kLayouts) {
    const DotNFn dot_n = k_->dot_n[uint32_t(layout.type)];
    if (!dot_n) continue;
    for (size_t n : kLengths) {
      SCOPED_TRACE(name(layout.type) + " n=" + std::to_string(n));
      const std::vector<uint8_t> row = random_row(layout, n, rng);
      std::vector<std::vector<BlockQ8K>> acts;
      const void* a[kDotN];
      for (int j = 0; j < kDotN; ++j) acts.push_back(random_activations(n, rng)), a[j] = acts.back().data();
      for (int count : {kDotN, 5, 1}) {  // whatever the number of rows sharing the call
        constexpr size_t kStride = 3;    // results land token-major in a tile, as Matmul lays them
        float got[kDotN * kStride];
        dot_n(n, row.data(), a, count, got, kStride);
        for (int j = 0; j < count; ++j) {
          const float want = k_->dot[uint32_t(layout.type)](n, row.data(), acts[j].data());
          EXPECT_EQ(std::memcmp(&got[j * kStride], &want, sizeof want), 0)
              << "row " << j << " of " << count << ": " << got[j * kStride] << " vs " << want;
        }
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << isa_name(GetParam()) << " has no many-row kernels";
}

TEST_P(QdotKquant, QuantizeQ8KWithinHalfStep) {
  std::mt19937 rng(7);
  const size_t n = 4096 + 256;
  std::vector<float> x = random_floats(n, rng, /*spread_per_block=*/true);
  std::fill(x.begin() + 512, x.begin() + 768, 0.0f);  // block 2: all zero
  std::vector<BlockQ8K> q(n / kQK);
  k_->quantize_q8k(x.data(), n, q.data());
  for (size_t b = 0; b < q.size(); ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    const BlockQ8K& blk = q[b];
    float amax = 0.0f;
    for (size_t i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[b * kQK + i]));
    EXPECT_EQ(blk.d, amax / 127.0f);
    int qmax = 0;
    for (size_t i = 0; i < kQK; ++i) {
      const double err = std::fabs(double(x[b * kQK + i]) - double(blk.d) * blk.qs[i]);
      ASSERT_LE(err, kHalfStep * blk.d) << "element " << i;
      qmax = std::max(qmax, std::abs(int(blk.qs[i])));
    }
    EXPECT_EQ(qmax, b == 2 ? 0 : 127);  // symmetric scale: the largest |x| maps to ±127
    for (size_t g = 0; g < 16; ++g) {
      int s = 0;
      for (size_t l = 0; l < 16; ++l) s += blk.qs[16 * g + l];
      EXPECT_EQ(blk.bsums[g], s) << "group " << g;
    }
  }
}

// A block so small that max|x| / 127 is subnormal is a zero block on every set: d is inexact
// there, x / d passed 127, and the scalar set wrapped to -128 (bsums -2048) where the SIMD sets
// saturated to 127.
TEST_P(QdotKquant, QuantizeQ8KTakesAVanishingBlockAsZero) {
  std::vector<float> x(2 * kQK, 1.12734e-41f);
  for (size_t i = kQK; i < 2 * kQK; ++i) x[i] = -1e-40f;
  std::vector<BlockQ8K> q(2);
  k_->quantize_q8k(x.data(), x.size(), q.data());
  for (const BlockQ8K& blk : q) {
    EXPECT_EQ(blk.d, 0.0f);
    for (size_t i = 0; i < kQK; ++i) ASSERT_EQ(blk.qs[i], 0) << "element " << i;
    for (size_t g = 0; g < 16; ++g) EXPECT_EQ(blk.bsums[g], 0);
  }
}

// The dot with quantize_q8k's activations against the f32 activations: the
// quantization moves each x_i by ≤ d/2, so |error| ≤ Σ_blocks d/2 · Σ|w_i|
// (proven bound, checked). Relative to Σ|w_i x_i| the error is that of random
// ±d/2 steps, d ≈ 20σ/127 with the outliers: measured over 64 trials per type
// and length, at most 1.1e-2 (n = 256) and 7e-3 (n = 2048, 4352; it averages
// down slowly since the random weight scales vary 100x between super-blocks);
// 2e-2 is checked.
TEST_P(QdotKquant, QuantizedActivationErrorIsBounded) {
  std::mt19937 rng(99);
  for (const Layout& layout : kLayouts)
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        SCOPED_TRACE(name(layout.type) + " n=" + std::to_string(n) + " trial " + std::to_string(trial));
        const std::vector<uint8_t> row = random_row(layout, n, rng);
        const std::vector<float> x = random_floats(n, rng, /*spread_per_block=*/false);
        std::vector<BlockQ8K> act(n / kQK);
        k_->quantize_q8k(x.data(), n, act.data());
        const Reference ref = reference_dot(layout, row, std::vector<double>(x.begin(), x.end()));
        const std::vector<float> w = dequantize(layout.type, row, n);
        double proven = 0.0, abs_sum = 0.0;
        for (size_t i = 0; i < n; ++i) {
          proven += kHalfStep * act[i / kQK].d * std::fabs(w[i]);
          abs_sum += std::fabs(double(w[i]) * x[i]);
        }
        const double err = std::fabs(k_->dot[uint32_t(layout.type)](n, row.data(), act.data()) - ref.dot);
        EXPECT_LE(err, proven + rounding_bound(ref.magnitude));
        EXPECT_LE(err, 2e-2 * abs_sum);
      }
}

// --- The packed layouts (qdot.h: Packing) and their group dots -------------------------------

struct PackedLayout {
  Packing packing;
  Layout layout;
  size_t bytes;  // per 256 elements of a group (the legacy types: their lines, past the scales)
};
constexpr PackedLayout kPacked[] = {{Packing::kQ4K16, kLayouts[2], 2368},
                                    {Packing::kQ6K16, kLayouts[4], 3392},
                                    {Packing::kQ8016, {GgufType::kQ8_0, 0, -1}, 8 * 512},
                                    {Packing::kQ5016, {GgufType::kQ5_0, 0, -1}, 8 * 320}};
bool legacy(const PackedLayout& pl) { return pl.packing == Packing::kQ8016 || pl.packing == Packing::kQ5016; }

// `a` as the legacy types' activation blocks of 32 (the same integers and scale per 32).
std::vector<BlockQ8> legacy_activations(const std::vector<BlockQ8K>& a) {
  std::vector<BlockQ8> out;
  for (const BlockQ8K& blk : a)
    for (size_t i = 0; i < kQK; i += 32) {
      BlockQ8 b{blk.d, 0.0f, {}};
      int sum = 0;
      for (size_t j = 0; j < 32; ++j) b.qs[j] = blk.qs[i + j], sum += b.qs[j];
      b.s = b.d * float(sum);
      out.push_back(b);
    }
  return out;
}

// kGroupRows random rows of n elements and their packed group.
struct PackedRows {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<std::byte> group;
};
PackedRows random_group(const PackedLayout& pl, size_t n, std::mt19937& rng) {
  PackedRows p;
  const std::byte* rows[kGroupRows];
  for (uint32_t r = 0; r < kGroupRows; ++r) p.rows.push_back(random_row(pl.layout, n, rng));
  for (uint32_t r = 0; r < kGroupRows; ++r) rows[r] = reinterpret_cast<const std::byte*>(p.rows[r].data());
  p.group.resize(group_bytes(pl.packing, n));
  pack_group(pl.packing, rows, n, p.group.data());
  return p;
}

// A random group and kDotN random activation rows for it (q8_K, or q8 for the legacy types).
struct GroupCase {
  PackedRows p;
  std::vector<std::vector<BlockQ8K>> acts;
  std::vector<std::vector<BlockQ8>> legacy_acts;
  const void* a[kDotN];
  GroupCase(const PackedLayout& pl, size_t n, std::mt19937& rng) : p(random_group(pl, n, rng)) {
    for (int t = 0; t < kDotN; ++t) acts.push_back(random_activations(n, rng));
    for (int t = 0; t < kDotN; ++t) legacy_acts.push_back(legacy_activations(acts[t]));
    for (int t = 0; t < kDotN; ++t)
      a[t] = legacy(pl) ? static_cast<const void*>(legacy_acts[t].data()) : acts[t].data();
  }
};

TEST(QdotPack, GroupsHoldExactlyTheFileRows) {
  std::mt19937 rng(21);
  for (const PackedLayout& pl : kPacked)
    for (size_t n : kLengths) {
      SCOPED_TRACE(std::string(packing_name(pl.packing)) + " n=" + std::to_string(n));
      EXPECT_EQ(group_bytes(pl.packing, n), n / kQK * pl.bytes + (legacy(pl) ? (n / 32 * 32 + 63) / 64 * 64 : 0));
      const PackedRows p = random_group(pl, n, rng);
      for (uint32_t r = 0; r < kGroupRows; ++r) {
        std::vector<uint8_t> back(p.rows[r].size());
        unpack_row(pl.packing, p.group.data(), n, r, reinterpret_cast<std::byte*>(back.data()));
        EXPECT_EQ(back, p.rows[r]) << "row " << r;
      }
    }
  // 37 rows of Q4_K: two groups packed (148 bytes per row and super-block, the file's 144 + 4),
  // five rows as the file stores them.
  EXPECT_EQ(packed_matrix_bytes(Packing::kQ4K16, GgufType::kQ4_K, 37, 512), 2 * 2 * 2368u + 5 * 2 * 144u);
  EXPECT_EQ(packed_matrix_bytes(Packing::kRows, GgufType::kQ4_K, 37, 512), 37 * 2 * 144u);
}

// Every set's group dots (the scalar reference where a set has no faster one) against the exact
// dot of the dequantized rows. As for rounding_bound, but the f32 steps round each sub-block's
// (Q6_K: each 16-element group's) term: ≤ 18 roundings per super-block of ≤ 2^-24 of the
// magnitude summed so far, ≲ 1.8e-5 of it over the longest row's 17 super-blocks; measured far
// below.
TEST_P(QdotKquant, GroupDotMatchesDequantizedReference) {
  std::mt19937 rng(22);
  for (const PackedLayout& pl : kPacked) {
    const GroupDotFn dot = k_->group_dot[int(pl.packing)];
    ASSERT_NE(dot, nullptr);
    for (size_t n : kLengths) {
      const GroupCase c(pl, n, rng);
      float out[kDotN][kGroupRows];
      dot(n, c.p.group.data(), c.a, kDotN, &out[0][0], kGroupRows);
      for (int t = 0; t < kDotN; ++t)
        for (uint32_t r = 0; r < kGroupRows; ++r) {
          const Reference ref = reference_dot(pl.layout, c.p.rows[r], dequantize_activations(c.acts[t]));
          EXPECT_NEAR(out[t][r], ref.dot, 2e-5 * ref.magnitude + 1e-6)
              << packing_name(pl.packing) << " n=" << n << " token " << t << " row " << r;
        }
    }
  }
}

// qdot.h's contract for group dots: each (row, token) is the scalar reference's f32 steps, so
// every set gives the reference's result bit for bit, however many tokens share the call.
TEST_P(QdotKquant, GroupDotIsTheScalarReferenceBitForBitWhateverTheCount) {
  std::mt19937 rng(23);
  for (const PackedLayout& pl : kPacked) {
    const GroupDotFn dot = k_->group_dot[int(pl.packing)];
    const GroupDotFn reference = kernels(Isa::kScalar)->group_dot[int(pl.packing)];
    for (size_t n : kLengths) {
      SCOPED_TRACE(std::string(packing_name(pl.packing)) + " n=" + std::to_string(n));
      const GroupCase c(pl, n, rng);
      float want[kDotN][kGroupRows];
      reference(n, c.p.group.data(), c.a, kDotN, &want[0][0], kGroupRows);
      for (int count : {kDotN, 13, 5, 1}) {
        constexpr size_t kStride = kGroupRows + 3;  // token-major with a gap, as a tile might be
        std::vector<float> got(kDotN * kStride, -1.0f);
        dot(n, c.p.group.data(), c.a, count, got.data(), kStride);
        for (int t = 0; t < count; ++t)
          EXPECT_EQ(std::memcmp(&got[t * kStride], want[t], sizeof want[t]), 0) << "count " << count << " token " << t;
        EXPECT_EQ(got[kGroupRows], -1.0f) << "wrote past a token's rows";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QdotKquant, ::testing::ValuesIn(kAllIsas), testing::isa_test_name);

class QdotKquantSimd : public testing::SimdIsaTest {};

TEST_P(QdotKquantSimd, QuantizeQ8KIsBitIdenticalToScalar) {
  std::mt19937 rng(5);
  const size_t n = 4096 + 256;
  std::vector<float> x = random_floats(n, rng, /*spread_per_block=*/true);
  std::fill(x.begin(), x.begin() + 256, 0.0f);
  x[300] = -x[300] * 1e3f;  // a lone dominant element
  std::vector<BlockQ8K> want(n / kQK), got(n / kQK);
  scalar_.quantize_q8k(x.data(), n, want.data());
  k_->quantize_q8k(x.data(), n, got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(BlockQ8K)), 0);
}

// Both sets sum the same exact integers and differ only in the f32 rounding of
// the per-super-block terms and their summation order: each is within ~1.5e-6
// of the magnitude from the exact dot (see rounding_bound), so the 1e-5 bound
// holds between them too.
TEST_P(QdotKquantSimd, DotsMatchScalar) {
  std::mt19937 rng(11);
  for (const Layout& layout : kLayouts)
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        SCOPED_TRACE(name(layout.type) + " n=" + std::to_string(n) + " trial " + std::to_string(trial));
        const std::vector<uint8_t> row = random_row(layout, n, rng);
        const std::vector<BlockQ8K> act = random_activations(n, rng);
        const Reference ref = reference_dot(layout, row, dequantize_activations(act));
        const uint32_t code = uint32_t(layout.type);
        EXPECT_NEAR(k_->dot[code](n, row.data(), act.data()), scalar_.dot[code](n, row.data(), act.data()),
                    rounding_bound(ref.magnitude));
      }
}

// The x86 sets are one source built three ways (engine/qdot_x86_isa.h): the VNNI ones compute the
// AVX2 set's integers and f32 operations, so every output is the AVX2 set's bit for bit.
TEST_P(QdotKquantSimd, IsBitIdenticalToAvx2) {
  const Kernels* avx2 = kernels(Isa::kAvx2);
  if (GetParam() == Isa::kAvx2) GTEST_SKIP() << "avx2 is the reference here";
  ASSERT_NE(avx2, nullptr);
  std::mt19937 rng(13);
  for (size_t n : kLengths) {
    const std::vector<float> x = random_floats(n, rng, /*spread_per_block=*/true);
    std::vector<BlockQ8K> want_q(n / kQK), got_q(n / kQK);
    avx2->quantize_q8k(x.data(), n, want_q.data());
    k_->quantize_q8k(x.data(), n, got_q.data());
    EXPECT_EQ(std::memcmp(want_q.data(), got_q.data(), want_q.size() * sizeof(BlockQ8K)), 0) << "n=" << n;
    std::vector<std::vector<BlockQ8K>> acts;
    const void* rows[kDotN];
    for (int j = 0; j < kDotN; ++j) acts.push_back(random_activations(n, rng)), rows[j] = acts.back().data();
    for (const Layout& layout : kLayouts) {
      const uint32_t code = uint32_t(layout.type);
      const std::vector<uint8_t> w = random_row(layout, n, rng);
      const float want = avx2->dot[code](n, w.data(), rows[0]), got = k_->dot[code](n, w.data(), rows[0]);
      EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0)
          << name(layout.type) << " n=" << n << ": " << want << " vs " << got;
      ASSERT_EQ(avx2->dot_n[code] == nullptr, k_->dot_n[code] == nullptr) << name(layout.type);
      if (!avx2->dot_n[code]) continue;
      float want_n[kDotN], got_n[kDotN];
      avx2->dot_n[code](n, w.data(), rows, kDotN, want_n, 1);
      k_->dot_n[code](n, w.data(), rows, kDotN, got_n, 1);
      EXPECT_EQ(std::memcmp(want_n, got_n, sizeof want_n), 0) << name(layout.type) << " n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QdotKquantSimd, ::testing::ValuesIn(testing::kSimdIsas), testing::isa_test_name);

}  // namespace
}  // namespace kvtier::engine::qdot
