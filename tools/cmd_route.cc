// `kvtier route`: the KV-aware router in front of several `kvtier serve`
// instances (src/router/router.h, docs/SCALING.md).
#include "command.h"
#include "router/router.h"

namespace {

struct RouteFlags {
  kvtier::router::RouterOptions options;
  std::string policy = "cache-aware";
  std::string model;
};

kvtier::Status run(const RouteFlags& f) {
  kvtier::router::RouterOptions o = f.options;
  KVTIER_ASSIGN_OR_RETURN(o.policy, kvtier::router::parse_policy(f.policy));
  std::optional<kvtier::text::Vocab> vocab;
  if (!f.model.empty()) {
    KVTIER_ASSIGN_OR_RETURN(vocab, kvtier::cli::vocab_of(f.model));
  }
  return kvtier::router::run_router(std::move(o), std::move(vocab), stderr);
}

const kvtier::cli::CommandRegistration kRoute("route", [](CLI::App& root, int& exit_code) {
  auto f = std::make_shared<RouteFlags>();
  auto& o = f->options;
  CLI::App* cmd = root.add_subcommand(
      "route", "Route OpenAI requests to the kvtier instance believed to hold their prefix's KV (docs/SCALING.md)");
  cmd->add_option("--backend", o.backends, "A backend's base URL, http://HOST:PORT (repeat for each)")->required();
  cmd->add_option("--host", o.host, "Listen address")->capture_default_str();
  cmd->add_option("--port", o.port, "Listen port (0: any free port)")->capture_default_str();
  cmd->add_option("--policy", f->policy, "cache-aware, round-robin or least-loaded")->capture_default_str();
  cmd->add_option("--model", f->model,
                  "The backends' model (GGUF file or preset; only its tokenizer and chat template are read); "
                  "required by cache-aware");
  cmd->add_option("--api-keys-file", o.api_keys_file,
                  "The backends' tenant keys file: the router checks keys and hashes each tenant's prompts apart");
  cmd->add_option("--backend-admin-key-file", o.backend_admin_key_file,
                  "The backends' admin key, for their /v1/cache/config and /v1/cache/events (when they have keys)");
  cmd->add_option("--health-interval-ms", o.health_interval_ms, "Backend health probes every this many ms")
      ->capture_default_str();
  cmd->add_option("--max-tracked-pages", o.max_tracked_pages, "Page hashes remembered per backend (LRU)")
      ->capture_default_str();
  cmd->add_option("--balance-slack", o.balance_slack,
                  "cache-aware sends a request to the least loaded backend instead once the cached one has this "
                  "many more requests")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "HTTP threads (each open stream holds one)")->capture_default_str();
  cmd->callback([f, &exit_code] { exit_code = kvtier::cli::report(run(*f)); });
});

}  // namespace
