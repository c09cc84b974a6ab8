#include "runtime/runtime.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <unordered_map>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "text/tokenizer.h"
#include "runtime/cached_prefill.h"
#include "runtime/prefill_trace.h"
#include "common/page_hash.h"
#include "tiers/tier_factory.h"

namespace kvtier {

namespace {

using SteadyClock = std::chrono::steady_clock;

// The plan's part of a trace, taken once loads are in flight.
void begin_trace(PrefillTrace& trace, const Plan& plan, size_t prompt_tokens, SteadyClock::time_point t0) {
  trace.plan = plan.segments;
  trace.predicted_s = plan.predicted_s;
  trace.predicted_load_s = plan.predicted_load_s;
  trace.predicted_compute_s = plan.predicted_compute_s;
  trace.recompute_all_s = plan.recompute_all_s;
  trace.prompt_tokens = uint32_t(prompt_tokens);
  trace.loads_submitted_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// Names the shared store behind a remote tier's URL by a digest of its sorted
// seed addresses: instances given the same store (in any order) agree, and
// the name says nothing of where it is or how to log in.
std::string remote_store_id(const std::string& url, const ChunkGeometry& geometry) {
  if (url.empty()) return {};
  auto r = RemoteTierOptions::from_url(url, geometry);
  if (!r.ok()) return {};
  std::vector<std::string> seeds;
  for (const RedisEndpoint& e : r->redis.seeds) seeds.push_back(e.to_string());
  std::sort(seeds.begin(), seeds.end());
  std::string all;
  for (const std::string& s : seeds) all += s + ",";
  return hash_bytes(HashAlgo::kXXH3_128, all.data(), all.size()).to_hex();
}

class RuntimeImpl final : public Runtime {
 public:
  RuntimeImpl(RuntimeOptions o, ServingStack stack, text::Tokenizer tok)
      : o_(std::move(o)), stack_(std::move(stack)), tok_(std::move(tok)),
        model_(stack_.model), cache_(stack_.cache.get()), engine_(stack_.engine.get()) {
    info_.name = model_->config().name;
    info_.vocab_size = model_->config().vocab_size;
    info_.max_context = model_->config().max_context;
    info_.weight_bytes = model_->weights().bytes();
    info_.eos = tok_.eos();
    info_.end_of_generation = tok_.end_of_generation_ids();
    info_.text = text_codec(tok_, model_->vocab());
    info_.fingerprint = model_->fingerprint();
    const uint64_t pool_tokens = uint64_t(cache_->pool().num_pages()) * o_.page_tokens;
    info_.max_kv_tokens = uint32_t(std::min<uint64_t>(pool_tokens, UINT32_MAX));
    info_.planner = std::make_shared<const Planner>(cache_->planner());
    info_.remote_store = remote_store_id(o_.remote_url, ChunkGeometry{cache_->options().geometry, o_.chunk_pages});
  }

  const ModelInfo& model() const override { return info_; }

  using Runtime::start;
  Result<Started> start(const PromptRequest& request, uint32_t chunk_tokens) override {
    const auto t0 = SteadyClock::now();
    const std::span<const TokenId> prompt = request.prompt;
    const SamplingParams& sp = request.sampling;
    if (prompt.empty()) return Status::InvalidArgument("prompt is empty");
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] < 0 || uint32_t(prompt[i]) >= info_.vocab_size)
        return Status::InvalidArgument("token id " + std::to_string(prompt[i]) + " at position " + std::to_string(i) +
                                       " is outside the vocabulary [0, " + std::to_string(info_.vocab_size) + ")");
    if (prompt.size() >= info_.max_context)
      return Status::InvalidArgument("prompt of " + std::to_string(prompt.size()) +
                                     " tokens does not fit the context of " + std::to_string(info_.max_context));
    if (prompt.size() > info_.max_kv_tokens)
      return Status::InvalidArgument("prompt of " + std::to_string(prompt.size()) + " tokens can never fit the device KV pool of " +
                                     std::to_string(info_.max_kv_tokens) + " tokens (" +
                                     std::to_string(cache_->pool().num_pages()) + " pages of " +
                                     std::to_string(o_.page_tokens) + ")");
    if (seqs_.size() >= o_.max_sequences)
      return Status::Busy("all " + std::to_string(o_.max_sequences) + " sequence slots are running");
    KVTIER_ASSIGN_OR_RETURN(auto sampler, engine::Sampler::create(sp));
    KVTIER_ASSIGN_OR_RETURN(BlendDecision blend, blend_intent(request.segments, prompt.size(), o_.blend, *engine_,
                                                              !o_.cache_enabled || sp.prompt_logprobs));

    Seq s{std::move(sampler)};
    s.ns = namespace_of(request);
    s.logprobs = sp.logprobs;
    s.retain = request.retain;
    s.tokens = request.prompt;
    s.prefill = std::make_unique<PromptPrefill>();
    PromptPrefill& p = *s.prefill;
    p.t0 = t0;
    p.prompt_logprobs = sp.prompt_logprobs;
    p.report.blend.decision = blend;
    p.report.blend.exact_tokens = uint32_t(prompt.size());
    if (blend == BlendDecision::kFirstSeen) p.segments = request.segments;
    // The race of this prefill: loads stamped by the transfer workers, compute by the traced engine.
    p.trace = std::make_shared<PrefillTrace>();
    p.trace->num_layers = model_->config().num_layers;
    p.trace->page_tokens = o_.page_tokens;
    KVTIER_RETURN_IF_ERROR(lease_prompt(s));
    const SeqId id(next_seq_++);
    return advance(id, seqs_.emplace(id.value(), std::move(s)).first->second, chunk_tokens);
  }

  Result<Started> prefill_more(SeqId id, uint32_t chunk_tokens) override {
    auto it = seqs_.find(id.value());
    if (it == seqs_.end()) return Status::NotFound("no running sequence " + std::to_string(id.value()));
    if (it->second.preempted) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is preempted");
    if (!it->second.prefill) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is prefilled");
    return advance(id, it->second, chunk_tokens);
  }

  uint32_t cached_prefix_tokens(const PromptRequest& request) override {
    if (!o_.cache_enabled || request.prompt.empty()) return 0;
    return cache_->cached_prefix_pages(namespace_of(request), request.prompt) * o_.page_tokens;
  }

  Result<PrefetchReport> prefetch(const PromptRequest& request) override {
    const std::span<const TokenId> prompt = request.prompt;
    if (!o_.cache_enabled || prompt.empty()) return PrefetchReport{};
    for (TokenId t : prompt)
      if (t < 0 || uint32_t(t) >= info_.vocab_size) return Status::InvalidArgument("prefetch: token outside the vocabulary");
    // Retention hints on a prefetch hold what it finds and reads ahead, for the longest hint's time,
    // ending at the request they are for only when every one of them says so.
    // covering the longest prefix a hint marks (a message's cache_control holds through that message).
    uint32_t hold_s = 0, hold_tokens = 0;
    bool until_used = !request.retain.empty();
    for (const RetainHint& h : request.retain)
      hold_s = std::max(hold_s, h.seconds), hold_tokens = std::max(hold_tokens, h.tokens), until_used &= h.until_used;
    const auto end = until_used ? KVCache::HoldEnd::kFirstUse : KVCache::HoldEnd::kTime;
    KVTIER_ASSIGN_OR_RETURN(const KVCache::PrefetchStart p, cache_->prefetch(namespace_of(request), prompt,
                                                                             std::chrono::seconds(hold_s), end, hold_tokens));
    return PrefetchReport{p.cached_pages * o_.page_tokens, p.loading_pages * o_.page_tokens,
                          p.promoting_pages * o_.page_tokens};
  }

  Result<std::vector<TokenId>> decode(std::span<const SeqId> ids) override {
    std::vector<engine::SequenceKV*> kvs;
    std::vector<TokenId> feed;
    std::vector<Seq*> ss;
    for (SeqId id : ids) {
      auto it = seqs_.find(id.value());
      if (it == seqs_.end()) return Status::NotFound("no running sequence " + std::to_string(id.value()));
      Seq& s = it->second;
      if (s.preempted) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is preempted");
      if (s.prefill) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is still prefilling");
      if (restoring(s)) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is still being resumed");
      if (s.kv.num_tokens + 1 >= info_.max_context)
        return Status::OutOfRange("sequence " + std::to_string(id.value()) + " reached the context limit");
      KVTIER_RETURN_IF_ERROR(cache_->grow(s.lease, s.kv.num_tokens + 1));
      if (s.kv.pages.size() != s.lease.pages().size()) s.kv.pages = s.lease.pages();
      kvs.push_back(&s.kv);
      feed.push_back(s.tokens.back());
      ss.push_back(&s);
    }
    KVTIER_ASSIGN_OR_RETURN(engine::Logits lg, engine_->decode(kvs, feed));
    std::vector<TokenId> out(ss.size());
    for (size_t i = 0; i < ss.size(); ++i) {
      out[i] = ss[i]->sampler.sample(lg.row(static_cast<uint32_t>(i)));
      ss[i]->tokens.push_back(out[i]);
      if (ss[i]->logprobs >= 0)
        ss[i]->last_logprobs = engine::token_logprobs(lg.row(uint32_t(i)), out[i], uint32_t(ss[i]->logprobs));
    }
    counters_.decode_tokens += ss.size();
    return out;
  }

  const engine::TokenLogprobs* last_logprobs(SeqId id) const override {
    auto it = seqs_.find(id.value());
    return it == seqs_.end() || it->second.logprobs < 0 ? nullptr : &it->second.last_logprobs;
  }

  Result<bool> preempt(SeqId id) override {
    auto it = seqs_.find(id.value());
    if (it == seqs_.end()) return Status::NotFound("no running sequence " + std::to_string(id.value()));
    Seq& s = it->second;
    if (s.preempted) return Status::FailedPrecondition("sequence " + std::to_string(id.value()) + " is already preempted");
    if (s.prefill) return preempt_prefill(s);
    BlockPool& pool = cache_->pool();
    const size_t page_bytes = pool.geometry().page_bytes();
    const size_t pages = (s.kv.num_tokens + o_.page_tokens - 1) / o_.page_tokens;
    // A lease with lossy KV is recomputed at resume, where its lookup labels it again: a raw copy
    // would come back in a fresh lease, which carries no lossy marks, and be committed as exact.
    // One still being resumed is too: its pages would come back too few for its tokens.
    const bool raw = s.lease.report().lossy_tokens == 0 && !restoring(s) &&
                     preempted_bytes_ + pages * page_bytes <= o_.host_bytes / 4;
    if (raw) {
      s.saved.resize(pages * page_bytes);
      std::vector<ByteCopy> copies(pages);
      for (size_t i = 0; i < pages; ++i) copies[i] = {s.saved.data() + i * page_bytes, pool.page(s.kv.pages[i]), page_bytes};
      KVTIER_RETURN_IF_ERROR(pool.memory().copy(copies));
      preempted_bytes_ += s.saved.size();
    }
    // Its exact KV is cached, so a resume that recomputes it finds what eviction has left of it
    // (device pages not yet reused, copies a lower tier took).
    (void)give_back(s, prefill_kv_tokens(s));
    s.kv.pages.clear();
    s.preempted = true;
    ++(raw ? counters_.preempted_raw : counters_.preempted_recompute);
    return raw;
  }

  using Runtime::resume;
  Result<Resumed> resume(SeqId id, uint32_t chunk_tokens) override {
    auto it = seqs_.find(id.value());
    if (it == seqs_.end()) return Status::NotFound("no running sequence " + std::to_string(id.value()));
    Seq& s = it->second;
    if (s.prefill) {  // the prefill goes on from what the cache holds
      if (s.preempted) KVTIER_RETURN_IF_ERROR(lease_prompt(s));
      return Resumed{};
    }
    if (s.preempted && !s.saved.empty()) KVTIER_RETURN_IF_ERROR(restore_raw(s));
    Resumed r;
    if (s.preempted || restoring(s)) {
      const bool fresh_lease = s.preempted;
      auto computed = recompute_kv(s, std::max<uint32_t>(chunk_tokens, 1));
      if (!computed.ok() && !s.preempted) seqs_.erase(it);  // a failed chunk ends the sequence, as a prompt's does
      KVTIER_ASSIGN_OR_RETURN(r.computed, std::move(computed));
      if (fresh_lease) r.lossy_tokens = s.lease.report().lossy_tokens;
    }
    r.left = uint32_t(s.tokens.size() - 1 - s.kv.num_tokens);
    return r;
  }

  uint32_t finish(SeqId id) override {
    auto it = seqs_.find(id.value());
    if (it == seqs_.end()) return 0;
    Seq& s = it->second;
    uint32_t retained = 0;
    if (s.preempted) {  // nothing on the device to commit
      preempted_bytes_ -= s.saved.size();
    } else {
      // Blended KV is approximate: only the exact front is cached; decoded KV is prefilled first.
      const auto committed = std::span(s.tokens).first(o_.cache_enabled ? prefill_decoded(s) : 0);
      if (give_back(s, uint32_t(committed.size())))
        for (const RetainHint& h : s.retain) {
          const auto kept = cache_->retain(s.ns, committed.first(std::min<size_t>(h.tokens, committed.size())),
                                           std::chrono::seconds(h.seconds));
          if (kept.ok()) retained = std::max(retained, *kept);
        }
    }
    seqs_.erase(it);
    return retained;
  }

  uint32_t free_device_pages() const override { return cache_->pool().free_pages(); }
  RuntimeStats stats() const override { return {cache_->stats(), counters_, stack_.profile, seqs_.size()}; }
  Status flush() override { return cache_->flush(); }
  void set_tenant_quotas(std::map<std::string, TenantQuota> quotas) override {
    cache_->set_tenant_quotas(std::move(quotas));
  }
  KVCacheStats::Tenant tenant_usage(const std::string& tenant) override { return cache_->tenant_usage(tenant); }
  TreeSnapshot cache_tree(const TreeSnapshotOptions& options) const override {
    return cache_->index().snapshot(options);
  }
  std::shared_ptr<KvEventLog> cache_events() const override { return cache_->events(); }
  void publish_cache_events() override { cache_->publish_events(); }
  KvSnapshot cache_event_snapshot() override { return cache_->event_snapshot(); }

 private:
  // The one place a request's namespace is formed: the model, its tenant, its salt.
  Namespace namespace_of(const PromptRequest& r) const {
    return Namespace{.model_fingerprint = info_.fingerprint, .adapter_id = {}, .cache_salt = r.cache_salt, .tenant = r.tenant};
  }

  // A prompt being computed (start(), prefill_more()); what its report needs until the first token.
  struct PromptPrefill {
    SteadyClock::time_point t0;
    bool prompt_logprobs = false;          // SamplingParams::prompt_logprobs
    std::vector<PromptSegment> segments;   // set only when it may blend (one call)
    bool begun = false;                    // the lease's loads are consumed (a chunk ran on it)
    // What the request's first lease found, kept when it was preempted: the lease taken at resume()
    // finds the pages the request computed itself, which its report does not count as cached. The
    // trace keeps that first lease's plan and loads, with every compute pass.
    std::optional<LeaseReport> first_lease;
    PrefillReport report;
    std::shared_ptr<PrefillTrace> trace;
    std::shared_ptr<LayerArrivals> arrivals;      // of the lease's loads
    std::vector<engine::TokenLogprobs> logprobs;  // of the prompt's tokens so far
  };

  struct Seq {
    engine::Sampler sampler;
    Namespace ns;
    CacheLease lease;
    engine::SequenceKV kv;
    std::vector<TokenId> tokens;  // prompt + sampled tokens; KV exists for the first kv.num_tokens
    int32_t logprobs = -1;        // SamplingParams::logprobs
    engine::TokenLogprobs last_logprobs;
    uint32_t exact_tokens = UINT32_MAX;  // KV past this position was blended: never committed
    uint32_t decoded_from = UINT32_MAX;  // KV from here on was written by decode steps
    std::unique_ptr<PromptPrefill> prefill;  // while the prompt is computed (tokens: the prompt)
    std::vector<RetainHint> retain;      // PromptRequest::retain
    bool preempted = false;              // its KV is off the device pool (preempt())
    std::vector<std::byte> saved;        // preempted raw: its pages' bytes; empty: recomputed at resume()
  };

  // The sequence's pages for its whole prompt, the cached prefix's loads started (a fresh lease
  // where the cache is off or every position's logits are asked). Busy: no room now; `s` unchanged.
  Status lease_prompt(Seq& s) {
    PromptPrefill& p = *s.prefill;
    const std::span<const TokenId> prompt = s.tokens;
    auto arrivals = std::make_shared<LayerArrivals>(model_->config().num_layers);
    ScopedLayerArrivals recording(arrivals);  // the loads the lease submits are stamped into it
    CacheLease lease;
    if (o_.cache_enabled && !p.prompt_logprobs) {
      KVTIER_ASSIGN_OR_RETURN(lease, cache_->acquire(s.ns, prompt));
    } else {
      KVTIER_ASSIGN_OR_RETURN(lease, cache_->fresh(s.ns, prompt.size()));
    }
    s.lease = std::move(lease);
    s.kv = {};
    s.preempted = false;
    p.arrivals = std::move(arrivals);
    p.begun = false;
    p.logprobs.clear();
    if (!p.first_lease) begin_trace(*p.trace, s.lease.plan(), prompt.size(), p.t0);
    return Status::Ok();
  }

  // The next chunk of the prompt: the first one on a lease waits for its loads (or blends, in one
  // call); later ones continue from the KV computed. On success kv.num_tokens is how far it got.
  Result<engine::Logits> compute_chunk(Seq& s, uint32_t chunk) {
    PromptPrefill& p = *s.prefill;
    const std::span<const TokenId> prompt = s.tokens;
    TracingForward traced(*engine_, *p.trace, p.t0);
    const auto end_from = [&](size_t from) { return std::min(prompt.size(), from + std::max<size_t>(chunk, 1)); };
    if (p.prompt_logprobs) {
      if (!p.begun) s.kv.pages = s.lease.pages();
      p.begun = true;
      return prefill_with_prompt_logprobs(traced, s.kv, prompt, end_from(s.kv.num_tokens),
                                          uint32_t(std::max(0, s.logprobs)), p.logprobs);
    }
    if (p.begun) return traced.prefill(s.kv, prompt.first(end_from(s.kv.num_tokens)), s.kv.num_tokens);
    p.begun = true;
    ScopedLayerArrivals recording(p.arrivals);  // and those blending submits
    auto logits = !p.segments.empty()
                      ? blend_prefill(traced, *cache_, s.ns, s.lease, s.kv, prompt, p.segments, o_.blend, p.report.blend)
                      : cached_prefill(traced, *cache_, s.lease, s.kv, prompt.first(end_from(s.lease.cached_end())));
    if (!p.first_lease) p.trace->take_arrivals(*p.arrivals, p.t0);  // every load was waited for
    return logits;
  }

  // One chunk of sequence `id`'s prompt, and the first token once it is all computed. A failed
  // chunk ends the sequence.
  Result<Started> advance(SeqId id, Seq& s, uint32_t chunk) {
    const bool first = !s.prefill->begun;
    const uint32_t before = s.kv.num_tokens;
    auto logits = compute_chunk(s, chunk);
    if (!logits.ok()) {
      seqs_.erase(id.value());
      return logits.status();
    }
    Started out;
    out.seq = id;
    // On a lease's first chunk, what was not reused: a recomputed front, or everything past a failed load.
    const uint32_t from = first ? s.lease.report().reused_tokens() : before;
    out.computed = s.kv.num_tokens - std::min(from, s.kv.num_tokens);
    out.prompt_left = uint32_t(s.tokens.size()) - s.kv.num_tokens;
    if (out.prompt_left == 0) first_token(s, *logits, out);
    return out;
  }

  // The prompt is computed: samples the first token and completes the report.
  void first_token(Seq& s, const engine::Logits& logits, Started& out) {
    PromptPrefill& p = *s.prefill;
    PrefillReport& rep = p.report;
    s.exact_tokens = rep.blend.blended ? rep.blend.exact_tokens : UINT32_MAX;
    s.decoded_from = s.kv.num_tokens;
    out.first_token = s.sampler.sample(logits.last());
    s.tokens.push_back(out.first_token);
    if (s.logprobs >= 0) s.last_logprobs = engine::token_logprobs(logits.last(), out.first_token, uint32_t(s.logprobs));
    rep.computed_in_full_for_logprobs = p.prompt_logprobs && o_.cache_enabled;
    rep.prompt_tokens = s.kv.num_tokens;
    const LeaseReport& lr = p.first_lease ? *p.first_lease : s.lease.report();
    for (int t = 0; t < kNumTiers; ++t) {
      rep.cached_tokens_by_tier[t] = lr.reused_tokens_by_tier[t];
      rep.bytes_loaded_by_tier[t] = lr.bytes_loaded_by_tier[t];
      rep.cached_tokens += lr.reused_tokens_by_tier[t];
    }
    rep.recomputed_cached_tokens = lr.recomputed_cached_tokens;
    // A lease taken at resume may have loaded what the first did not: approximate KV from a lossy
    // entry makes the answer approximate, whatever the first lease found (it was reported exact).
    rep.lossy_cached_tokens = std::max(lr.lossy_tokens, s.lease.report().lossy_tokens);
    rep.ttft_s = std::chrono::duration<double>(SteadyClock::now() - p.t0).count();
    p.trace->prefill_s = rep.ttft_s;
    rep.trace = std::move(p.trace);
    counters_.record(rep);
    out.report = std::move(rep);
    out.prompt_logprobs = std::move(p.logprobs);
    s.prefill.reset();
  }

  // A prompt being computed gives up its pages: what it computed is cached (or, without the cache,
  // dropped), and resume() leases the prompt again, finding that.
  Result<bool> preempt_prefill(Seq& s) {
    if (!s.prefill->first_lease) s.prefill->first_lease = s.lease.report();
    (void)give_back(s, s.kv.num_tokens);
    s.kv = {};
    s.preempted = true;
    ++counters_.preempted_recompute;
    return false;
  }

  // A preempted sequence kept raw: its pages' bytes copied back into fresh pages. Busy: not yet.
  Status restore_raw(Seq& s) {
    KVTIER_ASSIGN_OR_RETURN(CacheLease lease, cache_->fresh(s.ns, s.kv.num_tokens));
    BlockPool& pool = cache_->pool();
    const size_t page_bytes = pool.geometry().page_bytes();
    std::vector<ByteCopy> copies(s.saved.size() / page_bytes);
    for (size_t i = 0; i < copies.size(); ++i)
      copies[i] = {pool.page(lease.pages()[i]), s.saved.data() + i * page_bytes, page_bytes};
    KVTIER_RETURN_IF_ERROR(pool.memory().copy(copies));
    preempted_bytes_ -= s.saved.size();
    std::vector<std::byte>().swap(s.saved);
    s.lease = std::move(lease);
    s.kv.pages = s.lease.pages();
    s.preempted = false;
    return Status::Ok();
  }

  // Resumed, and its KV not yet back as far as its tokens go (resume() computes the rest).
  static bool restoring(const Seq& s) { return !s.preempted && !s.prefill && s.kv.num_tokens + 1 < s.tokens.size(); }

  // The next chunk of a sequence whose KV is computed again from its tokens (the last sampled one
  // is not in the KV yet: decode() feeds it next). The first, on a preempted sequence, takes pages
  // for all of them and the cache's (a lease: Busy when they do not fit, the sequence unchanged)
  // and computes from what it loads; later ones continue from the KV computed. Where the engine's
  // decode steps write what its prefill writes (Forward::decode_matches_prefill) the sequence goes
  // on bit for bit as it would have unpreempted; elsewhere its generated tokens' KV is prefill's,
  // which rounds otherwise.
  // Returns the positions it computed.
  Result<uint32_t> recompute_kv(Seq& s, uint32_t chunk) {
    const uint32_t known = uint32_t(s.tokens.size() - 1);
    const std::span<const TokenId> tokens(s.tokens.data(), known);
    if (!s.preempted) {
      const uint32_t from = s.kv.num_tokens;
      KVTIER_RETURN_IF_ERROR(engine_->prefill(s.kv, tokens.first(std::min<size_t>(known, size_t(from) + chunk)), from).status());
      return s.kv.num_tokens - from;
    }
    CacheLease lease;
    if (o_.cache_enabled) {
      KVTIER_ASSIGN_OR_RETURN(lease, cache_->acquire(s.ns, tokens));
    } else {
      KVTIER_ASSIGN_OR_RETURN(lease, cache_->fresh(s.ns, known));
    }
    engine::SequenceKV kv;
    const size_t end = std::min<size_t>(known, size_t(lease.cached_end()) + chunk);
    KVTIER_RETURN_IF_ERROR(cached_prefill(*engine_, *cache_, lease, kv, tokens.first(end)).status());
    const uint32_t computed = kv.num_tokens - std::min(kv.num_tokens, lease.report().reused_tokens());
    s.lease = std::move(lease);
    s.kv = std::move(kv);
    s.preempted = false;
    return computed;
  }

  // Where the engine's decode steps write KV that rounds otherwise than its prefill's (F32 weights,
  // whose BLAS products round by batch; the CUDA engine: Forward::decode_matches_prefill), the
  // whole pages of generated tokens are computed again by prefill before they are cached, so a
  // later hit on them is exactly what a prefill of the conversation computes. The tokens of a page
  // the cache will not keep (the partial last one) are not, nor those past reply_prefill_tokens
  // (the prefill holds every other stream meanwhile). How many of the sequence's positions may be
  // committed.
  uint32_t prefill_decoded(Seq& s) {
    const uint32_t known = std::min(s.kv.num_tokens, s.exact_tokens);
    const uint32_t prefilled = prefill_kv_tokens(s);
    if (prefilled == known) return known;
    const uint32_t end = uint32_t(std::min<uint64_t>(known, uint64_t(s.decoded_from) + o_.reply_prefill_tokens));
    const uint32_t whole = end / o_.page_tokens * o_.page_tokens;
    if (whole <= s.decoded_from) return prefilled;
    if (!engine_->prefill(s.kv, std::span(s.tokens).first(whole), s.decoded_from).ok()) return prefilled;
    counters_.decoded_tokens_prefilled += whole - s.decoded_from;
    return whole;
  }

  // The lease's pages go back to the pool, its first `tokens` positions committed to the cache where
  // the cache is on (else all released). Whether they were committed.
  bool give_back(Seq& s, uint32_t tokens) {
    if (!o_.cache_enabled) {
      cache_->release(s.lease);
      return false;
    }
    return cache_->commit(s.lease, std::span(s.tokens).first(tokens)).ok();
  }

  // The sequence's first positions whose KV is what a prefill of its tokens computes: all that are
  // exact (not blended) where decode steps write prefill's KV, else those before its decode steps.
  uint32_t prefill_kv_tokens(const Seq& s) const {
    const uint32_t known = std::min(s.kv.num_tokens, s.exact_tokens);
    return engine_->decode_matches_prefill() ? known : std::min(known, s.decoded_from);
  }

  RuntimeOptions o_;
  ServingStack stack_;
  text::Tokenizer tok_;
  std::shared_ptr<const engine::Model> model_;
  KVCache* cache_;
  engine::Forward* engine_;
  ModelInfo info_;
  std::unordered_map<uint64_t, Seq> seqs_;
  uint64_t next_seq_ = 1;
  size_t preempted_bytes_ = 0;  // of every Seq::saved
  RuntimeCounters counters_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(ServingStack stack, build_stack(options));
  const uint32_t layers = stack.model->config().num_layers;
  if (options.blend.enabled && options.blend.check_layer >= layers)  // it would never blend
    return Status::InvalidArgument("blend.check_layer (" + std::to_string(options.blend.check_layer) +
                                   ") must be below the model's " + std::to_string(layers) + " layers");
  KVTIER_ASSIGN_OR_RETURN(auto tok, text::Tokenizer::create(stack.model->vocab()));
  return std::unique_ptr<Runtime>(new RuntimeImpl(options, std::move(stack), std::move(tok)));
}

}  // namespace kvtier
