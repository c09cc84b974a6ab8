// `kvtier loadgen`: multi-round chat load against an OpenAI-compatible URL.
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "command.h"
#include "client/loadgen.h"

namespace {

struct LoadgenFlags {
  kvtier::server::LoadgenOptions options;
  bool json = false;
  bool quiet = false;
};

void draw_progress(size_t done, size_t total) {
  constexpr int kWidth = 30;
  const int filled = total ? int(double(done) / double(total) * kWidth) : kWidth;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu", filled, "==============================", kWidth - filled, "", done, total);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

const kvtier::cli::CommandRegistration kLoadgen("loadgen", [](CLI::App& root, int& exit_code) {
  auto f = std::make_shared<LoadgenFlags>();
  auto& o = f->options;
  CLI::App* cmd = root.add_subcommand("loadgen", "Multi-round chat load against an OpenAI-compatible server; reports TTFT, "
                                                 "latency, throughput and the cached-token share");
  cmd->add_option("--url", o.url, "Server base URL")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Bearer token (default: none)");
  cmd->add_option("--model", o.model, "Model name (default: the first of /v1/models)");
  cmd->add_option("--users,--sessions", o.users, "Concurrent conversations (agent sessions)")->capture_default_str();
  cmd->add_option("--rounds,--turns", o.rounds, "Rounds per conversation (turns per agent session)")->capture_default_str();
  cmd->add_option("--system-prompt-tokens", o.system_prompt_tokens, "System prompt shared by all users")->capture_default_str();
  cmd->add_option("--history-tokens", o.history_tokens, "Each user's own context before round 1 (with --agent: the session's, in its first message)")->capture_default_str();
  cmd->add_option("--question-tokens", o.question_tokens, "Tokens of each new question")->capture_default_str();
  cmd->add_option("--answer-tokens", o.answer_tokens, "Tokens generated per round")->capture_default_str();
  cmd->add_option("--qps", o.qps, "Request rate; 0 = closed loop (next round right after the answer)")->capture_default_str();
  cmd->add_option("--duration", o.duration_s, "Stop sending after this many seconds; 0 = all rounds")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the synthetic token ids")->capture_default_str();
  cmd->add_option("--vocab-size", o.vocab_size, "Token ids are drawn below this; 0 = ask the server (else 256)")
      ->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s, "Per-request timeout in seconds")->capture_default_str();
  cmd->add_flag("--chat", o.chat, "Drive /v1/chat/completions with text conversations (sizes count words)");
  cmd->add_flag("--rag", o.rag,
                "RAG requests: system prompt + documents from a pool in random order (reusable segments) + question, "
                "through /v1/completions \"segments\" (docs/BLEND.md)");
  cmd->add_option("--docs-pool", o.docs_pool, "With --rag: documents in the pool")->capture_default_str();
  cmd->add_option("--docs-per-request", o.docs_per_request, "With --rag: documents per request")->capture_default_str();
  cmd->add_option("--doc-tokens", o.doc_tokens, "With --rag: tokens per document")->capture_default_str();
  cmd->add_flag("--agent", o.agent,
                "Agent sessions through /v1/chat/completions: system prompt + --tools definitions, then turns of "
                "request, scripted tool call, tool result (docs/SERVER.md)");
  cmd->add_option("--tools", o.tools, "With --agent: tool definitions in the shared prefix")->capture_default_str();
  cmd->add_option("--tool-result-tokens", o.tool_result_tokens, "With --agent: words of each tool result")
      ->capture_default_str();
  cmd->add_option("--tool-latency-ms", o.tool_latency_ms, "With --agent: how long each tool runs")->capture_default_str();
  cmd->add_option("--tool-latency-jitter", o.tool_latency_jitter,
                  "With --agent: each tool call runs --tool-latency-ms x (1 +- this), drawn uniformly (0: all alike)")
      ->capture_default_str();
  cmd->add_flag("--prefetch", o.prefetch,
                "With --agent: POST /v1/cache/prefetch when a tool starts, with ready_in_ms = that call's latency");
  cmd->add_option("--retain-s", o.retain_s, "With --agent: \"kvtier\": {\"retain_s\"} on every request; 0 = none")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print one JSON object instead of the table");
  cmd->add_flag("--quiet", f->quiet, "No progress bar");
  cmd->callback([f, &exit_code] {
    std::mutex mu;
    const bool show = !f->quiet && isatty(STDERR_FILENO);
    auto progress = [&](size_t done, size_t total) {
      if (!show) return;
      std::lock_guard lk(mu);
      draw_progress(done, total);
    };
    auto result = kvtier::server::run_loadgen(f->options, progress);
    if (!result.ok()) {
      exit_code = kvtier::cli::report(result.status());
      return;
    }
    const auto summary = kvtier::server::summarize(*result);
    if (f->json) std::printf("%s\n", kvtier::server::summary_json(f->options, summary).c_str());
    else std::fputs(kvtier::server::summary_table(f->options, summary).c_str(), stdout);
    exit_code = summary.errors == 0 ? 0 : 1;
  });
});

}  // namespace
