// PrefillTrace: the race of one prefill, layer by layer — when each layer's
// cached KV arrived from each tier and when the engine computed each layer —
// with the planner's decision and predictions. The dashboard draws it as two
// lanes (load, compute) per request; GET /v1/requests/recent serves it.
//
// Times are seconds since the start of Runtime::start for that request.
// TracingForward records the compute lane: it wraps the engine for one
// prefill and times each call to the per-layer hook (the engine calls it
// just before computing a layer). The load lane comes from LayerArrivals
// (transfer/layer_arrivals.h), stamped by the transfer workers.
//
// Cost: two steady_clock reads per layer per engine call, and one per layer
// group per transfer shard; no extra synchronisation. Recording never changes
// results: the hook the caller gave still runs, unchanged, in the same order.
// On an accelerator engine the hook runs when the host enqueues a layer, so
// the compute lane shows enqueue times there.
//
// Thread safety: a trace is written by the runtime's thread during the
// prefill, then published read-only (shared_ptr<const PrefillTrace>).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "planner/planner.h"
#include "transfer/layer_arrivals.h"

namespace kvtier {

// One engine prefill call (a request may make several: the recomputed front,
// the rest, a fallback after a failed load, segments stored for blending).
struct PrefillPass {
  uint32_t start_pos = 0;   // first position computed
  uint32_t end_pos = 0;     // one past the last
  double begin_s = 0;
  double end_s = 0;         // the call returned (logits included)
  // Per layer: the hook was entered (the previous layer's compute was done)
  // and returned (this layer's KV was in place: compute began). A layer
  // computes from hook_return_s[l] to hook_enter_s[l + 1] (end_s after the last).
  // Empty when the call had no hook (nothing to wait for; not timed per layer).
  std::vector<double> hook_enter_s;
  std::vector<double> hook_return_s;
};

struct PrefillTrace {
  uint32_t num_layers = 0;
  uint32_t page_tokens = 0;
  uint32_t prompt_tokens = 0;
  // The planner's decision and predictions (planner/planner.h).
  std::vector<PlanSegment> plan;
  double predicted_s = 0, predicted_load_s = 0, predicted_compute_s = 0, recompute_all_s = 0;
  double loads_submitted_s = 0;  // lookup, plan and apply done: loads are in flight
  std::vector<PrefillPass> passes;
  // [tier][layer]: when that layer's KV from that tier was in place; < 0: nothing came from it.
  std::array<std::vector<double>, kNumTiers> arrival_s;
  double prefill_s = 0;  // the whole Runtime::start (first token sampled)

  // Copies the stamps of `arrivals` into arrival_s, relative to `start`.
  void take_arrivals(const LayerArrivals& arrivals, std::chrono::steady_clock::time_point start);
};

// An engine::Forward that forwards every call to `inner` and appends one
// PrefillPass to `trace` per prefill. Borrowed references; one prefill at a time.
class TracingForward final : public engine::Forward {
 public:
  TracingForward(engine::Forward& inner, PrefillTrace& trace, std::chrono::steady_clock::time_point start)
      : inner_(inner), trace_(trace), start_(start) {}

  Result<engine::Logits> prefill(engine::SequenceKV& seq, std::span<const TokenId> tokens, uint32_t start_pos,
                                 const engine::PrefillOptions& options = {}) override;
  Result<engine::Logits> decode(std::span<engine::SequenceKV* const> seqs, std::span<const TokenId> tokens) override {
    return inner_.decode(seqs, tokens);
  }
  const engine::Model& model() const override { return inner_.model(); }
  const KVGeometry& geometry() const override { return inner_.geometry(); }
  const engine::EngineProfile& profile() const override { return inner_.profile(); }
  void reset_profile() override { inner_.reset_profile(); }
  bool supports_blend() const override { return inner_.supports_blend(); }

 private:
  double since_start() const;

  engine::Forward& inner_;
  PrefillTrace& trace_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kvtier
