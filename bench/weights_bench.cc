#include "weights_bench.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/sampler.h"
#include "logit_compare.h"
#include "prompt_text.h"

namespace kvtier::bench {
namespace {

// One model on kvtier's engine over its own page pool, sized for one sequence.
struct Runner {
  std::shared_ptr<const engine::Model> model;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<engine::Engine> engine;
  engine::SequenceKV kv;  // every page of the pool, reused by each run

  static Result<Runner> open(const std::string& path, uint32_t max_tokens, uint32_t threads) {
    Runner r;
    KVTIER_ASSIGN_OR_RETURN(r.model, engine::load_gguf(path));
    const KVGeometry geo = r.model->config().kv_geometry(DType::kF32, 16);
    KVTIER_ASSIGN_OR_RETURN(r.pool, BlockPool::create({.geometry = geo, .num_pages = max_tokens / 16 + 2}));
    KVTIER_ASSIGN_OR_RETURN(r.engine, engine::Engine::create(r.model, *r.pool, {.threads = threads}));
    KVTIER_RETURN_IF_ERROR(r.pool->allocate(r.pool->num_pages(), r.kv.pages));
    return r;
  }

  // Every prompt position's logits, and `steps` greedy tokens after the prompt.
  Result<std::pair<engine::Logits, std::vector<TokenId>>> run(std::span<const TokenId> prompt, uint32_t steps) {
    kv.num_tokens = 0;
    engine::PrefillOptions po;
    po.all_logits = true;
    KVTIER_ASSIGN_OR_RETURN(engine::Logits logits, engine->prefill(kv, prompt, 0, po));
    std::vector<TokenId> greedy;
    TokenId t = engine::argmax(logits.last());
    for (uint32_t i = 0; i < steps; ++i) {
      greedy.push_back(t);
      engine::SequenceKV* seqs[] = {&kv};
      KVTIER_ASSIGN_OR_RETURN(const engine::Logits next, engine->decode(seqs, std::span(&t, 1)));
      t = engine::argmax(next.last());
    }
    return std::pair{std::move(logits), std::move(greedy)};
  }
};

}  // namespace

Status WeightsBenchOptions::validate() const {
  if (model.empty() || reference.empty()) return Status::InvalidArgument("bench weights: --model and --reference are required");
  if (prompts == 0 || prompt_tokens < 2 || greedy_tokens == 0)
    return Status::InvalidArgument("bench weights: prompts, greedy tokens must be > 0 and prompt tokens >= 2");
  return Status::Ok();
}

Result<WeightsBenchResult> run_weights_bench(const WeightsBenchOptions& o, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const uint32_t max_tokens = o.prompt_tokens + o.greedy_tokens + 16;
  KVTIER_ASSIGN_OR_RETURN(Runner model, Runner::open(o.model, max_tokens, o.threads));
  KVTIER_ASSIGN_OR_RETURN(Runner ref, Runner::open(o.reference, max_tokens, o.threads));
  const auto &a = model.model->config(), &b = ref.model->config();
  if (a.vocab_size != b.vocab_size || a.num_layers != b.num_layers || a.hidden_size != b.hidden_size)
    return Status::InvalidArgument("bench weights: the two files do not have the same shape and vocabulary");
  if (max_tokens > a.max_context) return Status::InvalidArgument("bench weights: prompt + greedy tokens exceed the context");
  KVTIER_ASSIGN_OR_RETURN(const PromptText text, PromptText::open(*ref.model, o.text));
  WeightsBenchResult res{.model = o.model, .reference = o.reference, .text = text.source()};
  std::mt19937_64 rng(o.seed);
  size_t greedy_same = 0, top1_same = 0;
  for (uint32_t i = 0; i < o.prompts; ++i) {
    if (progress) std::fprintf(progress, "bench weights: prompt %u/%u\n", i + 1, o.prompts);
    std::vector<TokenId> prompt = text.draw(rng, o.prompt_tokens);
    prompt.front() = ref.model->vocab().bos;
    KVTIER_ASSIGN_OR_RETURN(auto got, model.run(prompt, o.greedy_tokens));
    KVTIER_ASSIGN_OR_RETURN(auto want, ref.run(prompt, o.greedy_tokens));
    for (uint32_t p = 0; p < want.first.rows; ++p) {
      res.kl_mean += kl_divergence(want.first.row(p), got.first.row(p));
      top1_same += engine::argmax(want.first.row(p)) == engine::argmax(got.first.row(p));
      res.reference_top1_prob += top_probability(want.first.row(p));
      ++res.positions;
    }
    greedy_same += same_positions(want.second, got.second);
  }
  res.kl_mean /= res.positions;
  res.reference_top1_prob /= res.positions;
  res.top1 = double(top1_same) / res.positions;
  res.greedy_agreement = double(greedy_same) / (double(o.prompts) * o.greedy_tokens);
  return res;
}

std::string WeightsBenchResult::to_json() const {
  nlohmann::json j = {{"bench", "weights"},      {"model", model},       {"reference", reference},
                      {"text", text},            {"positions", positions}, {"kl_mean", kl_mean},
                      {"top1", top1},            {"greedy_agreement", greedy_agreement},
                      {"reference_top1_prob", reference_top1_prob}};
  return j.dump(2);
}

std::string WeightsBenchResult::to_table() const {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "%s against %s on %s\n%u positions: KL %.4f nats, top-1 agreement %.3f, greedy agreement %.3f "
                "(the reference's mean top probability %.3f)\n",
                model.c_str(), reference.c_str(), text.c_str(), positions, kl_mean, top1, greedy_agreement,
                reference_top1_prob);
  return buf;
}

}  // namespace kvtier::bench
