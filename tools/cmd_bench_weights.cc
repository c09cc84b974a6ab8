// `kvtier bench weights`: a model file against the same weights in another type (bench/weights_bench.h).
#include <cstdio>

#include "command.h"
#include "weights_bench.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("bench-weights", [](CLI::App& root, int& exit_code) {
  struct Flags {
    bench::WeightsBenchOptions o;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench_group(root).add_subcommand(
      "weights", "A model file against the same weights in another type: KL, top-1 and greedy agreement on text");
  cmd->add_option("--model", f->o.model, "the .gguf under test")->required();
  cmd->add_option("--reference", f->o.reference, "the .gguf it is compared with (e.g. the f16 file)")->required();
  add_prompt_text_option(cmd, f->o.text);
  cmd->add_option("--prompts", f->o.prompts, "prompts compared")->capture_default_str();
  cmd->add_option("--prompt-tokens", f->o.prompt_tokens, "tokens per prompt (every position is compared)")
      ->capture_default_str();
  cmd->add_option("--greedy-tokens", f->o.greedy_tokens, "greedy tokens compared after each prompt")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "compute threads (0: all cores)")->capture_default_str();
  cmd->add_option("--seed", f->o.seed, "where the prompts are drawn from the text")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    exit_code = print_result(bench::run_weights_bench(f->o, stderr), f->json);
  });
});

}  // namespace
}  // namespace kvtier::cli
