// SentencePiece-style BPE (tokenizer.ggml.model "llama"), internal to
// Tokenizer: starting from single characters, repeatedly merge the adjacent
// pair whose concatenation is the token with the highest score (leftmost on
// ties); characters that never become tokens fall back to <0xXX> byte tokens.
// Immutable after create(); safe from any thread.
#pragma once

#include <array>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "text/token_index.h"

namespace kvtier::text {

class SpmModel {
 public:
  // `index` must outlive the model.
  static Result<SpmModel> create(const Vocab& vocab, const TokenIndex& index);
  // Tokenizes `text`, in which spaces are already escaped to "▁".
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  SpmModel() = default;
  TokenId merged(TokenId left, TokenId right) const;
  void emit_bytes(std::string_view text, std::vector<TokenId>& out) const;

  const TokenIndex* index_ = nullptr;
  std::vector<float> scores_;
  std::unordered_map<uint64_t, TokenId> pairs_;  // (left id, right id) → the token their texts make
  std::array<TokenId, 256> byte_tokens_{};       // <0xXX>
  std::array<TokenId, 128> ascii_tokens_{};      // single ASCII characters
  TokenId unk_ = kNoToken;
};

}  // namespace kvtier::text
