#include "engine/engine_checks.h"

#include <string>

namespace kvtier::engine {

namespace {

Status check_pages(const BlockPool& pool, const SequenceKV& seq, uint32_t needed) {
  const uint32_t P = pool.geometry().page_tokens;
  if (uint64_t(seq.pages.size()) * P < needed)
    return Status::FailedPrecondition("page table covers " + std::to_string(seq.pages.size() * P) +
                                      " positions, the call needs " + std::to_string(needed));
  return check_pool_pages(pool, std::span(seq.pages).first((needed + P - 1) / P));
}

}  // namespace

Status check_pool_pages(const BlockPool& pool, std::span<const PageId> pages) {
  for (size_t i = 0; i < pages.size(); ++i)
    if (!pool.contains(pages[i]))
      return Status::InvalidArgument("page table entry " + std::to_string(i) + " is not a page of the pool");
  return Status::Ok();
}

namespace {

Status check_tokens(std::span<const TokenId> tokens, uint32_t vocab) {
  for (TokenId t : tokens)
    if (t < 0 || uint32_t(t) >= vocab)
      return Status::InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary [0, " +
                                     std::to_string(vocab) + ")");
  return Status::Ok();
}

}  // namespace

Status check_prefill(const ModelConfig& c, const BlockPool& pool, const SequenceKV& seq,
                     std::span<const TokenId> tokens, uint32_t start_pos) {
  if (start_pos >= tokens.size())
    return Status::InvalidArgument("prefill: start_pos " + std::to_string(start_pos) + " leaves nothing to compute in " +
                                   std::to_string(tokens.size()) + " tokens");
  if (tokens.size() > c.max_context)
    return Status::OutOfRange("prefill: " + std::to_string(tokens.size()) + " tokens exceed the model context of " +
                              std::to_string(c.max_context));
  if (start_pos > seq.num_tokens)
    return Status::FailedPrecondition("prefill: start_pos " + std::to_string(start_pos) + " but the sequence holds KV for " +
                                      std::to_string(seq.num_tokens) + " positions");
  KVTIER_RETURN_IF_ERROR(check_pages(pool, seq, uint32_t(tokens.size())));
  return check_tokens(tokens.subspan(start_pos), c.vocab_size);
}

Status check_decode(const ModelConfig& c, const BlockPool& pool, std::span<SequenceKV* const> seqs,
                    std::span<const TokenId> tokens) {
  if (seqs.size() != tokens.size() || seqs.empty())
    return Status::InvalidArgument("decode: " + std::to_string(seqs.size()) + " sequences but " +
                                   std::to_string(tokens.size()) + " tokens");
  KVTIER_RETURN_IF_ERROR(check_tokens(tokens, c.vocab_size));
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i]) return Status::InvalidArgument("decode: null sequence");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seqs[i]) return Status::InvalidArgument("decode: a sequence appears twice in the batch");
    if (seqs[i]->num_tokens >= c.max_context)
      return Status::OutOfRange("decode: sequence " + std::to_string(i) + " is at the model context of " +
                                std::to_string(c.max_context));
    KVTIER_RETURN_IF_ERROR(check_pages(pool, *seqs[i], seqs[i]->num_tokens + 1));
  }
  return Status::Ok();
}

}  // namespace kvtier::engine
