#include "engine_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/matmul.h"
#include "engine/sampler.h"
#include "engine/worker_pool.h"
#include "prompt_text.h"

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

namespace {

using SteadyClock = std::chrono::steady_clock;
double since(SteadyClock::time_point t0) { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Every matrix of the model, the embedding last (a decoded token reads one row of it).
std::vector<const Linear*> matrices(const Model& m) {
  std::vector<const Linear*> out;
  for (const LayerWeights& l : m.weights().layers)
    for (const Linear* w : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down}) out.push_back(w);
  if (!m.config().tied_embeddings) out.push_back(&m.weights().output);
  out.push_back(&m.weights().token_embd);
  return out;
}

uint64_t decode_bytes(const Model& m) {
  uint64_t n = 0;
  for (const Linear* w : matrices(m)) n += w->bytes();
  if (!m.config().tied_embeddings) n -= m.weights().token_embd.bytes();
  return n;
}

// Matmul::run on `tokens` rows of `w`, with `kernels` (median of 15 runs after one untimed).
KernelBenchRow time_matmul(WorkerPool& pool, const Linear& w, uint32_t tokens, const qdot::Kernels& kernels) {
  Matmul mm(pool, /*split_gemm=*/true, /*exact=*/false, kernels);
  std::vector<float> x(size_t(tokens) * w.cols(), 0.5f), y(size_t(tokens) * w.rows());
  std::vector<double> seconds;
  mm.run(x.data(), tokens, w, y.data(), uint32_t(w.rows()), 0.0f);
  for (int rep = 0; rep < 15; ++rep) {
    const auto t0 = SteadyClock::now();
    mm.run(x.data(), tokens, w, y.data(), uint32_t(w.rows()), 0.0f);
    seconds.push_back(since(t0));
  }
  const double s = median(seconds);
  return {.op = tokens == 1 ? "gemv" : "gemm",
          .isa = std::string(qdot::isa_name(kernels.isa)),
          .layout = std::string(qdot::packing_name(w.parts()[0].packing())),
          .gbps = double(w.bytes()) / s / 1e9,
          .gmacs = double(tokens) * double(w.rows()) * double(w.cols()) / s / 1e9};
}

// Each weight type's largest part, one token (decode's gemv) and kGemmTokens (prefill's GEMM),
// with every SIMD kernel set the CPU has, each on the part laid out as that set wants it, so a
// figure says which set ran on which layout.
std::vector<KernelBenchRow> measure_kernels(const Model& m, uint32_t threads) {
  constexpr uint32_t kGemmTokens = 64;
  std::map<GgufType, const WeightPart*> largest;
  for (const Linear* w : matrices(m))
    for (const WeightPart& p : w->parts())
      if (!largest.count(p.type()) || largest[p.type()]->bytes() < p.bytes()) largest[p.type()] = &p;
  WorkerPool pool(threads);
  std::vector<KernelBenchRow> rows;
  for (const auto& [type, part] : largest) {
    Linear file;  // the part as the file stores it
    if (!file.append(WeightPart::repacked(*part, 0, part->rows(), qdot::Packing::kRows)).ok()) continue;
    for (qdot::Isa isa : qdot::kAllIsas) {
      const qdot::Kernels* kernels = qdot::kernels(isa);
      if (!kernels || isa == qdot::Isa::kScalar) continue;
      Linear one = file;
      one.pack(*kernels);
      for (uint32_t tokens : {1u, kGemmTokens}) {
        KernelBenchRow row = time_matmul(pool, one, tokens, *kernels);
        row.type = std::string(gguf_type_name(type));
        if (type == GgufType::kF32) row.isa = "blas";
        rows.push_back(std::move(row));
      }
      if (type == GgufType::kF32) break;  // BLAS, whatever the set
    }
  }
  return rows;
}

}  // namespace

uint64_t resident_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

double measure_memcpy_gbps(uint32_t threads) {
  const size_t bytes = size_t(256) << 20, per = bytes / threads;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  WorkerPool pool(threads);
  std::vector<double> gbps;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = SteadyClock::now();
    pool.run(threads, [&](size_t t, uint32_t) { std::memcpy(b.data() + t * per, a.data() + t * per, per); });
    gbps.push_back(double(per * threads) / since(t0) / 1e9);  // bytes read (each is also written)
  }
  return median(gbps);
}

Result<EngineBenchReport> run_engine_bench(const EngineBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const uint64_t baseline_rss = resident_bytes();
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

  KVTIER_ASSIGN_OR_RETURN(const bench::PromptText text, bench::PromptText::open(*model, o.text));
  rep.text = text.source();
  std::mt19937_64 rng(o.seed);
  SequenceKV seq;
  KVTIER_RETURN_IF_ERROR(pool->allocate(pages, seq.pages));
  for (uint32_t n : o.prompts) {
    const std::vector<TokenId> tokens = text.draw(rng, n);
    std::vector<EngineProfile> runs;
    Logits last;
    for (uint32_t r = 0; r < o.repeats; ++r) {
      engine->reset_profile();
      seq.num_tokens = 0;
      KVTIER_ASSIGN_OR_RETURN(last, engine->prefill(seq, tokens, 0));
      runs.push_back(engine->profile());
    }
    std::sort(runs.begin(), runs.end(),
              [](const auto& a, const auto& b) { return a.prefill_seconds < b.prefill_seconds; });
    const EngineProfile& med = runs[runs.size() / 2];
    EngineBenchRow row;
    row.prompt_tokens = n;
    row.prefill_seconds = med.prefill_seconds;
    row.prefill_tokens_per_s = n / med.prefill_seconds;
    row.prefill_gflops = med.prefill_flops / med.prefill_seconds / 1e9;
    row.attention_share = med.attention_seconds / med.prefill_seconds;
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
  // What serving this model takes, before the measurements below allocate their own buffers.
  rep.rss_bytes = resident_bytes();
  rep.baseline_rss_bytes = baseline_rss;
  rep.weight_bytes = model->weights().bytes();
  rep.decode_weight_bytes = decode_bytes(*model);
  rep.sgemm_peak_gflops = measure_sgemm_gflops(2048, rep.threads);
  for (EngineBenchRow& row : rep.rows) row.ratio_to_sgemm = row.prefill_gflops / rep.sgemm_peak_gflops;
  rep.memcpy_gbps = measure_memcpy_gbps(rep.threads);
  rep.decode_ceiling_tokens_per_s = rep.memcpy_gbps * 1e9 / double(rep.decode_weight_bytes);
  rep.isa = std::string(qdot::isa_name(qdot::best().isa));
  rep.kernels = measure_kernels(*model, rep.threads);
  return rep;
}

}  // namespace kvtier::engine
