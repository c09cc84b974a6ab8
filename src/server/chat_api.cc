#include "server/chat_api.h"
#include "common/json_text.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "common/strings.h"

namespace kvtier::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string dump(const json& j) { return json_text(j); }

// `o` is an object whose `key` is the string `value` (any other type there: false, never a type_error).
bool field_is(const ojson& o, const char* key, std::string_view value) {
  if (!o.is_object()) return false;
  const auto it = o.find(key);
  return it != o.end() && it->is_string() && it->get_ref<const std::string&>() == value;
}

bool known_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool";
}

// content: a string, text parts (joined with "\n"), or null (an assistant turn with tool calls).
std::optional<ApiError> read_content(ojson& message, size_t index, std::vector<std::string>& cacheable) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (message["role"] == "assistant") {
      message["content"] = "";
      return std::nullopt;
    }
    return bad_request("'" + where + "' is required", where, "missing_field");
  }
  if (it->is_string()) return std::nullopt;
  if (!it->is_array()) return bad_request("'" + where + "' must be a string or an array of text parts", where, "invalid_type");
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const ojson& part = (*it)[k];
    if (!field_is(part, "type", "text") || !part.contains("text") || !part["text"].is_string())
      return bad_request("'" + where + "[" + std::to_string(k) + "]' must be {\"type\": \"text\", \"text\": ...}; other parts are not supported",
                         where, "unsupported");
    if (k > 0) text += '\n';
    text += part["text"].get_ref<const std::string&>();
    if (auto c = part.find("cacheable"); c != part.end() && !c->is_null()) {
      if (!c->is_boolean()) return bad_request("'" + where + "[" + std::to_string(k) + "].cacheable' must be a boolean", where, "invalid_type");
      if (c->get<bool>() && !part["text"].get_ref<const std::string&>().empty())
        cacheable.push_back(part["text"].get<std::string>());
    }
  }
  message["content"] = std::move(text);
  return std::nullopt;
}

std::string at(const std::string& where, std::string_view field) { return where + "." + std::string(field); }


ApiError wrong_type(const std::string& where, std::string_view what) {
  return bad_request(kvtier::quoted(where) + " must be " + std::string(what), where, "invalid_type");
}

// A string member `field` of `obj` (at `where`), non-empty.
std::optional<ApiError> need_string(const ojson& obj, std::string_view field, const std::string& where) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null())
    return bad_request(kvtier::quoted(at(where, field)) + " is required", at(where, field), "missing_field");
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) return wrong_type(at(where, field), "a non-empty string");
  return std::nullopt;
}

// `type`, when given, must be "function".
std::optional<ApiError> function_type(const ojson& obj, const std::string& where) {
  auto it = obj.find("type");
  if (it == obj.end() || it->is_null() || *it == "function") return std::nullopt;
  return bad_request(kvtier::quoted(at(where, "type")) + " must be \"function\"", at(where, "type"), "invalid_value");
}

// One assistant tool call; its arguments become an object, its id joins `ids`.
std::optional<ApiError> read_tool_call(ojson& call, const std::string& where, std::set<std::string>& ids) {
  if (!call.is_object()) return wrong_type(where, "an object");
  if (auto err = need_string(call, "id", where)) return err;
  if (auto err = function_type(call, where)) return err;
  auto fn = call.find("function");
  if (fn == call.end() || !fn->is_object()) return wrong_type(at(where, "function"), "an object");
  if (auto err = need_string(*fn, "name", at(where, "function"))) return err;
  const std::string args_at = at(where, "function.arguments");
  auto args = fn->find("arguments");
  if (args == fn->end() || args->is_null()) {
    (*fn)["arguments"] = ojson::object();
  } else if (args->is_string()) {
    ojson parsed = parse_bounded_json<ojson>(args->get_ref<const std::string&>());
    if (parsed.is_discarded() || !parsed.is_object())
      return bad_request(kvtier::quoted(args_at) + " is not a JSON object: " + args->get<std::string>().substr(0, 200), args_at,
                         "invalid_value");
    *args = std::move(parsed);
  } else if (!args->is_object()) {
    return wrong_type(args_at, "a JSON object or a string holding one");
  }
  ids.insert(call["id"].get<std::string>());
  return std::nullopt;
}

// Tool calls of an assistant message, and the tool_call_id of a tool message.
std::optional<ApiError> read_tool_fields(ojson& m, const std::string& where, std::set<std::string>& ids) {
  const std::string& role = m["role"].get_ref<const std::string&>();
  if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
    if (role != "assistant")
      return bad_request(kvtier::quoted(at(where, "tool_calls")) + " is only allowed on assistant messages", at(where, "tool_calls"),
                         "invalid_value");
    if (!it->is_array()) return wrong_type(at(where, "tool_calls"), "an array");
    for (size_t k = 0; k < it->size(); ++k)
      if (auto err = read_tool_call((*it)[k], at(where, "tool_calls") + "[" + std::to_string(k) + "]", ids)) return err;
  }
  if (role != "tool") return std::nullopt;
  if (auto err = need_string(m, "tool_call_id", where)) return err;
  if (ids.count(m["tool_call_id"].get<std::string>()) == 0)
    return bad_request(kvtier::quoted(at(where, "tool_call_id")) + " = " + kvtier::quoted(m["tool_call_id"].get<std::string>()) +
                           " answers no earlier assistant tool call",
                       at(where, "tool_call_id"), "invalid_value");
  return std::nullopt;
}

std::optional<ApiError> read_messages(ojson& doc, ojson& out, std::vector<std::string>& cacheable) {
  auto it = doc.find("messages");
  if (it == doc.end() || it->is_null()) return bad_request("'messages' is required", "messages", "missing_field");
  if (!it->is_array() || it->empty()) return bad_request("'messages' must be a non-empty array", "messages", "invalid_value");
  out = std::move(*it);
  std::set<std::string> call_ids;
  for (size_t i = 0; i < out.size(); ++i) {
    ojson& m = out[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request(kvtier::quoted(where) + " must be an object", where, "invalid_type");
    if (!m.contains("role") || !m["role"].is_string())
      return bad_request("'" + where + ".role' must be a string", where + ".role", "invalid_type");
    if (!known_role(m["role"].get<std::string>()))
      return bad_request("'" + where + ".role' = '" + m["role"].get<std::string>() +
                             "' is not one of system, developer, user, assistant, tool",
                         where + ".role", "invalid_value");
    if (auto err = read_content(m, i, cacheable)) return err;
    if (auto err = read_tool_fields(m, where, call_ids)) return err;
  }
  return std::nullopt;
}

// `tools`: OpenAI function tools; null or absent: none.
std::optional<ApiError> read_tools(ojson& doc, ojson& out) {
  auto it = doc.find("tools");
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return wrong_type("tools", "an array of tools");
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& tool = std::as_const(*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) return wrong_type(where, "an object");
    if (auto err = function_type(tool, where)) return err;
    auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) return wrong_type(at(where, "function"), "an object");
    if (auto err = need_string(*fn, "name", at(where, "function"))) return err;
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
      return wrong_type(at(where, "function.description"), "a string");
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object())
      return wrong_type(at(where, "function.parameters"), "a JSON schema object");
  }
  out = std::move(*it);
  return std::nullopt;
}

bool has_tool(const ojson& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const ojson& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

// `tool_choice`: "auto" and "none" work; "required" and a named function need constrained decoding.
std::optional<ApiError> read_tool_choice(const ojson& doc, const ojson& tools) {
  auto it = doc.find("tool_choice");
  if (it == doc.end() || it->is_null() || *it == "auto" || *it == "none") return std::nullopt;
  std::string name;
  if (field_is(*it, "type", "function") && it->contains("function") && (*it)["function"].is_object() &&
      (*it)["function"].contains("name") && (*it)["function"]["name"].is_string() && (*it)["function"]["name"] != "") {
    name = (*it)["function"]["name"].get<std::string>();
    if (!has_tool(tools, name))
      return bad_request("'tool_choice' names function '" + name + "', which is not among 'tools'", "tool_choice",
                         "invalid_value");
  } else if (*it != "required") {
    return bad_request("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}",
                       "tool_choice", "invalid_value");
  }
  return bad_request("'tool_choice' " + (name.empty() ? std::string("\"required\"") : "naming a function") +
                         " is not supported: it needs decoding constrained to a tool call; use \"auto\" (docs/SERVER.md)",
                     "tool_choice", "unsupported");
}

std::optional<ApiError> read_template_kwargs(ojson& doc, ojson& out) {
  if (auto it = doc.find("parallel_tool_calls"); it != doc.end() && !it->is_null() && !it->is_boolean())
    return wrong_type("parallel_tool_calls", "a boolean");
  auto it = doc.find("chat_template_kwargs");
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return wrong_type("chat_template_kwargs", "an object");
  if (it->contains("messages") || it->contains("tools"))
    return bad_request("'chat_template_kwargs' may not set 'messages' or 'tools'", "chat_template_kwargs", "invalid_value");
  out = std::move(*it);
  return std::nullopt;
}

std::optional<ApiError> read_logprobs(const json& doc, CompletionRequest& r) {
  bool wanted = false;
  if (auto it = doc.find("logprobs"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad_request("'logprobs' must be a boolean", "logprobs", "invalid_type");
    wanted = it->get<bool>();
  }
  int64_t top = 0;
  if (auto it = doc.find("top_logprobs"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad_request("'top_logprobs' must be an integer", "top_logprobs", "invalid_type");
    top = it->get<int64_t>();
    if (top < 0 || top > kMaxLogprobs)
      return bad_request("'top_logprobs' must be in [0, " + std::to_string(kMaxLogprobs) + "]", "top_logprobs", "invalid_value");
    if (!wanted) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
  }
  r.logprobs = wanted ? int32_t(top) : -1;
  return std::nullopt;
}

// OpenAI's chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json chat_logprobs_json(const CompletionDetail& d) {
  auto entry = [&](TokenId id, float logprob) {
    const std::string piece = d.piece(id);
    return json{{"token", d.label(id)}, {"logprob", logprob}, {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())}};
  };
  json content = json::array();
  const auto& ids = d.tokens->ids;
  for (size_t i = 0; i < ids.size() && i < d.tokens->logprobs.size(); ++i) {
    const engine::TokenLogprobs& lp = d.tokens->logprobs[i];
    json e = entry(ids[i], lp.logprob);
    e["top_logprobs"] = json::array();
    for (const auto& [alt, logprob] : lp.top) e["top_logprobs"].push_back(entry(alt, logprob));
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

// "call_" + the completion id's own part + the call's index: unique per reply, the same in both shapes.
std::string tool_call_id(const CompletionMeta& meta, size_t index) {
  return "call_" + meta.id.substr(meta.id.find('-') + 1) + "_" + std::to_string(index);
}

json chat_envelope(const CompletionMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::variant<text::ChatInput, ApiError> read_chat_input(ojson& doc, std::vector<std::string>& cacheable) {
  text::ChatInput in;
  if (!doc.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_type");
  if (auto err = read_messages(doc, in.messages, cacheable)) return *err;
  if (auto err = read_tools(doc, in.tools)) return *err;
  if (auto err = read_tool_choice(doc, in.tools)) return *err;
  if (auto err = read_template_kwargs(doc, in.kwargs)) return *err;
  return in;
}

namespace {

std::optional<ApiError> read_cache_control(const ojson& c, const std::string& where, size_t message,
                                           std::vector<CacheControl>& out) {
  if (c.is_null()) return std::nullopt;
  if (!field_is(c, "type", "ephemeral"))
    return bad_request(kvtier::quoted(where) + " must be {\"type\": \"ephemeral\", \"ttl\": \"5m\" or \"1h\"}", where,
                       "invalid_value");
  CacheControl mark{message, 300};
  if (auto ttl = c.find("ttl"); ttl != c.end() && !ttl->is_null()) {
    if (*ttl == "1h") mark.seconds = 3600;
    else if (*ttl != "5m")
      return bad_request(kvtier::quoted(where + ".ttl") + " must be \"5m\" or \"1h\"", where + ".ttl", "invalid_value");
  }
  for (const auto& [key, value] : c.items())
    if (key != "type" && key != "ttl")
      return bad_request("unknown field " + kvtier::quoted(where + "." + key) + " (known: type, ttl)", where + "." + key,
                         "invalid_value");
  if (!out.empty() && out.back().message == message) {
    out.back().seconds = std::max(out.back().seconds, mark.seconds);
    return std::nullopt;
  }
  if (out.size() == kMaxCacheControls)
    return bad_request("at most " + std::to_string(kMaxCacheControls) + " messages may carry cache_control", where,
                       "invalid_value");
  out.push_back(mark);
  return std::nullopt;
}

// How many tokens of `prompt` the conversation through `upto` (no generation prompt) renders as.
Result<uint32_t> common_prefix(const text::ChatInput& chat, ojson upto, std::span<const TokenId> prompt,
                               std::string_view salt, const ChatPromptBuilder& build) {
  text::ChatInput head = chat;
  head.messages = std::move(upto);
  head.add_generation_prompt = false;
  std::string rendered;
  KVTIER_ASSIGN_OR_RETURN(const std::vector<TokenId> ids, build(head, salt, rendered));
  const auto diverge = std::mismatch(ids.begin(), ids.end(), prompt.begin(), prompt.end());
  return uint32_t(diverge.first - ids.begin());
}

// Message `next` with content that differs from its own at the first character a template can
// show (past leading white space, which `trim` removes).
ojson other_content(const ojson& next) {
  std::string_view mine = next.contains("content") && next["content"].is_string()
                              ? std::string_view(next["content"].get_ref<const std::string&>()) : std::string_view();
  while (!mine.empty() && std::isspace(static_cast<unsigned char>(mine.front()))) mine.remove_prefix(1);
  ojson other = {{"role", next.value("role", std::string("user"))}};
  other["content"] = !mine.empty() && mine.front() == '\x01' ? "\x02" : "\x01";
  return other;
}

// The tokens of the prompt that messages 0..`last` determine: where that message ends in the
// rendered prompt. Either the conversation through `last` renders as a prefix of the prompt
// (ChatML and most templates), or a template renders a message inside the next one (Llama 2's
// and Mistral's put the system text in the first user turn, so messages 0..0 alone render
// nothing of it): then the prefix shared with a rendering whose next message holds other text.
// The longer of the two; either is a prefix of the prompt.
Result<uint32_t> tokens_through(const text::ChatInput& chat, size_t last, std::span<const TokenId> prompt,
                                std::string_view salt, const ChatPromptBuilder& build) {
  ojson upto = ojson::array();
  for (size_t i = 0; i <= last; ++i) upto.push_back(chat.messages[i]);
  const bool has_next = last + 1 < chat.messages.size();
  ojson with_other = has_next ? upto : ojson();
  KVTIER_ASSIGN_OR_RETURN(const uint32_t alone, common_prefix(chat, std::move(upto), prompt, salt, build));
  if (!has_next) return alone;
  with_other.push_back(other_content(chat.messages[last + 1]));
  auto other = common_prefix(chat, std::move(with_other), prompt, salt, build);
  return other.ok() ? std::max(alone, *other) : alone;  // a template that refuses the other text: the first
}

}  // namespace

std::variant<std::vector<CacheControl>, ApiError> read_cache_controls(const ojson& messages) {
  std::vector<CacheControl> out;
  if (!messages.is_array()) return out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) continue;
    if (auto c = m.find("cache_control"); c != m.end())
      if (auto err = read_cache_control(*c, where + ".cache_control", i, out)) return *err;
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    for (size_t k = 0; k < content->size(); ++k)
      if ((*content)[k].is_object())
        if (auto c = (*content)[k].find("cache_control"); c != (*content)[k].end())
          if (auto err = read_cache_control(*c, where + ".content[" + std::to_string(k) + "].cache_control", i, out))
            return *err;
  }
  return out;
}

std::variant<ChatRequest, ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                                       const ChatPromptBuilder& build) {
  ApiError error;
  auto ordered = parse_json_object<ojson>(body, error);  // the body's one parse: key order matters to templates
  if (!ordered.ok()) return error;
  ChatRequest r;
  // Marks are read before the conversation is taken out of the document (its text parts are joined).
  const auto messages = ordered->find("messages");
  auto marks = messages != ordered->end() ? read_cache_controls(*messages) : std::vector<CacheControl>{};
  auto chat = read_chat_input(*ordered, r.segment_texts);
  if (auto* err = std::get_if<ApiError>(&chat)) return *err;
  r.chat = std::move(std::get<text::ChatInput>(chat));
  if (auto* err = std::get_if<ApiError>(&marks)) return *err;
  const auto& controls = std::get<std::vector<CacheControl>>(marks);
  const auto choice = ordered->find("tool_choice");
  if (r.chat.tools.is_array() && !(choice != ordered->end() && *choice == "none"))
    for (const ojson& t : r.chat.tools) r.tool_names.push_back(t["function"]["name"].get<std::string>());
  const json rest(*ordered);  // the other fields (small now), for the readers every endpoint shares
  if (auto err = read_logprobs(rest, r.completion)) return *err;
  if (auto err = read_common_request(rest, limits, 1, r.completion)) return *err;
  if (!r.completion.max_tokens_given) r.completion.max_tokens = limits.max_tokens;  // to the context's end, as OpenAI
  r.completion.ignored_fields = count_ignored_fields(rest, {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                                            "chat_template_kwargs", "logprobs", "top_logprobs"});
  auto ids = build(r.chat, r.completion.cache_salt, r.rendered);
  if (!ids.ok() && ids.status().is(StatusCode::kOutOfRange)) {  // too long to tokenize
    if (auto err = check_text_bytes(r.rendered.size(), limits, "messages")) return *err;
    return bad_request(ids.status().message(), "messages", "context_length_exceeded");
  }
  if (!ids.ok() && ids.status().is(StatusCode::kUnimplemented)) return bad_request(ids.status().message(), "tools", "unsupported");
  if (!ids.ok()) return bad_request("chat template: " + ids.status().message(), "messages", "chat_template_error");
  r.completion.prompt = std::move(ids).value();
  r.completion.prompt_is_text = true;
  if (r.completion.prompt.empty()) return bad_request("the rendered conversation is empty", "messages", "empty_prompt");
  if (auto err = finish_request(r.completion, limits)) return *err;
  for (const CacheControl& c : controls) {
    auto n = tokens_through(r.chat, c.message, r.completion.prompt, r.completion.cache_salt, build);
    if (!n.ok()) return bad_request("chat template (cache_control): " + n.status().message(), "messages", "chat_template_error");
    if (*n > 0) r.completion.retain.push_back(RetainHint{*n, c.seconds});
  }
  return r;
}

std::string chat_completion_json(const CompletionMeta& meta, const ParsedReply& reply, std::string_view finish_reason,
                                 const CompletionUsage& usage, const CompletionDetail* detail) {
  json message = {{"role", "assistant"}, {"content", reply.content}};
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (!reply.calls.empty()) {
    if (reply.content.empty()) message["content"] = nullptr;
    message["tool_calls"] = json::array();
    for (size_t i = 0; i < reply.calls.size(); ++i)
      message["tool_calls"].push_back({{"id", tool_call_id(meta, i)},
                                       {"type", "function"},
                                       {"function", {{"name", reply.calls[i].name}, {"arguments", reply.calls[i].arguments}}}});
    finish_reason = "tool_calls";
  }
  json choice = {{"index", 0}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", std::string(finish_reason)}};
  if (detail != nullptr && detail->tokens != nullptr && detail->logprobs >= 0) choice["logprobs"] = chat_logprobs_json(*detail);
  json j = chat_envelope(meta, "chat.completion");
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::vector<std::string> chat_tool_call_chunks(const CompletionMeta& meta, const std::vector<ToolCall>& calls) {
  std::vector<std::string> out;
  auto chunk = [&](json call) {
    json j = chat_envelope(meta, "chat.completion.chunk");
    j["choices"] = json::array({{{"index", 0},
                                 {"delta", {{"tool_calls", json::array({std::move(call)})}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    out.push_back(dump(j));
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    chunk({{"index", i}, {"id", tool_call_id(meta, i)}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", ""}}}});
    chunk({{"index", i}, {"function", {{"arguments", calls[i].arguments}}}});
  }
  return out;
}

std::string chat_chunk_json(const CompletionMeta& meta, std::string_view delta, bool role,
                            std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                            bool with_choice, const CompletionDetail* detail, std::string_view reasoning) {
  json j = chat_envelope(meta, "chat.completion.chunk");
  j["choices"] = json::array();
  if (with_choice) {
    json d = json::object();
    if (role) d["role"] = "assistant";
    if (!delta.empty() || role) d["content"] = std::string(delta);
    if (!reasoning.empty()) d["reasoning_content"] = std::string(reasoning);
    json choice = {{"index", 0}, {"delta", d}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish_reason) choice["finish_reason"] = std::string(*finish_reason);
    if (detail != nullptr && detail->tokens != nullptr && detail->logprobs >= 0)
      choice["logprobs"] = chat_logprobs_json(*detail);
    j["choices"].push_back(std::move(choice));
  }
  if (usage != nullptr) j["usage"] = usage_json(*usage);
  return dump(j);
}

}  // namespace kvtier::server
