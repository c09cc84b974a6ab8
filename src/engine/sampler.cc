#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvtier::engine {

Status SamplerOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return Status::InvalidArgument("SamplerOptions: temperature must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Status::InvalidArgument("SamplerOptions: top_p must be in (0, 1]");
  return Status::Ok();
}

Result<Sampler> Sampler::create(const SamplerOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  return Sampler(o);
}

TokenId argmax(std::span<const float> logits) {
  TokenId best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = TokenId(i);
  return best;
}

TokenId Sampler::sample(std::span<const float> logits) {
  if (o_.temperature == 0.0f || logits.size() <= 1) return argmax(logits);
  cand_.clear();
  for (size_t i = 0; i < logits.size(); ++i) cand_.emplace_back(logits[i], TokenId(i));
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t k = cand_.size();
  if (o_.top_k > 0 && o_.top_k < k) {
    k = o_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), by_logit);
    cand_.resize(k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].first;
  double total = 0.0;
  for (auto& c : cand_) {
    c.first = std::exp((c.first - mx) / o_.temperature);
    total += c.first;
  }
  // Nucleus: keep the smallest prefix reaching top_p of the mass.
  double kept = 0.0;
  size_t n = 0;
  while (n < cand_.size()) {
    kept += cand_[n].first;
    ++n;
    if (kept >= o_.top_p * total) break;
  }
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= cand_[i].first;
    if (r < 0.0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

TokenLogprobs token_logprobs(std::span<const float> logits, TokenId token, uint32_t top) {
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - max);
  const float log_z = float(double(max) + std::log(sum));
  TokenLogprobs r;
  r.token = token;
  r.logprob = token >= 0 && size_t(token) < logits.size() ? logits[size_t(token)] - log_z : 0.0f;
  top = uint32_t(std::min<size_t>(top, logits.size()));
  if (top == 0) return r;
  std::vector<TokenId> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = TokenId(i);
  auto better = [&](TokenId a, TokenId b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), better);
  for (uint32_t k = 0; k < top; ++k) r.top.emplace_back(ids[k], logits[size_t(ids[k])] - log_z);
  return r;
}

}  // namespace kvtier::engine
