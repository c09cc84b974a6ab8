// CopyEngine: moves KV between a device BlockPool (CUDA memory, page-first
// pages) and pinned host chunks (layer-major, tiers/chunk_format.h) on two
// dedicated CUDA streams, one for loads (host → device) and one for stores
// (device → host), so a store never queues behind a load or vice versa.
//
// Loads go layer by layer: for layer l, every chunk's layer-l bytes are
// copied into a device staging buffer in one batched DMA submission
// (cudaMemcpyBatchAsync), a scatter kernel puts them into their pages, and
// LayerEvents records layer l. A compute stream
// that waits on event l (LayerEvents::wait_on) runs layer l as soon as that
// layer has arrived, while later layers are still in flight. Stores gather
// pages into staging with one kernel, then DMA the packed bytes out.
//
// Host chunks must be pinned (DeviceMemoryOptions::pinned) for the copies to
// be asynchronous; they, the pool and the pages must stay alive and
// untouched until the matching event/synchronize says the copy is done.
// Thread safety: one thread drives a CopyEngine; LayerEvents may be waited on
// from any thread. Ownership: the engine owns its streams and staging; the
// caller owns pools, chunks and events.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "memory/block_pool.h"

namespace kvtier::cuda {

// One CUDA event per layer.
class LayerEvents {
 public:
  static Result<std::unique_ptr<LayerEvents>> create(uint32_t num_layers);
  ~LayerEvents();
  LayerEvents(const LayerEvents&) = delete;
  LayerEvents& operator=(const LayerEvents&) = delete;

  uint32_t num_layers() const { return uint32_t(events_.size()); }
  Status record(LayerIdx layer, cudaStream_t stream);
  // `stream` waits on the device until layer l has arrived; the host never blocks.
  Status wait_on(LayerIdx layer, cudaStream_t stream) const;
  // The host blocks until layer l has arrived.
  Status synchronize(LayerIdx layer) const;
  // true once layer l has arrived (or was never recorded), false while pending.
  Result<bool> ready(LayerIdx layer) const;

 private:
  explicit LayerEvents(std::vector<cudaEvent_t> events) : events_(std::move(events)) {}
  Status check(LayerIdx layer) const;
  std::vector<cudaEvent_t> events_;
};

struct CopyEngineOptions {
  size_t staging_bytes = size_t(64) << 20;  // device staging per direction; >= one page's layer slice
  Status validate() const;
};

// A chunk to load: pinned host payload (layer-major, pages.size() pages) → device pages.
struct ChunkLoad {
  const std::byte* chunk = nullptr;
  std::span<const PageId> pages;
};
// A chunk to store: device pages → pinned host payload (layer-major).
struct ChunkStore {
  std::span<const PageId> pages;
  std::byte* chunk = nullptr;
};

struct LoadOptions {
  // Called on the host after layer l's copies and event are enqueued (tracing, tests).
  std::function<Status(LayerIdx)> after_layer;
};

class CopyEngine {
 public:
  // `pool` must live on a CUDA device (MemoryBackend::kCuda) and outlive the engine.
  static Result<std::unique_ptr<CopyEngine>> create(BlockPool& pool, const CopyEngineOptions& options = {});
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Enqueues the layer-wise load of `chunks` on the load stream and records
  // events.record(l) after layer l of every chunk. Returns once enqueued.
  Status load(std::span<const ChunkLoad> chunks, LayerEvents& events, const LoadOptions& options = {});
  // Enqueues gather + device→host copies of `chunks` on the store stream.
  Status store(std::span<const ChunkStore> chunks);
  Status synchronize_loads();
  Status synchronize_stores();

  // Device-side pack/unpack (no host involved), on `stream`: pages → layer-major
  // [layer][page][slice] at `packed` (device memory), and the reverse.
  Status gather_to_device(std::span<const PageId> pages, std::byte* packed, cudaStream_t stream);
  Status scatter_from_device(const std::byte* packed, std::span<const PageId> pages, cudaStream_t stream);

  cudaStream_t load_stream() const { return load_stream_; }
  cudaStream_t store_stream() const { return store_stream_; }
  BlockPool& pool() { return pool_; }

 private:
  CopyEngine(BlockPool& pool, const CopyEngineOptions& o);
  Status check_pages(std::span<const PageId> pages) const;
  Status scatter_layer(const std::byte* packed, uint32_t layer, std::span<const PageId> pages, cudaStream_t s);
  Status load_layer(std::span<const ChunkLoad> chunks, uint32_t l);
  Status gather_layers(std::span<const PageId> pages, uint32_t first, uint32_t count, std::byte* packed,
                       size_t layer_stride, cudaStream_t s);

  BlockPool& pool_;
  CopyEngineOptions options_;
  cudaStream_t load_stream_ = nullptr;
  cudaStream_t store_stream_ = nullptr;
  std::unique_ptr<DeviceMemory> load_staging_;
  std::unique_ptr<DeviceMemory> store_staging_;
};

}  // namespace kvtier::cuda
