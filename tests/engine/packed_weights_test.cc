// Weights regrouped for a kernel set (engine/weights.h: Linear::pack; qdot.h:
// Packing): a packed matrix holds exactly the file's rows, and Matmul over it
// gives each token the same result whatever the batch, close to the matrix as
// the file stores it. Runs on any CPU: the packing is asked of a copy of the
// scalar set, whose group dot is the reference every set reproduces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/matmul.h"
#include "engine/quantize.h"
#include "engine/weights.h"
#include "engine/worker_pool.h"

namespace kvtier::engine {
namespace {

constexpr uint64_t kRows = 37, kCols = 512;  // two groups of 16 and five rows past them

Linear random_matrix(std::mt19937& rng, GgufType type = GgufType::kQ4_K) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const size_t row_bytes = quant::row_bytes(quant::info(type), kCols);
  std::vector<std::byte> bytes(kRows * row_bytes);
  std::vector<float> x(kCols);
  for (uint64_t r = 0; r < kRows; ++r) {
    for (float& v : x) v = normal(rng);
    EXPECT_TRUE(quantize_row(type, x.data(), kCols, bytes.data() + r * row_bytes).ok());
  }
  Linear l;
  auto part = WeightPart::from_bytes(type, kRows, kCols, bytes);
  EXPECT_TRUE(part.ok());
  EXPECT_TRUE(l.append(std::move(*part)).ok());
  return l;
}

qdot::Kernels packing_scalar() {
  qdot::Kernels k = *qdot::kernels(qdot::Isa::kScalar);
  k.packing[uint32_t(GgufType::kQ4_K)] = qdot::Packing::kQ4K16;
  return k;
}

TEST(PackedWeights, HoldTheFileRowsInTwoParts) {
  std::mt19937 rng(1);
  const Linear file = random_matrix(rng);
  Linear packed = file;
  packed.pack(packing_scalar());
  ASSERT_EQ(packed.parts().size(), 2u);
  EXPECT_EQ(packed.parts()[0].packing(), qdot::Packing::kQ4K16);
  EXPECT_EQ(packed.parts()[0].rows(), 32u);
  EXPECT_EQ(packed.parts()[1].packing(), qdot::Packing::kRows);
  EXPECT_EQ(packed.rows(), kRows);
  EXPECT_EQ(packed.bytes(), qdot::packed_matrix_bytes(qdot::Packing::kQ4K16, GgufType::kQ4_K, kRows, kCols));
  EXPECT_EQ(packed.to_f32(), file.to_f32());
  Linear again = packed;
  again.pack(packing_scalar());  // already as wanted: unchanged
  EXPECT_EQ(again.parts().size(), 2u);
  EXPECT_EQ(again.to_f32(), file.to_f32());
}

// y for m tokens through `w` (a worker pool of two, as the engine's).
std::vector<float> run(const Linear& w, const qdot::Kernels& k, const std::vector<float>& x, uint32_t m) {
  WorkerPool pool(2);
  Matmul mm(pool, /*split_gemm=*/true, /*exact=*/false, k);
  std::vector<float> y(size_t(m) * kRows);
  mm.run(x.data(), m, w, y.data(), uint32_t(kRows), 0.0f);
  return y;
}

TEST(PackedWeights, MatmulGivesATokenTheSameResultWhateverTheBatch) {
  std::mt19937 rng(2);
  const Linear file = random_matrix(rng);
  Linear packed = file;
  const qdot::Kernels k = packing_scalar();
  packed.pack(k);
  constexpr uint32_t kTokens = 21;  // a full tile of 16 and five more
  std::vector<float> x(kTokens * kCols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  const std::vector<float> all = run(packed, k, x, kTokens);
  const std::vector<float> unpacked = run(file, k, x, kTokens);
  double max_err = 0, max_abs = 0;
  for (uint32_t t = 0; t < kTokens; ++t) {
    const std::vector<float> one =
        run(packed, k, std::vector<float>(x.begin() + t * kCols, x.begin() + (t + 1) * kCols), 1);
    EXPECT_EQ(std::memcmp(one.data(), &all[t * kRows], kRows * sizeof(float)), 0) << "token " << t;
    for (uint64_t r = 0; r < kRows; ++r) {
      max_err = std::max(max_err, std::fabs(double(all[t * kRows + r]) - unpacked[t * kRows + r]));
      max_abs = std::max(max_abs, std::fabs(double(unpacked[t * kRows + r])));
    }
  }
  // The same integers, scaled in f32 per sub-block rather than per super-block.
  EXPECT_LT(max_err, 1e-5 * max_abs * std::sqrt(double(kCols)));
  EXPECT_GT(max_abs, 0.1);
}

// Every x86 set this CPU has packs the same types and gives a matrix's outputs bit for bit, for
// groups of 16 rows and the rows past them (AVX2 kept Q8_0 and Q5_0 as rows, whose dot rounds
// otherwise: KV shared between an AVX2 host and a VNNI one differed from a recompute).
TEST(PackedWeights, EverySetGivesTheSameOutputs) {
  std::mt19937 rng(3);
  constexpr uint32_t kTokens = 19;
  std::vector<float> x(kTokens * kCols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  for (GgufType type : {GgufType::kQ8_0, GgufType::kQ5_0, GgufType::kQ4_K, GgufType::kQ6_K}) {
    const Linear file = random_matrix(rng, type);
    std::vector<float> want;
    for (qdot::Isa isa : {qdot::Isa::kAvx2, qdot::Isa::kAvxVnni, qdot::Isa::kAvx512}) {
      if (!qdot::cpu_has(isa)) continue;
      const qdot::Kernels& k = *qdot::kernels(isa);
      Linear packed = file;
      packed.pack(k);
      EXPECT_EQ(packed.parts()[0].packing(), k.packing[uint32_t(type)]);
      EXPECT_NE(k.packing[uint32_t(type)], qdot::Packing::kRows) << quant::info(type).name;
      const std::vector<float> y = run(packed, k, x, kTokens);
      if (want.empty()) want = y;
      EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
          << quant::info(type).name << " on set " << int(isa);
    }
  }
}

}  // namespace
}  // namespace kvtier::engine
