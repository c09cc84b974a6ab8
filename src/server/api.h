// The OpenAI-compatible wire formats of `kvtier serve`.
//
// parse_completion_request() turns a POST /v1/completions body into a
// validated CompletionRequest, or an ApiError carrying the HTTP status and
// OpenAI's error JSON shape. The *_json() functions build responses:
// a whole completion, one server-sent-event chunk, /v1/models. `usage`
// follows OpenAI (prompt_tokens, completion_tokens, total_tokens,
// prompt_tokens_details.cached_tokens) plus a `kvtier` object with the
// cached tokens per tier and the TTFT. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/sampler.h"
#include "kvtier/status.h"
#include "runtime/blend_prefill.h"
#include "runtime/runtime.h"
#include "server/json_limits.h"

namespace kvtier::server {

struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field, empty if none
  std::string code;   // short machine-readable code, empty if none
  // false: a client's automatic retry would redo lost work (a timed-out request); the answer says
  // `x-should-retry: false`, which OpenAI's SDKs obey (they retry 408, 409, 429 and 5xx otherwise).
  bool retry = true;
};
// {"error":{"message":..,"type":..,"param":..,"code":..}}
std::string error_json(const ApiError& e);
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
// Maps a Status from the scheduler/runtime onto an HTTP error
// (InvalidArgument 400, Busy 429, Unavailable 503, Cancelled 499, others 500).
ApiError error_from_status(const Status& s);
// The refusal of a draining server (SIGTERM): nothing of the request was done, so a router sends it
// to another backend. A 503 with code "server_draining", marked by this header for relays.
inline constexpr const char* kDrainingHeader = "X-Kvtier-Draining";
ApiError draining_error();

// What the scheduler runs: the Runtime's PromptRequest (prompt, sampling,
// salt, segments) and when to stop.
struct GenerationRequest : PromptRequest {
  uint32_t max_tokens = 16;       // 0: only the prompt is computed (its logprobs, with echo)
  std::vector<std::string> stop;  // stop strings (at most 4, non-empty)
  bool ignore_eos = false;        // vLLM-style extension: generate exactly max_tokens
  // "kvtier": {"session": "..."}: an opaque id of the client's session,
  // shown with the request in GET /v1/requests/recent (at most 256 bytes).
  std::string session;
  // Control tokens the reply shows as their text (TextCodec::detokenize_showing): the markers of
  // the tool-call format, when the reply's tool calls are parsed. Others decode as nothing.
  std::vector<TokenId> shown_specials;
};

// A parsed /v1/completions or /v1/chat/completions request: the
// GenerationRequest (prompt = the tokenized prompt; "segments", a kvtier
// extension, instead of "prompt": the prompt as pieces in order, the ones
// marked reusable blended from cached KV wherever they sit) and how to answer.
struct CompletionRequest : GenerationRequest {
  std::string model;
  bool prompt_is_text = false;
  bool stream = false;
  bool stream_include_usage = false;  // stream_options.include_usage
  int32_t logprobs = -1;          // 0..20: logprobs of each token and this many alternatives; -1: none
  bool echo = false;              // the response text starts with the prompt (and its logprobs, with logprobs)
  bool return_token_ids = false;  // choices[0].token_ids (and prompt_token_ids with echo), as vLLM
  bool tokens_as_ids = false;     // return_tokens_as_token_ids: logprobs name tokens "token_id:N", as vLLM
  // max_tokens (or max_completion_tokens) was in the body. Unset, max_tokens is the endpoint's
  // default, cut to what the context and the device KV pool leave after the prompt
  // (finish_request): /v1/completions' is --default-max-tokens (16, OpenAI's), a chat's is
  // --max-tokens (OpenAI's chat generates to the end of the context).
  bool max_tokens_given = false;
  // Top-level fields of the body that kvtier does not read: accepted and
  // ignored as vLLM does, and counted (kvtier_request_ignored_fields_total).
  uint32_t ignored_fields = 0;
  bool parse_special = true;      // "special": false treats special-token text in the prompt as plain text
  // "kvtier": {"blend": bool}, kvtier's own request options. blend true asks
  // to blend (with --blend-separator, the separator's pieces become segments);
  // false never blends, even with segments. Unset: segments and cacheable
  // chat parts ask by themselves.
  std::optional<bool> blend;
  // Retention hints ("kvtier": {"retain_s": N}, a chat message's
  // cache_control) are PromptRequest::retain.
};

inline constexpr uint32_t kMaxRetainSeconds = 86400;

// POST /v1/cache/prefetch's own field "ready_in_ms": in how many milliseconds
// the client expects to send the request the prefetch anticipates (an agent:
// its tool's expected latency). Absent: 0 (nothing more than the read-ahead
// now). An integer in [0, kMaxPrefetchReadyMs], or the 400 naming it.
inline constexpr uint32_t kMaxPrefetchReadyMs = 3'600'000;
std::variant<uint32_t, ApiError> read_prefetch_ready_ms(const nlohmann::json& body);

inline constexpr size_t kMaxSegments = 256;

inline constexpr int32_t kMaxLogprobs = 20;

// What a request may ask for. A request that breaks a limit gets a 400 at
// admission, before it is queued: it could never run, so it must not wait.
//   prompt tokens          <= max_prompt_tokens(limits)
//   prompt + max_tokens    <= max_context
//   prompt + max_tokens    <= max_kv_tokens (the device pool: every KV page of
//                             a sequence lives there while it runs, so a
//                             sequence that could outgrow the empty pool is
//                             refused instead of failing half-way)
//   text prompt bytes      <= max_prompt_bytes (checked before tokenizing)
struct RequestLimits {
  uint32_t vocab_size = 0;
  uint32_t max_context = 0;          // prompt + completion must fit
  uint32_t max_prompt_tokens = 0;    // configured; 0: max_context
  uint32_t max_tokens = 4096;        // cap on the requested max_tokens
  uint32_t default_max_tokens = 16;
  uint32_t max_kv_tokens = 0;        // ModelInfo::max_kv_tokens; 0: no limit
  uint64_t max_prompt_bytes = 0;     // longest text prompt or rendered chat; 0: no limit
};
// The longest cache_salt accepted.
inline constexpr size_t kMaxCacheSaltBytes = 1024;
inline constexpr size_t kMaxLogitBias = 1024;  // logit_bias entries a request may give
// The longest prompt accepted: the configured limit, the context and the device pool, whichever is least.
uint32_t max_prompt_tokens(const RequestLimits& limits);
// The limits a server derives from its configuration and its model: the
// pool's max_kv_tokens, and max_prompt_bytes = max_prompt_tokens × the
// longest token's bytes (a longer text has more tokens than allowed).
RequestLimits derive_limits(const RequestLimits& configured, const ModelInfo& model);

// Text to ids; `add_bos`: as the model does at the start of a prompt.
using Tokenizer = std::function<std::vector<TokenId>(std::string_view text, const text::EncodeOptions& options)>;

// Returns the request or the 400 describing what is wrong with it.
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body, const RequestLimits& limits,
                                                                   const Tokenizer& tokenize);

// Pieces of the request parsers, shared by the chat endpoint (chat_api.h).
// The body as a JSON object (J: nlohmann::json, or ordered_json where key order matters), or the
// 400 in `error`.
template <class J = nlohmann::json>
Result<J> parse_json_object(std::string_view body, ApiError& error);

// model, max_tokens/max_completion_tokens (at least `min_max_tokens`), sampling, stop, stream, ignore_eos, cache_salt.
// Top-level fields of `doc` that are neither read by every endpoint (model,
// max_tokens, sampling, stream, cache_salt, kvtier, ...) nor in `endpoint_fields`.
uint32_t count_ignored_fields(const nlohmann::json& doc, std::initializer_list<std::string_view> endpoint_fields);
std::optional<ApiError> read_common_request(const nlohmann::json& doc, const RequestLimits& limits,
                                            uint32_t min_max_tokens, CompletionRequest& r);
// Derives the sampling's logprob fields, fits a default max_tokens to the room the prompt leaves,
// and checks prompt + max_tokens against the limits.
std::optional<ApiError> finish_request(CompletionRequest& r, const RequestLimits& limits);
// The 400 for a prompt text (or rendered chat) longer than limits.max_prompt_bytes, checked before tokenizing.
std::optional<ApiError> check_text_bytes(uint64_t bytes, const RequestLimits& limits, const std::string& param);

// What a finished (or finishing) request reports.
struct CompletionUsage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  PrefillReport report;  // from Runtime::start (report.ttft_s: the prefill itself)
  double queue_s = 0;    // arrival to the start of prefill
  double ttft_s = 0;     // arrival to the first token (what the client sees)
  double e2e_s = 0;      // arrival to the last token
  uint32_t retained_tokens = 0;  // kept by the request's retention hints (Runtime::finish)
  // Ended by the server before its end, its client still there: its deadline passed or the server
  // stopped. Answered 503; counted as cancelled, not failed.
  bool cut_short = false;
  // The request's tenant's cached bytes per tier and quota once it ended (tenant keys only).
  std::optional<KVCacheStats::Tenant> tenant;
};

// The tokens of a finished completion, for logprobs and token ids in the response.
struct CompletionTokens {
  std::vector<TokenId> ids;                            // generated tokens (EOS excluded)
  std::vector<engine::TokenLogprobs> logprobs;         // one per id, when sampling.logprobs >= 0
  std::vector<engine::TokenLogprobs> prompt_logprobs;  // prompt tokens 1.., when sampling.prompt_logprobs
};

// What a response (or one stream chunk) carries besides its text: OpenAI's
// `logprobs` object (tokens, token_logprobs, top_logprobs, text_offset) over
// the echoed prompt tokens, if any, then the completion tokens; vLLM's
// `token_ids` and `prompt_token_ids`.
struct CompletionDetail {
  int32_t logprobs = -1;                    // CompletionRequest::logprobs
  bool return_token_ids = false;
  std::span<const TokenId> prompt;          // echoed prompt tokens in this response or chunk (else empty)
  const CompletionTokens* tokens = nullptr;  // completion tokens in it; prompt_logprobs go with `prompt`
  size_t text_offset = 0;                   // where this response or chunk starts in the whole text
  std::function<std::string(TokenId)> piece;  // the text of one token
  bool tokens_as_ids = false;                 // CompletionRequest::tokens_as_ids

  // How logprobs name a token: its text, or "token_id:N" (token texts collide; evaluation tools need ids).
  std::string label(TokenId id) const { return tokens_as_ids ? "token_id:" + std::to_string(id) : piece(id); }

  // The bytes the tokens of this response or chunk span (to advance text_offset).
  size_t text_bytes() const;
};

struct CompletionMeta {
  std::string id;       // "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// The response's "usage" object (OpenAI's fields and kvtier's details), as a JSON value.
nlohmann::json usage_json(const CompletionUsage& u);
// A non-streaming response: one choice with the whole text.
std::string completion_json(const CompletionMeta& meta, std::string_view text, std::string_view finish_reason,
                            const CompletionUsage& usage, const CompletionDetail* detail = nullptr);
// One SSE event payload (without "data: "): a text delta, the finish reason on
// the last one, usage when given. `with_choice` false gives OpenAI's trailing
// usage-only chunk ("choices": []).
std::string stream_chunk_json(const CompletionMeta& meta, std::string_view text_delta,
                              std::optional<std::string_view> finish_reason, const CompletionUsage* usage,
                              bool with_choice = true, const CompletionDetail* detail = nullptr);
// "data: <payload>\n\n"
std::string sse_event(std::string_view payload);
// /v1/models: one model, with max_model_len and, under "kvtier", the limits a request must respect.
// `one`: the model object alone (GET /v1/models/{id}); else the list of it.
std::string models_json(std::string_view model_name, const ModelInfo& info, const RequestLimits& limits, int64_t created,
                        bool one = false);

}  // namespace kvtier::server
