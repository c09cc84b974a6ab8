// `kvtier bench engine`: prefill/decode throughput of the reference engine,
// reported against one large sgemm measured in the same run.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#include "engine_bench.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("bench-engine", [](CLI::App& root, int& exit_code) {
  struct Flags {
    engine::EngineBenchOptions o;
    std::string prompts = "512,2048";
    std::string kv_dtype = "f16";
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = bench_group(root).add_subcommand("engine", "Prefill/decode throughput of the reference engine vs one sgemm");
  cmd->add_option("--model", f->o.model, "preset (tiny, small, 1b) or a .gguf file")->capture_default_str();
  add_prompt_text_option(cmd, f->o.text);
  cmd->add_option("--prompt", f->prompts, "comma-separated prompt lengths")->capture_default_str();
  cmd->add_option("--decode", f->o.decode_tokens, "tokens decoded after each prompt")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV cache dtype: f32, f16 or bf16")->capture_default_str();
  cmd->add_option("--threads", f->o.threads, "worker threads (0: all cores)")->capture_default_str();
  cmd->add_option("--repeats", f->o.repeats, "prefill runs per prompt (median reported)")->capture_default_str();
  cmd->add_option("--seed", f->o.seed, "synthetic weight seed")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    if (Status s = parse_lengths_and_dtype(f->prompts, "--prompt", f->o.prompts, f->kv_dtype, f->o.kv_dtype); !s.ok()) {
      exit_code = report(s);
      return;
    }
    auto r = engine::run_engine_bench(f->o);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    if (f->json) {
      nlohmann::json j = {{"bench", "engine"},          {"model", r->model},     {"text", r->text}, {"kv_dtype", r->kv_dtype},
                          {"isa", r->isa},
                          {"threads", r->threads},      {"sgemm_peak_gflops", r->sgemm_peak_gflops},
                          {"rss_bytes", r->rss_bytes},  {"baseline_rss_bytes", r->baseline_rss_bytes},
                          {"weight_bytes", r->weight_bytes},
                          {"decode_weight_bytes", r->decode_weight_bytes}, {"memcpy_gbps", r->memcpy_gbps},
                          {"decode_ceiling_tokens_per_s", r->decode_ceiling_tokens_per_s},
                          {"kernels", nlohmann::json::array()}};
      for (const auto& k : r->kernels)
        j["kernels"].push_back({{"type", k.type}, {"op", k.op}, {"isa", k.isa}, {"layout", k.layout}, {"gbps", k.gbps}, {"gmacs", k.gmacs}});
      for (const auto& row : r->rows)
        j["prompts"].push_back({{"prompt_tokens", row.prompt_tokens},
                                {"prefill_seconds", row.prefill_seconds},
                                {"prefill_tokens_per_s", row.prefill_tokens_per_s},
                                {"prefill_gflops", row.prefill_gflops},
                                {"prefill_gflops_over_sgemm_peak", row.ratio_to_sgemm},
                                {"attention_share", row.attention_share},
                                {"decode_tokens_per_s", row.decode_tokens_per_s},
                                {"decode_attention_share", row.decode_attention_share}});
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("model %s, KV %s, %u threads, kernels %s, sgemm peak %.1f GFLOP/s\n", r->model.c_str(),
                  r->kv_dtype.c_str(), r->threads, r->isa.c_str(), r->sgemm_peak_gflops);
      std::printf("weights %.1f MiB resident (%.1f MiB read per decoded token), RSS %.1f MiB (%.1f before loading); "
                  "memcpy %.1f GB/s -> decode ceiling %.1f tok/s\n",
                  r->weight_bytes / 1048576.0, r->decode_weight_bytes / 1048576.0, r->rss_bytes / 1048576.0,
                  r->baseline_rss_bytes / 1048576.0,
                  r->memcpy_gbps, r->decode_ceiling_tokens_per_s);
      for (const auto& k : r->kernels)
        std::printf("  kernel %-5s %s (%s, %s): %.1f GB/s, %.1f GMAC/s\n", k.type.c_str(), k.op.c_str(), k.isa.c_str(),
                    k.layout.c_str(), k.gbps, k.gmacs);
      std::printf("%8s %12s %12s %12s %10s %10s %12s %12s\n", "prompt", "prefill_s", "prefill_tok/s", "prefill_GF/s",
                  "vs_sgemm", "attn_share", "decode_tok/s", "dec_attn_sh");
      for (const auto& row : r->rows)
        std::printf("%8u %12.3f %12.0f %12.1f %10.2f %10.2f %12.1f %12.2f\n", row.prompt_tokens, row.prefill_seconds,
                    row.prefill_tokens_per_s, row.prefill_gflops, row.ratio_to_sgemm, row.attention_share,
                    row.decode_tokens_per_s, row.decode_attention_share);
    }
    exit_code = 0;
  });
});

}  // namespace
}  // namespace kvtier::cli
