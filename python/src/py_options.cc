// kvtier.Cache's keyword options → KVCacheOptions. The names are the
// server's [cache] section's (docs/CONFIG.md); sizes are in bytes.
#include <functional>
#include <map>

#include "index/eviction_policy.h"
#include "py_cache.h"
#include "tiers/remote_tier.h"

namespace kvtier::python {

namespace {

using Setter = std::function<void(KVCacheOptions&, const py::handle&)>;

Status profile_from(const py::handle& v, CostProfile& out) {
  if (py::isinstance<py::dict>(v)) {
    const std::string text = py::cast<std::string>(py::module_::import("json").attr("dumps")(v));
    KVTIER_ASSIGN_OR_RETURN(out, CostProfile::from_json(text));
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(out, CostProfile::load(py::cast<std::string>(v)));
  return Status::Ok();
}

ModelCost model_cost_from(const py::dict& d, const KVGeometry& g) {
  ModelCost m;
  m.num_layers = g.num_layers;
  m.kv_bytes_per_token = g.bytes_per_token();
  m.dense_flops_per_token = py::cast<double>(d["dense_flops_per_token"]);
  m.attn_flops_per_pair = d.contains("attn_flops_per_pair") ? py::cast<double>(d["attn_flops_per_pair"]) : 0.0;
  return m;
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = {
      {"device_capacity", [](auto& o, auto v) { o.device_bytes = py::cast<size_t>(v); }},
      {"host_capacity", [](auto& o, auto v) { o.host_bytes = py::cast<size_t>(v); }},
      {"disk_capacity", [](auto& o, auto v) { o.disk_bytes = py::cast<size_t>(v); }},
      {"disk_dir", [](auto& o, auto v) { o.disk_dir = py::cast<std::string>(py::str(v)); }},
      {"disk_region_bytes", [](auto& o, auto v) { o.disk_region_bytes = py::cast<size_t>(v); }},
      {"disk_direct_io", [](auto& o, auto v) { o.disk_direct_io = py::cast<bool>(v); }},
      {"chunk_pages", [](auto& o, auto v) { o.chunk_pages = py::cast<uint32_t>(v); }},
      {"write_policy", [](auto& o, auto v) { o.write_policy = value_or_throw(parse_write_policy(py::cast<std::string>(v))); }},
      {"selective_hits", [](auto& o, auto v) { o.selective_hits = py::cast<uint32_t>(v); }},
      {"eviction", [](auto& o, auto v) { o.eviction = value_or_throw(parse_eviction_policy(py::cast<std::string>(v))); }},
      {"hash", [](auto& o, auto v) { o.hash = value_or_throw(parse_hash_algo(py::cast<std::string>(v))); }},
      {"layerwise", [](auto& o, auto v) { o.layerwise = py::cast<bool>(v); }},
      {"transfer_workers", [](auto& o, auto v) { o.transfer_workers = py::cast<uint32_t>(v); }},
      {"profile", [](auto& o, auto v) { throw_if_error(profile_from(v, o.profile)); }},
      {"model_cost", [](auto& o, auto v) { o.model_cost = model_cost_from(py::cast<py::dict>(v), o.geometry); }},
      {"disk_codec", [](auto& o, auto v) { o.disk_codec = value_or_throw(parse_kv_codec(py::cast<std::string>(v))); }},
      {"remote_codec", [](auto& o, auto v) { o.remote_codec = value_or_throw(parse_kv_codec(py::cast<std::string>(v))); }},
      {"host_codec", [](auto& o, auto v) { o.host_codec = value_or_throw(parse_kv_codec(py::cast<std::string>(v))); }},
      {"remote",
       [](auto& o, auto v) {
         auto ro = value_or_throw(
             RemoteTierOptions::from_url(py::cast<std::string>(v), ChunkGeometry{o.geometry, o.chunk_pages, o.remote_codec}));
         ro.accept_lossy = o.serves_lossy();
         o.remote = std::shared_ptr<Tier>(value_or_throw(RemoteTier::create(ro)));  // Redis down: starts degraded
       }},
  };
  return s;
}

}  // namespace

KVCacheOptions cache_options(const KVGeometry& geometry, const py::dict& options) {
  KVCacheOptions o;
  o.geometry = geometry;
  // Defaults for a cache without a calibrated profile: loading is preferred
  // to recompute on every present tier (a Python model's speed is unknown
  // here); model_cost is a placeholder until one is given.
  o.profile.gemm_flops_per_s = o.profile.attn_flops_per_s = 1e9;
  for (auto& l : o.profile.links) l = TierLink{0, 1e12};
  o.profile.source = "python default: always load";
  o.model_cost = ModelCost{.dense_flops_per_token = 2e9, .attn_flops_per_pair = 0, .num_layers = geometry.num_layers,
                           .kv_bytes_per_token = geometry.bytes_per_token()};
  // chunk_pages and the codecs first: the remote tier's geometry depends on them.
  for (const char* first : {"chunk_pages", "disk_codec", "remote_codec", "host_codec"})
    if (options.contains(first)) setters().at(first)(o, options[first]);
  for (auto [k, v] : options) {
    const std::string key = py::cast<std::string>(k);
    auto it = setters().find(key);
    if (it == setters().end()) throw StatusError(Status::InvalidArgument("Cache: unknown option '" + key + "'"));
    if (key != "chunk_pages" && key != "remote") it->second(o, v);  // codecs set twice: harmless
  }
  if (options.contains("remote")) setters().at("remote")(o, options["remote"]);
  return o;
}

}  // namespace kvtier::python
