// Byte-level BPE (tokenizer.ggml.model "gpt2"), internal to Tokenizer: the
// pre-tokenizer splits text into words; each word's bytes become GPT-2's
// printable stand-in characters, and the adjacent pair of lowest merge rank
// (leftmost on ties) is merged until no listed merge applies. With Llama 3's
// pre-tokenizer a word that is a whole token is taken as is (llama.cpp's
// ignore_merges).
// Immutable after create(); safe from any thread.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "text/pretokenizer.h"
#include "text/token_index.h"

namespace kvtier::text {

// GPT-2's byte ↔ unicode mapping: the code point that stands for each byte.
const std::array<uint32_t, 256>& gpt2_byte_to_codepoint();
// Inverse of the mapping over a token's text; false when a character is not a stand-in.
bool gpt2_decode_text(std::string_view text, std::string& bytes);

class BpeModel {
 public:
  // `index` must outlive the model.
  static Result<BpeModel> create(const Vocab& vocab, const TokenIndex& index);
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // piece id
  };
  struct Scratch;

  BpeModel() = default;
  int32_t piece(std::string_view text);  // id of a merge operand (a token or an extra piece), created on demand
  void encode_word(std::string_view word, Scratch& scratch, std::vector<TokenId>& out) const;
  void emit_fallback(std::string_view word_bytes, std::vector<TokenId>& out) const;

  const TokenIndex* index_ = nullptr;
  uint64_t cache_owner_ = 0;  // WordCache key
  PreTokenizer pre_ = PreTokenizer::kDefault;
  bool ignore_merges_ = false;
  uint32_t vocab_size_ = 0;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> extra_pieces_;  // merge operands that are not tokens: ids from vocab_size_
  FlatU64Map<Merge> merges_;                               // (left piece, right piece) → rank and result
  std::array<int32_t, 256> byte_pieces_{};                 // the piece of each byte's stand-in character
  FlatStringMap raw_tokens_;                               // a token's bytes → id (for ignore_merges)
};

}  // namespace kvtier::text
