// Loadgen: a multi-round chat workload against any OpenAI-compatible server
// (modelled on LMCache's multi-round QA benchmark). With `chat` it drives
// /v1/chat/completions with text messages instead (see LoadgenOptions::chat);
// `rag` sends documents as reusable segments; `agent` runs tool-calling
// sessions (LoadgenOptions::agent).
//
// `users` conversations run side by side. Every prompt of user u, round r is
//   system prompt (shared by all users) + u's own history
//   + (question, answer) of each earlier round + the question of round r,
// sent as token ids so lengths are exact, streamed, with ignore_eos so each
// answer is exactly `answer_tokens` long. Answers are appended to the history
// as fixed synthetic ids (the server's text cannot be turned back into ids
// in general), so the cacheable prefix of round r is the whole prompt of
// round r-1. With qps = 0 each user sends its next round as soon as the
// previous one finished (closed loop); with qps > 0 request k (round-major)
// is not sent before k/qps seconds. TTFT is the time to the first streamed
// event that carries a choice. Not thread-safe; run() blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::server {

inline constexpr double kMaxTimeoutSeconds = 1e6;  // loadgen --timeout: about 11 days
inline constexpr uint32_t kMaxUsers = 4096;          // loadgen --users: one thread each
inline constexpr uint64_t kMaxRequests = 10'000'000;  // --users × --rounds: one sample each

struct LoadgenOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string model;               // empty: the first model of /v1/models
  uint32_t users = 8;
  uint32_t rounds = 6;
  uint32_t system_prompt_tokens = 1000;
  uint32_t history_tokens = 2000;  // each user's (agent session's) own context before round 1
  uint32_t question_tokens = 32;
  uint32_t answer_tokens = 32;
  double qps = 0;                  // 0: closed loop
  double duration_s = 0;           // 0: until every round is done
  uint64_t seed = 1;
  uint32_t vocab_size = 0;         // 0: from /v1/models (kvtier.vocab_size), else 256
  double timeout_s = 600;          // per request, at most kMaxTimeoutSeconds
  bool chat = false;               // /v1/chat/completions with text conversations: the *_tokens sizes
                                   // count words of synthetic sentences, and each assistant turn is the
                                   // server's own reply
  // RAG (`rag`): each request is the system prompt, `docs_per_request`
  // documents drawn from a pool in random order (marked as reusable
  // segments) and a question, through /v1/completions "segments"; `rounds`
  // requests per user, no history.
  bool rag = false;
  uint32_t docs_pool = 50;
  uint32_t docs_per_request = 6;
  uint32_t doc_tokens = 512;
  // Agent sessions (`agent`, through /v1/chat/completions): `users`
  // sessions of `rounds` turns share a system prompt and `tools` tool
  // definitions. Each turn sends the conversation, then appends a scripted
  // assistant tool call (whatever the model generated: our models are not
  // trained for tools) and, after `tool_latency_ms` (each call drawn from
  // tool_latency_ms × (1 ± tool_latency_jitter), uniformly, by seed, session
  // and turn), the tool's result of `tool_result_tokens` words. With
  // `prefetch` the client calls POST /v1/cache/prefetch when the tool starts,
  // with "ready_in_ms": that call's latency; `retain_s` > 0 sends
  // "kvtier": {"retain_s"} with every request.
  bool agent = false;
  uint32_t tools = 8;
  uint32_t tool_result_tokens = 200;
  uint32_t tool_latency_ms = 500;
  double tool_latency_jitter = 0;  // in [0, 1]
  bool prefetch = false;
  uint32_t retain_s = 0;

  Status validate() const;
};

struct LoadgenSample {
  uint32_t user = 0, round = 0;
  bool ok = false;
  int http_status = 0;
  std::string error;
  double ttft_s = 0, e2e_s = 0;
  uint32_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  uint32_t blended_tokens = 0;  // segment tokens reused from cached KV by blending (usage.kvtier.blend)
  uint32_t cached_by_tier[4] = {};  // usage.kvtier.cached_tokens_by_tier: device, host, disk, remote
  // Agent turns after the first: every earlier token of the session (the
  // previous turn's prompt), the most its cached tokens can be.
  uint32_t ideal_cached_tokens = 0;
  bool tool_calls = false;  // the server parsed the generated reply into delta.tool_calls
  // --prefetch: what the prefetch sent during the tool before this turn answered (tokens_matched,
  // tokens_loading): the cached prefix it found, and how much of it was below the host to read ahead.
  uint32_t prefetch_matched = 0, prefetch_loading = 0;
};

struct LoadgenSummary {
  size_t requests = 0, errors = 0;
  double wall_s = 0;
  double ttft_mean = 0, ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;  // seconds
  double e2e_mean = 0, e2e_p50 = 0, e2e_p90 = 0, e2e_p99 = 0;
  double requests_per_s = 0, output_tokens_per_s = 0, prompt_tokens_per_s = 0;
  double cached_share = 0;   // exactly cached prompt tokens / prompt tokens (from usage)
  double blended_share = 0;  // blended (approximate) prompt tokens / prompt tokens
  double computed_share = 0; // the rest: computed
  // Agent sessions: cached tokens of the turns after the first over their
  // ideal (LoadgenSample::ideal_cached_tokens); cached tokens by tier; replies parsed into tool calls.
  double ideal_share = 0;
  uint64_t cached_by_tier[4] = {};
  size_t tool_call_replies = 0;
  uint64_t prefetch_matched = 0, prefetch_loading = 0;  // sums of LoadgenSample's
  std::string first_error;
};

struct LoadgenResult {
  std::vector<LoadgenSample> samples;
  double wall_s = 0;
};

// `progress(done, total)` is called after each request (from worker threads, serialized).
Result<LoadgenResult> run_loadgen(const LoadgenOptions& options,
                                  const std::function<void(size_t done, size_t total)>& progress = {});
LoadgenSummary summarize(const LoadgenResult& result);
std::string summary_table(const LoadgenOptions& options, const LoadgenSummary& s);
std::string summary_json(const LoadgenOptions& options, const LoadgenSummary& s);

// Nearest-rank percentile of unsorted values (p in [0, 100]); 0 for none.
double percentile(std::vector<double> values, double p);

}  // namespace kvtier::server
