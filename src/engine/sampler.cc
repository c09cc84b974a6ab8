#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvtier::engine {

Status SamplerOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return Status::InvalidArgument("SamplerOptions: temperature must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Status::InvalidArgument("SamplerOptions: top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Status::InvalidArgument("SamplerOptions: min_p must be in [0, 1]");
  for (float p : {presence_penalty, frequency_penalty})
    if (!(p >= -2.0f && p <= 2.0f)) return Status::InvalidArgument("SamplerOptions: penalties must be in [-2, 2]");
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || !(bias >= -100.0f && bias <= 100.0f))
      return Status::InvalidArgument("SamplerOptions: a logit bias needs a token id >= 0 and a bias in [-100, 100]");
  std::vector<TokenId> ids;
  for (const auto& entry : logit_bias) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    return Status::InvalidArgument("SamplerOptions: a token has two logit biases");
  return Status::Ok();
}

Result<Sampler> Sampler::create(const SamplerOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  return Sampler(o);
}

TokenId argmax(std::span<const float> logits) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isnan(logits[i]) && (!found || logits[i] > logits[best])) best = i, found = true;
  return TokenId(best);
}

namespace {

// Heavier first; equal weights: lower id first.
bool heavier(const std::pair<float, TokenId>& a, const std::pair<float, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

size_t Sampler::weigh(std::span<const float> logits) {
  cand_.clear();
  float mx = -std::numeric_limits<float>::infinity();
  size_t infinite = 0;
  for (float x : logits) {
    if (x == std::numeric_limits<float>::infinity()) ++infinite;
    else if (x > mx) mx = x;  // NaN compares false
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (infinite > 0) {
      if (x == std::numeric_limits<float>::infinity()) cand_.emplace_back(1.0f, TokenId(i));
    } else if (x > -std::numeric_limits<float>::infinity()) {
      cand_.emplace_back(std::exp((x - mx) / o_.temperature), TokenId(i));
    }
  }
  return cand_.size();
}

size_t Sampler::nucleus(double total) {
  // Sorted only as far as the nucleus reaches: a whole sort of a 128k vocabulary every token
  // cost ~12 ms of the scheduler's thread.
  for (size_t k = std::min<size_t>(64, cand_.size());; k = std::min(cand_.size(), k * 4)) {
    std::partial_sort(cand_.begin(), cand_.begin() + ptrdiff_t(k), cand_.end(), heavier);
    double kept = 0.0;
    for (size_t n = 0; n < k; ++n)
      if ((kept += cand_[n].first) >= o_.top_p * total) return n + 1;
    if (k == cand_.size()) return k;
  }
}

std::span<const float> Sampler::adjusted(std::span<const float> logits) {
  const bool penalised = o_.presence_penalty != 0.0f || o_.frequency_penalty != 0.0f;
  if (o_.logit_bias.empty() && (!penalised || drawn_.empty())) return logits;
  adjusted_.assign(logits.begin(), logits.end());
  for (const auto& [id, bias] : o_.logit_bias)
    if (size_t(id) < adjusted_.size()) adjusted_[size_t(id)] += bias;
  for (const auto& [id, count] : drawn_)
    if (size_t(id) < adjusted_.size()) adjusted_[size_t(id)] -= o_.frequency_penalty * float(count) + o_.presence_penalty;
  return adjusted_;
}

TokenId Sampler::sample(std::span<const float> raw) {
  const std::span<const float> logits = adjusted(raw);
  TokenId t;
  // Candidates: tokens with a finite logit, weighed by softmax at the temperature; where a logit
  // is +inf, the +inf tokens alone, alike; a NaN logit is never drawn (it made the whole mass NaN
  // and the least likely token came out).
  if (o_.temperature > 0.0f && logits.size() > 1 && weigh(logits) > 0) {
    if (o_.min_p > 0.0f)  // weights are relative to the most likely token's (1)
      std::erase_if(cand_, [&](const auto& c) { return c.first < o_.min_p; });
    if (o_.top_k > 0 && o_.top_k < cand_.size()) {
      std::partial_sort(cand_.begin(), cand_.begin() + o_.top_k, cand_.end(), heavier);
      cand_.resize(o_.top_k);
    }
    t = draw();
  } else {
    t = argmax(logits);
  }
  if (o_.presence_penalty != 0.0f || o_.frequency_penalty != 0.0f) {
    auto it = std::find_if(drawn_.begin(), drawn_.end(), [&](const auto& d) { return d.first == t; });
    if (it == drawn_.end()) drawn_.emplace_back(t, 1);
    else ++it->second;
  }
  return t;
}

TokenId Sampler::draw() {
  double total = 0.0;
  for (const auto& c : cand_) total += c.first;
  const size_t n = o_.top_p < 1.0f ? nucleus(total) : cand_.size();
  double kept = 0.0;
  for (size_t i = 0; i < n; ++i) kept += cand_[i].first;
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
