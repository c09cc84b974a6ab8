// Planner: decides, for a prompt whose prefix is cached across tiers, which
// parts to load and which to recompute (DESIGN §6). A pure function of the
// match, the cost profile and the model cost: it mutates nothing, so it is
// safe from any thread and trivially unit-testable.
//
// The prompt is described page by page as an ordered list of runs, each on one
// tier (device runs are usable in place). The plan keeps causality: every
// recomputed page is computed after all pages before it are available, and
// the suffix after all cached pages. Among the plans of the form
//   [device: in place][load runs][recompute pages b..x)[load pages x..M)[suffix]
// (a "Cake" split: the compute lane works forward from b while the load lanes
// bring the back) it picks the one with the lowest predicted time to first
// token; on ties it prefers loading (less compute spent).
#pragma once

#include <span>
#include <vector>

#include "planner/cost_model.h"

namespace kvtier {

// A run of consecutive cached pages on one tier.
struct CachedRun {
  TierKind tier = TierKind::kDevice;
  uint32_t pages = 0;
};

struct PlannerOptions {
  uint32_t page_tokens = 16;
  bool layerwise = true;  // loads publish per layer and compute on layer l waits only for layer l

  Status validate() const;
};

enum class PlanAction : uint8_t { kInPlace = 0, kLoad = 1, kRecompute = 2 };
std::string_view plan_action_name(PlanAction a);

struct PlanSegment {
  uint32_t first_page = 0;
  uint32_t pages = 0;
  TierKind tier = TierKind::kDevice;  // where the cached copy lives
  PlanAction action = PlanAction::kInPlace;
};

struct Plan {
  std::vector<PlanSegment> segments;  // in prompt order, covering every cached page exactly once
  uint32_t cached_pages = 0;          // pages of the match
  uint32_t load_pages = 0;            // pages loaded (not in place)
  uint32_t recompute_pages = 0;       // cached pages recomputed anyway
  size_t suffix_tokens = 0;           // tokens after the cached pages (always computed)
  double predicted_s = 0;             // predicted time to first token with this plan
  double predicted_load_s = 0;        // busiest load lane
  double predicted_compute_s = 0;     // compute lane (recomputed pages + suffix)
  double recompute_all_s = 0;         // predicted time with no cache at all
  uint32_t reused_pages() const { return cached_pages - recompute_pages; }
};

// A prompt whose positions [exact_tokens, prompt_tokens) are to be computed,
// reused_tokens of them with KV from cached segments (segment_runs: where
// those pages live), blended from check_layer on with recompute ratio `ratio`.
struct BlendShape {
  size_t exact_tokens = 0;
  size_t prompt_tokens = 0;
  size_t reused_tokens = 0;
  std::vector<CachedRun> segment_runs;
  uint32_t check_layer = 1;
  float ratio = 0.15f;
};

// Predicted prefill times of the computed part: in full, and blended (the
// layers up to check_layer for every position, the rest for the selected
// ones, overlapped with loading the segments' pages).
struct BlendEstimate {
  double full_s = 0;
  double blend_s = 0;
  bool blend() const { return blend_s < full_s; }
};

class Planner {
 public:
  static Result<Planner> create(const PlannerOptions& options, const CostProfile& profile, const ModelCost& model);

  // `runs` describe the cached prefix in order; `prompt_tokens` is the whole
  // prompt length (>= cached tokens). Pure.
  Plan plan(std::span<const CachedRun> runs, size_t prompt_tokens) const;

  // The plan that uses every cached page (in place on the device, loaded
  // from the other tiers) and recomputes none: for KV wanted whatever the
  // cost (a segment to blend). Pure.
  Plan use_all(std::span<const CachedRun> runs, size_t prompt_tokens) const;
  // Blending or full prefill for a prompt with cached segments. Pure.
  BlendEstimate estimate_blend(const BlendShape& shape) const;
  // The longest a read-ahead of `tokens` tokens' KV into device memory can
  // take: loading them all from the slowest lower tier present (disk or
  // remote); 0 without one. Pure.
  double read_ahead_seconds(size_t tokens) const;
  // Predicted TTFT of a given plan layout (used by plan() and by tests).
  double evaluate(std::span<const PlanSegment> segments, size_t prompt_tokens, double* load_s = nullptr,
                  double* compute_s = nullptr) const;

  const CostProfile& profile() const { return profile_; }
  const ModelCost& model() const { return model_; }
  const PlannerOptions& options() const { return options_; }

  // Everything the planner prices with, as JSON ("kvtier-planner-v1"): an
  // instance publishes it (GET /v1/cache/config) so that a router prices a
  // prompt on it exactly as its own planner would. from_json validates.
  std::string to_json() const;
  static Result<Planner> from_json(const std::string& text);

 private:
  Planner(const PlannerOptions& o, const CostProfile& p, const ModelCost& m) : options_(o), profile_(p), model_(m) {}
  // A plan of `segments` covering `cached_pages`, with its counts and predictions.
  Plan finish(std::vector<PlanSegment> segments, uint32_t cached_pages, size_t prompt_tokens) const;
  PlannerOptions options_;
  CostProfile profile_;
  ModelCost model_;
};

}  // namespace kvtier
