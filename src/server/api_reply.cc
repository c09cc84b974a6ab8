// The answers of the completion endpoints: usage, logprobs, whole completions, stream chunks,
// server-sent events and the model list (the requests' parsers are api.cc).
#include "common/json_text.h"
#include "server/api.h"

#include <nlohmann/json.hpp>

#include "server/stats_render.h"

namespace kvtier::server {

using nlohmann::json;

json usage_json(const CompletionUsage& u) {
  json by_tier = json::object();
  for (int t = 0; t < kNumTiers; ++t)
    by_tier[std::string(tier_name(TierKind(t)))] = u.report.cached_tokens_by_tier[t];
  json j = {
      {"prompt_tokens", u.prompt_tokens},
      {"completion_tokens", u.completion_tokens},
      {"total_tokens", u.prompt_tokens + u.completion_tokens},
      {"prompt_tokens_details", {{"cached_tokens", u.report.cached_tokens}}},
      {"kvtier",
       {{"cached_tokens_by_tier", by_tier},
        {"recomputed_cached_tokens", u.report.recomputed_cached_tokens},
        {"lossy_cached_tokens", u.report.lossy_cached_tokens},
        {"ttft_ms", u.ttft_s * 1e3},
        {"prefill_ms", u.report.ttft_s * 1e3},
        {"computed_in_full_for_logprobs", u.report.computed_in_full_for_logprobs},
        {"blend",
         {{"decision", blend_decision_name(u.report.blend.decision)},
          {"blended", u.report.blend.blended},
          {"reused_tokens", u.report.blend.blended_tokens},
          {"recomputed_tokens", u.report.blend.recomputed_tokens},
          {"stored_segment_tokens", u.report.blend.stored_segment_tokens},
          {"failed_segments", u.report.blend.failed_segments}}},
        {"queue_ms", u.queue_s * 1e3},
        {"e2e_ms", u.e2e_s * 1e3},
        {"retained_tokens", u.retained_tokens}}},
  };
  if (u.tenant) j["kvtier"]["tenant"] = tenant_json(*u.tenant);
  return j;
}

namespace {

// OpenAI's completions logprobs object over the echoed prompt (when echoed) and the completion.
json logprobs_json(const CompletionDetail& d) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  size_t offset = d.text_offset;
  auto add = [&](TokenId id, const engine::TokenLogprobs* lp) {
    tokens.push_back(d.label(id));
    offsets.push_back(offset);
    offset += d.piece(id).size();
    if (lp == nullptr) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      return;
    }
    token_logprobs.push_back(lp->logprob);
    json top = json::object();
    for (const auto& [alt, logprob] : lp->top) top[d.label(alt)] = logprob;
    top_logprobs.push_back(std::move(top));
  };
  const auto& plp = d.tokens->prompt_logprobs;
  for (size_t i = 0; i < d.prompt.size(); ++i) add(d.prompt[i], i >= 1 && i - 1 < plp.size() ? &plp[i - 1] : nullptr);
  const auto& ids = d.tokens->ids;
  for (size_t i = 0; i < ids.size(); ++i) add(ids[i], i < d.tokens->logprobs.size() ? &d.tokens->logprobs[i] : nullptr);
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
}

void add_detail(json& choice, const CompletionDetail* d) {
  if (d == nullptr || d->tokens == nullptr) return;
  if (d->logprobs >= 0) choice["logprobs"] = logprobs_json(*d);
  if (d->return_token_ids) {
    choice["token_ids"] = d->tokens->ids;
    if (!d->prompt.empty()) choice["prompt_token_ids"] = std::vector<TokenId>(d->prompt.begin(), d->prompt.end());
  }
}

}  // namespace

size_t CompletionDetail::text_bytes() const {
  size_t n = 0;
  for (TokenId id : prompt) n += piece(id).size();
  if (tokens != nullptr)
    for (TokenId id : tokens->ids) n += piece(id).size();
  return n;
}

std::string completion_json(const CompletionMeta& meta, std::string_view text, std::string_view finish_reason,
                            const CompletionUsage& usage, const CompletionDetail* detail) {
  json choice = {{"index", 0}, {"text", std::string(text)}, {"logprobs", nullptr}, {"finish_reason", std::string(finish_reason)}};
  add_detail(choice, detail);
  json j = {{"id", meta.id},
            {"object", "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({std::move(choice)})},
            {"usage", usage_json(usage)}};
  return json_text(j);
}

std::string stream_chunk_json(const CompletionMeta& meta, std::string_view text_delta,
                              std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                              bool with_choice, const CompletionDetail* detail) {
  json j = {{"id", meta.id}, {"object", "text_completion"}, {"created", meta.created}, {"model", meta.model}};
  j["choices"] = json::array();
  if (with_choice) {
    json choice = {{"index", 0}, {"text", std::string(text_delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish_reason) choice["finish_reason"] = std::string(*finish_reason);
    add_detail(choice, detail);
    j["choices"].push_back(std::move(choice));
  }
  if (usage != nullptr) j["usage"] = usage_json(*usage);
  return json_text(j);
}

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out += "data: ";
  out += payload;
  out += "\n\n";
  return out;
}

std::string models_json(std::string_view model_name, const ModelInfo& info, const RequestLimits& limits,
                        int64_t created, bool one) {
  json m = {{"id", std::string(model_name)},
            {"object", "model"},
            {"created", created},
            {"owned_by", "kvtier"},
            {"max_model_len", info.max_context},
            {"kvtier",
             {{"vocab_size", info.vocab_size},
              {"eos_token_id", info.eos},
              {"fingerprint", info.fingerprint.to_hex()},
              {"max_prompt_tokens", max_prompt_tokens(limits)},
              {"max_kv_tokens", limits.max_kv_tokens},
              {"max_prompt_bytes", limits.max_prompt_bytes}}}};
  return json_text(one ? m : json{{"object", "list"}, {"data", json::array({m})}});
}

}  // namespace kvtier::server
