// The wire format of POST /v1/chat/completions (OpenAI's chat shape).
//
// parse_chat_request() validates `messages` (roles system, developer, user,
// assistant, tool; `content` a string, an array of text parts — joined with
// "\n"; a part with "cacheable": true is a reusable segment — or null for an
// assistant turn with tool calls) and the generation
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

namespace kvtier::server {

struct ChatRequest {
  CompletionRequest completion;      // prompt = the rendered conversation's tokens
  nlohmann::ordered_json messages;   // validated, content as a string (key order kept for the template)
  std::string rendered;              // the prompt as text
  // Texts of the content parts marked "cacheable": true (kvtier extension), in
  // order: reusable segments (docs/BLEND.md); ChatPrompts::segmented() finds
  // them in the rendered text.
  std::vector<std::string> segment_texts;
};

// Renders `messages` with the chat template (add_generation_prompt on) and
// tokenizes the text; an error Status becomes a 400 carrying its message.
// A builder refuses a rendered text longer than limits.max_prompt_bytes with
// OutOfRange before tokenizing it (a 400 "context_length_exceeded").
using ChatPromptBuilder =
    std::function<Result<std::vector<TokenId>>(const nlohmann::ordered_json& messages, std::string& rendered)>;

std::variant<ChatRequest, ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                                       const ChatPromptBuilder& build);

// A whole chat.completion: one choice whose message is the assistant's text.
std::string chat_completion_json(const CompletionMeta& meta, std::string_view text, std::string_view finish_reason,
                                 const CompletionUsage& usage, const CompletionDetail* detail = nullptr);
// One chat.completion.chunk: `role` adds "role": "assistant" to the delta (the
// first chunk), `finish_reason` ends the choice, `with_choice` false gives the
// usage-only chunk.
std::string chat_chunk_json(const CompletionMeta& meta, std::string_view delta, bool role,
                            std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                            bool with_choice = true, const CompletionDetail* detail = nullptr);

}  // namespace kvtier::server
