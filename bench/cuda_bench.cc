#include "cuda_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>

#include "common/stats.h"
#include "cuda/copy_engine.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_engine.h"
#include "cuda/cuda_memory.h"
#include "engine/model.h"

namespace kvtier::cuda {

namespace {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds of the work `f` enqueues on `s`, from events recorded around it.
Result<double> time_stream(cudaStream_t s, const std::function<Status()>& f) {
  cudaEvent_t a = nullptr, b = nullptr;
  KVTIER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&a));
  KVTIER_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b));
  Status st = cuda_status(cudaEventRecord(a, s), "cudaEventRecord");
  if (st.ok()) st = f();
  if (st.ok()) st = cuda_status(cudaEventRecord(b, s), "cudaEventRecord");
  if (st.ok()) st = cuda_status(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  if (st.ok()) st = cuda_status(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  if (!st.ok()) return st;
  return double(ms);
}

Result<double> median_ms(uint32_t reps, cudaStream_t s, const std::function<Status()>& f) {
  std::vector<double> v;
  KVTIER_RETURN_IF_ERROR(time_stream(s, f).status());  // warm-up
  for (uint32_t i = 0; i < reps; ++i) {
    KVTIER_ASSIGN_OR_RETURN(double ms, time_stream(s, f));
    v.push_back(ms);
  }
  return median(v);
}

Result<double> median_wall_ms(uint32_t reps, const std::function<Status()>& f) {
  std::vector<double> v;
  KVTIER_RETURN_IF_ERROR(f());  // warm-up
  for (uint32_t i = 0; i < reps; ++i) {
    const auto t0 = SteadyClock::now();
    KVTIER_RETURN_IF_ERROR(f());
    v.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
  }
  return median(v);
}

double gbps(size_t bytes, double ms) { return ms > 0 ? double(bytes) / (ms * 1e6) : 0.0; }

Result<std::unique_ptr<BlockPool>> device_pool(const KVGeometry& g, uint32_t pages) {
  return BlockPool::create(BlockPoolOptions::on(MemoryBackend::kCuda, g, pages));
}

// Consecutive runs of `chunk_pages` pages (the last may be shorter) over `pages`, backed by `host`.
std::vector<ChunkLoad> loads_of(std::span<const PageId> pages, uint32_t chunk_pages, std::byte* host, size_t page_bytes) {
  std::vector<ChunkLoad> v;
  for (size_t p0 = 0; p0 < pages.size(); p0 += chunk_pages) {
    const size_t n = std::min<size_t>(chunk_pages, pages.size() - p0);
    v.push_back({host + p0 * page_bytes, pages.subspan(p0, n)});
  }
  return v;
}

Status copy_figures(const CudaBenchOptions& o, const KVGeometry& g, CudaBenchReport& rep) {
  const uint32_t n = uint32_t(std::max<size_t>(o.copy_bytes / g.page_bytes(), 1));
  const size_t bytes = size_t(n) * g.page_bytes();
  rep.copy_bytes = bytes;
  KVTIER_ASSIGN_OR_RETURN(auto pool, device_pool(g, 2 * n));  // pages scattered over twice the bytes
  KVTIER_ASSIGN_OR_RETURN(auto engine, CopyEngine::create(*pool));
  KVTIER_ASSIGN_OR_RETURN(auto events, LayerEvents::create(g.num_layers));
  KVTIER_ASSIGN_OR_RETURN(auto pinned, DeviceMemory::allocate(bytes, host_memory_options(MemoryBackend::kCuda)));
  KVTIER_ASSIGN_OR_RETURN(auto dev, DeviceMemory::allocate(bytes, pool_memory_options(MemoryBackend::kCuda)));
  std::vector<std::byte> pageable(bytes, std::byte{1});
  std::vector<PageId> pages;
  for (uint32_t i = 0; i < 2 * n; ++i) pages.emplace_back(i);
  std::shuffle(pages.begin(), pages.end(), std::mt19937_64(7));
  pages.resize(n);
  const auto loads = loads_of(pages, o.chunk_pages, pinned->data(), g.page_bytes());
  std::vector<ChunkStore> stores;
  for (const ChunkLoad& l : loads) stores.push_back({l.pages, const_cast<std::byte*>(l.chunk)});
  cudaStream_t ls = engine->load_stream(), ss = engine->store_stream();
  std::byte* pin = pinned->data();
  std::byte* d = dev->data();

  KVTIER_ASSIGN_OR_RETURN(double h2d_plain, median_ms(o.repeats, ls, [&] {
    return cuda_status(cudaMemcpyAsync(d, pin, bytes, cudaMemcpyHostToDevice, ls), "cudaMemcpyAsync");
  }));
  KVTIER_ASSIGN_OR_RETURN(double h2d_pageable, median_wall_ms(o.repeats, [&] {
    return cuda_status(cudaMemcpy(d, pageable.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }));
  KVTIER_ASSIGN_OR_RETURN(double h2d_engine, median_ms(o.repeats, ls, [&] { return engine->load(loads, *events); }));
  KVTIER_ASSIGN_OR_RETURN(double d2h_plain, median_ms(o.repeats, ss, [&] {
    return cuda_status(cudaMemcpyAsync(pin, d, bytes, cudaMemcpyDeviceToHost, ss), "cudaMemcpyAsync");
  }));
  KVTIER_ASSIGN_OR_RETURN(double d2h_engine, median_ms(o.repeats, ss, [&] { return engine->store(stores); }));
  KVTIER_ASSIGN_OR_RETURN(double d2d, median_ms(o.repeats, ls, [&] {
    return cuda_status(cudaMemcpyAsync(d, pool->memory().data() + bytes, bytes, cudaMemcpyDeviceToDevice, ls),
                       "cudaMemcpyAsync");
  }));
  KVTIER_ASSIGN_OR_RETURN(double gather, median_ms(o.repeats, ls, [&] { return engine->gather_to_device(pages, d, ls); }));

  rep.copies.push_back({"H2D chunk load (layer-wise)", gbps(bytes, h2d_engine), gbps(bytes, h2d_plain),
                        "pinned cudaMemcpy H2D"});
  rep.copies.push_back({"H2D pageable cudaMemcpy (reference)", gbps(bytes, h2d_pageable), gbps(bytes, h2d_plain),
                        "pinned cudaMemcpy H2D"});
  rep.copies.push_back({"D2H chunk store (gather + DMA)", gbps(bytes, d2h_engine), gbps(bytes, d2h_plain),
                        "pinned cudaMemcpy D2H"});
  rep.copies.push_back({"gather kernel (pages -> packed)", gbps(bytes, gather), gbps(bytes, d2d), "cudaMemcpy D2D"});
  return Status::Ok();
}

Status ttft_figures(const CudaBenchOptions& o, const engine::ModelConfig& cfg, const KVGeometry& g, CudaBenchReport& rep) {
  KVTIER_ASSIGN_OR_RETURN(auto model, engine::Model::synthetic(cfg, 1));
  const uint32_t max_len = *std::max_element(o.prefixes.begin(), o.prefixes.end()) + o.suffix;
  const uint32_t seq_pages = (max_len + g.page_tokens - 1) / g.page_tokens;
  KVTIER_ASSIGN_OR_RETURN(auto pool, device_pool(g, 2 * seq_pages));
  KVTIER_ASSIGN_OR_RETURN(auto gpu, CudaEngine::create(model, *pool));
  KVTIER_ASSIGN_OR_RETURN(auto copy, CopyEngine::create(*pool));
  KVTIER_ASSIGN_OR_RETURN(auto events, LayerEvents::create(g.num_layers));
  std::mt19937_64 rng(3);
  for (uint32_t prefix : o.prefixes) {
    const uint32_t len = prefix + o.suffix, np = prefix / g.page_tokens;
    std::vector<TokenId> tokens(len);
    for (auto& t : tokens) t = TokenId(rng() % cfg.vocab_size);
    engine::SequenceKV a, b;
    for (uint32_t i = 0; i < seq_pages; ++i) a.pages.emplace_back(i), b.pages.emplace_back(seq_pages + i);
    TtftFigure f;
    f.prefix = prefix;
    KVTIER_ASSIGN_OR_RETURN(f.recompute_ms, median_wall_ms(o.repeats, [&] {
      a.num_tokens = 0;
      return gpu->prefill(a, tokens, 0).status();
    }));
    // The prefix KV, as a host tier would hold it: pinned layer-major chunks.
    KVTIER_ASSIGN_OR_RETURN(auto host, DeviceMemory::allocate(size_t(np) * g.page_bytes(), host_memory_options(MemoryBackend::kCuda)));
    const auto loads = loads_of(std::span(b.pages).first(np), o.chunk_pages, host->data(), g.page_bytes());
    std::vector<ChunkStore> stores;
    for (size_t i = 0; i < loads.size(); ++i)
      stores.push_back({std::span(a.pages).subspan(i * o.chunk_pages, loads[i].pages.size()),
                        const_cast<std::byte*>(loads[i].chunk)});
    KVTIER_RETURN_IF_ERROR(copy->store(stores));
    KVTIER_RETURN_IF_ERROR(copy->synchronize_stores());
    KVTIER_ASSIGN_OR_RETURN(f.load_only_ms, median_wall_ms(o.repeats, [&] {
      KVTIER_RETURN_IF_ERROR(copy->load(loads, *events));
      return copy->synchronize_loads();
    }));
    KVTIER_ASSIGN_OR_RETURN(f.suffix_only_ms, median_wall_ms(o.repeats, [&] {
      b.num_tokens = prefix;
      return gpu->prefill(b, tokens, prefix).status();
    }));
    engine::PrefillOptions po;
    po.layer_hook = [&](LayerIdx l) { return events->wait_on(l, gpu->stream()); };
    KVTIER_ASSIGN_OR_RETURN(f.load_overlap_ms, median_wall_ms(o.repeats, [&] {
      KVTIER_RETURN_IF_ERROR(copy->load(loads, *events));
      b.num_tokens = prefix;
      return gpu->prefill(b, tokens, prefix, po).status();
    }));
    rep.ttft.push_back(f);
  }
  return Status::Ok();
}

}  // namespace

Status CudaBenchOptions::validate() const {
  if (copy_bytes < 4096) return Status::InvalidArgument("bench cuda: copy bytes must be >= 4096");
  if (chunk_pages == 0) return Status::InvalidArgument("bench cuda: chunk_pages must be > 0");
  if (repeats == 0 || repeats > 100) return Status::InvalidArgument("bench cuda: repeats must be in [1, 100]");
  if (suffix == 0) return Status::InvalidArgument("bench cuda: suffix must be > 0");
  for (uint32_t p : prefixes)
    if (p == 0 || p % 16 != 0) return Status::InvalidArgument("bench cuda: prefixes must be positive multiples of 16");
  return Status::Ok();
}

Result<CudaBenchReport> run_cuda_bench(const CudaBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  register_cuda_memory();
  if (!device_present()) return Status::Unavailable("bench cuda: " + device_description());
  KVTIER_ASSIGN_OR_RETURN(engine::ModelConfig cfg, engine::model_preset(o.model));
  const KVGeometry g = cfg.kv_geometry(o.kv_dtype, 16);
  for (uint32_t p : o.prefixes)
    if (p + o.suffix > cfg.max_context) return Status::InvalidArgument("bench cuda: prefix + suffix exceed the model context");
  CudaBenchReport rep;
  rep.device = device_description();
  rep.model = o.model;
  rep.kv_dtype = std::string(dtype_name(o.kv_dtype));
  KVTIER_RETURN_IF_ERROR(copy_figures(o, g, rep));
  if (!o.prefixes.empty()) KVTIER_RETURN_IF_ERROR(ttft_figures(o, cfg, g, rep));
  return rep;
}

}  // namespace kvtier::cuda
