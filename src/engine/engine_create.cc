// The engine's entry points (Engine::create, create_forward, check_engine_supports), built for baseline x86-64 unlike
// the rest of the engine (x86-64-v3): the CPU is checked here, before any code compiled for
// AVX2 runs (a function of engine.cc uses AVX in its first instructions, so a check there came
// too late and a CPU without AVX2 died of SIGILL instead of reading the error).
#include <atomic>

#include "engine/engine.h"
#include "engine/engine_checks.h"
#include "engine/qdot.h"

namespace kvtier::engine {

Status check_engine_supports(const ModelConfig& c) {
  if (c.head_dim % 16 != 0)  // every kernel width (simd::kLanes: 8 or 16) divides it
    return Status::Unimplemented("Engine: head_dim " + std::to_string(c.head_dim) + " is not a multiple of 16");
  return Status::Ok();
}

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const Model> model, BlockPool& pool,
                                               const EngineOptions& options) {
  if (!qdot::cpu_has(qdot::Isa::kAvx2))  // first: EngineOptions::validate is engine.cc's
    return Status::Unimplemented("Engine: this CPU lacks AVX2, FMA or F16C, which the engine's f32 kernels are built for");
  KVTIER_RETURN_IF_ERROR(options.validate());
  if (!model) return Status::InvalidArgument("Engine: no model");
  const ModelConfig& c = model->config();
  const KVGeometry& g = pool.geometry();
  if (g != c.kv_geometry(g.dtype, g.page_tokens))
    return Status::InvalidArgument("Engine: block pool geometry (layers " + std::to_string(g.num_layers) + ", kv heads " +
                                   std::to_string(g.num_kv_heads) + ", head dim " + std::to_string(g.head_dim) +
                                   ") does not match the model");
  KVTIER_RETURN_IF_ERROR(check_engine_supports(c));
  return std::unique_ptr<Engine>(new Engine(std::move(model), pool, options));
}

namespace {
std::atomic<ForwardFactory> g_accelerator_engine{nullptr};
}  // namespace

void register_accelerator_engine(ForwardFactory factory) { g_accelerator_engine.store(factory); }

Result<std::unique_ptr<Forward>> create_forward(std::shared_ptr<const Model> model, BlockPool& pool,
                                                const EngineOptions& options) {
  if (pool.memory().backend() == MemoryBackend::kCpu) {
    KVTIER_ASSIGN_OR_RETURN(auto e, Engine::create(std::move(model), pool, options));
    return std::unique_ptr<Forward>(std::move(e));
  }
  const ForwardFactory f = g_accelerator_engine.load();
  if (!f) return Status::Unavailable("no engine for device memory in this build (configure with -DKVTIER_CUDA=ON)");
  return f(std::move(model), pool, options);
}

}  // namespace kvtier::engine
