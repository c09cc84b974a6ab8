// Fuzz checks of text/: the Jinja interpreter on mutated chat templates and
// the byte-level BPE tokenizer on mutated text (fuzz_checks.h).
#include <nlohmann/json.hpp>

#include "engine/gguf.h"
#include "fuzz_checks.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvtier::fuzzing {
namespace {

// A conversation that walks what templates read: a system prompt, tools, a tool call and its result.
const text::ChatInput& fuzz_chat() {
  static const text::ChatInput chat = [] {
    text::ChatInput c;
    c.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? ünïcode ✓"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
      {"role": "user", "content": "Thanks."}])");
    c.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "weather",
      "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    return c;
  }();
  return chat;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::string check_chat_template(Input data) {
  const std::string_view source(reinterpret_cast<const char*>(data.data()), data.size());
  auto tmpl = text::ChatTemplate::parse(source);
  if (!tmpl.ok()) return tmpl.status().message().empty() ? "a template refused without a message" : "";
  text::RenderOptions o;
  o.now_unix_seconds = 0;
  o.max_output_bytes = size_t(1) << 20;
  o.max_steps = 200'000;
  auto out = tmpl->render_chat(fuzz_chat(), "<s>", "</s>", o);
  if (!out.ok()) return out.status().message().empty() ? "a render failed without a message" : "";
  if (out->size() > o.max_output_bytes) return "a render past max_output_bytes";
  return {};
}

std::string check_tokenizer(Input data) {
  static const Result<text::Tokenizer> tok = [] () -> Result<text::Tokenizer> {
    KVTIER_ASSIGN_OR_RETURN(text::Vocab v, engine::load_gguf_vocab(KVTIER_FUZZ_VOCAB));
    return text::Tokenizer::create(v);
  }();
  if (!tok.ok()) return "the fuzz vocabulary did not load: " + tok.status().to_string();
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  for (bool special : {false, true}) {
    const std::vector<TokenId> ids = tok->encode(text, {.add_bos = false, .parse_special = special});
    for (TokenId id : ids)
      if (id < 0 || size_t(id) >= tok->vocab_size()) return "a token id outside the vocabulary";
    // Byte-level BPE spells every byte: plain text comes back whole (special tokens too, decoded as text).
    if (valid_utf8(text) && tok->decode(ids, /*special=*/true) != text) return "encode then decode changed the text";
  }
  return {};
}

}  // namespace kvtier::fuzzing
