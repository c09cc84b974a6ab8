#include "sim/mooncake_trace.h"

#include "common/mix.h"

namespace kvtier {

namespace {

// A bijection on [0, 2^31): odd multipliers and xor-shifts are invertible
// modulo 2^31, so distinct inputs never collide (no wrap-around aliasing).
uint32_t permute31(uint32_t x) {
  constexpr uint32_t kMask = 0x7FFFFFFFu;
  x &= kMask;
  x = (x * 0x2C1B3C6Du) & kMask;
  x ^= x >> 13;
  x = (x * 0x297A2D39u) & kMask;
  x ^= x >> 16;
  x = (x * 0x5BD1E995u) & kMask;
  x ^= x >> 15;
  return x;
}


}  // namespace

void expand_block(uint64_t hash_id, std::span<TokenId> out) {
  if (out.empty()) return;
  // The first token is a bijection of the id: different ids always differ there.
  out[0] = static_cast<TokenId>(permute31(static_cast<uint32_t>(hash_id & 0x7FFFFFFFu)));
  // The rest are independent hashes of (id, position): no serial dependency, so they pipeline.
  const uint64_t base = splitmix64_mix(hash_id + kSplitMix64Gamma);
  for (size_t j = 1; j < out.size(); ++j)
    out[j] = static_cast<TokenId>(splitmix64_mix(base + j * 0xD1B54A32D192ED03ull) & 0x7FFFFFFFu);
}

}  // namespace kvtier
