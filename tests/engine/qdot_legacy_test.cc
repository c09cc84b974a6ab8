// The legacy dot kernels (engine/qdot.h: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 against
// q8 activations, F16/BF16 against f32) and quantize_q8, for every kernel set
// the CPU runs: against a double-precision reference built from
// quant::dequantize_row, AVX2 against scalar, and the quantized activations'
// error against the f32 ones. Inputs are random blocks from seeded generators.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/half.h"
#include "engine/qdot.h"
#include "engine/quant.h"
#include "qdot_isa_test.h"

namespace kvtier::engine::qdot {

// Test names and failure messages show an Isa by name (static: each test file may have its own).
[[maybe_unused]] static void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

namespace {

constexpr GgufType kQ8Types[] = {GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ5_0, GgufType::kQ5_1, GgufType::kQ8_0};
constexpr GgufType kFloatTypes[] = {GgufType::kF16, GgufType::kBF16};
// Even and odd block counts (the AVX2 dots take blocks in pairs).
constexpr size_t kLengths[] = {32, 256, 352, 4096, 2048 + 32};
// F16/BF16 rows have no blocks: lengths that leave every tail of the 32- and 8-wide loops.
constexpr size_t kFloatLengths[] = {32, 256, 4096, 2048 + 32, 1, 7, 2048 + 32 + 8 + 3};
constexpr int kTrials = 4;

// A dot's error from f32 rounding alone, against the exact (double) dot of the
// same values: each of the few f32 roundings per block (scale product, int32 →
// f32, FMA/add into the sum) and the summation of ≤ 128 block terms costs at
// most a few ulps (2^-24 ≈ 6e-8 each) of Σ |w_i a_i|: measured ≤ 1e-7 here and
// ≤ 3e-7 over 6000 random dots, so 1e-5 leaves a 30x margin. The absolute
// term covers rows whose Σ |w_i a_i| is ~0. Q4_1/Q5_1 round the min term
// m * s apart from the q * d one; with realistic mins (|m| ≲ 16 d) both stay
// within a few times Σ |w_i a_i|.
double rounding_bound(double abs_sum) { return 1e-5 * abs_sum + 1e-6; }

std::string name(GgufType t) { return std::string(quant::info(t).name); }

float log_uniform(std::mt19937& rng, float lo, float hi) {
  return std::exp(std::uniform_real_distribution<float>(std::log(lo), std::log(hi))(rng));
}

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// A random row of `type`: random integer bytes with a realistic f16 scale per
// block (|d| log-uniform in [1e-2, 1], either sign for the symmetric types);
// Q4_1/Q5_1 get a min of -(0.3..0.7) of the block's range, as a quantizer of
// centred data would; F16/BF16 rows hold N(0, 0.5) values.
std::vector<uint8_t> random_row(GgufType type, size_t n, std::mt19937& rng) {
  const quant::TypeInfo& t = quant::info(type);
  std::vector<uint8_t> row(quant::row_bytes(t, n));
  if (t.block_elems == 1) {
    std::normal_distribution<float> value(0.0f, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = type == GgufType::kF16 ? f32_to_f16(value(rng)) : f32_to_bf16(value(rng));
      std::memcpy(row.data() + 2 * i, &h, 2);
    }
    return row;
  }
  for (uint8_t& byte : row) byte = uint8_t(rng());
  const bool has_min = type == GgufType::kQ4_1 || type == GgufType::kQ5_1;
  const float qmax = type == GgufType::kQ4_1 ? 15.0f : 31.0f;
  for (size_t b = 0; b < n / t.block_elems; ++b) {
    uint8_t* block = row.data() + b * t.block_bytes;
    const float d = log_uniform(rng, 1e-2f, 1.0f);
    store_f16(block, has_min || (rng() & 1) ? d : -d);
    if (has_min) store_f16(block + 2, -d * qmax * std::uniform_real_distribution<float>(0.3f, 0.7f)(rng));
  }
  return row;
}

// Activations: N(0, 1) scaled per row (log-uniform 0.1..10) with a few 10x outliers, as hidden states have.
std::vector<float> random_activations(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  const float scale = log_uniform(rng, 0.1f, 10.0f);
  std::vector<float> x(n);
  for (float& v : x) v = value(rng) * scale * (rng() % 64 == 0 ? 10.0f : 1.0f);
  return x;
}

std::vector<float> dequantize(GgufType type, const std::vector<uint8_t>& row, size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(quant::dequantize_row(type, std::as_bytes(std::span(row)), n, out.data()).ok());
  return out;
}

std::vector<BlockQ8> quantize(const Kernels& k, const std::vector<float>& x) {
  std::vector<BlockQ8> q(x.size() / 32);
  k.quantize_q8(x.data(), x.size(), q.data());
  return q;
}

// The values the q8 blocks stand for, d * qs, exactly.
std::vector<double> act_values(const std::vector<BlockQ8>& q) {
  std::vector<double> a;
  for (const BlockQ8& b : q)
    for (int8_t v : b.qs) a.push_back(double(b.d) * v);
  return a;
}

struct Exact {
  double dot = 0.0;  // Σ w_i a_i
  double abs = 0.0;  // Σ |w_i a_i|
};
template <typename A>
Exact exact_dot(const std::vector<float>& w, const std::vector<A>& a) {
  Exact e;
  for (size_t i = 0; i < w.size(); ++i) {
    e.dot += double(w[i]) * double(a[i]);
    e.abs += std::fabs(double(w[i]) * double(a[i]));
  }
  return e;
}

double norm(const auto& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Each test runs once per kernel set; a set the CPU (or this build) lacks skips, naming the ISA.
class QdotLegacy : public testing::IsaTest {};

// 1. Every quantized dot is the exact dot of the dequantized weights with the
// dequantized activations (its own quantize_q8's), up to f32 rounding.
TEST_P(QdotLegacy, QuantizedDotMatchesDequantizedReference) {
  std::mt19937 rng(1);
  for (GgufType type : kQ8Types) {
    ASSERT_NE(k_->dot[uint32_t(type)], nullptr) << name(type);
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        const std::vector<uint8_t> w = random_row(type, n, rng);
        const std::vector<BlockQ8> a = quantize(*k_, random_activations(n, rng));
        const Exact ref = exact_dot(dequantize(type, w, n), act_values(a));
        const float got = k_->dot[uint32_t(type)](n, w.data(), a.data());
        EXPECT_NEAR(got, ref.dot, rounding_bound(ref.abs)) << name(type) << " n=" << n << " trial " << trial;
      }
  }
}

// 1''. The many-row kernels (prefill) give each row's dot bit for bit (qdot.h's contract).
TEST_P(QdotLegacy, DotNIsBitIdenticalToDotPerRow) {
  std::mt19937 rng(3);
  int checked = 0;
  for (GgufType type : kQ8Types) {
    const DotNFn dot_n = k_->dot_n[uint32_t(type)];
    if (!dot_n) continue;
    for (size_t n : kLengths) {
      const std::vector<uint8_t> w = random_row(type, n, rng);
      std::vector<std::vector<BlockQ8>> acts;
      const void* a[kDotN];
      for (int j = 0; j < kDotN; ++j)
        acts.push_back(quantize(*k_, random_activations(n, rng))), a[j] = acts.back().data();
      for (int count : {kDotN, 5, 1}) {  // whatever the number of rows sharing the call
        constexpr size_t kStride = 3;  // results land token-major in a tile, as Matmul lays them
        float got[kDotN * kStride];
        dot_n(n, w.data(), a, count, got, kStride);
        for (int j = 0; j < count; ++j) {
          const float want = k_->dot[uint32_t(type)](n, w.data(), acts[j].data());
          EXPECT_EQ(std::memcmp(&got[j * kStride], &want, sizeof want), 0)
              << name(type) << " n=" << n << " row " << j << " of " << count;
        }
      }
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << isa_name(GetParam()) << " has no many-row kernels";
}

// 1'. F16/BF16 rows against f32 activations (no activation quantization).
TEST_P(QdotLegacy, FloatDotMatchesDequantizedReference) {
  std::mt19937 rng(2);
  for (GgufType type : kFloatTypes) {
    ASSERT_NE(k_->dot[uint32_t(type)], nullptr) << name(type);
    for (size_t n : kFloatLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        const std::vector<uint8_t> w = random_row(type, n, rng);
        const std::vector<float> x = random_activations(n, rng);
        const Exact ref = exact_dot(dequantize(type, w, n), x);
        const float got = k_->dot[uint32_t(type)](n, w.data(), x.data());
        EXPECT_NEAR(got, ref.dot, rounding_bound(ref.abs)) << name(type) << " n=" << n << " trial " << trial;
      }
  }
}

// 2. quantize_q8 rounds to nearest: |x - d q| ≤ d / 2 (plus the f32 rounding
// of x * (1 / d), ≤ 127 * 2^-23 of d), d = max|x| / 127 with the largest
// element at ±127, s = d * Σ q, and an all-zero block gives d = 0, q = 0.
TEST_P(QdotLegacy, QuantizeQ8ErrorWithinHalfStep) {
  std::mt19937 rng(3);
  for (size_t n : kLengths) {
    std::vector<float> x = random_activations(n, rng);
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    const std::vector<BlockQ8> q = quantize(*k_, x);
    for (size_t b = 0; b < q.size(); ++b) {
      float amax = 0.0f;
      int sum = 0, qmax = 0;
      for (size_t j = 0; j < 32; ++j) {
        const double err = std::fabs(double(x[32 * b + j]) - double(q[b].d) * q[b].qs[j]);
        ASSERT_LE(err, double(q[b].d) * (0.5 + 2e-5)) << "n=" << n << " block " << b << " element " << j;
        amax = std::max(amax, std::fabs(x[32 * b + j]));
        sum += q[b].qs[j];
        qmax = std::max(qmax, std::abs(int(q[b].qs[j])));
      }
      EXPECT_EQ(q[b].d, amax / 127.0f) << "n=" << n << " block " << b;
      EXPECT_EQ(q[b].s, q[b].d * float(sum)) << "n=" << n << " block " << b;
      EXPECT_EQ(qmax, b == 0 ? 0 : 127) << "n=" << n << " block " << b;
    }
  }
}

// 4. Against the f32 activations themselves, the quantized dot stays close to
// the exact Σ w_i x_i. Its error Σ w_i e_i sums rounding errors |e_i| ≤ d_b / 2,
// which behave as independent uniform ones: standard deviation σ = sqrt(Σ w_i²
// d_b² / 12). Each dot must be within 6σ (plus f32 rounding; measured ≤ 4.3σ
// over 12000 random dots, ≤ 2.9σ here), and the rms of err / σ over the rows
// must be near 1 (measured 0.93..0.97): a biased rounding (truncation gives ~2)
// or a wrong scale fails. In relative terms the error here is ≤ 0.2% of
// ‖w‖ ‖x‖ (0.65% worst over the 12000; Cauchy-Schwarz caps it at √32 / 254 ≈ 2.2%).
TEST_P(QdotLegacy, QuantizedActivationErrorIsBounded) {
  std::mt19937 rng(4);
  double z_squares = 0.0;
  int dots = 0;
  for (GgufType type : kQ8Types)
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        const std::vector<uint8_t> w = random_row(type, n, rng);
        const std::vector<float> x = random_activations(n, rng);
        const std::vector<BlockQ8> a = quantize(*k_, x);
        const std::vector<float> wf = dequantize(type, w, n);
        const Exact exact = exact_dot(wf, x);
        double variance = 0.0;
        for (size_t i = 0; i < n; ++i) variance += std::pow(double(wf[i]) * a[i / 32].d, 2) / 12.0;
        const double sigma = std::sqrt(variance);
        const double err = k_->dot[uint32_t(type)](n, w.data(), a.data()) - exact.dot;
        EXPECT_LE(std::fabs(err), 6.0 * sigma + rounding_bound(exact.abs))
            << name(type) << " n=" << n << " trial " << trial;
        z_squares += std::pow(err / sigma, 2);
        ++dots;
      }
  const double z_rms = std::sqrt(z_squares / dots);
  EXPECT_GT(z_rms, 0.7);
  EXPECT_LT(z_rms, 1.3);
}

INSTANTIATE_TEST_SUITE_P(Isas, QdotLegacy, ::testing::ValuesIn(kAllIsas), testing::isa_test_name);

// 3. Each SIMD set (AVX2, AVX-VNNI, AVX-512 VNNI) against the scalar one on the same inputs: quantize_q8 gives
// the same bits (both round x * (1 / d) half to even in the same f32 steps;
// checked on ties too), each dot agrees within the rounding bound of test 1.
class QdotLegacySimd : public testing::SimdIsaTest {};

TEST_P(QdotLegacySimd, QuantizeQ8IsBitIdenticalToScalar) {
  std::mt19937 rng(5);
  for (size_t n : kLengths) {
    std::vector<float> x = random_activations(n, rng);
    // Block 0 holds exact halves (d = 1): ties round to even in both.
    for (size_t j = 0; j < 32; ++j) x[j] = float(j) - 15.5f;
    x[31] = 127.0f;
    const std::vector<BlockQ8> want = quantize(scalar_, x), got = quantize(*k_, x);
    EXPECT_EQ(want[0].qs[0], -16);  // -15.5 → -16
    EXPECT_EQ(want[0].qs[1], -14);  // -14.5 → -14
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(BlockQ8)), 0) << "n=" << n;
  }
}

TEST_P(QdotLegacySimd, DotsMatchScalar) {
  std::mt19937 rng(6);
  for (GgufType type : kQ8Types)
    for (size_t n : kLengths)
      for (int trial = 0; trial < kTrials; ++trial) {
        const std::vector<uint8_t> w = random_row(type, n, rng);
        const std::vector<BlockQ8> a = quantize(scalar_, random_activations(n, rng));
        const double abs = exact_dot(dequantize(type, w, n), act_values(a)).abs;
        const float want = scalar_.dot[uint32_t(type)](n, w.data(), a.data());
        const float got = k_->dot[uint32_t(type)](n, w.data(), a.data());
        EXPECT_NEAR(got, want, rounding_bound(abs)) << name(type) << " n=" << n << " trial " << trial;
      }
  for (GgufType type : kFloatTypes)
    for (size_t n : kFloatLengths) {
      const std::vector<uint8_t> w = random_row(type, n, rng);
      const std::vector<float> x = random_activations(n, rng);
      const double abs = exact_dot(dequantize(type, w, n), x).abs;
      const float want = scalar_.dot[uint32_t(type)](n, w.data(), x.data());
      const float got = k_->dot[uint32_t(type)](n, w.data(), x.data());
      EXPECT_NEAR(got, want, rounding_bound(abs)) << name(type) << " n=" << n;
    }
}

// 5. The x86 sets are one source built three ways (engine/qdot_x86_isa.h): the VNNI ones compute
// the AVX2 set's integers and f32 operations, so every output is the AVX2 set's bit for bit.
TEST_P(QdotLegacySimd, IsBitIdenticalToAvx2) {
  const Kernels* avx2 = kernels(Isa::kAvx2);
  if (GetParam() == Isa::kAvx2) GTEST_SKIP() << "avx2 is the reference here";
  ASSERT_NE(avx2, nullptr);
  std::mt19937 rng(7);
  for (size_t n : kLengths) {
    const std::vector<float> x = random_activations(n, rng);
    const std::vector<BlockQ8> a = quantize(*avx2, x);
    ASSERT_EQ(std::memcmp(a.data(), quantize(*k_, x).data(), a.size() * sizeof(BlockQ8)), 0) << "n=" << n;
    std::vector<std::vector<BlockQ8>> acts;
    const void* rows[kDotN];
    for (int j = 0; j < kDotN; ++j) acts.push_back(quantize(*avx2, random_activations(n, rng))), rows[j] = acts.back().data();
    for (GgufType type : kQ8Types) {
      const uint32_t code = uint32_t(type);
      const std::vector<uint8_t> w = random_row(type, n, rng);
      const float want = avx2->dot[code](n, w.data(), a.data()), got = k_->dot[code](n, w.data(), a.data());
      EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << name(type) << " n=" << n << ": " << want << " vs " << got;
      ASSERT_EQ(avx2->dot_n[code] == nullptr, k_->dot_n[code] == nullptr) << name(type);
      if (!avx2->dot_n[code]) continue;
      float want_n[kDotN], got_n[kDotN];
      avx2->dot_n[code](n, w.data(), rows, kDotN, want_n, 1);
      k_->dot_n[code](n, w.data(), rows, kDotN, got_n, 1);
      EXPECT_EQ(std::memcmp(want_n, got_n, sizeof want_n), 0) << name(type) << " n=" << n;
    }
  }
  for (GgufType type : kFloatTypes)
    for (size_t n : kFloatLengths) {
      const std::vector<uint8_t> w = random_row(type, n, rng);
      const std::vector<float> x = random_activations(n, rng);
      const float want = avx2->dot[uint32_t(type)](n, w.data(), x.data());
      const float got = k_->dot[uint32_t(type)](n, w.data(), x.data());
      EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << name(type) << " n=" << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Isas, QdotLegacySimd, ::testing::ValuesIn(testing::kSimdIsas), testing::isa_test_name);

}  // namespace
}  // namespace kvtier::engine::qdot
