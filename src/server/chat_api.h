// The wire format of POST /v1/chat/completions (OpenAI's chat shape).
//
// parse_chat_request() validates `messages` (roles system, developer, user,
// assistant, tool; `content` a string, an array of text parts — joined with
// "\n"; a part with "cacheable": true is a reusable segment — or null for an
// assistant turn with tool calls), the tool fields (read_chat_input below) and the generation
// fields shared with /v1/completions (max_tokens or max_completion_tokens,
// temperature, top_p, seed, stop, stream, stream_options, cache_salt,
// logprobs + top_logprobs), then asks `build` for the prompt tokens (the
// server renders the chat template and tokenizes). The *_json() functions
// build a chat.completion or one chat.completion.chunk. Pure functions; safe
// from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/tool_calls.h"
#include "text/chat_template.h"

namespace kvtier::server {

struct ChatRequest {
  CompletionRequest completion;      // prompt = the rendered conversation's tokens
  text::ChatInput chat;              // validated messages (content as a string, key order kept), tools, kwargs
  std::string rendered;              // the prompt as text
  // Texts of the content parts marked "cacheable": true (kvtier extension), in
  // order: reusable segments (docs/BLEND.md); ChatPrompts::segmented() finds
  // them in the rendered text.
  std::vector<std::string> segment_texts;
  // Tools were given and tool_choice is not "none": the functions a reply may
  // call; its calls of them are parsed into message.tool_calls. Empty: none parsed.
  std::vector<std::string> tool_names;
};

// A message's Anthropic-style retention mark, "cache_control": {"type":
// "ephemeral", "ttl": "5m" | "1h"} (ttl absent: 5m), on the message or on
// one of its content parts: the prompt through that message is retained
// for the ttl (RetainHint), also where the template renders the message
// inside the next one (a Llama 2 system message). At most kMaxCacheControls per request.
struct CacheControl {
  size_t message = 0;
  uint32_t seconds = 300;
};
inline constexpr size_t kMaxCacheControls = 4;
std::variant<std::vector<CacheControl>, ApiError> read_cache_controls(const nlohmann::ordered_json& messages);

// Renders `messages` with the chat template (add_generation_prompt on) and
// tokenizes the text; an error Status becomes a 400 carrying its message.
// A builder refuses a rendered text longer than limits.max_prompt_bytes with
// OutOfRange before tokenizing it (a 400 "context_length_exceeded").
using ChatPromptBuilder = std::function<Result<std::vector<TokenId>>(const text::ChatInput& chat,
                                                                      std::string_view cache_salt, std::string& rendered)>;

// What the template renders, read from a request body (also `kvtier model
// chat-template`, so the command renders exactly what the server would):
// - `messages` as above. An assistant message's `tool_calls` are
//   [{id, type: "function", function: {name, arguments}}]; `arguments` given
//   as a JSON string is parsed into an object (as vLLM does: templates
//   iterate it), anything else that is not an object is a 400 naming the
//   message. A `tool` message needs a `tool_call_id` answering an earlier call.
// - `tools`: OpenAI function tools [{type: "function", function: {name,
//   description?, parameters?}}], passed to the template as `tools`.
// - `tool_choice`: "auto" and "none" (tools are rendered either way, so the
//   prompt's prefix stays the same across turns); "required" and a named
//   function would need constrained decoding and answer 400 "not supported".
// - `parallel_tool_calls` (a boolean; accepted), `chat_template_kwargs` (an object).
// `cacheable` collects the texts of content parts marked "cacheable": true.
// Message `cache_control` marks (read_cache_controls below) pass to the
// template as they are.
// Moves `messages`, `tools` and `chat_template_kwargs` out of `doc` (a body
// is parsed once, and its conversation is not copied).
std::variant<text::ChatInput, ApiError> read_chat_input(nlohmann::ordered_json& doc,
                                                        std::vector<std::string>& cacheable);

std::variant<ChatRequest, ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                                       const ChatPromptBuilder& build);

// A whole chat.completion: one choice whose message is the assistant's reply.
// With reasoning: message.reasoning_content. With tool calls: message.tool_calls ({id "call_…", type, function {name,
// arguments}}), content null when the reply held nothing else, and
// finish_reason "tool_calls".
std::string chat_completion_json(const CompletionMeta& meta, const ParsedReply& reply, std::string_view finish_reason,
                                 const CompletionUsage& usage, const CompletionDetail* detail = nullptr);
// chat.completion.chunk events streaming `calls` as OpenAI does: per call, one
// with its index, id, type and name (arguments ""), then one with its arguments.
std::vector<std::string> chat_tool_call_chunks(const CompletionMeta& meta, const std::vector<ToolCall>& calls);
// One chat.completion.chunk: `role` adds "role": "assistant" to the delta (the
// first chunk), `finish_reason` ends the choice, `with_choice` false gives the
// usage-only chunk.
// `reasoning` (--reasoning-parser think) goes out as delta.reasoning_content.
std::string chat_chunk_json(const CompletionMeta& meta, std::string_view delta, bool role,
                            std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                            bool with_choice = true, const CompletionDetail* detail = nullptr,
                            std::string_view reasoning = {});

}  // namespace kvtier::server
