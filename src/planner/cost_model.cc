#include "planner/cost_model.h"

#include "common/file_text.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace kvtier {

namespace {
bool finite_nonneg(double x) { return std::isfinite(x) && x >= 0; }
}  // namespace

Status CostProfile::validate() const {
  // At least one operation a second: a subnormal rate made every predicted time infinite.
  if (!(gemm_flops_per_s >= 1) || !std::isfinite(gemm_flops_per_s))
    return Status::InvalidArgument("CostProfile: gemm_flops_per_s must be a finite number >= 1");
  if (!(attn_flops_per_s >= 1) || !std::isfinite(attn_flops_per_s))
    return Status::InvalidArgument("CostProfile: attn_flops_per_s must be a finite number >= 1");
  for (int t = 0; t < kNumTiers; ++t) {
    const TierLink& l = links[t];
    if (!finite_nonneg(l.latency_s) || !(l.bytes_per_s >= 0))
      return Status::InvalidArgument("CostProfile: tier " + std::string(tier_name(TierKind(t))) +
                                     " needs latency >= 0 and bandwidth >= 0");
  }
  return Status::Ok();
}

std::string CostProfile::to_json() const {
  nlohmann::json j;
  j["format"] = "kvtier-cost-profile-v1";
  j["source"] = source;
  j["gemm_flops_per_s"] = gemm_flops_per_s;
  j["attn_flops_per_s"] = attn_flops_per_s;
  for (int t = 0; t < kNumTiers; ++t) {
    const TierLink& l = links[t];
    if (TierKind(t) == TierKind::kDevice) continue;  // in place by definition
    j["tiers"][std::string(tier_name(TierKind(t)))] = {{"latency_s", l.latency_s}, {"bytes_per_s", l.bytes_per_s}};
  }
  return j.dump(2);
}

Result<CostProfile> CostProfile::from_json(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::InvalidArgument("cost profile: not a JSON object");
  if (j.value("format", "") != "kvtier-cost-profile-v1")
    return Status::InvalidArgument("cost profile: missing or unknown \"format\" (expected kvtier-cost-profile-v1)");
  CostProfile p;
  try {
    p.source = j.value("source", "");
    p.gemm_flops_per_s = j.at("gemm_flops_per_s").get<double>();
    p.attn_flops_per_s = j.at("attn_flops_per_s").get<double>();
    p.link(TierKind::kDevice) = TierLink{0, std::numeric_limits<double>::infinity()};
    if (j.contains("tiers")) {
      for (TierKind t : {TierKind::kHost, TierKind::kDisk, TierKind::kRemote}) {
        auto it = j["tiers"].find(std::string(tier_name(t)));
        if (it == j["tiers"].end()) continue;
        p.link(t) = TierLink{it->at("latency_s").get<double>(), it->at("bytes_per_s").get<double>()};
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("cost profile: ") + e.what());
  }
  KVTIER_RETURN_IF_ERROR(p.validate());
  return p;
}

Result<CostProfile> CostProfile::load(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, read_file(path, "cost profile"));
  auto r = from_json(text);
  if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

Status CostProfile::save(const std::string& path) const {
  KVTIER_RETURN_IF_ERROR(validate());
  std::ofstream out(path);
  out << to_json() << "\n";
  if (!out) return Status::IOError("cost profile: cannot write " + path);
  return Status::Ok();
}

Status ModelCost::validate() const {
  if (!(dense_flops_per_token > 0) || !std::isfinite(dense_flops_per_token))
    return Status::InvalidArgument("ModelCost: dense_flops_per_token must be a finite number > 0");
  if (!finite_nonneg(attn_flops_per_pair)) return Status::InvalidArgument("ModelCost: attn_flops_per_pair must be a finite number >= 0");
  if (num_layers == 0) return Status::InvalidArgument("ModelCost: num_layers must be > 0");
  if (kv_bytes_per_token == 0) return Status::InvalidArgument("ModelCost: kv_bytes_per_token must be > 0");
  for (const TierEncoding& e : encoding)
    if (!(e.stored_fraction > 0 && e.stored_fraction <= 1) || !(e.decode_bytes_per_s >= 0))
      return Status::InvalidArgument("ModelCost: a tier encoding needs stored_fraction in (0, 1] and decode_bytes_per_s >= 0");
  return Status::Ok();
}

double recompute_seconds(const CostProfile& p, const ModelCost& m, size_t n, size_t context) {
  if (n == 0) return 0;
  const double nn = static_cast<double>(n);
  const double pairs = nn * static_cast<double>(context) + nn * (nn + 1) / 2;
  return nn * m.dense_flops_per_token / p.gemm_flops_per_s + pairs * m.attn_flops_per_pair / p.attn_flops_per_s;
}

double load_seconds(const CostProfile& p, const ModelCost& m, TierKind t, size_t n) {
  if (n == 0 || t == TierKind::kDevice) return 0;
  const TierLink& l = p.link(t);
  if (!l.present()) return std::numeric_limits<double>::infinity();
  const TierEncoding& e = m.encoding[static_cast<size_t>(t)];
  const double raw = static_cast<double>(n) * static_cast<double>(m.kv_bytes_per_token);
  return l.latency_s + raw * e.stored_fraction / l.bytes_per_s + (e.decode_bytes_per_s > 0 ? raw / e.decode_bytes_per_s : 0.0);
}

}  // namespace kvtier
