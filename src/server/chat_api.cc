#include "server/chat_api.h"

namespace kvtier::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
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

std::optional<ApiError> read_messages(const ojson& doc, ojson& out, std::vector<std::string>& cacheable) {
  auto it = doc.find("messages");
  if (it == doc.end() || it->is_null()) return bad_request("'messages' is required", "messages", "missing_field");
  if (!it->is_array() || it->empty()) return bad_request("'messages' must be a non-empty array", "messages", "invalid_value");
  out = *it;
  for (size_t i = 0; i < out.size(); ++i) {
    ojson& m = out[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + where + "' must be an object", where, "invalid_type");
    if (!m.contains("role") || !m["role"].is_string())
      return bad_request("'" + where + ".role' must be a string", where + ".role", "invalid_type");
    if (!known_role(m["role"].get<std::string>()))
      return bad_request("'" + where + ".role' = '" + m["role"].get<std::string>() +
                             "' is not one of system, developer, user, assistant, tool",
                         where + ".role", "invalid_value");
    if (auto err = read_content(m, i, cacheable)) return err;
  }
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
    return json{{"token", piece}, {"logprob", logprob}, {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())}};
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

json chat_envelope(const CompletionMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::variant<ChatRequest, ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                                       const ChatPromptBuilder& build) {
  ApiError error;
  auto doc = parse_json_object(body, error);
  if (!doc.ok()) return error;
  ChatRequest r;
  const ojson ordered = ojson::parse(body, nullptr, false);  // key order matters to templates
  if (auto err = read_messages(ordered, r.messages, r.segment_texts)) return *err;
  if (auto err = read_logprobs(*doc, r.completion)) return *err;
  if (auto err = read_common_request(*doc, limits, 1, r.completion)) return *err;
  auto ids = build(r.messages, r.rendered);
  if (!ids.ok() && ids.status().is(StatusCode::kOutOfRange)) {  // too long to tokenize
    if (auto err = check_text_bytes(r.rendered.size(), limits, "messages")) return *err;
    return bad_request(ids.status().message(), "messages", "context_length_exceeded");
  }
  if (!ids.ok()) return bad_request("chat template: " + ids.status().message(), "messages", "chat_template_error");
  r.completion.prompt = std::move(ids).value();
  r.completion.prompt_is_text = true;
  if (r.completion.prompt.empty()) return bad_request("the rendered conversation is empty", "messages", "empty_prompt");
  if (auto err = finish_request(r.completion, limits)) return *err;
  return r;
}

std::string chat_completion_json(const CompletionMeta& meta, std::string_view text, std::string_view finish_reason,
                                 const CompletionUsage& usage, const CompletionDetail* detail) {
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", std::string(text)}}},
                 {"logprobs", nullptr},
                 {"finish_reason", std::string(finish_reason)}};
  if (detail != nullptr && detail->tokens != nullptr && detail->logprobs >= 0) choice["logprobs"] = chat_logprobs_json(*detail);
  json j = chat_envelope(meta, "chat.completion");
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string chat_chunk_json(const CompletionMeta& meta, std::string_view delta, bool role,
                            std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                            bool with_choice, const CompletionDetail* detail) {
  json j = chat_envelope(meta, "chat.completion.chunk");
  j["choices"] = json::array();
  if (with_choice) {
    json d = json::object();
    if (role) d["role"] = "assistant";
    if (!delta.empty() || role) d["content"] = std::string(delta);
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
