// `kvtier demo`: the main job (see src/runtime/demo.h).
#include <unistd.h>

#include <cstdio>

#include "command.h"
#include "demo.h"
#include "common/option_values.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("demo", [](CLI::App& root, int& exit_code) {
  auto o = std::make_shared<DemoOptions>();
  auto dtype = std::make_shared<std::string>("f16");
  auto device = std::make_shared<std::string>("14MiB");
  auto host = std::make_shared<std::string>("12MiB");
  CLI::App* cmd = root.add_subcommand("demo", "Multi-turn chat on the built-in model: TTFT with the tiered cache vs none");
  cmd->add_option("--model", o->model, "preset (tiny, small, 1b) or a .gguf file")->capture_default_str();
  cmd->add_option("--device", o->device, "where KV pages and compute live: cpu, or cuda (CUDA build, GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--conversations", o->conversations, "conversations sharing the system prompt")->capture_default_str();
  cmd->add_option("--turns", o->turns, "turns per conversation")->capture_default_str();
  cmd->add_option("--system-tokens", o->system_tokens, "tokens of the shared system prompt")->capture_default_str();
  cmd->add_option("--user-tokens", o->user_tokens, "tokens per user message")->capture_default_str();
  cmd->add_option("--answer-tokens", o->answer_tokens, "tokens generated per answer")->capture_default_str();
  cmd->add_option("--kv-dtype", *dtype, "KV dtype: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--device-capacity", *device, "device KV pool size")->capture_default_str();
  cmd->add_option("--host-capacity", *host, "host tier size")->capture_default_str();
  cmd->add_option("--disk-dir", o->disk_dir, "disk tier directory (emptied first)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "prompt seed")->capture_default_str();
  cmd->callback([o, dtype, device, host, &exit_code] {
    auto dt = parse_dtype(*dtype);
    if (!dt.ok()) {
      exit_code = report(dt.status());
      return;
    }
    o->kv_dtype = *dt;
    for (auto [text, dst] : {std::pair{device.get(), &o->device_bytes}, std::pair{host.get(), &o->host_bytes}}) {
      auto n = parse_size(*text);
      if (!n.ok()) {
        exit_code = report(n.status());
        return;
      }
      *dst = *n;
    }
    auto r = run_demo(*o, stdout, isatty(STDERR_FILENO) ? stderr : nullptr);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::fputs(demo_summary(*r).c_str(), stdout);
    exit_code = r->all_same ? 0 : 2;
  });
});

}  // namespace
}  // namespace kvtier::cli
