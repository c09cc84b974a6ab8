#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "engine/gguf.h"
#include "text/vocab_fixture.h"

namespace kvtier::text {
namespace {

using testing::vocab_cases;
using testing::vocab_path;

Tokenizer load(const std::string& name) {
  auto vocab = engine::load_gguf_vocab(vocab_path(name));
  EXPECT_TRUE(vocab.ok()) << vocab.status().to_string();
  auto tok = Tokenizer::create(*vocab);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return *tok;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += std::to_string(id) + " ";
  return s;
}

class Fixture : public ::testing::TestWithParam<std::string> {};

// Every string of the fixture gives exactly llama.cpp's ids (no BOS, special tokens as text).
TEST_P(Fixture, EncodesAsLlamaCpp) {
  const Tokenizer tok = load(GetParam());
  const auto cases = vocab_cases(GetParam());
  ASSERT_EQ(cases.size(), 46u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const auto ids = tok.encode(c.text, {.add_bos = false, .parse_special = false});
    if (ids != c.ids) ++mismatches;
    // Again, now that this thread's word cache holds the words: the same ids.
    EXPECT_EQ(tok.encode(c.text, {.add_bos = false, .parse_special = false}), ids);
    EXPECT_EQ(ids_text(ids), ids_text(c.ids)) << "text: '" << c.text << "'";
  }
  EXPECT_EQ(mismatches, 0);
}

// Decoding gives the text back (SentencePiece adds one leading space).
TEST_P(Fixture, DecodesBack) {
  const Tokenizer tok = load(GetParam());
  for (const auto& c : vocab_cases(GetParam())) {
    std::string expect = c.text;
    if (tok.model_name() == "llama" && !expect.empty()) expect = " " + expect;
    EXPECT_EQ(tok.decode(c.ids), expect);
  }
}

// Two tokenizers used in turn on one thread never see each other's cached words.
TEST(Tokenizer, WordCacheIsPerTokenizer) {
  const Tokenizer a = load("llama-bpe"), b = load("qwen2");
  const std::string text = "The quick brown fox jumps over the lazy dog 12345.";
  const auto ida = a.encode(text), idb = b.encode(text);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(a.encode(text), ida);
    EXPECT_EQ(b.encode(text), idb);
  }
  EXPECT_NE(ida, idb);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, Fixture, ::testing::Values("llama-spm", "llama-bpe", "qwen2"));

TEST(Tokenizer, SpecialTokensAreWholeTokens) {
  const Tokenizer tok = load("llama-bpe");
  const auto ids = tok.encode("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", {.add_bos = true});
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], 128000);  // <|begin_of_text|>
  EXPECT_EQ(ids[1], 128006);  // <|start_header_id|>
  EXPECT_EQ(ids.back(), 128009);  // <|eot_id|>
  // As plain text the same string is many ordinary tokens.
  const auto plain = tok.encode("<|eot_id|>", {.parse_special = false});
  EXPECT_GT(plain.size(), 1u);
  for (TokenId id : plain) EXPECT_LT(id, 128000);
}

TEST(Tokenizer, BosNeverTwice) {
  const Tokenizer tok = load("llama-bpe");
  const auto ids = tok.encode("<|begin_of_text|>Hello", {.add_bos = true});
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 128000);
  const Tokenizer spm = load("llama-spm");
  const auto s = spm.encode("<s>Hi", {.add_bos = true});
  EXPECT_EQ(s[0], 1);
  EXPECT_NE(s[1], 1);
}

// A text tokenized in pieces, each after the ids of those before it, reads as the whole text:
// SentencePiece's space prefix comes at the start and after a special token only (each piece took
// one, and the model read "[INST]  hello world  [/INST]"). Pieces that break before a word's space
// are the whole text's very ids.
TEST(Tokenizer, PiecesThatFollowOtherTextTakeNoSpacePrefix) {
  const Tokenizer spm = load("llama-spm");
  auto in_pieces = [&](std::initializer_list<std::string> parts, std::string& whole) {
    std::vector<TokenId> pieces;
    for (const std::string& p : parts) {
      whole += p;
      const auto ids = spm.encode(p, {.follows = pieces.empty() ? std::nullopt : std::optional(pieces.back())});
      pieces.insert(pieces.end(), ids.begin(), ids.end());
    }
    return pieces;
  };
  std::string chat;
  const auto turn = in_pieces({"<s>[INST] ", "hello world", " [/INST]", "</s>", "again"}, chat);
  EXPECT_EQ(spm.decode(turn, true), spm.decode(spm.encode(chat), true));
  std::string words;
  const auto pieces = in_pieces({"hello", " world", " again"}, words);
  EXPECT_EQ(ids_text(pieces), ids_text(spm.encode(words)));
  // Without `follows` every piece starts a text, and gets the space.
  EXPECT_NE(ids_text(spm.encode("hello world")), ids_text(spm.encode("hello world", {.follows = 22172})));
}

TEST(Tokenizer, EndOfGeneration) {
  const Tokenizer llama3 = load("llama-bpe");
  EXPECT_TRUE(llama3.is_end_of_generation(128009));  // <|eot_id|> by its text
  EXPECT_TRUE(llama3.is_end_of_generation(llama3.eos()));
  EXPECT_FALSE(llama3.is_end_of_generation(100));
  const Tokenizer qwen = load("qwen2");
  bool im_end = false;
  for (TokenId id : qwen.end_of_generation_ids()) im_end |= qwen.piece(id).empty() && id == 151645;
  EXPECT_TRUE(im_end);  // <|im_end|>
}

TEST(Tokenizer, QwenChatMarkersAndMultilingual) {
  const Tokenizer tok = load("qwen2");
  const auto ids = tok.encode("<|im_start|>user\n你好，世界<|im_end|>");
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(tok.decode(ids), "user\n你好，世界");  // control tokens decode to nothing
}

TEST(Tokenizer, RefusesUnsupportedModelsByName) {
  Vocab v = Vocab::defaults_for("gpt2", "tekken");
  v.tokens = {"a", "b", "ab"};
  v.scores.assign(3, 0), v.types.assign(3, 1), v.merges = {"a b"};
  v.bos = v.eos = 0;
  auto t = Tokenizer::create(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tekken"), std::string::npos);
  v = Vocab::defaults_for("t5", "");
  v.tokens = {"a"};
  v.scores.assign(1, 0), v.types.assign(1, 1);
  v.bos = v.eos = 0;
  t = Tokenizer::create(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'t5'"), std::string::npos);
}

// A hostile file cannot make building the tables quadratic in a huge token.
TEST(Tokenizer, RefusesOverlongTokens) {
  auto v = Vocab::synthetic(512);
  ASSERT_TRUE(v.ok());
  v->tokens[300] = std::string(kMaxTokenBytes + 1, 'a');
  auto t = Tokenizer::create(*v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("token 300"), std::string::npos) << t.status().to_string();
}

// A NaN score has no order among merges: the file is refused, not tokenized by the heap's accidents.
TEST(Tokenizer, RefusesNanScores) {
  auto v = Vocab::synthetic(512);
  ASSERT_TRUE(v.ok());
  v->scores[301] = std::numeric_limits<float>::quiet_NaN();
  auto t = Tokenizer::create(*v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("token 301's score is NaN"), std::string::npos) << t.status().to_string();
}

TEST(Tokenizer, SyntheticVocabularySpellsAnyText) {
  auto v = Vocab::synthetic(512);
  ASSERT_TRUE(v.ok());
  auto tok = Tokenizer::create(*v);
  ASSERT_TRUE(tok.ok());
  const std::string text = "Hello wörld 🦙";
  const auto ids = tok->encode(text, {.add_bos = true});
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 259);  // the leading space prefix: one "▁" token
  EXPECT_EQ(tok->decode(ids), " " + text);
  EXPECT_EQ(ids.size(), 1 + 1 + 5 + 1 + 6 + 1 + 4u);  // BOS, ▁, bytes of each word, ▁ between
}

// Special tokens are found by a search over their sorted texts (and the chain of each one's special
// prefixes); it finds what a scan of every special at every position finds: the longest one starting there (the lowest id of equal texts),
// only user-defined ones without parse_special. Random texts over an alphabet that makes the
// specials overlap, nest and repeat.
TEST(Tokenizer, SpecialsAreTheLongestMatchAsAScanFindsThem) {
  auto v = Vocab::synthetic(512);
  ASSERT_TRUE(v.ok());
  const std::vector<std::pair<std::string, TokenType>> added = {
      {"<a", TokenType::kUserDefined},   {"<ab", TokenType::kUserDefined}, {"<abc", TokenType::kControl},
      {"ab", TokenType::kUserDefined},   {"abcab", TokenType::kUserDefined}, {"<|x|>", TokenType::kControl},
      {"<ab", TokenType::kControl},      {"ba", TokenType::kUserDefined},  {"<abcabc>", TokenType::kUserDefined},
      {"aa", TokenType::kUserDefined},   {"aab", TokenType::kUserDefined}, {"aaab", TokenType::kUserDefined},
      {"aaaab", TokenType::kControl},    {"aaaaaab", TokenType::kUserDefined}};  // a chain of prefixes
  for (const auto& [text, type] : added) {
    v->tokens.push_back(text);
    v->scores.push_back(0);
    v->types.push_back(int32_t(type));
  }
  auto tok = Tokenizer::create(*v);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto scan = [&](std::string_view text, bool parse_special) {  // the reference: every special, every position
    std::vector<TokenId> found;
    for (size_t at = 0; at < text.size();) {
      std::optional<size_t> best;
      for (size_t k = 0; k < added.size(); ++k) {
        if (!parse_special && added[k].second != TokenType::kUserDefined) continue;
        if (!text.substr(at).starts_with(added[k].first)) continue;
        if (!best || added[k].first.size() > added[*best].first.size()) best = k;
      }
      if (!best) {
        ++at;
        continue;
      }
      found.push_back(TokenId(512 + *best));
      at += added[*best].first.size();
    }
    return found;
  };
  std::mt19937 rng(7);
  const std::string alphabet[] = {"<", "a", "b", "c", "|", "x", ">", "ab", "<ab", " ", "aaa"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    for (int i = 0; i < 24; ++i) text += alphabet[rng() % std::size(alphabet)];
    for (const bool parse_special : {true, false}) {
      std::vector<TokenId> specials;
      for (TokenId id : tok->encode(text, {.parse_special = parse_special}))
        if (id >= 512) specials.push_back(id);
      ASSERT_EQ(specials, scan(text, parse_special)) << "'" << text << "' parse_special " << parse_special;
    }
  }
}

}  // namespace
}  // namespace kvtier::text
