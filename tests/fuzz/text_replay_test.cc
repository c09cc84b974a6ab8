// Corpus replay of the chat-template and tokenizer fuzzers (chat_template_fuzz, tokenizer_fuzz): the
// real templates of tests/data/chat-templates and llama.cpp's tokenizer test texts (tests/data/vocab,
// Qwen2's), the committed corpus, and mutations of them all.
#include <fstream>
#include <sstream>

#include "replay_support.h"
#include "text/chat_template.h"

namespace kvtier::fuzzing {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<NamedInput> real_templates() {
  std::vector<NamedInput> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(KVTIER_TEST_DATA_DIR) / "chat-templates"))
    if (e.path().extension() == ".jinja") out.emplace_back(e.path().filename().string(), bytes_of(read_file(e.path())));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<NamedInput> template_seeds() {
  std::vector<NamedInput> out = corpus_files("chat_template");
  for (auto& t : real_templates()) out.push_back(std::move(t));
  return out;
}

// llama.cpp's test texts: entries separated by "\n__ggml_vocab_test__\n".
std::vector<NamedInput> tokenizer_seeds() {
  std::vector<NamedInput> out = corpus_files("tokenizer");
  const std::string all = read_file(std::filesystem::path(KVTIER_TEST_DATA_DIR) / "vocab" / "ggml-vocab-qwen2.gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t at = 0, i = 0; at < all.size(); ++i) {
    size_t end = all.find(sep, at);
    if (end == std::string::npos) end = all.size();
    out.emplace_back("inp-" + std::to_string(i), bytes_of(all.substr(at, end - at)));
    at = end + sep.size();
  }
  return out;
}

TEST(ChatTemplateReplay, RealTemplatesRender) {
  const auto seeds = real_templates();
  ASSERT_GE(seeds.size(), 8u);
  for (const auto& [name, b] : seeds) {
    auto t = text::ChatTemplate::parse({reinterpret_cast<const char*>(b.data()), b.size()});
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().to_string();  // the mutations start from templates that parse
  }
}

TEST(ChatTemplateReplay, CorpusAndMutations) { replay(template_seeds(), check_chat_template, kReplayMutations / 5); }

TEST(TokenizerReplay, CorpusAndMutations) {
  const auto seeds = tokenizer_seeds();
  ASSERT_GE(seeds.size(), 20u);
  replay(seeds, check_tokenizer);
}

}  // namespace
}  // namespace kvtier::fuzzing
