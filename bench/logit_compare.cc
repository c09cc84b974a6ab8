#include "logit_compare.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvtier::bench {

namespace {

std::vector<double> log_softmax(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  const double log_sum = std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - mx - log_sum;
  return out;
}

}  // namespace

double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

double top_probability(std::span<const float> logits) {
  const auto lp = log_softmax(logits);
  return std::exp(*std::max_element(lp.begin(), lp.end()));
}

double top2_margin(std::span<const float> logits) {
  if (logits.size() < 2) return 0;
  float first = std::max(logits[0], logits[1]), second = std::min(logits[0], logits[1]);
  for (size_t i = 2; i < logits.size(); ++i) {
    if (logits[i] > first) {
      second = first;
      first = logits[i];
    } else if (logits[i] > second) {
      second = logits[i];
    }
  }
  return double(first) - double(second);
}

size_t same_positions(std::span<const TokenId> a, std::span<const TokenId> b) {
  size_t same = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) same += a[i] == b[i];
  return same;
}

size_t common_prefix_length(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace kvtier::bench
