// blend_prefill: non-prefix reuse (CacheBlend). A prompt marks some of its
// token ranges as reusable segments (documents that come back in any order
// and after any text). Each segment's KV is cached on its own: computed with
// the segment alone at positions 0.. and committed to the KVCache under the
// request's namespace as the prompt "the segment's tokens", so it lives in
// every tier (device, host, disk, Redis) with the prefix chunks' integrity
// checks, and a prompt that starts with the segment hits it exactly. A
// segment seen for the first time is computed and stored that way before the
// request's own prefill (the request pays for it; counted apart).
//
// The request then uses, in order: the exact cached prefix (its CacheLease),
// and for the rest of the prompt the segments' cached whole pages, moved to
// their positions with move_kv (keys turned by the offset) layer by layer as
// the engine reaches each layer, with selective recompute (BlendOptions).
// The planner decides between that and a plain prefill from the cost model;
// an engine without selective recompute (CUDA) always prefills plainly.
//
// Blended KV is approximate: the caller must cache (commit) only the first
// report.exact_tokens positions of the sequence, and label the request.
// A segment whose load fails verification is never used: the prompt is
// recomputed from the exact prefix. Called on the thread that owns the cache
// and the engine.
#pragma once

#include <span>

#include "cache/kv_cache.h"
#include "engine/engine.h"

namespace kvtier {

// Tokens [begin, end) of the prompt; segments are in order and disjoint.
struct PromptSegment {
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct BlendPrefillOptions {
  bool enabled = false;          // the server allows blending (--blend); else plain cached prefill
  uint32_t check_layer = 1;
  float recompute_ratio = 0.15f;
  bool force = false;            // blend whenever segments are cached (benchmarks); else the planner decides
  uint64_t random_seed = 0;      // benchmarks: recompute positions chosen at random (BlendOptions)

  Status validate() const;
};

// Why a prompt was or was not blended (usage.kvtier.blend.decision).
enum class BlendDecision : uint8_t {
  kNoSegments,    // the request marked no segments: it did not ask to blend
  kDisabled,      // the server does not blend (blend.enabled false)
  kUnsupported,   // the engine has no selective recompute (CUDA)
  kInFull,        // the prompt is computed whole: the request asked every position's logprobs, or
                  // the cache is off (blending reuses cached segments)
  kFirstSeen,     // segments were stored (computed alone) by this request, and none could be used in it
  kNothingToBlend,  // the exact cached prefix covered the segments, none spans a whole page, or
                    // the only one starts the prompt (a prefix: the prefix cache's)
  kExactFaster,   // the planner predicted the exact prefill faster
  kFailed,        // a load failed verification (a segment's, or the exact prefix's): recomputed exactly
  kBlended,
};
std::string_view blend_decision_name(BlendDecision d);

struct BlendReport {
  BlendDecision decision = BlendDecision::kNoSegments;
  bool blended = false;           // segment KV was used (the output is approximate)
  uint32_t exact_tokens = 0;      // leading positions whose KV is exact (commit only these)
  uint32_t blended_tokens = 0;    // segment positions whose cached KV was kept
  uint32_t recomputed_tokens = 0; // segment positions recomputed by the selection
  uint32_t stored_segment_tokens = 0;  // tokens computed to store first-seen segments
  uint32_t failed_segments = 0;   // segments whose load failed (never used)
  double predicted_full_s = 0, predicted_blend_s = 0;  // the planner's estimate
};

// `lease` comes from lookup/plan/apply of the whole prompt (as for
// cached_prefill); on success kv.num_tokens == prompt.size(). Segments out
// of order, overlapping, empty or past the prompt are InvalidArgument.
Result<engine::Logits> blend_prefill(engine::Forward& engine, KVCache& cache, const Namespace& ns, CacheLease& lease,
                                     engine::SequenceKV& kv, std::span<const TokenId> prompt,
                                     std::span<const PromptSegment> segments, const BlendPrefillOptions& options,
                                     BlendReport& report);

// What blend_prefill does with `segments` before any cache work: InvalidArgument for segments out
// of order, overlapping, empty or past the prompt (or bad options); kNoSegments, kDisabled,
// kUnsupported or kInFull (`in_full`: the caller computes the prompt whole, with no cached KV)
// when it will not try to blend (it runs a plain cached_prefill, which a caller may run itself, in
// parts); kFirstSeen when it will try.
Result<BlendDecision> blend_intent(std::span<const PromptSegment> segments, size_t prompt_tokens,
                                   const BlendPrefillOptions& options, const engine::Forward& engine,
                                   bool in_full = false);

// Segments from a separator (LMCache's convention, `--blend-separator`): the
// ranges between occurrences of `separator` in `prompt` (token ids); the
// separators' own tokens are computed, not reused. Empty separator: none.
std::vector<PromptSegment> segments_between(std::span<const TokenId> prompt, std::span<const TokenId> separator);

}  // namespace kvtier
