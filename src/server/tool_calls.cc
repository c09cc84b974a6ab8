#include "server/tool_calls.h"
#include "common/json_text.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/json_scan.h"
#include "common/strings.h"
#include "server/json_limits.h"
#include "server/text_stream.h"

namespace kvtier::server {
namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) { return json_text(j); }

// {"name": string, <args_key>: object} → a call; anything else: nullopt. Without its arguments key
// only where `args_needed` is false (a call inside its format's markers).
std::optional<ToolCall> call_of(const json& j, bool args_needed = false) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get_ref<const std::string&>().empty())
    return std::nullopt;
  if (args_needed && !j.contains("arguments") && !j.contains("parameters")) return std::nullopt;
  json args = json::object();
  for (const char* key : {"arguments", "parameters"}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (it->is_string()) {  // some models write the arguments as a JSON string
      json parsed = parse_bounded_json<json>(it->get_ref<const std::string&>());
      if (parsed.is_discarded()) return std::nullopt;
      args = std::move(parsed);
    } else {
      args = *it;
    }
    break;
  }
  if (!args.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), dump(args)};
}

std::optional<ToolCall> call_of_text(std::string_view text, bool args_needed = false) {
  const json j = parse_bounded_json<json>(trim(text));
  if (j.is_discarded()) return std::nullopt;
  return call_of(j, args_needed);
}

ParsedReply as_content(std::string_view text) { return ParsedReply{std::string(text), {}}; }

constexpr std::string_view kHermesOpen = "<tool_call>", kPythonTag = "<|python_tag|>", kMistralTag = "[TOOL_CALLS]";

ParsedReply parse_hermes(std::string_view text) {
  constexpr std::string_view kOpen = kHermesOpen, kClose = "</tool_call>";
  ParsedReply out;
  size_t from = 0;
  for (;;) {
    const size_t open = text.find(kOpen, from);
    if (open == std::string_view::npos) break;
    const size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) return as_content(text);  // cut off: not a call
    auto call = call_of_text(text.substr(open + kOpen.size(), close - open - kOpen.size()));
    if (!call) return as_content(text);
    out.content += text.substr(from, open - from);
    out.calls.push_back(std::move(*call));
    from = close + kClose.size();
  }
  if (out.calls.empty()) return as_content(text);
  out.content += text.substr(from);
  return out;
}

// `text` split at each `sep` that is outside JSON strings and brackets.
std::vector<std::string_view> top_level_pieces(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t from = 0, depth = 0;
  for_each_json_structural(text, [&](size_t i, char c) {
    if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == sep && depth == 0) {
      out.push_back(text.substr(from, i - from));
      from = i + 1;
    }
  });
  out.push_back(text.substr(from));
  return out;
}

ParsedReply parse_llama3(std::string_view text) {
  std::string_view body = trim(text);
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || body.front() != '{') return as_content(text);
  ParsedReply out;
  // One object, or several joined by ';' outside strings and brackets (found in one pass: trying
  // each ';' in turn re-parsed ever longer pieces, seconds for a cut-off reply with many of them).
  for (const std::string_view piece : top_level_pieces(body, ';')) {
    if (trim(piece).empty() && !out.calls.empty()) continue;  // after a trailing ';'
    std::optional<ToolCall> call = call_of_text(piece, /*args_needed=*/true);
    if (!call) return as_content(text);
    out.calls.push_back(std::move(*call));
  }
  return out;
}

ParsedReply parse_mistral(std::string_view text) {
  const size_t at = text.find(kMistralTag);
  if (at == std::string_view::npos) return as_content(text);
  const json j = parse_bounded_json<json>(trim(text.substr(at + kMistralTag.size())));
  if (!j.is_array() || j.empty()) return as_content(text);
  ParsedReply out;
  for (const json& item : j) {
    auto call = call_of(item);
    if (!call) return as_content(text);
    out.calls.push_back(std::move(*call));
  }
  out.content = std::string(text.substr(0, at));
  return out;
}

}  // namespace

std::string_view tool_parser_name(ToolParser p) {
  switch (p) {
    case ToolParser::kNone: return "none";
    case ToolParser::kHermes: return "hermes";
    case ToolParser::kLlama3Json: return "llama3_json";
    case ToolParser::kMistral: return "mistral";
  }
  return "none";
}

std::optional<ToolParser> parse_tool_parser_name(std::string_view name) {
  for (ToolParser p : {ToolParser::kNone, ToolParser::kHermes, ToolParser::kLlama3Json, ToolParser::kMistral})
    if (tool_parser_name(p) == name) return p;
  return std::nullopt;
}

ToolParser tool_parser_for_template(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolParser::kHermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolParser::kMistral;
  if (source.find("<|python_tag|>") != std::string_view::npos || source.find("\"parameters\": ") != std::string_view::npos)
    return ToolParser::kLlama3Json;
  return ToolParser::kNone;
}

std::vector<std::string_view> tool_call_markers(ToolParser parser) {
  switch (parser) {
    case ToolParser::kHermes: return {kHermesOpen, "</tool_call>"};
    case ToolParser::kLlama3Json: return {kPythonTag};
    case ToolParser::kMistral: return {kMistralTag};
    case ToolParser::kNone: break;
  }
  return {};
}

ParsedReply parse_tool_calls(ToolParser parser, std::string_view text, std::span<const std::string> tools) {
  ParsedReply r = as_content(text);
  switch (tools.empty() ? ToolParser::kNone : parser) {
    case ToolParser::kNone: break;
    case ToolParser::kHermes: r = parse_hermes(text); break;
    case ToolParser::kLlama3Json: r = parse_llama3(text); break;
    case ToolParser::kMistral: r = parse_mistral(text); break;
  }
  // A call of a function the request never declared is not one OpenAI would send: the reply is content.
  for (const ToolCall& c : r.calls)
    if (std::find(tools.begin(), tools.end(), c.name) == tools.end()) return as_content(text);
  // Beside calls, the content loses its trailing whitespace only (the text before a call): a stream
  // has sent what came first as it came, and holds back only whitespace (ToolCallStream::push).
  if (!r.calls.empty())
    r.content.erase(r.content.find_last_not_of(" \t\r\n") == std::string::npos ? 0 : r.content.find_last_not_of(" \t\r\n") + 1);
  return r;
}

size_t ToolCallStream::sendable() const {
  const std::string_view r = reply_;
  switch (parser_) {
    case ToolParser::kNone: return r.size();
    case ToolParser::kHermes: return std::min(r.size(), tag_start(r, kHermesOpen));
    case ToolParser::kMistral: return std::min(r.size(), tag_start(r, kMistralTag));
    case ToolParser::kLlama3Json: {
      // The whole reply is the call: held while it opens as one could.
      const size_t first = r.find_first_not_of(" \t\r\n");
      if (first == std::string_view::npos) return 0;
      const std::string_view rest = r.substr(first);
      const bool may_be_call = rest.front() == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag ||
                               kPythonTag.substr(0, rest.size()) == rest;
      return may_be_call ? 0 : r.size();
    }
  }
  return r.size();
}

std::string ToolCallStream::push(std::string_view delta) {
  reply_ += delta;
  size_t upto = sendable();
  while (upto > sent_ && std::string_view(" \t\r\n").find(reply_[upto - 1]) != std::string_view::npos)
    --upto;  // whitespace goes out with what follows it: before a call it is no content (parse_tool_calls)
  upto = std::max(sent_, upto);
  std::string out = reply_.substr(sent_, upto - sent_);
  sent_ = upto;
  return out;
}

// The sent content ends before any call could begin, so the calls, and the content still to send,
// are those of the rest of the reply.
ParsedReply ToolCallStream::finish() { return parse_tool_calls(parser_, std::string_view(reply_).substr(sent_), tools_); }

}  // namespace kvtier::server
