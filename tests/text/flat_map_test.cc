#include "text/flat_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace kvtier::text {
namespace {

// The inverse of the unseeded mix the tables used before (x ^= x >> 33; x *= C; x ^= x >> 33): keys a hostile
// vocabulary could choose so that every one of them had the same home slot.
uint64_t unmix_unseeded(uint64_t y) {
  y ^= y >> 33;
  uint64_t inv = 0xff51afd7ed558ccdULL;  // Newton's iteration for C^-1 mod 2^64 (C is odd)
  for (int i = 0; i < 6; ++i) inv *= 2 - 0xff51afd7ed558ccdULL * inv;
  y *= inv;
  return y ^ (y >> 33);
}

TEST(FlatU64Map, KeysChosenToShareASlotUnderAFixedMixDoNotShareOne) {
  constexpr uint64_t kKeys = 20000;
  FlatU64Map<uint32_t> map(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) ASSERT_TRUE(map.insert(unmix_unseeded(i << 32), uint32_t(i)));
  for (uint64_t i = 0; i < kKeys; ++i) {
    const uint32_t* v = map.find(unmix_unseeded(i << 32));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(*v, i);
  }
  EXPECT_EQ(map.find(unmix_unseeded(kKeys << 32)), nullptr);
  // Half full with a random hash, the longest run is a few dozen slots (log-sized); under the fixed mix
  // these keys all had home slot 0 and the last one probed 20,000.
  EXPECT_LT(map.longest_probe(), 200u);
}

TEST(FlatStringMap, ALaterSetWinsAndMissingKeysAreMissing) {
  FlatStringMap map(4);
  for (int i = 0; i < 1000; ++i) {
    std::string key = "t";
    key += std::to_string(i);
    map.set(key, i);
  }
  map.set("t7", 70);
  EXPECT_EQ(map.find("t7"), 70);
  EXPECT_EQ(map.find("t999"), 999);
  EXPECT_EQ(map.find("t1000"), -1);
  EXPECT_EQ(map.find("", -5), -5);
}

}  // namespace
}  // namespace kvtier::text
