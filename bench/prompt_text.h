// Prompt tokens for the benches. A model with a real tokenizer reads real
// text: --text FILE, or by default the held-out text of the trained fixture
// model (tests/data/text/heldout.txt, docs/PERF.md), tokenized once; each
// draw is a run of consecutive tokens from a random offset. A model with
// kvtier's synthetic vocabulary (the presets) gets random ids, as before:
// its weights are random too, so real text would mean nothing to it.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kvtier/status.h"

namespace kvtier::bench {

class PromptText {
 public:
  // `path` empty: the default held-out text when the vocabulary is real.
  static Result<PromptText> open(const engine::Model& model, const std::string& path);

  // `n` tokens: a run of the text from a random offset, or random ids.
  std::vector<TokenId> draw(std::mt19937_64& rng, uint32_t n) const;
  // "random ids" or the text's path and token count, for the bench's output.
  std::string source() const;

 private:
  std::string path_;
  std::vector<TokenId> tokens_;  // empty: random ids in [300, vocab)
  uint32_t vocab_ = 0;
};

// The held-out text of the fixture model in the source tree.
std::string default_prompt_text();

}  // namespace kvtier::bench
