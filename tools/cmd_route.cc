// `kvtier route`: the KV-aware router in front of several `kvtier serve`
// instances (src/router/router.h, docs/SCALING.md).
#include "command.h"
#include "common/option_flags.h"
#include "router/router.h"

namespace {

struct RouteFlags {
  std::vector<std::string> backends;
  std::string model;
  kvtier::OptionFlags<kvtier::router::RouterOptions> table;  // every other option, from router_option_table()
};

kvtier::Status run(const RouteFlags& f) {
  kvtier::router::RouterOptions o;
  o.backends = f.backends;
  KVTIER_RETURN_IF_ERROR(f.table.apply(o));
  std::optional<kvtier::text::Vocab> vocab;
  if (!f.model.empty()) {
    KVTIER_ASSIGN_OR_RETURN(vocab, kvtier::cli::vocab_of(f.model));
  }
  return kvtier::router::run_router(std::move(o), std::move(vocab), stderr);
}

const kvtier::cli::CommandRegistration kRoute("route", [](CLI::App& root, int& exit_code) {
  auto f = std::make_shared<RouteFlags>();
  CLI::App* cmd = root.add_subcommand(
      "route", "Route OpenAI requests to the kvtier instance believed to hold their prefix's KV (docs/SCALING.md)");
  cmd->add_option("--backend", f->backends, "A backend's base URL, http://HOST:PORT (repeat for each)")->required();
  cmd->add_option("--model", f->model,
                  "The backends' model (GGUF file or preset; only its tokenizer and chat template are read); "
                  "required by cache-aware");
  f->table.add(*cmd, kvtier::router::router_option_table());
  cmd->callback([f, &exit_code] { exit_code = kvtier::cli::report(run(*f)); });
});

}  // namespace
