// Fuzz check of the /v1/completions request parser: any body gets a
// request within the limits or a 4xx with OpenAI's error shape.
#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>

#include "fuzz_checks.h"
#include "server/api.h"
#include "server/chat_api.h"
#include "server/tool_calls.h"

namespace kvtier::fuzzing {

namespace {

const std::vector<std::string> kFuzzTools = {"f", "g", "get_weather"};

// An ApiError as the server would send it: a described 4xx in OpenAI's error shape; empty when so.
std::string check_error(const server::ApiError& e) {
  if (e.http_status < 400 || e.http_status > 499 || e.message.empty()) return "an error that is not a described 4xx";
  auto doc = nlohmann::json::parse(server::error_json(e), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("error") || !doc["error"].contains("message")) return "error_json is not the error shape";
  return {};
}

server::RequestLimits fuzz_limits(uint32_t max_context) {
  server::RequestLimits limits;
  limits.vocab_size = 300;
  limits.max_context = max_context;
  limits.max_tokens = 64;
  limits.default_max_tokens = 16;
  return limits;
}

}  // namespace

std::string check_completion_request(Input data) {
  const server::RequestLimits limits = fuzz_limits(256);
  // A byte tokenizer: every byte is one token below 256 (as unsigned char: a plain char is signed
  // here, and bytes past 0x7F became negative ids, which the check then took for the parser's).
  const server::Tokenizer tokenize = [](std::string_view text, const text::EncodeOptions&) {
    std::vector<TokenId> ids;
    for (unsigned char c : text) ids.push_back(TokenId(c));
    return ids;
  };
  const std::string_view body(reinterpret_cast<const char*>(data.data()), data.size());
  auto parsed = server::parse_completion_request(body, limits, tokenize);
  if (auto* e = std::get_if<server::ApiError>(&parsed)) return check_error(*e);
  const auto& r = std::get<server::CompletionRequest>(parsed);
  if (r.prompt.empty()) return "accepted an empty prompt";
  for (TokenId t : r.prompt)
    if (t < 0 || uint32_t(t) >= limits.vocab_size) return "accepted a token outside the vocabulary";
  if (r.max_tokens > limits.max_tokens) return "accepted max_tokens above the cap";
  if (uint64_t(r.prompt.size()) + r.max_tokens > limits.max_context) return "accepted prompt + max_tokens beyond the context";
  if (r.stop.size() > 4) return "accepted more than 4 stop strings";
  for (const auto& s : r.stop)
    if (s.empty()) return "accepted an empty stop string";
  if (r.logprobs < -1 || r.logprobs > server::kMaxLogprobs) return "accepted logprobs out of range";
  return {};
}

std::string check_chat_request(Input data) {
  const server::RequestLimits limits = fuzz_limits(4096);
  // Renders the validated input the way a tools template reads it, so what reaches the template is walked.
  const server::ChatPromptBuilder build = [](const text::ChatInput& chat, std::string_view, std::string& rendered) -> Result<std::vector<TokenId>> {
    rendered = chat.messages.dump() + chat.tools.dump() + chat.kwargs.dump();
    return std::vector<TokenId>(rendered.size() % 200 + 1, TokenId(65));
  };
  const std::string_view body(reinterpret_cast<const char*>(data.data()), data.size());
  auto parsed = server::parse_chat_request(body, limits, build);
  if (auto* e = std::get_if<server::ApiError>(&parsed)) return check_error(*e);
  const auto& r = std::get<server::ChatRequest>(parsed);
  for (const auto& m : r.chat.messages) {
    if (!m.contains("tool_calls") || m["tool_calls"].is_null()) continue;
    for (const auto& call : m["tool_calls"])
      if (!call["function"]["arguments"].is_object()) return "a tool call's arguments reached the template as a non-object";
  }
  if (!r.chat.tools.is_null() && !r.chat.tools.is_array()) return "accepted tools that are not a list";
  if (!r.chat.kwargs.is_object()) return "accepted chat_template_kwargs that are not an object";
  for (const RetainHint& h : r.completion.retain) {
    if (h.seconds == 0 || h.seconds > server::kMaxRetainSeconds) return "a retention hint outside (0, 86400] seconds";
    if (h.tokens != UINT32_MAX && h.tokens > r.completion.prompt.size()) return "a retention hint past the prompt";
  }
  if (r.completion.session.size() > 256) return "accepted a session id over 256 bytes";
  return {};
}

std::string check_tool_calls(Input data) {
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  for (server::ToolParser p : {server::ToolParser::kHermes, server::ToolParser::kLlama3Json, server::ToolParser::kMistral}) {
    const server::ParsedReply r = server::parse_tool_calls(p, text, kFuzzTools);
    if (r.calls.empty() && r.content != text) return "a reply without tool calls lost text";
    for (const auto& call : r.calls) {
      if (call.name.empty()) return "a tool call without a name";
      auto args = nlohmann::json::parse(call.arguments, nullptr, false);
      if (args.is_discarded() || !args.is_object()) return "a tool call whose arguments are not a JSON object";
    }
  }
  return {};
}

}  // namespace kvtier::fuzzing
