// SentencePiece-style BPE (tokenizer.ggml.model "llama"), internal to
// Tokenizer: starting from single characters, repeatedly merge the adjacent
// pair whose concatenation is the token with the highest score (leftmost on
// ties); characters that never become tokens fall back to <0xXX> byte tokens.
// Immutable after create(); safe from any thread.
#pragma once

#include <array>
#include <string_view>
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
  struct Scratch;
  TokenId merged(TokenId left, TokenId right) const;
  bool joinable(uint64_t pair) const { return joinable_.find(pair) != nullptr; }
  void encode_segment(std::string_view text, Scratch& scratch, std::vector<TokenId>& out) const;
  void emit_bytes(std::string_view text, std::vector<TokenId>& out) const;

  const TokenIndex* index_ = nullptr;
  uint64_t cache_owner_ = 0;  // WordCache key
  std::vector<float> scores_;
  FlatU64Map<TokenId> pairs_;     // (left id, right id) → the token their texts make
  // Pairs of adjacent characters (their bytes packed) found inside some token. Where two
  // neighbours of the text are not such a pair no merge can ever join them, so the text
  // is tokenized in independent segments between such places (same result, small heaps).
  FlatU64Map<uint8_t> joinable_;
  std::array<TokenId, 256> byte_tokens_{};       // <0xXX>
  std::array<TokenId, 128> ascii_tokens_{};      // single ASCII characters
  TokenId unk_ = kNoToken;
};

}  // namespace kvtier::text
