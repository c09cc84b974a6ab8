// --reasoning-parser think: <think>…</think> split off as reasoning_content,
// the same whether the reply comes whole or one byte at a time.
#include "server/reasoning.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

struct Case {
  std::string reply;
  bool starts_inside;
  std::string reasoning, content;
};

TEST(Reasoning, SplitsWholeAndStreamedAlike) {
  const Case cases[] = {
      {"<think>\nx = 2 - 1\n</think>\n\nx = 1", false, "\nx = 2 - 1\n", "x = 1"},
      {"  <think>a</think>b", false, "a", "b"},
      {"x = 1, no reasoning", false, "", "x = 1, no reasoning"},
      {"<thin", false, "", "<thin"},                     // not the tag after all: plain
      {"<think>cut off by max_tokens", false, "cut off by max_tokens", ""},
      {"reasoned</think>\n\nanswer", true, "reasoned", "answer"},  // the prompt opened the tag (DeepSeek-R1)
      {"a </thin b</think>c", true, "a </thin b", "c"},
      {"", false, "", ""}};
  for (const Case& c : cases) {
    const ReasoningSplit whole = split_reasoning(c.reply, c.starts_inside);
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.reply;
    EXPECT_EQ(whole.content, c.content) << c.reply;
    ReasoningStream stream(c.starts_inside);
    ReasoningSplit streamed;
    for (char ch : c.reply) {
      ReasoningSplit s = stream.push(std::string_view(&ch, 1));
      // Nothing of a tag is ever sent.
      EXPECT_EQ(s.reasoning.find("</think>"), std::string::npos);
      streamed.reasoning += s.reasoning, streamed.content += s.content;
    }
    ReasoningSplit end = stream.finish();
    streamed.reasoning += end.reasoning, streamed.content += end.content;
    EXPECT_EQ(streamed.reasoning, c.reasoning) << c.reply;
    EXPECT_EQ(streamed.content, c.content) << c.reply;
  }
}

TEST(Reasoning, PromptThatOpensTheTag) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<think>\n\n</think>\n\n"));  // Qwen3 with enable_thinking false: closed
  EXPECT_FALSE(prompt_opens_reasoning("<think>a</think> then <think>b</think>"));
  EXPECT_EQ(parse_reasoning_parser("think").value(), ReasoningParser::kThink);
  EXPECT_FALSE(parse_reasoning_parser("r1").ok());
}

}  // namespace
}  // namespace kvtier::server
