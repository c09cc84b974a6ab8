// Pre-tokenizers of byte-level BPE vocabularies: the regular expressions
// named by a GGUF file's `tokenizer.ggml.pre`, written out by hand (as
// llama.cpp does for the common ones) over the Unicode classes of
// text/unicode.h. They split text into the words BPE merges within.
// Pure functions; safe from any thread.
#pragma once

#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::text {

enum class PreTokenizer {
  kDefault,  // llama.cpp's default chain: punctuation runs, then the GPT-2 rule, then digit runs, then 3-digit groups
  kGpt2,     // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,   // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,    // as kLlama3 with \p{N} (one digit per word)
};

// Maps a `tokenizer.ggml.pre` value ("" is "default") to its pre-tokenizer;
// an unknown name is an error naming it.
Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizer kind);

// Appends the words of `text`, in order, as views into `text`; they cover it exactly.
void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& words);

}  // namespace kvtier::text
