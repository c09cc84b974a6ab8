#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "server/json_limits.h"
#include "server/text_stream.h"

namespace kvtier::server {
namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// {"name": string, <args_key>: object} → a call; anything else: nullopt.
std::optional<ToolCall> call_of(const json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get_ref<const std::string&>().empty())
    return std::nullopt;
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

std::optional<ToolCall> call_of_text(std::string_view text) {
  const json j = parse_bounded_json<json>(trim(text));
  if (j.is_discarded()) return std::nullopt;
  return call_of(j);
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
  out.content = std::string(trim(out.content));
  return out;
}

ParsedReply parse_llama3(std::string_view text) {
  std::string_view body = trim(text);
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || body.front() != '{') return as_content(text);
  ParsedReply out;
  // One object, or several joined by ';' (a ';' inside a string ends no object: each piece must parse).
  size_t from = 0;
  while (from < body.size()) {
    size_t end = body.find(';', from);
    std::optional<ToolCall> call;
    while (!(call = call_of_text(body.substr(from, end == std::string_view::npos ? std::string_view::npos : end - from)))) {
      if (end == std::string_view::npos) return as_content(text);
      end = body.find(';', end + 1);
    }
    out.calls.push_back(std::move(*call));
    if (end == std::string_view::npos) break;
    from = end + 1;
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
  out.content = std::string(trim(text.substr(0, at)));
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

ParsedReply parse_tool_calls(ToolParser parser, std::string_view text) {
  switch (parser) {
    case ToolParser::kNone: return as_content(text);
    case ToolParser::kHermes: return parse_hermes(text);
    case ToolParser::kLlama3Json: return parse_llama3(text);
    case ToolParser::kMistral: return parse_mistral(text);
  }
  return as_content(text);
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
  const size_t upto = std::max(sent_, sendable());
  std::string out = reply_.substr(sent_, upto - sent_);
  sent_ = upto;
  return out;
}

// The sent content ends before any call could begin, so the calls, and the content still to send,
// are those of the rest of the reply.
ParsedReply ToolCallStream::finish() { return parse_tool_calls(parser_, std::string_view(reply_).substr(sent_)); }

}  // namespace kvtier::server
