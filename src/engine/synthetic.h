// Model::synthetic's weights a few rows at a time, without building the Model:
// what `kvtier model make` streams into a GGUF file, so an 8B-shaped model is
// generated, quantised and written in the memory of a few chunks of rows.
// Values are exactly Model::synthetic's (synthetic_fill's stream, jumped ahead
// to the first value asked for). Stateless free functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf.h"
#include "model/model_config.h"

namespace kvtier::engine {

// synthetic_fill(v, offset + n, seed, tensor_id, mean, sigma)'s last n values, into out[n],
// without computing the ones before (the generator is a counter: value i costs the same for any i).
void synthetic_fill_range(float* out, uint64_t offset, size_t n, uint64_t seed, uint64_t tensor_id, float mean,
                          float sigma);

// Rows [first_row, first_row + rows) of `tensor` (an entry of gguf_model_tensors(config))
// of Model::synthetic(config, seed), into out[rows][tensor.cols]; a vector is row 0.
// rope_freqs.weight is config.rope_freq_factors.
void synthetic_rows(const ModelConfig& config, uint64_t seed, const GgufModelTensor& tensor, uint64_t first_row,
                    uint64_t rows, float* out);

// The whole tensor `name` (a GGUF name of gguf_model_tensors(config)); NotFound for any other name.
Result<std::vector<float>> synthetic_tensor(const ModelConfig& config, uint64_t seed, std::string_view name);

// Writes Model::synthetic(config, seed, vocab) as a GGUF file (what write_gguf of that
// model writes) one chunk of rows at a time.
Status write_synthetic_gguf(const ModelConfig& config, uint64_t seed, const Vocab& vocab, const std::string& path,
                            const GgufWriteOptions& options, const GgufStreamOptions& stream = {});

}  // namespace kvtier::engine
