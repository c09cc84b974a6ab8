// `kvtier calibrate`: measures this machine's figures for the planner's cost
// model (compute rates of the engine, host copy and disk read bandwidth) and
// writes them as a profile that `serve --profile` and `replay --profile` read.
#include <cstdio>

#include "command.h"
#include "runtime/calibration.h"
#include "runtime/runtime.h"

namespace kvtier::cli {
namespace {

CommandRegistration reg("calibrate", [](CLI::App& root, int& exit_code) {
  struct Flags {
    RuntimeOptions ro;
    std::string disk_dir;
    std::string out;
    std::string kv_dtype = "f16";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = root.add_subcommand("calibrate", "Measure compute and tier bandwidths; write a cost profile (JSON)");
  cmd->add_option("--model", f->ro.model, "preset (tiny, small, 1b) or a .gguf file")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV dtype: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--disk-dir", f->disk_dir, "directory on the disk to measure (scratch files are removed)");
  cmd->add_option("--out", f->out, "profile file to write")->required();
  cmd->callback([f, &exit_code] {
    auto dt = parse_dtype(f->kv_dtype);
    if (!dt.ok()) {
      exit_code = report(dt.status());
      return;
    }
    f->ro.kv_dtype = *dt;
    f->ro.host_bytes = 0;
    f->ro.device_bytes = size_t(256) << 20;
    auto stack = build_stack(f->ro);  // a cache without disk: the disk is measured below, at full length
    if (!stack.ok()) {
      exit_code = report(stack.status());
      return;
    }
    CalibrationOptions co;
    co.quick = false;
    co.disk_dir = f->disk_dir;
    std::fprintf(stderr, "calibrate: measuring the engine on %s%s...\n", f->ro.model.c_str(),
                 f->disk_dir.empty() ? "" : (" and the disk under " + f->disk_dir).c_str());
    auto p = calibrate(*stack->engine, stack->cache->pool(), co);
    if (!p.ok()) {
      exit_code = report(p.status());
      return;
    }
    Status st = p->save(f->out);
    if (!st.ok()) {
      exit_code = report(st);
      return;
    }
    std::printf("%s\nwrote %s\n", p->to_json().c_str(), f->out.c_str());
  });
});

}  // namespace
}  // namespace kvtier::cli
