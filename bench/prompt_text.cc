#include "prompt_text.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "text/tokenizer.h"

#ifndef KVTIER_SOURCE_DIR
#define KVTIER_SOURCE_DIR "."
#endif

namespace kvtier::bench {
namespace {

// kvtier's synthetic vocabulary is bytes and fillers: no normal tokens past the first 260.
bool has_words(const text::Vocab& v) {
  return std::count(v.types.begin(), v.types.end(), int32_t(text::TokenType::kNormal)) > 1000;
}

}  // namespace

std::string default_prompt_text() { return std::string(KVTIER_SOURCE_DIR) + "/tests/data/text/heldout.txt"; }

Result<PromptText> PromptText::open(const engine::Model& model, const std::string& path) {
  PromptText p;
  p.vocab_ = model.config().vocab_size;
  if (path.empty() && !has_words(model.vocab())) return p;
  p.path_ = path.empty() ? default_prompt_text() : path;
  std::ifstream in(p.path_, std::ios::binary);
  if (!in) return Status::NotFound("prompt text " + p.path_ + " cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  KVTIER_ASSIGN_OR_RETURN(const text::Tokenizer tok, text::Tokenizer::create(model.vocab()));
  p.tokens_ = tok.encode(text.str(), {.add_bos = false, .parse_special = false});
  if (p.tokens_.size() < 64) return Status::InvalidArgument("prompt text " + p.path_ + " has fewer than 64 tokens");
  return p;
}

std::vector<TokenId> PromptText::draw(std::mt19937_64& rng, uint32_t n) const {
  std::vector<TokenId> out(n);
  if (tokens_.empty()) {
    for (auto& x : out) x = TokenId(300 + rng() % (vocab_ - 300));
    return out;
  }
  // A run from a random offset, wrapping around the end of the text.
  size_t at = rng() % tokens_.size();
  for (auto& x : out) {
    x = tokens_[at];
    at = (at + 1) % tokens_.size();
  }
  return out;
}

std::string PromptText::source() const {
  return tokens_.empty() ? "random ids" : path_ + " (" + std::to_string(tokens_.size()) + " tokens)";
}

}  // namespace kvtier::bench
