// Corpus replay of the /v1/completions request fuzzer (completion_fuzz).
#include "replay_support.h"
#include "server/api.h"

namespace kvtier::fuzzing {
namespace {

// The valid seeds parse (so the mutations start from requests the server takes).
TEST(CompletionReplay, ValidSeedsAreAccepted) {
  server::RequestLimits limits;
  limits.vocab_size = 300, limits.max_context = 256, limits.max_tokens = 64;
  const server::Tokenizer bytes = [](std::string_view t, const text::EncodeOptions&) { return std::vector<TokenId>(t.begin(), t.end()); };
  for (const auto& [name, body] : corpus_files("completion")) {
    const bool valid = name == "text_prompt.json" || name == "token_prompt.json" || name == "stream_stop.json" ||
                       name == "echo_logprobs.json" || name == "salt_special.json" ||
                       name == "text_prompt_with_high_bytes.json";
    auto r = server::parse_completion_request({reinterpret_cast<const char*>(body.data()), body.size()}, limits, bytes);
    EXPECT_EQ(std::holds_alternative<server::CompletionRequest>(r), valid) << name;
  }
}

TEST(CompletionReplay, CorpusAndMutations) { replay(corpus_files("completion"), check_completion_request); }

}  // namespace
}  // namespace kvtier::fuzzing
