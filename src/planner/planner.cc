#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace kvtier {

Status PlannerOptions::validate() const {
  if (page_tokens == 0) return Status::InvalidArgument("PlannerOptions: page_tokens must be > 0");
  return Status::Ok();
}

std::string_view plan_action_name(PlanAction a) {
  switch (a) {
    case PlanAction::kInPlace: return "in_place";
    case PlanAction::kLoad: return "load";
    case PlanAction::kRecompute: return "recompute";
  }
  return "unknown";
}

Result<Planner> Planner::create(const PlannerOptions& o, const CostProfile& p, const ModelCost& m) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  KVTIER_RETURN_IF_ERROR(p.validate());
  KVTIER_RETURN_IF_ERROR(m.validate());
  return Planner(o, p, m);
}

namespace {
constexpr const char* kPlannerFormat = "kvtier-planner-v1";
constexpr TierKind kLoadTiers[] = {TierKind::kHost, TierKind::kDisk, TierKind::kRemote};
}  // namespace

std::string Planner::to_json() const {
  nlohmann::json enc;
  for (TierKind t : kLoadTiers) {
    const TierEncoding& e = model_.encoding[size_t(t)];
    enc[std::string(tier_name(t))] = {{"stored_fraction", e.stored_fraction}, {"decode_bytes_per_s", e.decode_bytes_per_s}};
  }
  return nlohmann::json{{"format", kPlannerFormat},
                        {"page_tokens", options_.page_tokens},
                        {"layerwise", options_.layerwise},
                        {"profile", nlohmann::json::parse(profile_.to_json())},
                        {"model",
                         {{"dense_flops_per_token", model_.dense_flops_per_token},
                          {"attn_flops_per_pair", model_.attn_flops_per_pair},
                          {"num_layers", model_.num_layers},
                          {"kv_bytes_per_token", model_.kv_bytes_per_token},
                          {"encoding", enc}}}}
      .dump();
}

Result<Planner> Planner::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kPlannerFormat)
    return Status::InvalidArgument(std::string("planner: not a JSON object of format ") + kPlannerFormat);
  PlannerOptions o;
  ModelCost m;
  std::string profile;
  try {
    o.page_tokens = j.at("page_tokens").get<uint32_t>();
    o.layerwise = j.at("layerwise").get<bool>();
    profile = j.at("profile").dump();
    const auto& jm = j.at("model");
    m.dense_flops_per_token = jm.at("dense_flops_per_token").get<double>();
    m.attn_flops_per_pair = jm.at("attn_flops_per_pair").get<double>();
    m.num_layers = jm.at("num_layers").get<uint32_t>();
    m.kv_bytes_per_token = jm.at("kv_bytes_per_token").get<size_t>();
    for (TierKind t : kLoadTiers) {
      const auto& e = jm.at("encoding").at(std::string(tier_name(t)));
      m.encoding[size_t(t)] = {e.at("stored_fraction").get<double>(), e.at("decode_bytes_per_s").get<double>()};
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("planner: ") + e.what());
  }
  KVTIER_ASSIGN_OR_RETURN(CostProfile p, CostProfile::from_json(profile));
  return create(o, p, m);
}

// Timeline model. Every tier link loads all of its pages in one aggregated,
// layer-major transfer starting at t=0 (links run in parallel); with layer-wise
// publication layer l of a link is ready at latency + (l+1)/L of its transfer,
// otherwise only when the whole transfer is done. The compute lane first
// recomputes the recompute segments in order (each layer waits for layer l of
// every load before it), then computes the suffix layer by layer (each layer
// waits for layer l of every load).
double Planner::evaluate(std::span<const PlanSegment> segs, size_t prompt_tokens, double* load_s,
                         double* compute_s) const {
  const uint32_t L = model_.num_layers;
  const size_t P = options_.page_tokens;
  std::array<size_t, kNumTiers> tier_tokens{};
  for (const PlanSegment& s : segs)
    if (s.action == PlanAction::kLoad) tier_tokens[static_cast<size_t>(s.tier)] += size_t(s.pages) * P;
  std::array<double, kNumTiers> lat{}, xfer{};
  double busiest = 0;
  for (int t = 0; t < kNumTiers; ++t) {
    if (tier_tokens[t] == 0) continue;
    const double total = load_seconds(profile_, model_, TierKind(t), tier_tokens[t]);
    lat[t] = profile_.links[t].latency_s;
    xfer[t] = total - lat[t];
    busiest = std::max(busiest, total);
  }
  auto ready = [&](int t, uint32_t layer) {
    if (tier_tokens[t] == 0) return 0.0;
    if (!options_.layerwise) return lat[t] + xfer[t];
    return lat[t] + xfer[t] * double(layer + 1) / double(L);
  };

  double t_now = 0, compute_total = 0;
  std::array<bool, kNumTiers> before{};  // tiers with a load segment before the current position
  uint32_t cached_pages = 0;
  for (const PlanSegment& s : segs) {
    cached_pages = std::max(cached_pages, s.first_page + s.pages);
    if (s.action == PlanAction::kLoad) {
      before[static_cast<size_t>(s.tier)] = true;
      continue;
    }
    if (s.action != PlanAction::kRecompute) continue;
    const double c = recompute_seconds(profile_, model_, size_t(s.pages) * P, size_t(s.first_page) * P);
    compute_total += c;
    for (uint32_t l = 0; l < L; ++l) {
      for (int t = 0; t < kNumTiers; ++t)
        if (before[t]) t_now = std::max(t_now, ready(t, l));
      t_now += c / L;
    }
  }
  const size_t cached_tokens = size_t(cached_pages) * P;
  const size_t suffix = prompt_tokens > cached_tokens ? prompt_tokens - cached_tokens : 0;
  const double cs = recompute_seconds(profile_, model_, suffix, cached_tokens);
  compute_total += cs;
  for (uint32_t l = 0; l < L; ++l) {
    for (int t = 0; t < kNumTiers; ++t) t_now = std::max(t_now, ready(t, l));
    t_now += cs / L;
  }
  if (load_s) *load_s = busiest;
  if (compute_s) *compute_s = compute_total;
  return t_now;
}

Plan Planner::plan(std::span<const CachedRun> runs, size_t prompt_tokens) const {
  // Runs with their first page; a candidate plan recomputes pages [b, x) of
  // non-device runs and loads the rest. Building one is O(runs).
  std::vector<PlanSegment> base;
  std::vector<uint32_t> starts;  // candidate b: the start of each non-device run, and M
  uint32_t M = 0;
  for (const CachedRun& r : runs) {
    if (r.pages == 0) continue;
    if (r.tier != TierKind::kDevice) starts.push_back(M);
    base.push_back(PlanSegment{M, r.pages, r.tier, PlanAction::kInPlace});
    M += r.pages;
  }
  starts.push_back(M);

  std::vector<PlanSegment> cand, best;
  auto emit = [&](uint32_t first, uint32_t end, TierKind t, PlanAction a) {
    if (end <= first) return;
    // A tier with no link cannot be loaded from: recompute it.
    if (a == PlanAction::kLoad && !profile_.link(t).present()) a = PlanAction::kRecompute;
    if (!cand.empty() && cand.back().tier == t && cand.back().action == a &&
        cand.back().first_page + cand.back().pages == first) {
      cand.back().pages += end - first;
    } else {
      cand.push_back(PlanSegment{first, end - first, t, a});
    }
  };
  auto build = [&](uint32_t b, uint32_t x) {
    cand.clear();
    for (const PlanSegment& r : base) {
      const uint32_t lo = r.first_page, hi = r.first_page + r.pages;
      if (r.tier == TierKind::kDevice) {
        emit(lo, hi, r.tier, PlanAction::kInPlace);
        continue;
      }
      const uint32_t rb = std::clamp(b, lo, hi), rx = std::clamp(x, lo, hi);
      emit(lo, rb, r.tier, PlanAction::kLoad);
      emit(rb, rx, r.tier, PlanAction::kRecompute);
      emit(rx, hi, r.tier, PlanAction::kLoad);
    }
  };

  double best_t = std::numeric_limits<double>::infinity();
  uint32_t best_recompute = 0;
  for (uint32_t b : starts) {
    for (uint32_t x = b; x <= M; ++x) {
      build(b, x);
      const double t = evaluate(cand, prompt_tokens);
      uint32_t rc = 0;
      for (const auto& s : cand) rc += s.action == PlanAction::kRecompute ? s.pages : 0;
      // Strictly better, or equal within rounding with less recompute.
      const bool better = t < best_t * (1 - 1e-9) || (t <= best_t * (1 + 1e-9) && rc < best_recompute);
      if (better) {
        best_t = t;
        best_recompute = rc;
        best = cand;
      }
    }
  }

  return finish(std::move(best), M, prompt_tokens);
}

Plan Planner::finish(std::vector<PlanSegment> segments, uint32_t cached_pages, size_t prompt_tokens) const {
  Plan plan;
  plan.segments = std::move(segments);
  plan.cached_pages = cached_pages;
  for (const PlanSegment& s : plan.segments) {
    if (s.action == PlanAction::kLoad) plan.load_pages += s.pages;
    if (s.action == PlanAction::kRecompute) plan.recompute_pages += s.pages;
  }
  const size_t cached_tokens = size_t(cached_pages) * options_.page_tokens;
  plan.suffix_tokens = prompt_tokens > cached_tokens ? prompt_tokens - cached_tokens : 0;
  plan.predicted_s = evaluate(plan.segments, prompt_tokens, &plan.predicted_load_s, &plan.predicted_compute_s);
  plan.recompute_all_s = recompute_seconds(profile_, model_, prompt_tokens, 0);
  return plan;
}

double Planner::read_ahead_seconds(size_t tokens) const {
  double worst = 0;
  for (TierKind t : {TierKind::kDisk, TierKind::kRemote})
    if (profile_.link(t).present()) worst = std::max(worst, load_seconds(profile_, model_, t, tokens));
  return worst;
}

Plan Planner::use_all(std::span<const CachedRun> runs, size_t prompt_tokens) const {
  std::vector<PlanSegment> segments;
  uint32_t cached = 0;
  for (const CachedRun& r : runs) {
    if (r.pages == 0) continue;
    PlanAction a = r.tier == TierKind::kDevice ? PlanAction::kInPlace : PlanAction::kLoad;
    if (a == PlanAction::kLoad && !profile_.link(r.tier).present()) a = PlanAction::kRecompute;
    segments.push_back(PlanSegment{cached, r.pages, r.tier, a});
    cached += r.pages;
  }
  return finish(std::move(segments), cached, prompt_tokens);
}

BlendEstimate Planner::estimate_blend(const BlendShape& b) const {
  BlendEstimate e;
  const size_t computed = b.prompt_tokens - b.exact_tokens;
  e.full_s = recompute_seconds(profile_, model_, computed, b.exact_tokens);
  const double layers = double(model_.num_layers);
  const size_t selected = computed - b.reused_tokens + size_t(std::ceil(double(b.ratio) * double(b.reused_tokens)));
  // Layers below the check layer for every position; from it on, the
  // selected positions; plus the check layer's K/V for the others (its QKV
  // projection: a third of a layer at most, taken as a third).
  const double below = std::min(1.0, double(b.check_layer) / layers);
  const double selected_s = recompute_seconds(profile_, model_, selected, b.exact_tokens + computed - selected);
  const double compute_s = below * e.full_s + (1.0 - below) * selected_s + (e.full_s - selected_s) / (3.0 * layers);
  double load_s = 0;
  for (const CachedRun& r : b.segment_runs)
    if (r.tier != TierKind::kDevice) load_s += load_seconds(profile_, model_, r.tier, size_t(r.pages) * options_.page_tokens);
  e.blend_s = std::max(compute_s, load_s);
  return e;
}

}  // namespace kvtier
