#include "server/reasoning.h"

#include <algorithm>

#include "server/text_stream.h"

namespace kvtier::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

size_t skip_space(std::string_view s, size_t from = 0) {
  while (from < s.size() && (s[from] == ' ' || s[from] == '\n' || s[from] == '\r' || s[from] == '\t')) ++from;
  return from;
}

}  // namespace

std::string_view reasoning_parser_name(ReasoningParser p) { return p == ReasoningParser::kThink ? "think" : "none"; }

Result<ReasoningParser> parse_reasoning_parser(std::string_view name) {
  if (name == "none") return ReasoningParser::kNone;
  if (name == "think") return ReasoningParser::kThink;
  return Status::InvalidArgument("unknown reasoning parser '" + std::string(name) + "' (none, think)");
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  return open != std::string_view::npos && prompt.find(kClose, open) == std::string_view::npos &&
         skip_space(prompt, open + kOpen.size()) == prompt.size();
}

ReasoningSplit ReasoningStream::drain(bool final) {
  ReasoningSplit out;
  for (bool progress = true; progress;) {
    progress = false;
    switch (state_) {
      case State::kUndecided: {
        const size_t first = skip_space(held_);
        const std::string_view rest = std::string_view(held_).substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, first + kOpen.size());
          state_ = State::kInside;
          progress = true;
        } else if (final || (!rest.empty() && kOpen.substr(0, rest.size()) != rest)) {
          state_ = State::kPlain;  // no <think> at the start: a reply without reasoning
          progress = true;
        }
        break;
      }
      case State::kInside: {
        const size_t close = held_.find(kClose);
        if (close != std::string::npos) {
          out.reasoning += held_.substr(0, close);
          held_.erase(0, close + kClose.size());
          state_ = State::kAfter;
          progress = true;
          break;
        }
        const size_t keep = final ? held_.size() : std::min(held_.size(), tag_start(held_, kClose));
        out.reasoning += held_.substr(0, keep);
        held_.erase(0, keep);
        break;
      }
      case State::kAfter:
        if (!answer_started_) held_.erase(0, skip_space(held_));  // the blank line the models write
        answer_started_ = answer_started_ || !held_.empty();
        [[fallthrough]];
      case State::kPlain:
        out.content += held_;
        held_.clear();
        break;
    }
  }
  return out;
}

ReasoningSplit ReasoningStream::push(std::string_view delta) {
  held_ += delta;
  return drain(false);
}

ReasoningSplit ReasoningStream::finish() { return drain(true); }

ReasoningSplit split_reasoning(std::string_view reply, bool starts_inside) {
  ReasoningStream s(starts_inside);
  ReasoningSplit a = s.push(reply), b = s.finish();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

}  // namespace kvtier::server
