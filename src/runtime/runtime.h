// Runtime: one model engine plus one KVCache, driven request by request.
//
// This is the serving loop's view of kvtier: add a sequence (its prompt is
// matched against the cache, the plan loads what is worth loading and the
// engine prefills only the rest), decode sequences in batches, finish them
// (their KV is committed to the cache for the next request). `kvtier serve`,
// `kvtier demo` and `kvtier bench ttft` are all built on it.
//
// Thread safety: a Runtime belongs to one thread (the scheduler's). Its
// worker threads (transfer engine, BLAS) are internal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "index/tree_snapshot.h"
#include "runtime/blend_prefill.h"
#include "kvtier/namespace.h"
#include "kvtier/types.h"
#include "text/tokenizer.h"

namespace kvtier {

struct PrefillTrace;  // runtime/prefill_trace.h

// A Runtime's options: the cache's (CacheConfig, cache/cache_config.h) and
// the model's, the engine's and the batch's. One row each in
// runtime_option_table(); `kvtier serve` adds its own (server/config.h).
struct RuntimeOptions : CacheConfig {
  std::string model = "small";      // engine preset (tiny, small, 1b) or a GGUF path
  uint64_t model_seed = 1;          // synthetic weights seed
  DType kv_dtype = DType::kF32;
  uint32_t page_tokens = 16;
  std::string device = "cpu";       // where KV pages and compute live: cpu | cuda (a CUDA build with a GPU)
  bool cache_enabled = true;        // false: every prompt is fully recomputed (the baseline)
  BlendPrefillOptions blend;        // non-prefix reuse of marked segments (runtime/blend_prefill.h)
  uint32_t max_sequences = 64;      // running sequences at once
  // Generated tokens prefilled again when a sequence ends, where the engine's decode steps write
  // KV that rounds otherwise than its prefill's (F32 weights, CUDA: engine::Forward::
  // decode_matches_prefill), so that their KV is cached as exactly what a prefill computes; a
  // longer reply is cached this far. The prefill runs on the scheduler's thread: this bounds how
  // long it holds other streams. Quantized and F16 weights on the CPU need none.
  uint32_t reply_prefill_tokens = 256;
  uint32_t threads = 0;             // compute threads; 0 = all cores

  Status validate() const;
};

// One row per option of RuntimeOptions, the cache's rows included (TOML
// sections [model], [cache], [blend], and limits.max_sequences).
const OptionTable<RuntimeOptions>& runtime_option_table();

// The sampler's options (engine::SamplerOptions: temperature, top_k, top_p, min_p, seed, logit
// bias, penalties) and what the runtime reports beside the tokens.
struct SamplingParams : engine::SamplerOptions {
  int32_t logprobs = -1;         // >= 0: log-probability of each sampled token and the top `logprobs` alternatives
  bool prompt_logprobs = false;  // also of every prompt token: needs logits at every position, so the prompt
                                 // is computed in full (no cached KV is used; its KV is still committed)
};

// What Runtime::start needs of a request. The server's requests extend it
// (server/api.h: GenerationRequest, CompletionRequest), so one request type
// runs from the HTTP parser down to the Runtime, never copied field by field.
// A retention hint (KVCache::retain): keep the cached first `tokens` of the
// sequence (prompt and completion; UINT32_MAX: all of it) for `seconds`.
// `until_used`: on a prefetch, the hold also ends at the first request that
// finds the prefix (KVCache::HoldEnd::kFirstUse: a read-ahead's deadline hold).
struct RetainHint {
  uint32_t tokens = UINT32_MAX;
  uint32_t seconds = 0;
  bool until_used = false;
};

struct PromptRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  std::string cache_salt;               // the client's isolation salt (within its tenant)
  std::string tenant;                   // the authenticated tenant (server/auth.h); "": none
  std::vector<PromptSegment> segments;  // reusable pieces of the prompt (blend_prefill.h)
  std::vector<RetainHint> retain;       // applied when the sequence ends (Runtime::finish)
};

// Where the prompt's tokens came from, for usage reporting and metrics.
struct PrefillReport {
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;                      // served from cache, any tier
  uint32_t cached_tokens_by_tier[kNumTiers] = {};  // device, host, disk, remote
  uint32_t recomputed_cached_tokens = 0;           // cached but recomputed by the planner's choice
  uint32_t lossy_cached_tokens = 0;                // of cached_tokens, from lossy codec entries (approximate KV)
  uint64_t bytes_loaded_by_tier[kNumTiers] = {};
  bool computed_in_full_for_logprobs = false;      // prompt logprobs asked: the cache was not used
  BlendReport blend;                               // segments' non-prefix reuse (approximate when blend.blended)
  double ttft_s = 0;                               // lookup + load + prefill + first sample
  // When each layer's loads arrived and each layer was computed, with the
  // plan's predictions (runtime/prefill_trace.h); null when not recorded.
  std::shared_ptr<const PrefillTrace> trace;
};

struct RuntimeCounters {
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t cached_tokens_by_tier[kNumTiers] = {};
  uint64_t decode_tokens = 0;
  // Generated tokens whose decoded KV was computed again by prefill before it was cached (where
  // decode rounds otherwise: RuntimeOptions::reply_prefill_tokens; cached KV is always prefill's).
  uint64_t decoded_tokens_prefilled = 0;
  double ttft_seconds_sum = 0;
  // Preemption (Runtime::preempt): sequences whose KV left the device pool,
  // kept raw in host memory or to be recomputed at resume() (from the cache where it kept them).
  uint64_t preempted_raw = 0;
  uint64_t preempted_recompute = 0;
  // Non-prefix reuse (BlendReport), apart from exact cache hits.
  uint64_t blended_requests = 0;
  uint64_t blended_tokens = 0;          // segment KV kept (approximate)
  uint64_t blend_recomputed_tokens = 0; // segment positions recomputed by the selection
  uint64_t blend_stored_tokens = 0;     // computed to store first-seen segments
  uint64_t blend_failed_segments = 0;   // segment loads that failed verification (never used)

  void record(const PrefillReport& r);  // runtime_stats.cc
};

// A Runtime's statistics, as values: the server renders them as JSON and
// Prometheus text (server/stats_render.h); nothing below it formats them.
struct RuntimeStats {
  KVCacheStats cache;
  RuntimeCounters counters;
  CostProfile profile;     // what the planner prices with
  size_t running = 0;      // sequences holding KV pages
};

// Text ↔ ids with the model's tokenizer. Immutable and safe from any thread,
// and independent of the Runtime's lifetime (it shares the tokenizer's
// tables), so HTTP threads tokenize long prompts without holding up the
// scheduler. The text of ids is the text of each id in turn (every
// detokenize below): a stream appends each new token's.
struct TextCodec {
  std::function<std::vector<TokenId>(std::string_view text, const text::EncodeOptions& options)> tokenize;
  std::function<std::string(std::span<const TokenId> ids)> detokenize;
  std::function<std::string(std::span<const TokenId> ids)> detokenize_special;  // control tokens as their text
  // A reply's text: control tokens decode as nothing, except those in `shown` (a tool-call
  // format's marker, as [TOOL_CALLS] in Mistral's vocabularies), which decode as their text.
  std::string detokenize_showing(std::span<const TokenId> ids, std::span<const TokenId> shown) const;
  std::string chat_template;         // tokenizer.chat_template; empty when the model has none
  std::string bos_token, eos_token;  // their texts, as chat templates use them
  // The longest token's text in bytes (0: unknown). No token covers more
  // input bytes than this, so a text of B bytes has at least
  // B / max_token_bytes tokens: servers refuse long texts before tokenizing.
  uint32_t max_token_bytes = 0;
};

// The codec of a tokenizer and its vocabulary (what a Runtime's ModelInfo
// holds; the router builds one from a model file's tokenizer keys alone).
TextCodec text_codec(const text::Tokenizer& tok, const text::Vocab& vocab);

struct ModelInfo {
  std::string name;
  uint32_t vocab_size = 0;
  uint32_t max_context = 0;
  TokenId eos = -1;
  std::vector<TokenId> end_of_generation;  // sorted: EOS, EOT, EOM and end-of-turn tokens; generation stops at any
  PageHash fingerprint;
  uint64_t weight_bytes = 0;  // the weights as held in memory (their file types)
  TextCodec text;
  // The most tokens one sequence's KV can ever hold: the whole device pool
  // (0: no limit known). A request whose prompt plus completion exceeds it
  // can never run, however long it waits.
  uint32_t max_kv_tokens = 0;
  // What a router needs to price a prompt here as this instance's planner
  // does (null: not known, e.g. a test runtime), and which shared remote
  // store its remote tier is: a digest of the store's addresses, never the
  // addresses or credentials (empty: no remote tier). GET /v1/cache/config
  // publishes both.
  std::shared_ptr<const Planner> planner;
  std::string remote_store;

  // KV positions a request of `prompt` tokens generating up to `max_tokens` holds at its end:
  // the prompt's and those of the tokens fed back, every sampled one but the last (0 tokens: an
  // echo of the prompt only). It fits the device pool when this is at most max_kv_tokens.
  static uint64_t kv_tokens_needed(uint64_t prompt, uint32_t max_tokens) {
    return prompt + (max_tokens > 0 ? max_tokens - 1 : 0);
  }
  bool fits_kv_pool(uint64_t prompt, uint32_t max_tokens) const {
    return max_kv_tokens == 0 || kv_tokens_needed(prompt, max_tokens) <= max_kv_tokens;
  }

  bool is_end_of_generation(TokenId t) const {
    return std::binary_search(end_of_generation.begin(), end_of_generation.end(), t);
  }
};

// The model, cache and engine a Runtime is made of, built from options:
// loads the model, builds the KVCache (tiers from the options) and the
// engine on its pool, and calibrates the cost profile when no profile file
// is given. Benchmarks that drive the cache directly build one too.
struct ServingStack {
  std::shared_ptr<const engine::Model> model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<engine::Forward> engine;
  CostProfile profile;

  ServingStack() = default;
  ServingStack(ServingStack&&) noexcept = default;
  ServingStack& operator=(ServingStack&&) noexcept = default;
  ~ServingStack();  // the engine goes before the cache whose pool it uses
};
Result<ServingStack> build_stack(const RuntimeOptions& options);

class Runtime {
 public:
  virtual ~Runtime() = default;
  static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions& options);

  virtual const ModelInfo& model() const = 0;

  // Starts a sequence and prefills its prompt (cache lookup, plan, loads,
  // compute of the rest). The request's tenant and cache_salt are part of
  // its Namespace: requests of two tenants never share a page. Fails with
  // InvalidArgument for empty prompts, out-of-vocabulary ids or prompts that
  // do not fit the context or the whole device pool (model().max_kv_tokens),
  // and with Busy when max_sequences are running or running sequences hold
  // the pages it needs (it may fit once one finishes).
  // `first_token` is sampled from the last prompt position.
  // With sampling.prompt_logprobs, `prompt_logprobs[i]` is about prompt token i + 1.
  struct Started {
    SeqId seq;
    TokenId first_token = -1;  // once prompt_left is 0
    uint32_t prompt_left = 0;  // prompt positions not computed yet: prefill_more() computes them
    uint32_t computed = 0;     // prompt positions this call computed (not reused from the cache)
    PrefillReport report;      // once prompt_left is 0
    std::vector<engine::TokenLogprobs> prompt_logprobs;  // once prompt_left is 0
  };
  // Chunked prefill, so that a long prompt does not hold the streams decoding beside it: start()
  // takes the sequence's pages for the whole prompt and its cached prefix (loads and a recomputed
  // front included), but computes at most `chunk_tokens` (at least 1) of the positions past it;
  // prefill_more() computes the next ones, and the call that computes the last one samples the
  // first token. The result is the one-call prefill's (each chunk continues from the KV before
  // it, as a cache hit does). Until then decode() refuses the sequence; finish() caches the
  // positions computed so far; preempt() caches them too and drops the sequence's pages, and once
  // resume() has taken pages again the prefill goes on from what the cache then holds (the
  // report's cached tokens stay those the request found when it started).
  // `segments` mark reusable pieces of the prompt (blend_prefill.h): when the
  // planner blends them, the output is approximate, only the KV before the
  // first blended position is cached at finish(), and report.blend says so. A prompt that may
  // blend is computed by one call whatever `chunk_tokens` says.
  virtual Result<Started> start(const PromptRequest& request, uint32_t chunk_tokens) = 0;
  // NotFound for an unknown sequence, FailedPrecondition when it is preempted or prefilled.
  // A failed chunk ends the sequence (nothing of it is cached).
  virtual Result<Started> prefill_more(SeqId seq, uint32_t chunk_tokens) = 0;
  // The whole prompt at once.
  Result<Started> start(const PromptRequest& request) {
    KVTIER_ASSIGN_OR_RETURN(Started s, start(request, UINT32_MAX));
    while (s.prompt_left > 0) {
      KVTIER_ASSIGN_OR_RETURN(s, prefill_more(s.seq, UINT32_MAX));
    }
    return s;
  }
  // The same from loose parts (tests and tools).
  Result<Started> start(std::span<const TokenId> prompt, const SamplingParams& sampling, std::string_view cache_salt = {},
                        std::span<const PromptSegment> segments = {}) {
    PromptRequest r;
    r.prompt.assign(prompt.begin(), prompt.end());
    r.sampling = sampling;
    r.cache_salt = cache_salt;
    r.segments.assign(segments.begin(), segments.end());
    return start(r);
  }

  // Appends each sequence's last sampled token and samples the next one, in one batch.
  virtual Result<std::vector<TokenId>> decode(std::span<const SeqId> seqs) = 0;

  // The log-probabilities of the sequence's last sampled token, when its
  // sampling asked for them (null otherwise); valid until the next call.
  virtual const engine::TokenLogprobs* last_logprobs(SeqId) const { return nullptr; }

  // Preemption, for sequences that together outgrow the device pool while
  // decoding: preempt() takes the sequence's KV off the device pool — copied
  // raw into host memory (never through a codec) while the preempted copies
  // fit a quarter of the host tier's capacity and the KV is exact (a lossy
  // label would not survive the copy), else left to be recomputed — commits
  // its pages whose KV is what a prefill computes to the cache, and keeps its
  // tokens and sampler; decode() refuses it until resume() puts its KV back
  // in fresh pages (copied, or recomputed from its tokens and what the cache
  // still holds of them: Busy while they do not fit). Its output is the one it would have had unpreempted exactly
  // for the raw copy, and recomputed where the engine's decode steps write
  // the KV its prefill writes (engine::Forward::decode_matches_prefill) and
  // the prompt was computed exactly (docs/SERVER.md says when not).
  // Returns true when the KV was kept raw.
  virtual Result<bool> preempt(SeqId seq) = 0;
  // KV that is recomputed is computed in chunks, as a prompt's is: a call computes at most
  // `chunk_tokens` (at least 1) of its positions past what its cache lookup loads (and a
  // recomputed front the plan chose), so that a long sequence does not hold the streams decoding
  // beside it; resume() again computes the next ones, and decode() refuses it until `left` is 0.
  // preempt() and finish() take it as it stands. A prompt being computed leaves resume() with
  // `left` 0: prefill_more() goes on with it. Busy only on the call that takes the pages.
  struct Resumed {
    uint32_t computed = 0;      // positions this call computed
    uint32_t left = 0;          // positions resume() has still to compute
    uint32_t lossy_tokens = 0;  // positions its cache lookup loaded from lossy entries (approximate KV)
  };
  virtual Result<Resumed> resume(SeqId seq, uint32_t chunk_tokens) = 0;
  // All at once.
  Status resume(SeqId seq) {
    for (;;) {
      KVTIER_ASSIGN_OR_RETURN(Resumed r, resume(seq, UINT32_MAX));
      if (r.left == 0) return Status::Ok();
    }
  }

  // Ends a sequence: its full pages are committed to the cache; its pages
  // are released; its request's retention hints are applied to what was
  // committed. Returns the tokens retained (the longest hint's; 0: none).
  virtual uint32_t finish(SeqId seq) = 0;

  // Cache and runtime statistics (per tier occupancy, hits, bytes moved,
  // evictions, checksum failures, the options...). Cheap: a copy of counters.
  virtual RuntimeStats stats() const = 0;
  // Device pages on the pool's free list now (cached pages not in use are
  // not counted: they are reclaimed on demand). Cheap; /health reports it.
  virtual uint32_t free_device_pages() const { return 0; }
  // Starts reading the disk/remote part of the prompt's cached prefix into
  // host memory ahead of start() (a scheduler calls it for queued
  // requests). Best effort and bounded; no effect without the cache.
  // Returns the prompt's cached tokens (any tier) and how many of them are being read ahead.
  struct PrefetchReport {
    uint32_t cached_tokens = 0;
    uint32_t loading_tokens = 0;    // being read from disk or remote into the host tier
    uint32_t promoting_tokens = 0;  // being copied from the host tier into free device pages
  };
  // Only the request's prompt, tenant, cache_salt and retain are read: a
  // retention hint holds what the prefetch finds and reads ahead for the
  // longest hint's seconds (KVCache::prefetch's hold).
  virtual Result<PrefetchReport> prefetch(const PromptRequest& request) = 0;
  // Tokens of the prompt whose KV is cached on the device or host now (the
  // prefix index only: a pure read, microseconds; 0 without the cache). The
  // scheduler orders its queue by what is left to compute.
  virtual uint32_t cached_prefix_tokens(const PromptRequest& request) = 0;
  // Per-tenant budgets per tier (KVCache::set_tenant_quotas); replaces the previous set.
  virtual void set_tenant_quotas(std::map<std::string, TenantQuota> quotas) = 0;
  // A tenant's cached bytes per tier now, and its quota (what a response's usage reports).
  virtual KVCacheStats::Tenant tenant_usage(const std::string& tenant) = 0;
  // Drops every cached entry on every local tier (running sequences keep their pages).
  virtual Status flush() = 0;
  // A copy of the prefix index's tree for display (index/tree_snapshot.h),
  // reduced to options.max_nodes records; empty without a cache. O(nodes).
  virtual TreeSnapshot cache_tree(const TreeSnapshotOptions& options) const {
    (void)options;
    return {};
  }
  // The cache's event log (KVCache::events; thread-safe); null without a cache.
  virtual std::shared_ptr<KvEventLog> cache_events() const { return nullptr; }
  // KVCache::publish_events and event_snapshot (empty without a cache).
  virtual void publish_cache_events() {}
  virtual KvSnapshot cache_event_snapshot() { return {}; }
};

}  // namespace kvtier
