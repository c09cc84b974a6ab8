#pragma once
// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators"): the
// increment of its state and the output function that turns a state into a well-mixed value.
// Used where a cheap, stateless hash of a counter or an id is wanted (synthetic weights, trace
// token ids, request seeds); never for anything an attacker must not predict.

#include <cstdint>

namespace kvtier {

inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kvtier
