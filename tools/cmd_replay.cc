// `kvtier replay`: trace-driven capacity planning (src/sim/replay.h). Maps
// flags onto ReplayOptions, prints a table or one JSON object, and with
// --sweep-capacity writes a CSV and an SVG plot of hit ratio vs capacity
// (one pair per policy when --eviction or --write-policy lists several);
// --html writes the self-contained report page (sim/replay_html.h).
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "common/option_flags.h"
#include "sim/replay.h"
#include "sim/replay_html.h"

namespace kvtier::cli {
namespace {

struct ReplayFlags {
  std::string trace, format = "mooncake";
  uint32_t block_tokens = 512;
  bool skip_bad_lines = false;
  std::string model = "llama-3-8b", kv_dtype = "bf16";
  uint32_t page_tokens = 16;
  uint32_t layers = 0, kv_heads = 0, head_dim = 0;
  double flops_per_token = 0, attn_flops_per_pair = 0;
  std::string hardware = "h100-pcie5";
  std::string device = "unlimited", host = "0", disk = "0", remote = "0";
  std::string capacity_tokens;
  // Lists with --sweep-capacity (one replay per pair), so the replay's own flags.
  std::string write_policy = "write_through", eviction = "lru";
  std::string disk_reclaim = "fifo", remote_reclaim = "lru";
  OptionFlags<CacheConfig> cache;  // the server's cache options offered to the replay (cache_option_table())
  double codec_decode_gbps = 4.0;
  uint32_t workers = 1;
  double time_scale = 1.0;
  bool no_timing = false, no_max = false;
  uint32_t plan_units = 64;
  std::string sweep, sweep_out = "replay_sweep";
  std::string html;
  bool json = false;
};

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return Status::IOError("cannot write " + path);
  return Status::Ok();
}

Result<ReplayOptions> options_from(const ReplayFlags& f, bool tier_flags_given) {
  ReplayOptions o;
  KVTIER_ASSIGN_OR_RETURN(DType dt, parse_dtype(f.kv_dtype));
  if (f.model == "custom") {
    if (f.layers == 0 || f.kv_heads == 0 || f.head_dim == 0 || !(f.flops_per_token > 0))
      return Status::InvalidArgument("--model custom needs --layers, --kv-heads, --head-dim and --flops-per-token");
    KVGeometry g{f.layers, f.kv_heads, f.head_dim, dt, f.page_tokens};
    KVTIER_ASSIGN_OR_RETURN(o.model, custom_replay_model(g, f.flops_per_token, f.attn_flops_per_pair));
  } else {
    KVTIER_ASSIGN_OR_RETURN(o.model, replay_model_preset(f.model, dt, f.page_tokens));
  }
  KVTIER_RETURN_IF_ERROR(f.cache.apply(o));
  if (!o.profile_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.profile, CostProfile::load(o.profile_path));
  } else {
    KVTIER_ASSIGN_OR_RETURN(o.profile, hardware_preset(f.hardware));
  }
  KVTIER_ASSIGN_OR_RETURN(o.write_policy, parse_write_policy(f.write_policy));
  KVTIER_ASSIGN_OR_RETURN(o.eviction, parse_eviction_policy(f.eviction));
  KVTIER_ASSIGN_OR_RETURN(o.disk_reclaim, parse_chunk_reclaim(f.disk_reclaim));
  KVTIER_ASSIGN_OR_RETURN(o.remote_reclaim, parse_chunk_reclaim(f.remote_reclaim));
  if (!f.capacity_tokens.empty()) {
    if (tier_flags_given)
      return Status::InvalidArgument("--capacity-tokens is a single LRU device tier: drop --device/--host/--disk/"
                                     "--remote/--eviction, or use --device instead");
    KVTIER_ASSIGN_OR_RETURN(Capacity c, parse_capacity(f.capacity_tokens));
    if (c.bytes) return Status::InvalidArgument("--capacity-tokens takes a token count");
    o.device = c;
    o.eviction = EvictionPolicyKind::kLru;
  } else {
    KVTIER_ASSIGN_OR_RETURN(o.device, parse_capacity(f.device));
    KVTIER_ASSIGN_OR_RETURN(o.host, parse_capacity(f.host));
    KVTIER_ASSIGN_OR_RETURN(o.disk, parse_capacity(f.disk));
    KVTIER_ASSIGN_OR_RETURN(o.remote, parse_capacity(f.remote));
  }
  o.codec_decode_bytes_per_s = f.codec_decode_gbps * 1e9;
  o.timing = !f.no_timing;
  o.workers = f.workers;
  o.time_scale = f.time_scale;
  o.plan_units = f.plan_units;
  o.max_pass = !f.no_max;
  KVTIER_RETURN_IF_ERROR(o.validate());
  return o;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// The sweep's policies: every --eviction × --write-policy pair, each with its own flags.
std::vector<ReplayFlags> policy_flags(const ReplayFlags& f) {
  std::vector<ReplayFlags> out;
  for (const std::string& eviction : split_list(f.eviction)) {
    for (const std::string& write_policy : split_list(f.write_policy)) {
      ReplayFlags one = f;
      one.eviction = eviction;
      one.write_policy = write_policy;
      out.push_back(std::move(one));
    }
  }
  return out;
}

std::string html_title(const ReplayFlags& f, const ReplayOptions& o) {
  return std::filesystem::path(f.trace).filename().string() + " · " + o.model.name;
}

// One policy's sweep: CSV and SVG beside each other (suffixed by the policy when there are several).
Status write_sweep_files(const ReplayFlags& f, const ReplayOptions& o, const SweepSeries& series, bool several) {
  const std::string prefix = several ? f.sweep_out + "-" + f.eviction + "-" + f.write_policy : f.sweep_out;
  KVTIER_RETURN_IF_ERROR(write_file(prefix + ".csv", format_sweep_csv(series.points)));
  const std::string title = "Token hit ratio vs device capacity (" + o.model.name + ", " + series.label + ")";
  KVTIER_RETURN_IF_ERROR(write_file(prefix + ".svg", format_sweep_svg(series.points, title)));
  if (!f.json) {
    if (several) std::printf("# %s\n", series.label.c_str());
    std::printf("%s", format_sweep_csv(series.points).c_str());
    std::printf("wrote %s.csv and %s.svg\n", prefix.c_str(), prefix.c_str());
  }
  return Status::Ok();
}

Status run_sweep(const ReplayFlags& f, bool tier_flags_given, const ReplayTrace& trace) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint64_t> caps, parse_capacity_list(f.sweep));
  const std::vector<ReplayFlags> policies = policy_flags(f);
  std::vector<SweepSeries> all;
  std::string title;
  for (const ReplayFlags& one : policies) {
    KVTIER_ASSIGN_OR_RETURN(ReplayOptions o, options_from(one, tier_flags_given));
    SweepSeries series;
    series.label = std::string(eviction_policy_name(o.eviction)) + " · " + std::string(write_policy_name(o.write_policy));
    KVTIER_ASSIGN_OR_RETURN(series.points, run_capacity_sweep(o, trace, caps));
    KVTIER_RETURN_IF_ERROR(write_sweep_files(one, o, series, policies.size() > 1));
    title = html_title(f, o) + " · capacity sweep";
    all.push_back(std::move(series));
  }
  if (f.json) {
    std::string s = "[";
    for (const SweepSeries& series : all)
      for (const SweepPoint& point : series.points) s += (s.size() > 1 ? "," : "") + format_replay_json(point.report);
    std::printf("%s]\n", s.c_str());
  }
  if (!f.html.empty()) KVTIER_RETURN_IF_ERROR(write_file(f.html, format_sweep_html(all, title)));
  return Status::Ok();
}

Status run(const ReplayFlags& f, bool tier_flags_given) {
  TraceReadOptions ro;
  KVTIER_ASSIGN_OR_RETURN(ro.format, parse_trace_format(f.format));
  ro.block_tokens = f.block_tokens;
  ro.skip_bad_lines = f.skip_bad_lines;
  const bool lists = f.eviction.find(',') != std::string::npos || f.write_policy.find(',') != std::string::npos;
  if (lists && f.sweep.empty())
    return Status::InvalidArgument("a list of --eviction or --write-policy values needs --sweep-capacity");
  // Check every flag before reading the trace.
  for (const ReplayFlags& one : policy_flags(f)) KVTIER_RETURN_IF_ERROR(options_from(one, tier_flags_given).status());
  KVTIER_ASSIGN_OR_RETURN(ReplayTrace trace, read_replay_trace(f.trace, ro));
  if (trace.skipped_lines > 0)
    std::fprintf(stderr, "kvtier replay: skipped %llu bad line(s); first: %s\n",
                 (unsigned long long)trace.skipped_lines, trace.first_skipped.c_str());
  if (!f.sweep.empty()) return run_sweep(f, tier_flags_given, trace);
  KVTIER_ASSIGN_OR_RETURN(ReplayOptions o, options_from(f, tier_flags_given));
  KVTIER_ASSIGN_OR_RETURN(ReplayReport r, run_replay(o, trace));
  const std::string text = f.json ? format_replay_json(r) + "\n" : format_replay_table(r);
  std::fputs(text.c_str(), stdout);
  if (!f.html.empty()) KVTIER_RETURN_IF_ERROR(write_file(f.html, format_replay_html(r, html_title(f, o))));
  return Status::Ok();
}

const CommandRegistration kRegistration("replay", [](CLI::App& root, int& exit_code) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = root.add_subcommand(
      "replay", "Replay a request trace through the cache model: hit ratios, TTFT, bytes moved (docs/REPLAY.md)");
  cmd->add_option("--trace", f->trace, "JSONL trace file")->required();
  cmd->add_option("--format", f->format, "mooncake or kvtier")->capture_default_str();
  cmd->add_option("--block-tokens", f->block_tokens, "tokens per hash id")->capture_default_str();
  cmd->add_flag("--skip-bad-lines", f->skip_bad_lines, "skip (and count) malformed lines instead of failing");
  cmd->add_option("--model", f->model, "llama-3-8b, llama-3-70b, tiny, small, 1b or custom")->capture_default_str();
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV cache dtype: f32, f16, bf16")->capture_default_str();
  cmd->add_option("--page-tokens", f->page_tokens, "tokens per KV page")->capture_default_str();
  cmd->add_option("--layers", f->layers, "custom model: layers");
  cmd->add_option("--kv-heads", f->kv_heads, "custom model: KV heads");
  cmd->add_option("--head-dim", f->head_dim, "custom model: head dimension");
  cmd->add_option("--flops-per-token", f->flops_per_token, "custom model: dense FLOPs per token (~2 x params)");
  cmd->add_option("--attn-flops-per-pair", f->attn_flops_per_pair, "custom model: attention FLOPs per (query, key)");
  cmd->add_option("--hardware", f->hardware, "h100-pcie5 or a100-pcie4")->capture_default_str();
  auto* dev = cmd->add_option("--device", f->device, "device capacity: tokens, bytes (80GiB) or unlimited")
                  ->capture_default_str();
  auto* host = cmd->add_option("--host", f->host, "host DRAM tier capacity (0 = none)")->capture_default_str();
  auto* disk = cmd->add_option("--disk", f->disk, "disk tier capacity (0 = none)")->capture_default_str();
  auto* remote = cmd->add_option("--remote", f->remote, "remote tier capacity (0 = none)")->capture_default_str();
  cmd->add_option("--capacity-tokens", f->capacity_tokens, "shorthand: one LRU device tier of N tokens");
  cmd->add_option("--write-policy", f->write_policy, "write_through, write_back or selective (a list with --sweep-capacity)")->capture_default_str();
  auto* ev = cmd->add_option("--eviction", f->eviction, "lru, lfu, fifo, priority, slru (a list with --sweep-capacity)")->capture_default_str();
  cmd->add_option("--disk-reclaim", f->disk_reclaim, "fifo or lru")->capture_default_str();
  cmd->add_option("--codec-decode-gbps", f->codec_decode_gbps, "timing: decode rate of a loading worker, GB/s")
      ->capture_default_str();
  cmd->add_option("--remote-reclaim", f->remote_reclaim, "fifo or lru")->capture_default_str();
  cmd->add_option("--workers", f->workers, "prefill workers")->capture_default_str();
  cmd->add_option("--time-scale", f->time_scale, "multiply arrival gaps (0.5 = twice the load)")
      ->capture_default_str();
  cmd->add_flag("--no-timing", f->no_timing, "hit ratios only");
  cmd->add_flag("--no-max", f->no_max, "skip the unlimited-cache pass");
  cmd->add_option("--plan-units", f->plan_units, "planner granularity cap per request")->capture_default_str();
  cmd->add_option("--sweep-capacity", f->sweep, "device capacities in tokens, e.g. 1e5,3e5,1e6");
  cmd->add_option("--sweep-out", f->sweep_out, "sweep output prefix (.csv and .svg)")->capture_default_str();
  cmd->add_option("--html", f->html, "also write a self-contained HTML report (charts) to this file");
  cmd->add_flag("--json", f->json, "print one JSON object");
  // The cache's own options, as the server names them (docs/CONFIG.md); --profile overrides --hardware.
  f->cache.add(*cmd, cache_option_table(), kScopeReplay, {"cache.write_policy", "cache.eviction"});
  cmd->callback([f, &exit_code, dev, host, disk, remote, ev] {
    const bool tiers = dev->count() || host->count() || disk->count() || remote->count() || ev->count();
    exit_code = report(run(*f, tiers));
  });
});

}  // namespace
}  // namespace kvtier::cli
