// Tokenizer: text ↔ token ids for a GGUF vocabulary, as llama.cpp does it.
//
// The algorithm is chosen by the vocabulary's `tokenizer.ggml.model`:
// `llama` is SentencePiece-style BPE (merge the adjacent pair whose result
// has the best score, `▁` for spaces, the leading-space prefix, byte
// fallback to <0xXX> tokens); `gpt2` is byte-level BPE (GPT-2's byte ↔
// unicode mapping, the pre-tokenizer named by `tokenizer.ggml.pre`, merges by
// rank). Special tokens (control, user-defined, unknown) are matched as whole
// tokens in the text first; with `parse_special` off only user-defined ones
// are, as in llama.cpp.
//
// Decoding maps each id to the bytes it stands for (control tokens to
// nothing); a UTF-8 character may span tokens, so callers that stream hold
// back incomplete sequences.
//
// Immutable after create(); copies share the tables; safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/types.h"
#include "text/vocab.h"

namespace kvtier::text {

struct EncodeOptions {
  bool add_bos = false;       // prepend BOS if the vocabulary asks for it (never twice)
  bool parse_special = true;  // match control tokens such as <|im_start|> in the text
  // The token this text comes right after, where it is a piece of a longer text tokenized piece
  // by piece: SentencePiece vocabularies that prefix a space to a text (add_space_prefix) do so
  // only at its start and after a special token, so a piece that follows ordinary text gets none
  // (each piece got one: the model read a space the text did not have). None: the text starts.
  std::optional<TokenId> follows;
};

class Tokenizer {
 public:
  // Fails with a message naming an unsupported model or pre-tokenizer, or a malformed vocabulary.
  static Result<Tokenizer> create(const Vocab& vocab);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The bytes of the tokens, concatenated (out-of-range ids are skipped).
  // With `special`, control tokens are written as their text (<|im_start|>),
  // which gives back the text a prompt was tokenized from.
  std::string decode(std::span<const TokenId> ids, bool special = false) const;
  // The bytes one token stands for ("" for control tokens and out-of-range ids).
  const std::string& piece(TokenId id) const;

  uint32_t vocab_size() const;
  TokenId bos() const;
  TokenId eos() const;
  bool adds_bos() const;  // tokenizer.ggml.add_bos_token
  // End of generation: EOS, EOT, EOM and the tokens llama.cpp treats as end of turn by their text.
  bool is_end_of_generation(TokenId id) const;
  const std::vector<TokenId>& end_of_generation_ids() const;
  std::string_view model_name() const;  // "llama" | "gpt2"

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kvtier::text
