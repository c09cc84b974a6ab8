#include "transfer/layer_arrivals.h"

#include <chrono>
#include <utility>

namespace kvtier {
namespace {

thread_local std::shared_ptr<LayerArrivals> t_recording;

}  // namespace

LayerArrivals::LayerArrivals(uint32_t num_layers)
    : num_layers_(num_layers), stamps_(new std::atomic<int64_t>[size_t(kNumTiers) * num_layers]) {
  for (size_t i = 0; i < size_t(kNumTiers) * num_layers; ++i) stamps_[i].store(0, std::memory_order_relaxed);
}

void LayerArrivals::mark(TierKind source, uint32_t first_layer, uint32_t end_layer) {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const size_t base = size_t(source) * num_layers_;
  for (uint32_t l = first_layer; l < end_layer && l < num_layers_; ++l) {
    std::atomic<int64_t>& stamp = stamps_[base + l];
    int64_t seen = stamp.load(std::memory_order_relaxed);
    while (seen < now && !stamp.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
}

int64_t LayerArrivals::arrival_ns(TierKind source, uint32_t layer) const {
  if (layer >= num_layers_ || int(source) >= kNumTiers) return 0;
  return stamps_[size_t(source) * num_layers_ + layer].load(std::memory_order_relaxed);
}

ScopedLayerArrivals::ScopedLayerArrivals(std::shared_ptr<LayerArrivals> arrivals)
    : previous_(std::exchange(t_recording, std::move(arrivals))) {}

ScopedLayerArrivals::~ScopedLayerArrivals() { t_recording = std::move(previous_); }

std::shared_ptr<LayerArrivals> ScopedLayerArrivals::current() { return t_recording; }

}  // namespace kvtier
