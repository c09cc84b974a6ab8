// `kvtier bench index`: replays a Mooncake trace through the PrefixIndex
// (src/index/index_bench.h) and prints a table or one JSON object.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "index_bench.h"
#include "sim/kvtier_trace.h"

namespace kvtier::cli {
namespace {

struct BenchIndexFlags {
  std::string trace;
  uint32_t page_tokens = 16;
  uint64_t capacity_tokens = 0;
  std::string policy = "lru";
  bool no_hashes = false;
  bool json = false;
};

Status run(const BenchIndexFlags& f) {
  KVTIER_ASSIGN_OR_RETURN(EvictionPolicyKind policy, parse_eviction_policy(f.policy));
  KVTIER_ASSIGN_OR_RETURN(ReplayTrace trace, read_replay_trace(f.trace, TraceReadOptions{}));  // Mooncake's
  IndexBenchOptions o;
  o.page_tokens = f.page_tokens;
  o.capacity_tokens = f.capacity_tokens;
  o.policy = policy;
  o.store_hashes = !f.no_hashes;
  PromptSource src;
  src.count = trace.requests.size();
  src.fill = [&](size_t i, std::vector<TokenId>& out) { return expand_request(trace, trace.requests[i], out); };
  KVTIER_ASSIGN_OR_RETURN(IndexBenchReport r, run_index_bench(o, src));
  const std::string text = f.json ? format_json(r) + "\n" : format_table(r);
  std::fputs(text.c_str(), stdout);
  return Status::Ok();
}

const CommandRegistration kRegistration("bench index", [](CLI::App& root, int& exit_code) {
  auto flags = std::make_shared<BenchIndexFlags>();
  CLI::App* cmd = bench_group(root).add_subcommand(
      "index", "Replay a Mooncake trace through the prefix index (match -> insert -> evict-to-capacity)");
  cmd->add_option("--trace", flags->trace, "Mooncake JSONL trace")->required();
  cmd->add_option("--page-tokens", flags->page_tokens, "tokens per page")->capture_default_str();
  cmd->add_option("--capacity-tokens", flags->capacity_tokens, "device capacity in tokens (0 = unlimited)")
      ->capture_default_str();
  cmd->add_option("--policy", flags->policy, "eviction policy: lru, lfu, fifo, priority, slru")->capture_default_str();
  cmd->add_flag("--no-hashes", flags->no_hashes, "metadata-only index without page hashes");
  cmd->add_flag("--json", flags->json, "print one JSON object instead of a table");
  cmd->callback([flags, &exit_code] { exit_code = report(run(*flags)); });
});

}  // namespace
}  // namespace kvtier::cli
