// Argument checks shared by every engine backend (CPU Engine, CudaEngine):
// the prefill and decode contracts of engine.h, checked the same way with
// the same messages. Pure functions; internal to src/engine and src/cuda.
#pragma once

#include <span>

#include "engine/engine.h"

namespace kvtier::engine {

// prefill(seq, tokens, start_pos): something to compute, within the model
// context, contiguous with the KV already held, pages of `pool` covering
// every position, token ids inside the vocabulary.
Status check_prefill(const ModelConfig& c, const BlockPool& pool, const SequenceKV& seq,
                     std::span<const TokenId> tokens, uint32_t start_pos);
// Every entry of `pages` is a page of `pool` (InvalidArgument naming the first that is not).
Status check_pool_pages(const BlockPool& pool, std::span<const PageId> pages);

// decode(seqs, tokens): one token per distinct, non-null sequence, each below
// the model context, with a page for its next position.
Status check_decode(const ModelConfig& c, const BlockPool& pool, std::span<SequenceKV* const> seqs,
                    std::span<const TokenId> tokens);

}  // namespace kvtier::engine
