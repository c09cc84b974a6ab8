// Reasoning in chat replies (--reasoning-parser think): Qwen3 and
// DeepSeek-R1 write their reasoning as <think>…</think> before the answer;
// it goes out as message.reasoning_content (delta.reasoning_content when
// streamed), the rest as content. A reply is reasoning from its start when it
// opens with <think> (whitespace aside) or when the prompt already ended
// inside one (R1's template opens the tag itself); it ends at </think>. A
// reply cut off inside its reasoning is all reasoning. Off by default, as in
// vLLM: it changes what existing clients receive. Not thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::server {

enum class ReasoningParser { kNone, kThink };
std::string_view reasoning_parser_name(ReasoningParser p);
Result<ReasoningParser> parse_reasoning_parser(std::string_view name);  // "none", "think"

struct ReasoningSplit {
  std::string reasoning;  // empty: none
  std::string content;
};

// True when `prompt` (the rendered chat) ends inside an open <think> tag.
bool prompt_opens_reasoning(std::string_view prompt);

class ReasoningStream {
 public:
  explicit ReasoningStream(bool starts_inside) : state_(starts_inside ? State::kInside : State::kUndecided) {}
  // The reply grew by `delta`: what may be sent now, as reasoning and as content.
  ReasoningSplit push(std::string_view delta);
  // The end of the reply: whatever was held back.
  ReasoningSplit finish();

 private:
  enum class State { kUndecided, kInside, kAfter, kPlain };
  ReasoningSplit drain(bool final);

  State state_;
  std::string held_;             // text not yet sent
  bool answer_started_ = false;  // after </think>: content has begun (leading whitespace dropped)
};

// The whole reply at once (non-streaming).
ReasoningSplit split_reasoning(std::string_view reply, bool starts_inside);

}  // namespace kvtier::server
