#include "byte_mutator.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>

namespace kvtier::fuzzing {

std::vector<uint8_t> mutate(const std::vector<uint8_t>& base, uint64_t k) {
  std::mt19937_64 rng(k * 0x9E3779B97F4A7C15ull + 1);
  std::vector<uint8_t> b = base;
  if (b.empty()) return b;
  // Most interesting bytes are in headers and tables: bias positions there.
  auto pos = [&]() -> size_t {
    const size_t head = std::min<size_t>(b.size(), 8192);
    return (rng() % 4 != 0) ? rng() % head : rng() % b.size();
  };
  const int n_mut = 1 + int(rng() % 4);
  for (int m = 0; m < n_mut && !b.empty(); ++m) {
    switch (rng() % 6) {
      case 0: b[pos()] ^= uint8_t(1u << (rng() % 8)); break;
      case 1: b[pos()] = uint8_t(rng()); break;
      case 2: {  // smash a 32- or 64-bit field with an extreme value
        static const uint64_t extremes[] = {0, 1, 0xff, 0xffff, 0x7fffffff, 0xffffffff, 0x8000000000000000ull,
                                            0xffffffffffffffffull, 31, 33, 4096};
        const uint64_t v = extremes[rng() % std::size(extremes)];
        const size_t w = (rng() % 2) ? 4 : 8;
        const size_t at = pos();
        if (at + w <= b.size()) std::memcpy(&b[at], &v, w);
        break;
      }
      case 3: b.resize(rng() % b.size()); break;
      case 4: {
        const size_t at = pos();
        b.insert(b.begin() + long(at), size_t(1 + rng() % 16), uint8_t(rng()));
        break;
      }
      case 5: {
        const size_t from = pos(), len = std::min<size_t>(b.size() - from, 1 + rng() % 64), to = pos();
        std::vector<uint8_t> chunk(b.begin() + long(from), b.begin() + long(from + len));
        b.insert(b.begin() + long(std::min(to, b.size())), chunk.begin(), chunk.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace kvtier::fuzzing
