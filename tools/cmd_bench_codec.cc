// `kvtier bench codec`: compressed KV on disk (issue 22) — bytes per token, codec speed, disk-hit load time and
// TTFT, and the error against none (and none against a full recompute), per codec (none, f16, k16v8, q8, k8v4, q4).
#include <cstdio>

#include "codec_bench.h"
#include "command.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("bench-codec", [](CLI::App& root, int& exit_code) {
  struct Flags {
    bench::CodecBenchOptions o;
    std::string prefixes = "4096,16384";
    std::string kv_dtype = "f16";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench_group(root).add_subcommand(
      "codec", "KV codecs on disk: bytes per token, encode/decode speed, disk-hit load time and TTFT, error vs none");
  cmd->add_option("--model", f->o.model, "preset (small, 1b) or a .gguf file; lossy codecs need head_dim % 32 == 0")
      ->capture_default_str();
  add_prompt_text_option(cmd, f->o.text);
  cmd->add_option("--kv-dtype", f->kv_dtype, "the pool's KV dtype: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--prefixes", f->prefixes, "comma-separated cached prefix lengths (multiples of 256); "
                                             "the error prompts use the shortest")->capture_default_str();
  cmd->add_option("--suffix", f->o.suffix_tokens, "new tokens after the prefix")->capture_default_str();
  cmd->add_option("--prompts", f->o.prompts, "prompts the error figures are taken over")->capture_default_str();
  cmd->add_option("--gen-tokens", f->o.gen_tokens, "greedy tokens compared per prompt")->capture_default_str();
  cmd->add_option("--rounds", f->o.rounds, "timed rounds per prefix and codec (medians)")->capture_default_str();
  cmd->add_option("--disk-dir", f->o.disk_dir, "where the scratch disk tiers go (removed after); default: the temp dir");
  cmd->add_option("--threads", f->o.threads, "compute threads (0: all cores)")->capture_default_str();
  cmd->add_option("--seed", f->o.seed, "seed of the prompts' random tokens")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    if (Status s = parse_lengths_and_dtype(f->prefixes, "--prefixes", f->o.prefixes, f->kv_dtype, f->o.kv_dtype);
        !s.ok()) {
      exit_code = report(s);
      return;
    }
    exit_code = print_result(bench::run_codec_bench(f->o, stderr), f->json);
  });
});

}  // namespace
}  // namespace kvtier::cli
