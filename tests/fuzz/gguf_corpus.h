// Builds a small valid GGUF image and deterministic mutations of it: the
// seed corpus of the GGUF fuzzer and the cases of the replay test.
#pragma once

#include <cstdint>
#include <vector>

#include "byte_mutator.h"
#include "engine/gguf.h"

namespace kvtier::engine::fuzzing {

// A micro llama model (1 layer, hidden 16) written as GGUF with `type` matrices.
std::vector<uint8_t> valid_image(GgufType type);

using kvtier::fuzzing::mutate;

}  // namespace kvtier::engine::fuzzing
