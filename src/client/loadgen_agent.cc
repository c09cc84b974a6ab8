// kvtier loadgen --agent: sessions of tool-calling turns (loadgen.h).
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "client/loadgen_detail.h"

namespace kvtier::server::loadgen_detail {
namespace {

using nlohmann::json;

// The shared tool definitions: `n` functions with a description and a schema.
json agent_tools(const LoadgenOptions& o) {
  json tools = json::array();
  for (uint32_t i = 0; i < o.tools; ++i)
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", "tool_" + std::to_string(i)},
                       {"description", synth_text(o.seed, 6, i, 0, 24)},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"query", {{"type", "string"}, {"description", "what to look up"}}}}},
                         {"required", json::array({"query"})}}}}}});
  return tools;
}

// The assistant's scripted tool call of a turn, as a replaying client appends it.
json scripted_call(const LoadgenOptions& o, uint32_t session, uint32_t turn) {
  const std::string id = "call_" + std::to_string(session) + "_" + std::to_string(turn);
  const json args = {{"query", synth_text(o.seed, 7, session, turn, 8)}};
  return {{"role", "assistant"},
          {"content", nullptr},
          {"tool_calls", json::array({{{"id", id},
                                       {"type", "function"},
                                       {"function", {{"name", "tool_" + std::to_string(turn % o.tools)},
                                                     {"arguments", args.dump()}}}}})}};
}

// The session's first message: its own context (`history_tokens` words: the files or pages it works
// on), then its question.
std::string first_question(const LoadgenOptions& o, uint32_t session) {
  const std::string own = synth_text(o.seed, 2, session, 0, o.history_tokens);
  const std::string question = synth_text(o.seed, 3, session, 0, o.question_tokens);
  return own.empty() ? question : own + "\n\n" + question;
}

// How long the tool of `session`'s `turn` runs: tool_latency_ms × (1 + jitter × u), u uniform in
// [-1, 1], the same for the same seed, session and turn.
std::chrono::milliseconds tool_latency(const LoadgenOptions& o, uint32_t session, uint32_t turn) {
  if (o.tool_latency_jitter == 0) return std::chrono::milliseconds(o.tool_latency_ms);
  std::seed_seq seq{uint32_t(o.seed), uint32_t(o.seed >> 32), session, turn, 9u};
  std::mt19937_64 rng(seq);
  const double u = std::uniform_real_distribution<double>(-1, 1)(rng);
  return std::chrono::milliseconds(std::llround(double(o.tool_latency_ms) * (1 + o.tool_latency_jitter * u)));
}

// POST /v1/cache/prefetch of the conversation so far; best effort: its answer's tokens_matched and
// tokens_loading go with the next turn's sample, 0 where it failed.
std::pair<uint32_t, uint32_t> prefetch(httplib::Client& client, const LoadgenOptions& o, const json& body) {
  const auto res = small_request(client, o, "POST", "/v1/cache/prefetch", body.dump());
  if (!res.ok() || res->status != 202) return {0, 0};
  const json a = json::parse(res->body, nullptr, /*allow_exceptions=*/false);  // count_of: 0 unless an object
  return {count_of(a, "tokens_matched"), count_of(a, "tokens_loading")};
}

}  // namespace

void run_agent_session(const LoadgenOptions& o, const std::string& model, uint32_t session,
                       const std::function<bool(uint32_t turn)>& may_send,
                       const std::function<void(uint32_t turn, LoadgenSample)>& record) {
  auto client = make_client(o);
  json request = {{"tools", agent_tools(o)},
                  {"messages", json::array({{{"role", "system"}, {"content", synth_text(o.seed, 1, 0, 0, o.system_prompt_tokens)}},
                                            {{"role", "user"}, {"content", first_question(o, session)}}})}};
  if (o.retain_s > 0) request["kvtier"] = {{"retain_s", o.retain_s}, {"session", "agent-" + std::to_string(session)}};
  uint32_t previous_prompt = 0;
  std::pair<uint32_t, uint32_t> prefetched{0, 0};
  for (uint32_t turn = 0; turn < o.rounds && may_send(turn); ++turn) {
    LoadgenSample s = send_one(*client, o, model, request);
    s.user = session, s.round = turn;
    std::tie(s.prefetch_matched, s.prefetch_loading) = prefetched;
    s.ideal_cached_tokens = previous_prompt;
    previous_prompt = s.ok ? s.prompt_tokens : 0;
    record(turn, std::move(s));
    if (turn + 1 == o.rounds) break;
    // The tool runs from now; the client may ask for the prefix to be read ahead meanwhile (the
    // prefetch's answer comes within the tool's time, not before it).
    const auto latency = tool_latency(o, session, turn);
    const auto tool_done = std::chrono::steady_clock::now() + latency;
    request["messages"].push_back(scripted_call(o, session, turn));
    if (o.prefetch) {
      json body = request;
      body["ready_in_ms"] = latency.count();
      prefetched = prefetch(*client, o, body);
    }
    std::this_thread::sleep_until(tool_done);
    request["messages"].push_back({{"role", "tool"},
                                   {"tool_call_id", request["messages"].back()["tool_calls"][0]["id"]},
                                   {"content", synth_text(o.seed, 8, session, turn, o.tool_result_tokens)}});
  }
}

}  // namespace kvtier::server::loadgen_detail
