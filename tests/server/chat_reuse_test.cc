// Multi-turn chat on the prefix cache, for every shared chat template: where
// a template renders turn n (with the generation prompt) plus the reply as a
// prefix of turn n+1, the cache must cover at least 95 % of turn n's prompt
// plus reply in turn n+1 — whatever BPE does with the reply's text, since
// ChatPrompts gives the reply's own ids back. Templates that are not
// prefix-preserving (they drop earlier reasoning or move the system message)
// are measured and reported, not held to the bound. The renderer is checked
// byte for byte against jinja2 in text_test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/gguf.h"
#include "server/chat_prompt.h"
#include "runtime/runtime.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string source_dir() {
  const char* s = std::getenv("KVTIER_SOURCE_DIR");
  return s ? s : ".";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string words(const std::string& sentence, int times) {
  std::string s;
  for (int i = 0; i < times; ++i) s += sentence;
  return s;
}

struct TurnFigure {
  uint32_t cached = 0, previous = 0;  // cached tokens of this turn; prompt + reply of the previous one
};

// Three turns through `rt`; fails the test only on errors. Returns each later turn's figure.
std::vector<TurnFigure> run_chat(Runtime& rt, ChatPrompts& chat, bool with_system, const ojson& tools,
                                 bool& prefix_preserving) {
  const TextCodec& codec = rt.model().text;
  ojson messages = ojson::array();
  if (with_system) messages.push_back({{"role", "system"}, {"content", words("You answer questions about caches. ", 30)}});
  std::vector<TurnFigure> figures;
  uint32_t previous = 0;
  std::string previous_text;
  prefix_preserving = true;
  for (int turn = 0; turn < 3; ++turn) {
    std::string user = "Turn ";
    user += std::to_string(turn);
    user += words(": how do the tiers work together?", with_system ? 10 : 40);
    messages.push_back({{"role", "user"}, {"content", user}});
    std::string rendered;
    auto prompt = chat.build({.messages = messages, .tools = tools}, rendered);
    if (!prompt.ok()) {
      ADD_FAILURE() << prompt.status().to_string();
      return figures;
    }
    if (turn > 0) prefix_preserving &= rendered.rfind(previous_text, 0) == 0;
    auto s = rt.start(*prompt, {});
    if (!s.ok()) {
      ADD_FAILURE() << s.status().to_string();
      return figures;
    }
    if (turn > 0) figures.push_back({s->report.cached_tokens, previous});
    std::vector<TokenId> reply{s->first_token};
    while (reply.size() < 16) reply.push_back((*rt.decode(std::span(&s->seq, 1)))[0]);
    rt.finish(s->seq);
    const std::string reply_text = codec.detokenize(reply);
    chat.remember(rendered, reply_text, *prompt, reply);
    messages.push_back({{"role", "assistant"}, {"content", reply_text}});
    previous = uint32_t(prompt->size() + reply.size());
    previous_text = rendered + reply_text;
  }
  return figures;
}

TEST(ChatReuse, EveryPrefixPreservingTemplateKeepsItsTurnsCached) {
  const fs::path dir = fs::temp_directory_path() / ("kvtier-chat-reuse-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto vocab = engine::load_gguf_vocab(source_dir() + "/tests/data/vocab/ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status().to_string();
  auto cfg = engine::model_preset("tiny");
  cfg->vocab_size = uint32_t(vocab->tokens.size());
  auto model = engine::Model::synthetic(*cfg, 1, *vocab);
  ASSERT_TRUE(model.ok());
  const std::string path = (dir / "tiny-qwen2.gguf").string();
  ASSERT_TRUE(engine::write_gguf(**model, path, {.weight_type = engine::GgufType::kF16}).ok());
  RuntimeOptions o;
  o.model = path;
  o.device_bytes = size_t(64) << 20;
  o.host_bytes = 0;
  o.max_sequences = 2;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();

  int preserving = 0;
  for (const auto& entry : fs::directory_iterator(source_dir() + "/tests/data/chat-templates")) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    auto chat = ChatPrompts::create((*rt)->model().text, read(entry.path()));
    ASSERT_TRUE(chat.ok()) << name << ": " << chat.status().to_string();
    (void)(*rt)->flush();  // every template starts cold
    bool prefix = false;
    // Gemma's template refuses a system message.
    const bool system = name.find("gemma") == std::string::npos;
    // Hermes 3's tool_use template iterates `tools`, which transformers passes as None without
    // tools (jinja2 then fails as kvtier does): it is run with one tool.
    const ojson tools = name.find("tool_use") == std::string::npos
                            ? ojson()
                            : ojson::parse(R"([{"type": "function", "function": {"name": "lookup", "description": "Looks a word up.",
                                              "parameters": {"type": "object", "properties": {}}}}])");
    const auto figures = run_chat(**rt, *chat, system, tools, prefix);
    ASSERT_EQ(figures.size(), 2u) << name;
    std::string line;
    for (const auto& f : figures) {
      const double ratio = double(f.cached) / double(f.previous);
      char buf[16];
      std::snprintf(buf, sizeof buf, " %.3f", ratio);
      line += buf;
      if (prefix) {
        EXPECT_GE(ratio, 0.95) << name << ": cached " << f.cached << " of " << f.previous;
      }
    }
    preserving += prefix;
    std::printf("%-55s %s%s\n", name.c_str(), line.c_str(), prefix ? "" : "  (turn n is not a prefix of turn n+1)");
  }
  // Qwen2.5, Qwen3, Hermes 3 and Gemma 2 render turn n as a prefix of turn n+1. Llama 3.x trims each
  // message, so a reply that starts or ends with whitespace (this synthetic model's often do) is not
  // rendered as generated; DeepSeek-R1 drops earlier reasoning; Mistral moves the system message.
  EXPECT_GE(preserving, 4);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvtier
