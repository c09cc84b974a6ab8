// Deterministic byte-level mutations of a valid input: what the corpus-replay
// tests run in every `make test` in place of a fuzzer. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace kvtier::fuzzing {

// Mutation `k` of `base`: byte flips, 32/64-bit field smashes with extreme
// values, truncation, insertion, duplication of a range. The first 8 KiB
// (headers, tables) are hit three times as often as the rest. Deterministic
// in (base, k).
std::vector<uint8_t> mutate(const std::vector<uint8_t>& base, uint64_t k);

}  // namespace kvtier::fuzzing
