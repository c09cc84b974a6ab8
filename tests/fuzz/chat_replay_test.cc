// Corpus replay of the chat request (with tools) and tool-call parser fuzzers (chat_fuzz, tool_calls_fuzz).
#include "replay_support.h"
#include "server/chat_api.h"

namespace kvtier::fuzzing {
namespace {

TEST(ChatReplay, SeedsAreAcceptedOrRefusedAsNamed) {
  server::RequestLimits limits;
  limits.vocab_size = 300, limits.max_context = 4096, limits.max_tokens = 64, limits.default_max_tokens = 16;
  const server::ChatPromptBuilder build = [](const text::ChatInput&, std::string_view, std::string& r) -> Result<std::vector<TokenId>> {
    r.assign(1, 'x');
    return std::vector<TokenId>{65};
  };
  const auto seeds = corpus_files("chat");
  ASSERT_GE(seeds.size(), 6u);
  for (const auto& [name, body] : seeds) {
    const bool valid = name == "agent_turn.json" || name == "plain.json" || name == "retention.json";
    auto r = server::parse_chat_request({reinterpret_cast<const char*>(body.data()), body.size()}, limits, build);
    EXPECT_EQ(std::holds_alternative<server::ChatRequest>(r), valid) << name;
  }
}

TEST(ChatReplay, CorpusAndMutations) { replay(corpus_files("chat"), check_chat_request); }
TEST(ToolCallsReplay, CorpusAndMutations) { replay(corpus_files("tool_calls"), check_tool_calls); }

}  // namespace
}  // namespace kvtier::fuzzing
