#include "route_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/page_hash.h"
#include "planner/planner.h"
#include "router/policy.h"
#include "router/prefix_tracker.h"
#include "router/pricing.h"
#include "sim/timing_model.h"

namespace kvtier {

Status RouteBenchOptions::validate() const {
  if (backends == 0 || conversations == 0 || requests == 0 || page_tokens == 0 || prompt_tokens < page_tokens)
    return Status::InvalidArgument("bench route: backends, conversations, requests must be > 0 and the prompt a page or more");
  return Status::Ok();
}

namespace {

// Conversation c's tokens (a first page of its own, so chains never meet).
void conversation_tokens(uint64_t c, uint32_t n, std::vector<TokenId>& out) {
  out.resize(n);
  std::mt19937 rng(uint32_t(c * 2654435761u + 1));
  for (uint32_t i = 0; i < n; ++i) out[i] = TokenId(rng() % 32000);
}

double percentile(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

}  // namespace

Result<RouteBenchReport> run_route_bench(const RouteBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  using Clock = std::chrono::steady_clock;
  const uint64_t pages = o.prompt_tokens / o.page_tokens;
  std::vector<router::PrefixTracker> trackers;
  for (uint32_t b = 0; b < o.backends; ++b) trackers.emplace_back(o.conversations * pages);
  std::vector<TokenId> tokens;
  std::vector<PageHash> chain;
  const PageHash seed{1, 2};
  for (uint64_t c = 0; c < o.conversations; ++c) {
    conversation_tokens(c, o.prompt_tokens, tokens);
    chain.clear();
    hash_pages(HashAlgo::kXXH3_128, seed, tokens, o.page_tokens, chain);
    trackers[c % o.backends].insert(chain);
  }
  RouteBenchReport r;
  r.options = o;
  for (const auto& t : trackers) r.tracked_pages += t.size();
  std::vector<double> decide(o.requests), hash(o.requests);
  std::mt19937_64 pick(7);
  uint64_t rotation = 0;
  // Every backend priced by a planner (as `kvtier serve` publishes one); their event views empty, so
  // the trackers say what they hold.
  const std::vector<router::HeldIndex> held(o.backends);
  router::BackendCacheConfig config;
  config.page_tokens = o.page_tokens;
  config.chunk_pages = 16;
  // The replay's presets: a machine (its host, disk and remote links) and a model's cost per token.
  KVTIER_ASSIGN_OR_RETURN(const CostProfile machine, hardware_preset("h100-pcie5"));
  KVTIER_ASSIGN_OR_RETURN(const ReplayModel model, replay_model_preset("llama-3-8b", DType::kF16, o.page_tokens));
  KVTIER_ASSIGN_OR_RETURN(Planner planner, Planner::create({.page_tokens = o.page_tokens}, machine, model.cost));
  config.planner = std::make_shared<const Planner>(std::move(planner));
  std::vector<router::BackendView> views(o.backends);
  std::vector<router::Belief> beliefs(o.backends);
  router::RoutedPrompt prompt;
  for (uint32_t i = 0; i < o.requests; ++i) {
    const uint64_t c = pick() % o.conversations;
    conversation_tokens(c, o.prompt_tokens + o.page_tokens, tokens);  // the prefix, then one new page
    const auto t0 = Clock::now();
    prompt.chain.clear();
    prompt.tokens = tokens.size();
    hash_pages(HashAlgo::kXXH3_128, seed, tokens, o.page_tokens, prompt.chain);
    const auto t1 = Clock::now();
    for (uint32_t b = 0; b < o.backends; ++b) beliefs[b] = router::believe(held[b], trackers[b], nullptr, &config, prompt);
    router::normalize_prices(beliefs);
    for (uint32_t b = 0; b < o.backends; ++b) views[b] = {true, 0, beliefs[b].pages, beliefs[b].price_s};
    const auto choice = router::choose_backend(router::RoutePolicy::kCacheAware, views, rotation, 4);
    const auto t2 = Clock::now();
    r.cache_routed += choice && choice->backend == c % o.backends;
    hash[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    decide[i] = std::chrono::duration<double, std::micro>(t2 - t0).count();
  }
  r.decision_p50_us = percentile(decide, 0.5);
  r.decision_p99_us = percentile(decide, 0.99);
  r.hash_p50_us = percentile(hash, 0.5);
  r.decision_over_hash = r.hash_p50_us > 0 ? r.decision_p50_us / r.hash_p50_us : 0;
  return r;
}

std::string RouteBenchReport::to_json() const {
  return nlohmann::json{{"backends", options.backends},
                        {"conversations", options.conversations},
                        {"prompt_tokens", options.prompt_tokens},
                        {"tracked_pages", tracked_pages},
                        {"requests", options.requests},
                        {"decision_p50_us", decision_p50_us},
                        {"decision_p99_us", decision_p99_us},
                        {"hash_p50_us", hash_p50_us},
                        {"decision_over_hash", decision_over_hash},
                        {"cache_routed", cache_routed}}
      .dump();
}

std::string RouteBenchReport::to_table() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%u backends, %llu conversations of %u tokens (%llu pages tracked), %u requests\n"
                "decision (hash + match + price + choose)  p50 %.2f us  p99 %.2f us\n"
                "hashing the prompt alone           p50 %.2f us  (decision / hash %.2f)\n"
                "routed to the backend holding the prefix: %llu of %u\n",
                options.backends, (unsigned long long)options.conversations, options.prompt_tokens,
                (unsigned long long)tracked_pages, options.requests, decision_p50_us, decision_p99_us, hash_p50_us,
                decision_over_hash, (unsigned long long)cache_routed, options.requests);
  return buf;
}

}  // namespace kvtier
