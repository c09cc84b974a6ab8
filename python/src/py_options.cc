// kvtier.Cache's keyword options → KVCacheOptions: every keyword is a row of
// the cache's option table (cache/cache_config.h; docs/CONFIG.md lists them
// with their Python names), parsed as the server parses its flags; sizes
// are bytes. `profile` (a dict or a path) and `model_cost` are Python's own.

#include "index/eviction_policy.h"
#include "py_cache.h"

namespace kvtier::python {

namespace {

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

// A Python value as the text its option row parses: sizes are bytes.
std::string option_text(const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return py::cast<bool>(v) ? "true" : "false";
  return py::cast<std::string>(py::str(v));
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
  for (auto [k, v] : options) {
    const std::string key = py::cast<std::string>(k);
    if (key == "profile") {
      throw_if_error(profile_from(v, o.profile));
    } else if (key == "model_cost") {
      o.model_cost = model_cost_from(py::cast<py::dict>(v), o.geometry);
    } else if (const Option<CacheConfig>* row = find_python_option(cache_option_table(), key)) {
      throw_if_error(row->apply(o, option_text(v), "Cache: " + key));
    } else {
      throw StatusError(Status::InvalidArgument("Cache: unknown option '" + key + "' (docs/CONFIG.md lists them)"));
    }
  }
  throw_if_error(require_authenticated_remote(o));  // remote= needs tier_secret_file (or remote_insecure=True)
  return o;
}

}  // namespace kvtier::python
