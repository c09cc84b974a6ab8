// Tool calls in generated text: the formats of the shared chat templates,
// parsed into OpenAI's message.tool_calls.
//
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one or
//                many (Hermes 3, Qwen2.5, Qwen3); text outside the blocks is content.
//   llama3_json  the whole reply is {"name": ..., "parameters"|"arguments": {...}},
//                or several joined by ';', optionally after <|python_tag|> (Llama 3.1/3.2).
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]; text before is content.
//
// Text that looks like a tool call but does not parse (bad JSON, a block cut
// off by max_tokens, no name), or that calls a function the request did not
// declare, is returned whole as content: never an error. A llama3_json call
// needs its "parameters" or "arguments": the whole reply is the call there,
// and a JSON answer that merely has a "name" is content.
// Pure functions; safe from any thread.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::server {

enum class ToolParser { kNone, kHermes, kLlama3Json, kMistral };

std::string_view tool_parser_name(ToolParser p);
// "none", "hermes", "llama3_json", "mistral" ("auto" is the caller's: tool_parser_for_template).
std::optional<ToolParser> parse_tool_parser_name(std::string_view name);
// The format a chat template's tool calls take, from what it writes; kNone when it names none.
ToolParser tool_parser_for_template(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

struct ParsedReply {
  std::string content;  // the reply without its tool calls (the whole reply when there are none)
  std::vector<ToolCall> calls;
  std::string reasoning;  // with --reasoning-parser think: the <think> part (server/reasoning.h); else empty
};

// `tools`: the names of the functions the request declared (none: the reply is content).
ParsedReply parse_tool_calls(ToolParser parser, std::string_view text, std::span<const std::string> tools);
// The texts that mark a tool call in the parser's format. Where a vocabulary has one as a control
// token (Mistral's [TOOL_CALLS], Llama 3.1's <|python_tag|>) the reply must show it, or it decodes
// as nothing and no call is found (GenerationRequest::shown_specials).
std::vector<std::string_view> tool_call_markers(ToolParser parser);

// A streamed reply: content is sent as it comes until it may be the start of
// a tool call (a prefix of the format's marker, or for llama3_json a reply
// that opens with '{' or <|python_tag|>); from there it is held back.
// finish() parses the whole reply: the calls, and the content not yet sent
// (all of what was held when there are no calls). Not thread-safe.
class ToolCallStream {
 public:
  ToolCallStream(ToolParser parser, std::vector<std::string> tools) : parser_(parser), tools_(std::move(tools)) {}
  // The reply grew by `delta`; returns the content that may be sent now.
  std::string push(std::string_view delta);
  ParsedReply finish();

 private:
  size_t sendable() const;  // bytes of reply_ that can no longer become part of a tool call

  ToolParser parser_;
  std::vector<std::string> tools_;  // the declared functions' names
  std::string reply_;
  size_t sent_ = 0;
};

}  // namespace kvtier::server
