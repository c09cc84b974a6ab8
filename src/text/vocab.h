// Vocab: everything a GGUF file says about its tokenizer (the
// `tokenizer.ggml.*` keys and `tokenizer.chat_template`), as plain data.
// The GGUF reader fills it; text::Tokenizer is built from it. A value type;
// thread-safe to copy and read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier::text {

// llama.cpp token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

inline constexpr TokenId kNoToken = -1;
// Longest token text accepted (real vocabularies stay far below; the tables'
// build time grows with it, so a hostile file must not choose it).
inline constexpr size_t kMaxTokenBytes = 1024;

struct Vocab {
  std::string model = "llama";       // tokenizer.ggml.model: "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;                   // tokenizer.ggml.pre (gpt2 only); empty is "default"
  std::vector<std::string> tokens;
  std::vector<float> scores;         // one per token (SentencePiece merge priority)
  std::vector<int32_t> types;        // TokenType values, one per token
  std::vector<std::string> merges;   // "left right", by rank (gpt2 only)
  TokenId bos = 1;
  TokenId eos = 2;
  TokenId unk = 0;                   // kNoToken when the vocabulary has none
  TokenId eot = kNoToken;            // tokenizer.ggml.eot_token_id
  TokenId eom = kNoToken;            // tokenizer.ggml.eom_token_id
  bool add_bos = true;               // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;      // tokenizer.ggml.add_space_prefix (llama only)
  std::string chat_template;         // tokenizer.chat_template; empty when absent

  // The vocabulary of synthetic models (model "llama"): <unk>, <s>, </s>, the
  // 256 byte tokens <0x00>..<0xFF> (ids 3..258), the space marker "▁" (259),
  // then unused fillers up to vocab_size.
  static Result<Vocab> synthetic(uint32_t vocab_size);
  // The tokenizer defaults of llama.cpp for a `tokenizer.ggml.model` and `pre`
  // (special ids, add_bos, add_space_prefix) before a file's keys override them.
  static Vocab defaults_for(std::string_view model, std::string_view pre);
  // Sizes agree with `vocab_size`, special ids are in range, token texts and
  // merges are at most kMaxTokenBytes (merges twice that), the model and
  // pre-tokenizer are supported (the error names them otherwise).
  Status validate(uint32_t vocab_size) const;
};

}  // namespace kvtier::text
