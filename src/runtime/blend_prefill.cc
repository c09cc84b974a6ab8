#include "runtime/blend_prefill.h"

#include <algorithm>

#include "runtime/cached_prefill.h"

namespace kvtier {

namespace {

// A segment's tokens as a lookup key: one token more, so that lookup (which
// never matches a prompt's last token) can match every whole page.
std::vector<TokenId> lookup_key(std::span<const TokenId> segment) {
  std::vector<TokenId> key(segment.begin(), segment.end());
  key.push_back(segment.back());
  return key;
}

// A segment's cached KV held for one request.
struct HeldSegment {
  PromptSegment at;     // where it sits in the prompt
  uint32_t reused = 0;  // its leading positions reused (whole cached pages)
  std::vector<CachedRun> runs;
  CacheLease lease;     // its pages, in place or being loaded
  bool failed = false;  // a load failed verification: never used
};

// Computes the segment alone at positions 0.. and commits its whole pages,
// unless they are all cached already. Returns the tokens computed.
Result<uint32_t> store_segment(engine::Forward& engine, KVCache& cache, const Namespace& ns,
                               std::span<const TokenId> segment) {
  const uint32_t P = cache.geometry().page_tokens;
  const std::vector<TokenId> key = lookup_key(segment);
  KVTIER_ASSIGN_OR_RETURN(CacheLookup look, cache.lookup(ns, key));
  if (size_t(look.cached_pages()) * P >= segment.size() / P * P) return 0u;
  KVTIER_ASSIGN_OR_RETURN(CacheLease lease, cache.acquire(std::move(look), ns, key));
  engine::SequenceKV kv;
  KVTIER_RETURN_IF_ERROR(cached_prefill(engine, cache, lease, kv, segment).status());
  const uint32_t computed = uint32_t(segment.size()) - lease.report().reused_tokens();
  KVTIER_RETURN_IF_ERROR(cache.commit(lease, segment));
  return computed;
}

// The segment's cached whole pages, every one in place or loading.
Result<HeldSegment> hold_segment(KVCache& cache, const Namespace& ns, std::span<const TokenId> segment, PromptSegment at) {
  const std::vector<TokenId> key = lookup_key(segment);
  HeldSegment held;
  held.at = at;
  KVTIER_ASSIGN_OR_RETURN(held.lease, cache.acquire(ns, key, [&](const CacheLookup& look) {
    held.runs = look.runs;
    return cache.planner().use_all(look.runs, key.size());
  }));
  const CacheLease& l = held.lease;
  held.reused = l.recompute_end() > l.recompute_begin() ? l.recompute_begin() : l.cached_end();
  held.reused = std::min<uint32_t>(held.reused, uint32_t(segment.size()));
  return held;
}

// Stores first-seen segments past `exact`, then holds each one's cached KV.
// A segment that cannot be stored or held (the pool is full, a load failed)
// is simply not reused: the request computes it.
std::vector<HeldSegment> gather_segments(engine::Forward& engine, KVCache& cache, const Namespace& ns,
                                         std::span<const TokenId> prompt, std::span<const PromptSegment> segments,
                                         uint32_t exact, BlendReport& report) {
  std::vector<HeldSegment> held;
  // A segment at position 0 is the prompt's prefix: its KV computed alone is the prefix cache's (the
  // request commits it), and blending it would compute it twice for an approximate label.
  const auto reusable = [&](const PromptSegment& s) { return s.begin >= exact && s.begin > 0; };
  for (const PromptSegment& s : segments) {
    if (!reusable(s)) continue;
    auto computed = store_segment(engine, cache, ns, prompt.subspan(s.begin, s.end - s.begin));
    if (computed.ok()) report.stored_segment_tokens += *computed;
  }
  for (const PromptSegment& s : segments) {
    if (!reusable(s)) continue;
    auto h = hold_segment(cache, ns, prompt.subspan(s.begin, s.end - s.begin), s);
    if (!h.ok()) continue;
    // The last prompt position yields the logits: it is always computed.
    h->reused = std::min<uint32_t>(h->reused, uint32_t(prompt.size()) - 1 - s.begin);
    if (h->reused > 0) held.push_back(std::move(*h));
  }
  return held;
}

// Plain prefill of positions from `from` on, waiting for the lease's loads (when blending does not
// pay, or a blended prefill failed on a segment); a load that fails is recomputed, as
// cached_prefill does: everything past the pages shared in place.
Result<engine::Logits> plain_from(engine::Forward& engine, KVCache& cache, CacheLease& lease, engine::SequenceKV& kv,
                                  std::span<const TokenId> prompt, uint32_t from) {
  kv.num_tokens = from;
  engine::PrefillOptions po;
  po.layer_hook = [&](LayerIdx l) { return lease.wait_layer(l); };
  auto out = engine.prefill(kv, prompt, from, po);
  if (out.ok() || lease.cached_end() == 0) return out;
  return recompute_after_failed_load(engine, cache, lease, kv, prompt);
}

// Segments are in order, disjoint, non-empty and inside the prompt.
Status check_segments(std::span<const PromptSegment> segments, size_t prompt_tokens) {
  uint32_t end = 0;
  for (const PromptSegment& s : segments) {
    if (s.begin < end || s.end <= s.begin || s.end > prompt_tokens)
      return Status::InvalidArgument("blend: segment [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                                     ") is empty, out of order or outside the prompt of " +
                                     std::to_string(prompt_tokens) + " tokens");
    end = s.end;
  }
  return Status::Ok();
}

}  // namespace

std::string_view blend_decision_name(BlendDecision d) {
  switch (d) {
    case BlendDecision::kNoSegments: return "no_segments";
    case BlendDecision::kDisabled: return "disabled";
    case BlendDecision::kUnsupported: return "unsupported";
    case BlendDecision::kInFull: return "computed_in_full";
    case BlendDecision::kFirstSeen: return "first_seen";
    case BlendDecision::kNothingToBlend: return "nothing_to_blend";
    case BlendDecision::kExactFaster: return "exact_faster";
    case BlendDecision::kFailed: return "failed";
    case BlendDecision::kBlended: return "blended";
  }
  return "unknown";
}

Status BlendPrefillOptions::validate() const {
  if (!(recompute_ratio >= 0.0f && recompute_ratio <= 1.0f))
    return Status::InvalidArgument("blend: recompute_ratio must be in [0, 1]");
  return Status::Ok();
}

std::vector<PromptSegment> segments_between(std::span<const TokenId> prompt, std::span<const TokenId> separator) {
  std::vector<PromptSegment> out;
  if (separator.empty()) return out;
  uint32_t begin = 0;
  for (uint32_t i = 0; i + separator.size() <= prompt.size();) {
    if (!std::equal(separator.begin(), separator.end(), prompt.begin() + i)) {
      ++i;
      continue;
    }
    if (i > begin) out.push_back({begin, i});
    i += uint32_t(separator.size());
    begin = i;
  }
  if (begin < prompt.size()) out.push_back({begin, uint32_t(prompt.size())});
  return out;
}

Result<BlendDecision> blend_intent(std::span<const PromptSegment> segments, size_t prompt_tokens,
                                   const BlendPrefillOptions& options, const engine::Forward& engine, bool in_full) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  KVTIER_RETURN_IF_ERROR(check_segments(segments, prompt_tokens));
  if (segments.empty()) return BlendDecision::kNoSegments;
  if (!options.enabled) return BlendDecision::kDisabled;
  if (!engine.supports_blend()) return BlendDecision::kUnsupported;
  if (in_full) return BlendDecision::kInFull;
  return BlendDecision::kFirstSeen;
}

Result<engine::Logits> blend_prefill(engine::Forward& engine, KVCache& cache, const Namespace& ns, CacheLease& lease,
                                     engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                     std::span<const PromptSegment> segments, const BlendPrefillOptions& options,
                                     BlendReport& report) {
  report = BlendReport{};
  report.exact_tokens = uint32_t(prompt.size());
  KVTIER_ASSIGN_OR_RETURN(report.decision, blend_intent(segments, prompt.size(), options, engine));
  if (report.decision != BlendDecision::kFirstSeen) return cached_prefill(engine, cache, lease, kv, prompt);
  Status front = prefill_front(engine, lease, kv, prompt);
  const uint32_t exact = lease.cached_end();
  if (!front.ok()) {
    report.decision = BlendDecision::kFailed;
    return cached_prefill(engine, cache, lease, kv, prompt);  // its fallback recomputes
  }

  std::vector<HeldSegment> held = gather_segments(engine, cache, ns, prompt, segments, exact, report);
  kv.pages = lease.pages();
  BlendShape shape{.exact_tokens = exact, .prompt_tokens = prompt.size(), .check_layer = options.check_layer,
                   .ratio = options.recompute_ratio};
  for (const HeldSegment& h : held) {
    shape.reused_tokens += h.reused;
    shape.segment_runs.insert(shape.segment_runs.end(), h.runs.begin(), h.runs.end());
  }
  const BlendEstimate estimate = cache.planner().estimate_blend(shape);
  report.predicted_full_s = estimate.full_s;
  report.predicted_blend_s = estimate.blend_s;
  const uint32_t layers = engine.model().config().num_layers;
  if (held.empty() && report.stored_segment_tokens == 0) report.decision = BlendDecision::kNothingToBlend;
  if (!held.empty()) report.decision = BlendDecision::kExactFaster;
  if (held.empty() || options.check_layer >= layers || !(options.force || estimate.blend())) {
    for (HeldSegment& h : held) cache.release(h.lease);
    return plain_from(engine, cache, lease, kv, prompt, exact);
  }

  std::vector<uint8_t> reused(prompt.size() - exact, 0);
  for (const HeldSegment& h : held) std::fill_n(reused.begin() + (h.at.begin - exact), h.reused, uint8_t(1));
  engine::BlendOptions blend{.reused = reused, .check_layer = options.check_layer,
                             .recompute_ratio = options.recompute_ratio, .random_seed = options.random_seed};
  bool lease_failed = false;
  engine::PrefillOptions po;
  po.blend = &blend;
  po.layer_hook = [&](LayerIdx l) -> Status {
    if (Status st = lease.wait_layer(l); !st.ok()) {
      lease_failed = true;
      return st;
    }
    if (l.value() < options.check_layer) return Status::Ok();  // recomputed for every position anyway
    for (HeldSegment& h : held) {
      if (Status st = h.lease.wait_layer(l); !st.ok()) {
        h.failed = true;
        return st;
      }
      KVTIER_RETURN_IF_ERROR(engine::move_kv(engine.model().config(), cache.pool(), l, h.lease.pages(), 0, kv.pages,
                                             h.at.begin, h.reused));
    }
    return Status::Ok();
  };
  kv.num_tokens = exact;
  auto out = engine.prefill(kv, prompt, exact, po);
  for (HeldSegment& h : held) {
    if (h.failed) {
      ++report.failed_segments;
      (void)cache.fall_back(h.lease);  // counts the failed load (the segment's lease is released, never written)
    }
    cache.release(h.lease);
  }
  if (!out.ok()) {
    report.decision = BlendDecision::kFailed;
    if (lease_failed) return recompute_after_failed_load(engine, cache, lease, kv, prompt);
    return plain_from(engine, cache, lease, kv, prompt, exact);
  }
  report.decision = BlendDecision::kBlended;
  report.blended = true;
  report.exact_tokens = held.front().at.begin;
  report.recomputed_tokens = blend.recomputed;
  report.blended_tokens = uint32_t(std::count(reused.begin(), reused.end(), uint8_t(1))) - blend.recomputed;
  return out;
}

}  // namespace kvtier
