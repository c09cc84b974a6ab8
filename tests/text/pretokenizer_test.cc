#include "text/pretokenizer.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier::text {
namespace {

std::vector<std::string> words(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> views;
  pre_tokenize(kind, text, views);
  std::string joined;
  for (auto v : views) joined += v;
  EXPECT_EQ(joined, text) << "the words must cover the text exactly";
  return {views.begin(), views.end()};
}

using W = std::vector<std::string>;

TEST(PreTokenizer, Names) {
  EXPECT_EQ(*pre_tokenizer_from_name(""), PreTokenizer::kDefault);
  EXPECT_EQ(*pre_tokenizer_from_name("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(*pre_tokenizer_from_name("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(*pre_tokenizer_from_name("gpt-2"), PreTokenizer::kGpt2);
  auto bad = pre_tokenizer_from_name("tekken");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'tekken'"), std::string::npos);
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(words(PreTokenizer::kLlama3, "Hello world"), (W{"Hello", " world"}));
  EXPECT_EQ(words(PreTokenizer::kLlama3, "I'VE 12345 apples!!\n\n  x"),
            (W{"I", "'VE", " ", "123", "45", " apples", "!!\n\n", " ", " x"}));
  EXPECT_EQ(words(PreTokenizer::kLlama3, "a   b"), (W{"a", "  ", " b"}));
  EXPECT_EQ(words(PreTokenizer::kLlama3, "x  \n y "), (W{"x", "  \n", " y", " "}));
  EXPECT_EQ(words(PreTokenizer::kLlama3, "\xD0\x96\xD0\xB8\xD0\xB2 3.14"), (W{"\xD0\x96\xD0\xB8\xD0\xB2", " ", "3", ".", "14"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(words(PreTokenizer::kQwen2, "x 2024"), (W{"x", " ", "2", "0", "2", "4"}));
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(words(PreTokenizer::kGpt2, "I'VE 12345 apples!!"), (W{"I", "'", "VE", " 12345", " apples", "!!"}));
  EXPECT_EQ(words(PreTokenizer::kGpt2, "it's  ok "), (W{"it", "'s", " ", " ok", " "}));
}

TEST(PreTokenizer, DefaultChain) {
  // Punctuation runs first, then the GPT-2 rule, digit runs, three-digit groups.
  EXPECT_EQ(words(PreTokenizer::kDefault, "ab, 12345"), (W{"ab", ",", " ", "123", "45"}));
}

TEST(PreTokenizer, MalformedUtf8IsKept) {
  EXPECT_EQ(words(PreTokenizer::kLlama3, "a\xFF" "b"), (W{"a", "\xFF" "b"}));
}

}  // namespace
}  // namespace kvtier::text
