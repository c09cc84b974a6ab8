// Fuzz check of the /v1/completions request parser: any body gets a
// request within the limits or a 4xx with OpenAI's error shape.
#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>

#include "fuzz_checks.h"
#include "server/api.h"

namespace kvtier::fuzzing {

std::string check_completion_request(Input data) {
  server::RequestLimits limits;
  limits.vocab_size = 300;
  limits.max_context = 256;
  limits.max_tokens = 64;
  limits.default_max_tokens = 16;
  // A byte tokenizer: every byte is one token below 256.
  const server::Tokenizer tokenize = [](std::string_view text, bool, bool) {
    return std::vector<TokenId>(text.begin(), text.end());
  };
  const std::string_view body(reinterpret_cast<const char*>(data.data()), data.size());
  auto parsed = server::parse_completion_request(body, limits, tokenize);
  if (auto* e = std::get_if<server::ApiError>(&parsed)) {
    if (e->http_status < 400 || e->http_status > 499 || e->message.empty()) return "an error that is not a described 4xx";
    auto doc = nlohmann::json::parse(server::error_json(*e), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.contains("error") || !doc["error"].contains("message")) return "error_json is not the error shape";
    return {};
  }
  const auto& r = std::get<server::CompletionRequest>(parsed);
  if (r.prompt.empty()) return "accepted an empty prompt";
  for (TokenId t : r.prompt)
    if (t < 0 || uint32_t(t) >= limits.vocab_size) return "accepted a token outside the vocabulary";
  if (r.max_tokens > limits.max_tokens) return "accepted max_tokens above the cap";
  if (uint64_t(r.prompt.size()) + r.max_tokens > limits.max_context) return "accepted prompt + max_tokens beyond the context";
  if (r.stop.size() > 4) return "accepted more than 4 stop strings";
  for (const auto& s : r.stop)
    if (s.empty()) return "accepted an empty stop string";
  if (r.logprobs < -1 || r.logprobs > server::kMaxLogprobs) return "accepted logprobs out of range";
  return {};
}

}  // namespace kvtier::fuzzing
