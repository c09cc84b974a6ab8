// Builds a small valid GGUF image and deterministic mutations of it: the
// seed corpus of the GGUF fuzzer and the cases of the replay test.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/gguf.h"

namespace kvtier::engine::fuzzing {

// A micro llama model (1 layer, hidden 16) written as GGUF with `type` matrices.
std::vector<uint8_t> valid_image(GgufType type);

// Mutation `k` of `base`: byte flips, 32/64-bit field smashes, truncation,
// insertion, duplication of a region. Deterministic in (base, k).
std::vector<uint8_t> mutate(const std::vector<uint8_t>& base, uint64_t k);

}  // namespace kvtier::engine::fuzzing
