#include "server/api.h"
#include "common/json_text.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <limits>
#include <random>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/mix.h"
#include "server/stats_render.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return json_text(j); }

const char* kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
      return "an integer";
    case json::value_t::number_unsigned:
      return v.get<uint64_t>() > uint64_t(INT64_MAX) ? "an integer past 2^63 - 1" : "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

ApiError wrong_type(const char* field, const char* expected, const json& got) {
  return bad_request(std::string("'") + field + "' must be " + expected + ", got " + kind(got), field, "invalid_type");
}

// Integral JSON numbers only (1.0 is accepted as 1, 1.5 is not).
// is_number_integer() holds for unsigned values too: they are looked at first, so one past
// INT64_MAX is refused rather than wrapped to a negative.
std::optional<int64_t> as_integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return std::nullopt;
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return int64_t(d);
  }
  return std::nullopt;
}

// Reads a token-id array; nullopt-with-error when an element is not a valid id.
std::optional<ApiError> read_token_array(const json& arr, uint32_t vocab, std::vector<TokenId>& out) {
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    auto id = as_integer(arr[i]);
    if (!id) return bad_request("'prompt' token " + std::to_string(i) + " must be an integer, got " + kind(arr[i]), "prompt",
                                "invalid_type");
    if (*id < 0 || uint64_t(*id) >= vocab)
      return bad_request("'prompt' token " + std::to_string(i) + " = " + std::to_string(*id) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                         "prompt", "token_out_of_vocabulary");
    out.push_back(TokenId(*id));
  }
  return std::nullopt;
}

}  // namespace

uint32_t max_prompt_tokens(const RequestLimits& limits) {
  // The context holds the prompt and at least the position of the token sampled after it
  // (Runtime::start refuses a prompt that fills the context).
  uint32_t limit = limits.max_context == 0 ? 0 : limits.max_context - 1;
  if (limits.max_prompt_tokens != 0) limit = std::min(limit, limits.max_prompt_tokens);
  if (limits.max_kv_tokens != 0) limit = std::min(limit, limits.max_kv_tokens);
  return limit;
}

RequestLimits derive_limits(const RequestLimits& configured, const ModelInfo& model) {
  RequestLimits limits = configured;
  limits.vocab_size = model.vocab_size;
  limits.max_context = model.max_context;
  limits.max_kv_tokens = model.max_kv_tokens;
  if (model.text.max_token_bytes != 0)
    limits.max_prompt_bytes = uint64_t(max_prompt_tokens(limits)) * model.text.max_token_bytes;
  return limits;
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return dump(json{{"error", err}});
}

ApiError error_from_status(const Status& s) {
  ApiError e;
  e.message = s.message().empty() ? s.to_string() : s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.http_status = 400, e.type = "invalid_request_error";
      break;
    case StatusCode::kBusy:
      e.http_status = 429, e.type = "rate_limit_error", e.code = "queue_full";
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503, e.type = "service_unavailable", e.code = "unavailable";
      break;
    case StatusCode::kCancelled:
      e.http_status = 499, e.type = "cancelled";
      break;
    case StatusCode::kDeadlineExceeded:
      e.http_status = 503, e.type = "service_unavailable", e.code = "timeout", e.retry = false;
      break;
    default:
      e.http_status = 500, e.type = "server_error";
      break;
  }
  return e;
}

ApiError draining_error() {
  ApiError e = error_from_status(Status::Unavailable("the server is shutting down"));
  e.code = "server_draining";
  return e;
}

namespace {

const json* find_field(const json& doc, const char* name) {
  auto it = doc.find(name);
  return it == doc.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> read_bool(const json& doc, const char* name, bool& out) {
  const json* it = find_field(doc, name);
  if (it == nullptr) return std::nullopt;
  if (!it->is_boolean()) return wrong_type(name, "a boolean", *it);
  out = it->get<bool>();
  return std::nullopt;
}

// max_tokens (or, for chat, max_completion_tokens), at least `min_tokens`.
std::optional<ApiError> read_max_tokens(const json& doc, const RequestLimits& limits, uint32_t min_tokens,
                                        CompletionRequest& r) {
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    const json* it = find_field(doc, field);
    if (it == nullptr) continue;
    auto v = as_integer(*it);
    if (!v) return wrong_type(field, "an integer", *it);
    if (*v < int64_t(min_tokens))
      return bad_request(std::string("'") + field + "' must be at least " + std::to_string(min_tokens) +
                             (min_tokens == 1 ? " (0 only with 'echo')" : ""),
                         field, "invalid_value");
    if (uint64_t(*v) > limits.max_tokens)
      return bad_request(std::string("'") + field + "' = " + std::to_string(*v) + " exceeds this server's limit of " +
                             std::to_string(limits.max_tokens),
                         field, "too_many_tokens");
    r.max_tokens = uint32_t(*v);
    r.max_tokens_given = true;
  }
  return std::nullopt;
}

// A request without a seed samples afresh: seeds drawn from the process's own random start
// (every request got seed 0, so N requests for N candidates gave N copies of one).
uint64_t unseeded_request_seed() {
  static const uint64_t start = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> next{0};
  return splitmix64_mix(start + kSplitMix64Gamma * (next.fetch_add(1, std::memory_order_relaxed) + 1));
}

// The fields /v1/completions and /v1/chat/completions share: sampling, stop, stream, salt.
std::optional<ApiError> read_generation_fields(const json& doc, CompletionRequest& r) {
  if (auto it = doc.find("temperature"); it != doc.end() && !it->is_null()) {
    if (!it->is_number()) return wrong_type("temperature", "a number", *it);
    const double t = it->get<double>();
    if (!(t >= 0 && t <= 2)) return bad_request("'temperature' must be in [0, 2]", "temperature", "invalid_value");
    r.sampling.temperature = float(t);
  }
  if (auto it = doc.find("top_p"); it != doc.end() && !it->is_null()) {
    if (!it->is_number()) return wrong_type("top_p", "a number", *it);
    const double t = it->get<double>();
    if (!(t > 0 && t <= 1)) return bad_request("'top_p' must be in (0, 1]", "top_p", "invalid_value");
    // The sampler keeps it as a float: a value below the smallest float keeps the most likely token alone.
    r.sampling.top_p = std::max(float(t), std::numeric_limits<float>::min());
  }
  if (auto it = doc.find("top_k"); it != doc.end() && !it->is_null()) {
    auto v = as_integer(*it);
    if (!v) return wrong_type("top_k", "an integer", *it);
    if (*v < -1) return bad_request("'top_k' must be >= -1", "top_k", "invalid_value");
    r.sampling.top_k = *v <= 0 ? 0 : uint32_t(std::min<int64_t>(*v, UINT32_MAX));
  }
  if (auto it = doc.find("seed"); it != doc.end() && !it->is_null()) {
    // Any 64-bit pattern seeds: an unsigned value as itself, a negative one as its bits.
    if (it->is_number_unsigned()) r.sampling.seed = it->get<uint64_t>();
    else if (auto v = as_integer(*it)) r.sampling.seed = uint64_t(*v);
    else return wrong_type("seed", "an integer", *it);
  } else {
    r.sampling.seed = unseeded_request_seed();  // a fresh sample per request, as without a seed elsewhere
  }
  if (auto it = doc.find("n"); it != doc.end() && !it->is_null()) {
    auto v = as_integer(*it);
    if (!v) return wrong_type("n", "an integer", *it);
    if (*v != 1) return bad_request("only 'n' = 1 is supported", "n", "unsupported");
  }
  if (auto it = doc.find("stop"); it != doc.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const json& s : *it) {
        if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings", *it);
    }
    if (r.stop.size() > 4) return bad_request("'stop' may hold at most 4 strings", "stop", "invalid_value");
    for (const auto& s : r.stop)
      if (s.empty()) return bad_request("'stop' strings must not be empty", "stop", "invalid_value");
  }
  if (auto err = read_bool(doc, "stream", r.stream)) return err;
  if (auto it = doc.find("stream_options"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("stream_options", "an object", *it);
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *u);
      r.stream_include_usage = u->get<bool>();
    }
  }
  if (auto err = read_bool(doc, "ignore_eos", r.ignore_eos)) return err;
  if (auto it = doc.find("cache_salt"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return wrong_type("cache_salt", "a string", *it);
    r.cache_salt = it->get<std::string>();
    // Kept with every queued request and timed prefetch (a hash of it would do, but it is
    // named in logs and events): 16 MiB salts held an hour by 1,024 timers took 16 GiB.
    if (r.cache_salt.size() > kMaxCacheSaltBytes)
      return bad_request("'cache_salt' is longer than " + std::to_string(kMaxCacheSaltBytes) + " bytes", "cache_salt",
                         "invalid_value");
  }
  return std::nullopt;
}

// Why the prompt limit is what it is, for the 400's message.
std::string prompt_limit_reason(const RequestLimits& limits) {
  const uint32_t limit = max_prompt_tokens(limits);
  if (limits.max_kv_tokens != 0 && limit == limits.max_kv_tokens)
    return "the device KV pool holds " + std::to_string(limits.max_kv_tokens) + " tokens";
  if (limit + 1 == limits.max_context) return "the model's context, less the first generated token";
  return "this server's max_prompt_tokens";
}

// The prompt and completion must fit the limits, the context and the device pool.
std::optional<ApiError> check_lengths(const CompletionRequest& r, const RequestLimits& limits) {
  const uint64_t max_prompt = max_prompt_tokens(limits);
  if (r.prompt.size() > max_prompt)
    return bad_request("prompt has " + std::to_string(r.prompt.size()) + " tokens, more than the limit of " +
                           std::to_string(max_prompt) + " (" + prompt_limit_reason(limits) + ")",
                       "prompt", "context_length_exceeded");
  const uint64_t total = r.prompt.size() + uint64_t(r.max_tokens);
  if (total > limits.max_context)
    return bad_request("prompt (" + std::to_string(r.prompt.size()) + " tokens) plus max_tokens (" +
                           std::to_string(r.max_tokens) + ") exceeds the model's context of " +
                           std::to_string(limits.max_context) + " tokens",
                       "max_tokens", "context_length_exceeded");
  const uint64_t kv = ModelInfo::kv_tokens_needed(r.prompt.size(), r.max_tokens);
  if (limits.max_kv_tokens != 0 && kv > limits.max_kv_tokens)
    return bad_request("prompt (" + std::to_string(r.prompt.size()) + " tokens) plus max_tokens (" +
                           std::to_string(r.max_tokens) + ") needs KV for " + std::to_string(kv) +
                           " tokens, more than the device KV pool holds (" + std::to_string(limits.max_kv_tokens) +
                           " tokens): it could never run; lower max_tokens or shorten the prompt",
                       "max_tokens", "kv_pool_exceeded");
  return std::nullopt;
}

}  // namespace

template <class J>
Result<J> parse_json_object(std::string_view body, ApiError& error) {
  if (const std::string why = json_cost_refusal(body); !why.empty()) {
    error = bad_request("request body " + why, "", "invalid_json");
    return Status::InvalidArgument(error.message);
  }
  J doc = J::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) error = bad_request("request body is not valid JSON", "", "invalid_json");
  else if (!doc.is_object()) error = bad_request("request body must be a JSON object", "", "invalid_json");
  else return doc;
  return Status::InvalidArgument(error.message);
}
template Result<json> parse_json_object<json>(std::string_view, ApiError&);
template Result<nlohmann::ordered_json> parse_json_object<nlohmann::ordered_json>(std::string_view, ApiError&);

// "kvtier": {"blend": bool, "retain_s": N, "session": "..."}: kvtier's own
// options of a request, one parser for every endpoint.
std::optional<ApiError> read_kvtier_object(const json& doc, CompletionRequest& r) {
  const json* ext = find_field(doc, "kvtier");
  if (ext == nullptr) return std::nullopt;
  if (!ext->is_object()) return wrong_type("kvtier", "an object", *ext);
  for (const auto& [key, value] : ext->items()) {
    const std::string param = "kvtier." + key;
    if (key == "blend") {
      if (!value.is_boolean()) return wrong_type(param.c_str(), "a boolean", value);
      r.blend = value.get<bool>();
    } else if (key == "retain_s") {
      const std::optional<int64_t> v = as_integer(value);
      if (!v || *v < 0 || *v > kMaxRetainSeconds)
        return bad_request("kvtier.retain_s must be an integer number of seconds in [0, " +
                               std::to_string(kMaxRetainSeconds) + "]",
                           param, "invalid_value");
      if (*v > 0) r.retain.push_back(RetainHint{UINT32_MAX, uint32_t(*v)});
    } else if (key == "session") {
      if (!value.is_string()) return wrong_type(param.c_str(), "a string", value);
      if (value.get_ref<const std::string&>().size() > 256)
        return bad_request("kvtier.session is longer than 256 bytes", param, "invalid_value");
      r.session = value.get<std::string>();
    } else {
      return bad_request("unknown field '" + param + "' (known: blend, retain_s, session)", param, "invalid_value");
    }
  }
  return std::nullopt;
}

std::variant<uint32_t, ApiError> read_prefetch_ready_ms(const json& body) {
  const json* v = find_field(body, "ready_in_ms");
  if (v == nullptr) return 0u;
  const std::optional<int64_t> ms = as_integer(*v);
  if (!ms || *ms < 0 || *ms > kMaxPrefetchReadyMs)
    return bad_request("ready_in_ms must be an integer number of milliseconds in [0, " +
                           std::to_string(kMaxPrefetchReadyMs) + "]",
                       "ready_in_ms", "invalid_value");
  return uint32_t(*ms);
}

namespace {

// A number field in [lo, hi] into `out` (absent or null: unchanged).
std::optional<ApiError> read_number_in(const json& doc, const char* name, double lo, double hi, float& out) {
  const json* v = find_field(doc, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    return bad_request(kvtier::quoted(name) + " must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]", name,
                       "invalid_value");
  out = float(x);
  return std::nullopt;
}

// OpenAI's logit_bias ({"token id": bias in [-100, 100]}, at most kMaxLogitBias entries),
// presence_penalty and frequency_penalty ([-2, 2]), and vLLM's min_p ([0, 1]).
std::optional<ApiError> read_logit_adjustments(const json& doc, const RequestLimits& limits, SamplingParams& s) {
  if (auto err = read_number_in(doc, "presence_penalty", -2, 2, s.presence_penalty)) return err;
  if (auto err = read_number_in(doc, "frequency_penalty", -2, 2, s.frequency_penalty)) return err;
  if (auto err = read_number_in(doc, "min_p", 0, 1, s.min_p)) return err;
  const json* bias = find_field(doc, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return wrong_type("logit_bias", "an object of token ids to numbers", *bias);
  if (bias->size() > kMaxLogitBias)
    return bad_request("'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) + " tokens", "logit_bias",
                       "invalid_value");
  for (const auto& [key, value] : bias->items()) {
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    // Written as the id alone ("0500" would be a second entry for 500: biases past ±100 by adding).
    if (ec != std::errc() || end != key.data() + key.size() || key != std::to_string(id) || id >= limits.vocab_size)
      return bad_request("'logit_bias' key " + kvtier::quoted(key) + " is not a token id below " +
                             std::to_string(limits.vocab_size),
                         "logit_bias", "invalid_value");
    float b = 0;
    if (auto err = read_number_in(*bias, key.c_str(), -100, 100, b)) {
      err->param = "logit_bias";
      return err;
    }
    s.logit_bias.emplace_back(TokenId(id), b);
  }
  return std::nullopt;
}

// Fields asking for an answer kvtier cannot give: output held to a format or grammar (OpenAI's
// response_format, vLLM's guided_*, llama.cpp's grammar and json_schema), several candidates
// (best_of), text after the insertion point (suffix), and the legacy function calling that tools
// replaced. Ignoring one answers another question than was asked, and its parser fails far from
// the cause, so each is refused unless it holds its neutral value (absent, null, or as listed).
std::optional<ApiError> refuse_unhonoured_fields(const json& doc) {
  struct Field {
    std::string_view name;
    bool (*neutral)(const json&);
    std::string_view instead;
  };
  static constexpr Field kFields[] = {
      {"response_format", [](const json& v) { return v.is_object() && v.size() == 1 && v.value("type", "") == "text"; },
       "kvtier does not constrain its output to a format; only {\"type\": \"text\"} is accepted"},
      {"guided_json", nullptr, "kvtier does not constrain its output"},
      {"guided_regex", nullptr, "kvtier does not constrain its output"},
      {"guided_choice", nullptr, "kvtier does not constrain its output"},
      {"guided_grammar", nullptr, "kvtier does not constrain its output"},
      {"grammar", nullptr, "kvtier does not constrain its output"},
      {"json_schema", nullptr, "kvtier does not constrain its output"},
      {"best_of", [](const json& v) { return v == 1; }, "only 'best_of' = 1 is supported"},
      {"suffix", [](const json& v) { return v == ""; }, "kvtier does not insert text before a suffix"},
      {"functions", [](const json& v) { return v.is_array() && v.empty(); }, "use 'tools' (OpenAI's current form)"},
      {"function_call", [](const json& v) { return v == "none"; }, "use 'tools' and 'tool_choice'"}};
  for (const Field& f : kFields) {
    auto it = doc.find(f.name);
    if (it == doc.end() || it->is_null() || (f.neutral && f.neutral(*it))) continue;
    const std::string name(f.name);
    return bad_request("'" + name + "' is not supported: " + std::string(f.instead), name, "unsupported");
  }
  return std::nullopt;
}

}  // namespace

uint32_t count_ignored_fields(const json& doc, std::initializer_list<std::string_view> endpoint_fields) {
  static constexpr std::string_view kCommon[] = {
      "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
      "stream_options", "cache_salt", "ignore_eos", "kvtier", "n", "return_tokens_as_token_ids",
      "logit_bias", "presence_penalty", "frequency_penalty", "min_p", "response_format", "best_of", "suffix"};
  uint32_t n = 0;
  for (const auto& [key, value] : doc.items()) {
    const bool read = std::find(std::begin(kCommon), std::end(kCommon), key) != std::end(kCommon) ||
                      std::find(endpoint_fields.begin(), endpoint_fields.end(), key) != endpoint_fields.end();
    n += read ? 0 : 1;
  }
  return n;
}

std::optional<ApiError> read_common_request(const json& doc, const RequestLimits& limits, uint32_t min_max_tokens,
                                            CompletionRequest& r) {
  r.max_tokens = limits.default_max_tokens;
  if (auto err = refuse_unhonoured_fields(doc)) return err;
  if (auto err = read_kvtier_object(doc, r)) return err;
  if (const json* it = find_field(doc, "model")) {
    if (!it->is_string()) return wrong_type("model", "a string", *it);
    r.model = it->get<std::string>();
  }
  if (auto err = read_max_tokens(doc, limits, min_max_tokens, r)) return err;
  if (auto err = read_bool(doc, "return_tokens_as_token_ids", r.tokens_as_ids)) return err;
  if (auto err = read_logit_adjustments(doc, limits, r.sampling)) return err;
  return read_generation_fields(doc, r);
}

std::optional<ApiError> check_text_bytes(uint64_t bytes, const RequestLimits& limits, const std::string& param) {
  if (limits.max_prompt_bytes == 0 || bytes <= limits.max_prompt_bytes) return std::nullopt;
  return bad_request("prompt text of " + std::to_string(bytes) + " bytes is longer than this server accepts (" +
                         std::to_string(limits.max_prompt_bytes) + " bytes: " +
                         std::to_string(max_prompt_tokens(limits)) +
                         " tokens at most, and no token spans more bytes than the model's longest); it was not tokenized",
                     param, "context_length_exceeded");
}

std::optional<ApiError> finish_request(CompletionRequest& r, const RequestLimits& limits) {
  if (!r.max_tokens_given) {  // a default asks for no more than the context and the pool leave
    uint64_t room = limits.max_context;  // for prompt + max_tokens
    if (limits.max_kv_tokens != 0)       // the last token's KV is never written (ModelInfo::kv_tokens_needed)
      room = std::min<uint64_t>(room, uint64_t(limits.max_kv_tokens) + 1);
    if (room > r.prompt.size()) r.max_tokens = uint32_t(std::min<uint64_t>(r.max_tokens, room - r.prompt.size()));
  }
  r.sampling.logprobs = r.logprobs;
  r.sampling.prompt_logprobs = r.echo && r.logprobs >= 0;
  return check_lengths(r, limits);
}

namespace {

// "segments": [{"text": "..."} | {"tokens": [ids]}, optional "reuse" (default true)], the prompt's pieces in order.
// Text pieces are tokenized one by one (BOS only before the first).
std::optional<ApiError> read_segments(const json& pieces, const RequestLimits& limits, const Tokenizer& tokenize,
                                      CompletionRequest& r) {
  if (!pieces.is_array() || pieces.empty() || pieces.size() > kMaxSegments)
    return bad_request("'segments' must be an array of 1 to " + std::to_string(kMaxSegments) + " pieces", "segments",
                       "invalid_value");
  uint64_t text_bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const json& piece = pieces[i];
    const std::string where = "'segments' piece " + std::to_string(i);
    if (!piece.is_object()) return bad_request(where + " must be an object", "segments", "invalid_type");
    const json* text = find_field(piece, "text");
    const json* tokens = find_field(piece, "tokens");
    if ((text == nullptr) == (tokens == nullptr))
      return bad_request(where + " needs exactly one of 'text' and 'tokens'", "segments", "invalid_value");
    bool reuse = true;
    if (auto err = read_bool(piece, "reuse", reuse)) return *err;
    std::vector<TokenId> ids;
    if (text != nullptr) {
      if (!text->is_string()) return bad_request(where + " 'text' must be a string", "segments", "invalid_type");
      text_bytes += text->get_ref<const std::string&>().size();
      if (auto err = check_text_bytes(text_bytes, limits, "segments")) return *err;
      // A piece after others continues their text (no SentencePiece space prefix of its own).
      ids = tokenize(text->get_ref<const std::string&>(),
                     {.add_bos = r.prompt.empty(), .parse_special = r.parse_special,
                      .follows = r.prompt.empty() ? std::nullopt : std::optional(r.prompt.back())});
      r.prompt_is_text = true;
    } else {
      if (!tokens->is_array()) return bad_request(where + " 'tokens' must be an array of ids", "segments", "invalid_type");
      if (auto err = read_token_array(*tokens, limits.vocab_size, ids)) return *err;
    }
    if (reuse && !ids.empty()) r.segments.push_back({uint32_t(r.prompt.size()), uint32_t(r.prompt.size() + ids.size())});
    r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
  }
  return std::nullopt;
}

// prompt: "text" | [ids] | ["text"] | [[ids]] (a batch of one).
std::optional<ApiError> read_prompt(const json& doc, const RequestLimits& limits, const Tokenizer& tokenize,
                                    CompletionRequest& r) {
  const json* prompt = find_field(doc, "prompt");
  if (const json* pieces = find_field(doc, "segments")) {
    if (prompt != nullptr) return bad_request("send either 'prompt' or 'segments', not both", "segments", "invalid_value");
    return read_segments(*pieces, limits, tokenize, r);
  }
  if (prompt == nullptr) return bad_request("'prompt' is required", "prompt", "missing_field");
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
    prompt = &(*prompt)[0];
  else if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
    return bad_request("batched prompts are not supported: send one prompt per request", "prompt", "unsupported");
  if (prompt->is_string()) {
    r.prompt_is_text = true;
    const std::string& text = prompt->get_ref<const std::string&>();
    if (auto err = check_text_bytes(text.size(), limits, "prompt")) return *err;
    r.prompt = tokenize(text, {.add_bos = true, .parse_special = r.parse_special});
  } else if (prompt->is_array()) {
    if (auto err = read_token_array(*prompt, limits.vocab_size, r.prompt)) return *err;
  } else {
    return wrong_type("prompt", "a string or an array of token ids", *prompt);
  }
  return std::nullopt;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body, const RequestLimits& limits,
                                                                   const Tokenizer& tokenize) {
  ApiError error;
  auto doc_or = parse_json_object(body, error);
  if (!doc_or.ok()) return error;
  const json& doc = *doc_or;
  CompletionRequest r;
  if (auto err = read_bool(doc, "special", r.parse_special)) return *err;
  if (auto err = read_prompt(doc, limits, tokenize, r)) return *err;
  if (r.prompt.empty()) return bad_request("'prompt' must not be empty", "prompt", "empty_prompt");
  if (auto err = read_bool(doc, "echo", r.echo)) return *err;
  if (const json* it = find_field(doc, "logprobs")) {
    auto v = as_integer(*it);
    if (!v) return wrong_type("logprobs", "an integer", *it);
    if (*v < 0 || *v > kMaxLogprobs)
      return bad_request("'logprobs' must be in [0, " + std::to_string(kMaxLogprobs) + "]", "logprobs", "invalid_value");
    r.logprobs = int32_t(*v);
  }
  if (auto err = read_bool(doc, "return_token_ids", r.return_token_ids)) return *err;
  if (auto err = read_common_request(doc, limits, r.echo ? 0 : 1, r)) return *err;
  r.ignored_fields = count_ignored_fields(doc, {"prompt", "echo", "logprobs", "return_token_ids", "segments", "special"});
  if (auto err = finish_request(r, limits)) return *err;
  return r;
}

}  // namespace kvtier::server
