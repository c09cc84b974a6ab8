// `kvtier model make|info`: write a synthetic model as GGUF, or describe a GGUF file.
#include <cstdio>

#include "command.h"
#include "engine/gguf.h"

namespace kvtier::cli {
namespace {

void print_model(const engine::Model& m) {
  const auto& c = m.config();
  std::printf("name %s\nvocab %u, hidden %u, layers %u, heads %u, kv heads %u, head dim %u, ffn %u\n", c.name.c_str(),
              c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, c.ffn_size);
  std::printf("rope theta %g, rms eps %g, tied embeddings %s, max context %u\nparameters %llu\nfingerprint %s\n",
              double(c.rope_theta), double(c.rms_eps), c.tied_embeddings ? "yes" : "no", c.max_context,
              static_cast<unsigned long long>(c.num_params()), m.fingerprint().to_hex().c_str());
}

CommandRegistration reg("model", [](CLI::App& root, int& exit_code) {
  CLI::App* cmd = root.add_subcommand("model", "Make or inspect model files");
  cmd->require_subcommand(1);

  struct Make {
    std::string preset = "small", out, dtype = "f32";
    uint64_t seed = 1;
  };
  auto mk = std::make_shared<Make>();
  CLI::App* make = cmd->add_subcommand("make", "Write a synthetic model as a GGUF file");
  make->add_option("--preset", mk->preset, "tiny, small or 1b")->capture_default_str();
  make->add_option("--out", mk->out, "output .gguf path")->required();
  make->add_option("--seed", mk->seed, "weight seed")->capture_default_str();
  make->add_option("--dtype", mk->dtype, "matrix type: f32, f16, bf16 or q8_0")->capture_default_str();
  make->callback([mk, &exit_code] {
    auto cfg = engine::model_preset(mk->preset);
    if (!cfg.ok()) return void(exit_code = report(cfg.status()));
    auto type = engine::parse_gguf_type(mk->dtype);
    if (!type.ok()) return void(exit_code = report(type.status()));
    auto model = engine::Model::synthetic(*cfg, mk->seed);
    if (!model.ok()) return void(exit_code = report(model.status()));
    Status s = engine::write_gguf(**model, mk->out, {.weight_type = *type});
    if (!s.ok()) return void(exit_code = report(s));
    std::printf("wrote %s (%s, %s weights, seed %llu, fingerprint %s)\n", mk->out.c_str(), mk->preset.c_str(),
                mk->dtype.c_str(), static_cast<unsigned long long>(mk->seed), (*model)->fingerprint().to_hex().c_str());
    exit_code = 0;
  });

  auto path = std::make_shared<std::string>();
  CLI::App* info = cmd->add_subcommand("info", "Load a GGUF file and print its shape and fingerprint");
  info->add_option("file", *path, "a .gguf file")->required();
  info->callback([path, &exit_code] {
    auto model = engine::load_gguf(*path);
    if (!model.ok()) return void(exit_code = report(model.status()));
    print_model(**model);
    exit_code = 0;
  });
});

}  // namespace
}  // namespace kvtier::cli
