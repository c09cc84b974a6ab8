// `kvtier bench ttft`: TTFT with the prefix cached on each tier vs recompute and vs the overlap floor.
#include <cstdio>
#include <sstream>

#include "command.h"
#include "ttft_bench.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("bench-ttft", [](CLI::App& root, int& exit_code) {
  struct Flags {
    TtftBenchOptions o;
    std::string prefixes = "1024,4096,16384";
    std::string kv_dtype = "f16";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench_group(root).add_subcommand("ttft", "TTFT with a cached prefix per tier vs recompute and the overlap floor");
  cmd->add_option("--model", f->o.model, "preset (tiny, small, 1b) or a .gguf file")->capture_default_str();
  cmd->add_option("--device", f->o.device, "where KV pages and compute live: cpu, or cuda (CUDA build, GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--prefix", f->prefixes, "comma-separated cached prefix lengths")->capture_default_str();
  cmd->add_option("--suffix", f->o.suffix, "new tokens after the prefix")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV dtype: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--dir", f->o.dir, "where the disk tier's scratch directory is made (kvtier-bench-ttft-PID inside it, removed afterwards)")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "compute threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    if (Status s = parse_lengths_and_dtype(f->prefixes, "--prefix", f->o.prefixes, f->kv_dtype, f->o.kv_dtype);
        !s.ok()) {
      exit_code = report(s);
      return;
    }
    exit_code = print_result(run_ttft_bench(f->o, stderr), f->json);
  });
});

}  // namespace
}  // namespace kvtier::cli
