#include "router/pricing.h"

namespace kvtier::router {

Belief believe(const HeldIndex& held, const PrefixTracker& routed, const HeldIndex* store,
               const BackendCacheConfig* config, const RoutedPrompt& p) {
  HeldIndex::Match m = held.match(p.chain, config ? config->chunk_pages : 0, store);
  if (const uint32_t n = routed.match(p.chain); n > m.pages()) m.runs.push_back({TierKind::kDevice, n - m.pages()});
  Belief out{m.pages(), m.pages(), -1, 0};
  if (!config || !config->planner || p.tokens == 0) return out;
  // A backend computes at least the prompt's last token: a prompt of whole pages reuses one page fewer.
  if (size_t(m.pages()) * config->page_tokens >= p.tokens && !m.runs.empty() && --m.runs.back().pages == 0)
    m.runs.pop_back();
  const Plan plan = config->planner->plan(m.runs, p.tokens);
  out.reused_pages = plan.reused_pages();
  out.price_s = plan.predicted_s;
  out.full_s = plan.recompute_all_s;
  return out;
}

void normalize_prices(std::span<Belief> beliefs) {
  double sum = 0;
  size_t n = 0;
  for (const Belief& b : beliefs)
    if (b.price_s >= 0 && b.full_s > 0) sum += b.full_s, ++n;
  for (Belief& b : beliefs)
    if (b.price_s >= 0) b.price_s = b.full_s > 0 ? b.price_s / b.full_s * (sum / double(n)) : 0;
}

}  // namespace kvtier::router
