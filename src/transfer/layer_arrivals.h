// LayerArrivals: when each layer of a request's loads landed in place, per
// source tier — the "load" lane of the dashboard's per-request race.
//
// Recording is opt-in and scoped to the thread that submits the loads: while
// a ScopedLayerArrivals lives on a thread, every batch that thread submits to
// a TransferEngine keeps a reference to its LayerArrivals, and the transfer
// workers stamp, for each layer and source tier, the moment a shard finished
// moving that layer (the latest stamp wins, so a layer's arrival is its last
// shard's). A scope rather than an argument so that the cache facade, which
// submits the batches, needs no change to be observed.
//
// Cost: one steady_clock read and one atomic max per (shard, layer group,
// source tier) while recorded; nothing at all otherwise. Recording never
// changes what is moved or when.
//
// Thread safety: mark() from any thread (the workers); arrival_ns() from any
// thread, final once the loads have been waited for. ScopedLayerArrivals is
// per thread and must be destroyed on the thread that made it (scopes nest).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kvtier/types.h"

namespace kvtier {

class LayerArrivals {
 public:
  explicit LayerArrivals(uint32_t num_layers);
  uint32_t num_layers() const { return num_layers_; }
  // Layers [first_layer, end_layer) from `source` are in place now. Layers
  // past num_layers() are ignored.
  void mark(TierKind source, uint32_t first_layer, uint32_t end_layer);
  // steady_clock time (ns since its epoch) of the last mark of `layer` from
  // `source`; 0 when nothing from that tier landed for that layer.
  int64_t arrival_ns(TierKind source, uint32_t layer) const;

 private:
  uint32_t num_layers_;
  std::unique_ptr<std::atomic<int64_t>[]> stamps_;  // [tier * num_layers + layer]
};

class ScopedLayerArrivals {
 public:
  explicit ScopedLayerArrivals(std::shared_ptr<LayerArrivals> arrivals);
  ~ScopedLayerArrivals();
  ScopedLayerArrivals(const ScopedLayerArrivals&) = delete;
  ScopedLayerArrivals& operator=(const ScopedLayerArrivals&) = delete;

  // The recording in force on the calling thread (null when none).
  static std::shared_ptr<LayerArrivals> current();

 private:
  std::shared_ptr<LayerArrivals> previous_;
};

}  // namespace kvtier
