#include "blend_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "common/stats.h"
#include "engine/sampler.h"
#include "logit_compare.h"
#include "prompt_text.h"
#include "runtime/blend_prefill.h"
#include "runtime/cached_prefill.h"
#include "runtime/runtime.h"

namespace kvtier::bench {

namespace {

using SteadyClock = std::chrono::steady_clock;
double ms_since(SteadyClock::time_point t0) { return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count(); }

struct Request {
  std::vector<TokenId> tokens;
  std::vector<PromptSegment> segments;
};

// One prefill's outcome: the last position's logits and greedy continuation.
struct Run {
  double ms = 0;
  std::vector<float> logits;
  std::vector<TokenId> greedy;
  BlendReport report;
};

class Driver {
 public:
  Driver(ServingStack& s, Namespace ns) : s_(s), ns_(std::move(ns)) {}

  // The prompt on its own, computed and committed (a document of the pool).
  Status cache_alone(std::span<const TokenId> tokens) {
    KVTIER_ASSIGN_OR_RETURN(CacheLookup look, s_.cache->lookup(ns_, tokens));
    const Plan plan = s_.cache->plan(look);
    KVTIER_ASSIGN_OR_RETURN(CacheLease lease, s_.cache->apply(std::move(look), plan));
    engine::SequenceKV kv;
    KVTIER_RETURN_IF_ERROR(cached_prefill(*s_.engine, *s_.cache, lease, kv, tokens).status());
    return s_.cache->commit(lease, tokens);
  }

  // mode: "full" (no reuse), "prefix" (exact prefix only) or "blend" (with `options`).
  Result<Run> run(const Request& r, const std::string& mode, const BlendPrefillOptions& options, uint32_t greedy) {
    const auto t0 = SteadyClock::now();
    CacheLease lease;
    if (mode == "full") {
      KVTIER_ASSIGN_OR_RETURN(lease, s_.cache->fresh(ns_, r.tokens.size()));
    } else {
      KVTIER_ASSIGN_OR_RETURN(CacheLookup look, s_.cache->lookup(ns_, r.tokens));
      const Plan plan = s_.cache->plan(look);
      KVTIER_ASSIGN_OR_RETURN(lease, s_.cache->apply(std::move(look), plan));
    }
    engine::SequenceKV kv;
    Run out;
    const std::vector<PromptSegment> none;
    KVTIER_ASSIGN_OR_RETURN(engine::Logits lg, blend_prefill(*s_.engine, *s_.cache, ns_, lease, kv, r.tokens,
                                                             mode == "blend" ? r.segments : none, options, out.report));
    out.ms = ms_since(t0);
    out.logits.assign(lg.last().begin(), lg.last().end());
    KVTIER_RETURN_IF_ERROR(decode_greedy(lease, kv, engine::argmax(lg.last()), greedy, out.greedy));
    if (mode == "blend") {
      KVTIER_RETURN_IF_ERROR(s_.cache->commit(lease, std::span(r.tokens).first(out.report.exact_tokens)));
    } else {
      s_.cache->release(lease);
    }
    return out;
  }

 private:
  Status decode_greedy(CacheLease& lease, engine::SequenceKV& kv, TokenId first, uint32_t steps, std::vector<TokenId>& out) {
    TokenId t = first;
    for (uint32_t i = 0; i < steps; ++i) {
      out.push_back(t);
      KVTIER_RETURN_IF_ERROR(s_.cache->grow(lease, kv.num_tokens + 1));
      kv.pages = lease.pages();
      engine::SequenceKV* seqs[] = {&kv};
      KVTIER_ASSIGN_OR_RETURN(engine::Logits d, s_.engine->decode(seqs, std::span(&t, 1)));
      t = engine::argmax(d.last());
    }
    return Status::Ok();
  }

  ServingStack& s_;
  Namespace ns_;
};

// System prompt, documents drawn without repetition in random order, question.
Request make_request(std::mt19937_64& rng, const std::vector<TokenId>& system,
                     const std::vector<std::vector<TokenId>>& docs, const BlendBenchOptions& o, const PromptText& text) {
  Request r;
  r.tokens = system;
  std::vector<uint32_t> order(docs.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (uint32_t k = 0; k < o.docs_per_request; ++k) {
    const auto& d = docs[order[k]];
    r.segments.push_back({uint32_t(r.tokens.size()), uint32_t(r.tokens.size() + d.size())});
    r.tokens.insert(r.tokens.end(), d.begin(), d.end());
  }
  const auto q = text.draw(rng, o.question_tokens);
  r.tokens.insert(r.tokens.end(), q.begin(), q.end());
  return r;
}

Result<ServingStack> make_stack(const BlendBenchOptions& o) {
  RuntimeOptions ro;
  ro.model = o.model;
  ro.kv_dtype = DType::kF16;
  ro.threads = o.threads;
  ro.max_sequences = 1;
  ro.host_bytes = 0;
  ro.device_bytes = size_t(64) << 20;
  KVTIER_ASSIGN_OR_RETURN(ServingStack probe, build_stack(ro));
  const size_t bpt = probe.cache->geometry().bytes_per_token();
  probe = ServingStack();
  const size_t prompt = o.system_tokens + size_t(o.docs_per_request) * o.doc_tokens + o.question_tokens + o.greedy_tokens;
  ro.device_bytes = (size_t(o.docs_pool) * (o.doc_tokens + 16) + 4 * prompt + 4096) * bpt;
  return build_stack(ro);
}

// Quality at each ratio, by deviation and at random, over the first quality requests.
Status measure_quality(Driver& d, const std::vector<Request>& requests, const std::vector<Run>& full,
                       const BlendBenchOptions& o, BlendBenchResult& res, std::FILE* progress) {
  const uint32_t n = std::min<uint32_t>(o.quality_requests, uint32_t(requests.size()));
  for (float ratio : o.ratios)
    for (bool random : {false, true}) {
      BlendQuality q{.ratio = ratio, .random = random};
      for (uint32_t i = 0; i < n; ++i) {
        BlendPrefillOptions bo{.enabled = true, .check_layer = o.check_layer, .recompute_ratio = ratio, .force = true,
                               .random_seed = random ? 1000 + i : 0};
        KVTIER_ASSIGN_OR_RETURN(Run b, d.run(requests[i], "blend", bo, o.greedy_tokens));
        q.kl_mean += kl_divergence(full[i].logits, b.logits) / n;
        q.top1 += double(b.greedy.front() == full[i].greedy.front()) / n;
        q.greedy += double(same_positions(b.greedy, full[i].greedy)) / double(b.greedy.size()) / n;
      }
      if (progress) std::fprintf(progress, "bench blend: ratio %.2f %s: KL %.4f\n", ratio, random ? "random" : "deviation", q.kl_mean);
      res.quality.push_back(q);
    }
  return Status::Ok();
}

}  // namespace

Status BlendBenchOptions::validate() const {
  if (docs_per_request == 0 || docs_per_request > docs_pool)
    return Status::InvalidArgument("bench blend: docs per request must be in [1, docs pool]");
  if (doc_tokens == 0 || requests == 0 || greedy_tokens == 0 || question_tokens == 0)
    return Status::InvalidArgument("bench blend: doc tokens, requests, greedy tokens and question tokens must be > 0");
  for (float r : ratios)
    if (!(r >= 0 && r <= 1)) return Status::InvalidArgument("bench blend: ratios must be in [0, 1]");
  if (!(ratio >= 0 && ratio <= 1)) return Status::InvalidArgument("bench blend: --ratio must be in [0, 1]");
  return Status::Ok();
}

Result<BlendBenchResult> run_blend_bench(const BlendBenchOptions& o, std::FILE* progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  KVTIER_ASSIGN_OR_RETURN(ServingStack s, make_stack(o));
  KVTIER_ASSIGN_OR_RETURN(const PromptText text, PromptText::open(*s.model, o.text));
  std::mt19937_64 rng(o.seed);
  const auto system = text.draw(rng, o.system_tokens);
  std::vector<std::vector<TokenId>> docs;
  for (uint32_t i = 0; i < o.docs_pool; ++i) docs.push_back(text.draw(rng, o.doc_tokens));
  Driver d(s, Namespace{s.model->fingerprint(), "", "bench-blend"});
  BlendBenchResult res;
  res.model = o.model;
  res.text = text.source();
  res.requests = o.requests;
  const auto t0 = SteadyClock::now();
  if (progress) std::fprintf(progress, "bench blend: caching %u documents of %u tokens...\n", o.docs_pool, o.doc_tokens);
  for (const auto& doc : docs) KVTIER_RETURN_IF_ERROR(d.cache_alone(doc));
  res.warmup_s = ms_since(t0) / 1e3;

  std::vector<Request> requests;
  std::vector<Run> full;
  std::vector<double> full_ms, prefix_ms, blend_ms;
  const BlendPrefillOptions forced{.enabled = true, .check_layer = o.check_layer, .recompute_ratio = o.ratio, .force = true};
  for (uint32_t i = 0; i < o.requests; ++i) {
    requests.push_back(make_request(rng, system, docs, o, text));
    const Request& r = requests.back();
    res.prompt_tokens = uint32_t(r.tokens.size());
    if (progress) std::fprintf(progress, "bench blend: request %u/%u (%zu tokens)...\n", i + 1, o.requests, r.tokens.size());
    KVTIER_ASSIGN_OR_RETURN(Run f, d.run(r, "full", {}, o.greedy_tokens));
    KVTIER_ASSIGN_OR_RETURN(Run b, d.run(r, "blend", forced, 1));
    KVTIER_ASSIGN_OR_RETURN(Run p, d.run(r, "prefix", {}, 1));
    full_ms.push_back(f.ms), blend_ms.push_back(b.ms), prefix_ms.push_back(p.ms);
    const bool chose = b.report.predicted_blend_s < b.report.predicted_full_s, faster = b.ms < f.ms;
    res.planner_chose_blend += chose;
    res.blend_was_faster += faster;
    res.planner_right += chose == faster;
    full.push_back(std::move(f));
  }
  res.ttft_full_ms = median(full_ms);
  res.ttft_prefix_ms = median(prefix_ms);
  res.ttft_blend_ms = median(blend_ms);
  KVTIER_RETURN_IF_ERROR(measure_quality(d, requests, full, o, res, progress));
  return res;
}

std::string BlendBenchResult::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["text"] = text;
  j["prompt_tokens"] = prompt_tokens;
  j["requests"] = requests;
  j["ttft_full_ms"] = ttft_full_ms;
  j["ttft_prefix_ms"] = ttft_prefix_ms;
  j["ttft_blend_ms"] = ttft_blend_ms;
  j["full_over_blend"] = ttft_blend_ms > 0 ? ttft_full_ms / ttft_blend_ms : 0;
  j["full_over_prefix"] = ttft_prefix_ms > 0 ? ttft_full_ms / ttft_prefix_ms : 0;
  j["planner_chose_blend"] = planner_chose_blend;
  j["blend_was_faster"] = blend_was_faster;
  j["planner_right"] = planner_right;
  j["warmup_s"] = warmup_s;
  for (const BlendQuality& q : quality)
    j["quality"].push_back({{"ratio", q.ratio}, {"selection", q.random ? "random" : "deviation"},
                            {"kl_mean", q.kl_mean}, {"top1", q.top1}, {"greedy_agreement", q.greedy}});
  return j.dump(2);
}

std::string BlendBenchResult::to_table() const {
  char buf[512];
  std::string out;
  std::snprintf(buf, sizeof buf,
                "model %s, prompt %u tokens, %u requests (medians)\nTTFT full %.1f ms, prefix cache %.1f ms (%.2fx), "
                "blend %.1f ms (%.2fx)\nplanner chose blend %u/%u, blend faster %u/%u, planner right %u/%u\n",
                model.c_str(), prompt_tokens, requests, ttft_full_ms, ttft_prefix_ms,
                ttft_prefix_ms > 0 ? ttft_full_ms / ttft_prefix_ms : 0, ttft_blend_ms,
                ttft_blend_ms > 0 ? ttft_full_ms / ttft_blend_ms : 0, planner_chose_blend, requests, blend_was_faster,
                requests, planner_right, requests);
  out += buf;
  out += "ratio  selection  KL(full||blend)  top-1  greedy agreement\n";
  for (const BlendQuality& q : quality) {
    std::snprintf(buf, sizeof buf, "%5.2f  %-9s  %15.5f  %5.2f  %16.3f\n", q.ratio, q.random ? "random" : "deviation",
                  q.kl_mean, q.top1, q.greedy);
    out += buf;
  }
  return out;
}

}  // namespace kvtier::bench
