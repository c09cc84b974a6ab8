// ChatTemplate: a parsed Jinja chat template (a model's tokenizer.chat_template),
// rendered as Hugging Face transformers renders it with Python's jinja2:
// trim_blocks and lstrip_blocks on, loop controls (break/continue), and the
// globals raise_exception(msg) and strftime_now(fmt). The interpreter is
// kvtier's own (text/jinja_*.h); see jinja_parser.h for what it accepts.
//
// parse() fails with a message naming any construct it does not support (at
// load, not at render). render() evaluates the template against a context (a
// JSON object: messages, add_generation_prompt, bos_token, eos_token, tools,
// ...; every key becomes a variable; objects keep their key order with
// nlohmann::ordered_json, sorted order with nlohmann::json). A template that
// calls raise_exception fails with kFailedPrecondition and exactly its
// message; other render errors are kInvalidArgument/kOutOfRange naming the
// line. Output, work and nesting are capped (RenderOptions).
//
// Immutable after parse(); copies share the tree; safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvtier/status.h"

namespace kvtier::text {

namespace jinja {
struct Node;
}

// A chat as apply_chat_template (transformers) renders it, and vLLM's server
// on top: the variables are messages, tools (None when absent), documents
// (None), add_generation_prompt, bos_token, eos_token, then every key of
// `kwargs` (a request's chat_template_kwargs, e.g. enable_thinking), which may
// set any variable but messages and tools.
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
};

struct RenderOptions {
  int64_t now_unix_seconds = -1;              // -1: the current time; strftime_now uses it (UTC)
  size_t max_output_bytes = size_t{8} << 20;  // also the largest string a template may build
  uint64_t max_steps = 2'000'000;               // statements, loop iterations and calls
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);

  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  // Renders a chat (ChatInput's variables). Before rendering: Unimplemented
  // when tools are given to a template that never mentions `tools` (they
  // would be dropped silently); InvalidArgument when kwargs set messages or tools.
  Result<std::string> render_chat(const ChatInput& chat, std::string_view bos_token, std::string_view eos_token,
                                  const RenderOptions& options = {}) const;
  // The template's source mentions `tools` (the test for tool support).
  bool reads_tools() const { return reads_tools_; }

 private:
  using Body = std::vector<std::unique_ptr<const jinja::Node>>;
  ChatTemplate(std::shared_ptr<const Body> body, bool reads_tools) : body_(std::move(body)), reads_tools_(reads_tools) {}
  template <class Json>
  Result<std::string> render_json(const Json& context, const RenderOptions& options) const;

  std::shared_ptr<const Body> body_;
  bool reads_tools_ = false;
};

}  // namespace kvtier::text
