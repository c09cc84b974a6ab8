// copy_host: small batches by memcpy, large ones by streaming stores; every
// byte lands exactly, whatever the alignment and length of each copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "memory/device_memory.h"

namespace kvtier {
namespace {

// equal_len > 0: every copy that long (gathers and scatters of page slices, which stream side by side).
void check_batch(size_t total_bytes, uint32_t seed, size_t equal_len = 0) {
  std::mt19937 rng(seed);
  std::vector<std::byte> src(total_bytes + 4096), dst(total_bytes + 4096, std::byte{0x5A});
  for (auto& b : src) b = std::byte(rng());
  // Copies of odd lengths at odd offsets, a gap of untouched bytes after each.
  std::vector<ByteCopy> copies;
  size_t at = 0;
  while (true) {
    const size_t len = equal_len ? equal_len : 1 + rng() % 20000;
    const size_t skew = equal_len && rng() % 4 ? 0 : rng() % 64;  // mostly a shared alignment, sometimes not
    if (at + skew + len + 8 > total_bytes) break;
    copies.push_back({dst.data() + at + skew, src.data() + at + skew + 3, len});
    at += skew + len + 8;
  }
  ASSERT_TRUE(copy_host(copies).ok());
  std::vector<bool> written(dst.size());
  for (const ByteCopy& c : copies) {
    ASSERT_EQ(std::memcmp(c.dst, c.src, c.bytes), 0) << "copy at " << (c.dst - dst.data()) << " of " << c.bytes;
    std::fill_n(written.begin() + (c.dst - dst.data()), c.bytes, true);
  }
  size_t changed = 0;
  for (size_t i = 0; i < dst.size(); ++i) changed += !written[i] && dst[i] != std::byte{0x5A};
  EXPECT_EQ(changed, 0u) << "bytes outside every copy changed";
}

TEST(CopyHost, SmallBatchesAreExact) { check_batch(size_t(1) << 20, 1); }

TEST(CopyHost, LargeBatchesAreExactAtAnyAlignment) {  // past the streaming threshold
  for (uint32_t seed = 2; seed < 5; ++seed) check_batch(size_t(6) << 20, seed);
}

TEST(CopyHost, LargeBatchesOfEqualSlicesAreExact) {  // streamed several at a time
  for (size_t len : {4096u, 5000u, 16384u, 16447u}) check_batch(size_t(6) << 20, uint32_t(len), len);
}

}  // namespace
}  // namespace kvtier
