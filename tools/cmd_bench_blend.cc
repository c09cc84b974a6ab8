// `kvtier bench blend`: TTFT and quality of non-prefix reuse (CacheBlend) on a RAG workload.
#include <cstdio>

#include "blend_bench.h"
#include "command.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("bench-blend", [](CLI::App& root, int& exit_code) {
  struct Flags {
    bench::BlendBenchOptions o;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench_group(root).add_subcommand(
      "blend", "RAG workload: TTFT of full prefill, prefix caching and blending; blending's quality per recompute ratio");
  cmd->add_option("--model", f->o.model, "preset (tiny, small, 1b) or a .gguf file")->capture_default_str();
  add_prompt_text_option(cmd, f->o.text);
  cmd->add_option("--docs-pool", f->o.docs_pool, "documents in the pool (each cached on its own first)")->capture_default_str();
  cmd->add_option("--docs-per-request", f->o.docs_per_request, "documents per request, in random order")->capture_default_str();
  cmd->add_option("--doc-tokens", f->o.doc_tokens, "tokens per document")->capture_default_str();
  cmd->add_option("--system-tokens", f->o.system_tokens, "system prompt tokens (shared prefix)")->capture_default_str();
  cmd->add_option("--question-tokens", f->o.question_tokens, "question tokens after the documents")->capture_default_str();
  cmd->add_option("--requests", f->o.requests, "requests timed (medians)")->capture_default_str();
  cmd->add_option("--quality-requests", f->o.quality_requests, "requests measured at every ratio")->capture_default_str();
  cmd->add_option("--greedy-tokens", f->o.greedy_tokens, "greedy tokens compared with the full prefill's")->capture_default_str();
  cmd->add_option("--ratio", f->o.ratio, "recompute ratio of the timed blend runs")->capture_default_str();
  cmd->add_option("--check-layer", f->o.check_layer, "layers below it are computed for every token")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "compute threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    exit_code = print_result(bench::run_blend_bench(f->o, stderr), f->json);
  });
});

}  // namespace
}  // namespace kvtier::cli
