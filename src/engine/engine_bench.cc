#include "engine/engine_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/sampler.h"

namespace kvtier::engine {

Status EngineBenchOptions::validate() const {
  if (model.empty()) return Status::InvalidArgument("bench engine: no model");
  if (prompts.empty()) return Status::InvalidArgument("bench engine: no prompt lengths");
  for (uint32_t p : prompts)
    if (p == 0) return Status::InvalidArgument("bench engine: prompt lengths must be > 0");
  if (repeats == 0) return Status::InvalidArgument("bench engine: repeats must be > 0");
  return Status::Ok();
}

double measure_sgemm_gflops(uint32_t n, uint32_t threads) {
  const int before = openblas_get_num_threads();
  openblas_set_num_threads(int(threads ? threads : std::max(1u, std::thread::hardware_concurrency())));
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto* v : {&a, &b})
    for (float& x : *v) x = u(rng);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(n), 1.0f, a.data(), int(n), b.data(),
                int(n), 0.0f, c.data(), int(n));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  openblas_set_num_threads(before);
  return 2.0 * double(n) * n * n / best / 1e9;
}

Result<EngineBenchReport> run_engine_bench(const EngineBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  std::shared_ptr<const Model> model;
  if (o.model.ends_with(".gguf")) {
    KVTIER_ASSIGN_OR_RETURN(model, load_gguf(o.model));
  } else {
    KVTIER_ASSIGN_OR_RETURN(ModelConfig cfg, model_preset(o.model));
    KVTIER_ASSIGN_OR_RETURN(model, Model::synthetic(cfg, o.seed));
  }
  const ModelConfig& c = model->config();
  const uint32_t max_prompt = *std::max_element(o.prompts.begin(), o.prompts.end());
  if (max_prompt + o.decode_tokens > c.max_context)
    return Status::InvalidArgument("bench engine: prompt + decode exceeds the model context");
  const KVGeometry geo = c.kv_geometry(o.kv_dtype, 16);
  const uint32_t pages = (max_prompt + o.decode_tokens + geo.page_tokens - 1) / geo.page_tokens;
  KVTIER_ASSIGN_OR_RETURN(auto pool, BlockPool::create({.geometry = geo, .num_pages = pages}));
  KVTIER_ASSIGN_OR_RETURN(auto engine, Engine::create(model, *pool, {.threads = o.threads}));

  EngineBenchReport rep;
  rep.model = o.model;
  rep.kv_dtype = std::string(dtype_name(o.kv_dtype));
  rep.threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  rep.sgemm_peak_gflops = measure_sgemm_gflops(2048, rep.threads);

  std::mt19937_64 rng(o.seed);
  SequenceKV seq;
  KVTIER_RETURN_IF_ERROR(pool->allocate(pages, seq.pages));
  for (uint32_t n : o.prompts) {
    std::vector<TokenId> tokens(n);
    for (auto& t : tokens) t = TokenId(rng() % c.vocab_size);
    std::vector<EngineProfile> runs;
    Logits last;
    for (uint32_t r = 0; r < o.repeats; ++r) {
      engine->reset_profile();
      seq.num_tokens = 0;
      KVTIER_ASSIGN_OR_RETURN(last, engine->prefill(seq, tokens, 0));
      runs.push_back(engine->profile());
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.prefill_seconds < b.prefill_seconds; });
    const EngineProfile& med = runs[runs.size() / 2];
    EngineBenchRow row;
    row.prompt_tokens = n;
    row.prefill_seconds = med.prefill_seconds;
    row.prefill_tokens_per_s = n / med.prefill_seconds;
    row.prefill_gflops = med.prefill_flops / med.prefill_seconds / 1e9;
    row.attention_share = med.attention_seconds / med.prefill_seconds;
    row.ratio_to_sgemm = row.prefill_gflops / rep.sgemm_peak_gflops;
    engine->reset_profile();
    TokenId next = argmax(last.last());
    SequenceKV* s = &seq;
    for (uint32_t i = 0; i < o.decode_tokens; ++i) {
      KVTIER_ASSIGN_OR_RETURN(Logits l, engine->decode(std::span(&s, 1), std::span(&next, 1)));
      next = argmax(l.last());
    }
    if (o.decode_tokens > 0) {
      row.decode_tokens_per_s = o.decode_tokens / engine->profile().decode_seconds;
      row.decode_attention_share = engine->profile().decode_attention_seconds / engine->profile().decode_seconds;
    }
    rep.rows.push_back(row);
  }
  return rep;
}

}  // namespace kvtier::engine
