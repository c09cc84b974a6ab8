// ByteTokenizer: text ↔ token ids for the synthetic models, one token per
// byte through the vocabulary's byte-fallback tokens <0x00>..<0xFF> (the same
// tokens a llama.cpp SPM vocabulary uses to spell any text). Decoding maps
// byte tokens back to bytes, skips control tokens and prints other tokens'
// text with the SentencePiece space marker turned into a space.
// Immutable after creation; thread-safe.
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model.h"

namespace kvtier::engine {

class ByteTokenizer {
 public:
  // Fails when the vocabulary lacks any of the 256 byte tokens.
  static Result<ByteTokenizer> create(const Vocab& vocab);

  std::vector<TokenId> encode(std::string_view text, bool add_bos = true) const;
  std::string decode(std::span<const TokenId> ids) const;
  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }

 private:
  ByteTokenizer() = default;
  std::array<TokenId, 256> byte_to_id_{};
  std::vector<std::string> pieces_;  // per id: the bytes it decodes to
  TokenId bos_ = 1, eos_ = 2;
};

}  // namespace kvtier::engine
