// `kvtier bench cuda`: the GPU path against its same-run limits (copy
// engine vs plain cudaMemcpy, gather kernel vs device-to-device copy, TTFT
// from pinned host vs GPU recompute). In a build without CUDA the command
// exists and says so.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.h"
#ifdef KVTIER_HAVE_CUDA
#include "cuda_bench.h"
#endif

namespace kvtier::cli {
namespace {

#ifdef KVTIER_HAVE_CUDA
int run(const cuda::CudaBenchOptions& o, bool json) {
  auto r = cuda::run_cuda_bench(o);
  if (!r.ok()) return report(r.status());
  if (json) {
    nlohmann::json j = {{"bench", "cuda"}, {"device", r->device}, {"model", r->model},
                        {"kv_dtype", r->kv_dtype}, {"copy_bytes", r->copy_bytes}};
    for (const auto& c : r->copies)
      j["copies"].push_back({{"what", c.what}, {"gbps", c.gbps}, {"limit", c.limit}, {"limit_gbps", c.limit_gbps},
                             {"ratio", c.ratio()}});
    for (const auto& t : r->ttft)
      j["ttft"].push_back({{"prefix", t.prefix}, {"recompute_ms", t.recompute_ms}, {"load_only_ms", t.load_only_ms},
                           {"suffix_only_ms", t.suffix_only_ms}, {"load_overlap_ms", t.load_overlap_ms},
                           {"overlap_ratio", t.overlap_ratio()}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("device: %s   model %s, kv %s, %.0f MiB per copy\n", r->device.c_str(), r->model.c_str(),
              r->kv_dtype.c_str(), double(r->copy_bytes) / (1 << 20));
  std::printf("%-40s %10s %10s  %-24s %6s\n", "copy", "GB/s", "limit", "limit is", "ratio");
  for (const auto& c : r->copies)
    std::printf("%-40s %10.1f %10.1f  %-24s %6.2f\n", c.what.c_str(), c.gbps, c.limit_gbps, c.limit.c_str(), c.ratio());
  if (!r->ttft.empty()) {
    std::printf("\n%8s %14s %10s %11s %16s %22s\n", "prefix", "recompute ms", "load ms", "suffix ms", "load+overlap ms",
                "overlap/max(load,sfx)");
    for (const auto& t : r->ttft)
      std::printf("%8u %14.1f %10.1f %11.1f %16.1f %22.2f\n", t.prefix, t.recompute_ms, t.load_only_ms, t.suffix_only_ms,
                  t.load_overlap_ms, t.overlap_ratio());
  }
  return 0;
}
#endif

CommandRegistration reg("bench-cuda", [](CLI::App& root, int& exit_code) {
  CLI::App* cmd = bench_group(root).add_subcommand("cuda", "GPU copy engine, gather kernel and TTFT vs same-run limits");
#ifdef KVTIER_HAVE_CUDA
  struct Flags {
    cuda::CudaBenchOptions o;
    std::string kv_dtype = "f16";
    std::string prefixes = "4096,16384";
    size_t mib = 256;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  cmd->add_option("--model", f->o.model, "preset for the KV geometry and TTFT weights (tiny, small, 1b)")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV dtype: f32, f16 or bf16")->capture_default_str();
  cmd->add_option("--mib", f->mib, "MiB per bandwidth measurement")->capture_default_str();
  cmd->add_option("--chunk-pages", f->o.chunk_pages, "pages per host chunk")->capture_default_str();
  cmd->add_option("--prefix", f->prefixes, "comma-separated TTFT prefix lengths ('' skips TTFT)")->capture_default_str();
  cmd->add_option("--suffix", f->o.suffix, "tokens computed after the prefix")->capture_default_str();
  cmd->add_option("--repeats", f->o.repeats, "runs per figure (median reported)")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object");
  cmd->callback([f, &exit_code] {
    if (Status s = parse_lengths_and_dtype(f->prefixes, "--prefix", f->o.prefixes, f->kv_dtype, f->o.kv_dtype);
        !s.ok()) {
      exit_code = report(s);
      return;
    }
    f->o.copy_bytes = f->mib << 20;
    exit_code = run(f->o, f->json);
  });
#else
  cmd->allow_extras();
  cmd->callback([&exit_code] {
    exit_code = report(Status::Unimplemented("this kvtier was built without CUDA (configure with -DKVTIER_CUDA=ON)"));
  });
#endif
});

}  // namespace
}  // namespace kvtier::cli
