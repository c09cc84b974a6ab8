// kvtier.Model (a GGUF file read by kvtier's reader, weights as read-only
// NumPy views) and kvtier.ReferenceEngine (kvtier's C++ engine on that model:
// the reference a Python model is compared with).
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/sampler.h"
#include "py_cache.h"
#include "runtime/cached_prefill.h"
#include "runtime/calibration.h"

namespace kvtier::python {

namespace {

using ModelPtr = std::shared_ptr<const engine::Model>;
using Holder = std::shared_ptr<engine::Model>;  // pybind11 holders cannot be shared_ptr<const T>; never mutated

// A read-only [rows][cols] view of model weights, keeping the model alive.
py::array weight_view(const ModelPtr& model, const float* data, size_t rows, size_t cols) {
  py::capsule keep(new ModelPtr(model), [](void* p) { delete static_cast<ModelPtr*>(p); });
  py::array a = cols == 0 ? py::array_t<float>({py::ssize_t(rows)}, {py::ssize_t(sizeof(float))}, data, keep)
                          : py::array_t<float>({py::ssize_t(rows), py::ssize_t(cols)},
                                               {py::ssize_t(cols * sizeof(float)), py::ssize_t(sizeof(float))}, data, keep);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// A matrix as a read-only [rows][cols] f32 array: a view of the model's own floats when the
// matrix is one F32 part, otherwise dequantized into a new array (one tensor at a time).
py::array matrix_f32(const ModelPtr& model, const engine::Linear& w) {
  if (const float* f = w.f32()) return weight_view(model, f, w.rows(), w.cols());
  auto* values = new std::vector<float>(w.to_f32());
  py::capsule keep(values, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  py::array a = py::array_t<float>({py::ssize_t(w.rows()), py::ssize_t(w.cols())},
                                   {py::ssize_t(w.cols() * sizeof(float)), py::ssize_t(sizeof(float))}, values->data(), keep);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::dict config_dict(const engine::ModelConfig& c) {
  py::dict d;
  d["name"] = c.name;
  d["arch"] = std::string(engine::arch_name(c.arch));
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["num_layers"] = c.num_layers;
  d["num_heads"] = c.num_heads;
  d["num_kv_heads"] = c.num_kv_heads;
  d["head_dim"] = c.head_dim;
  d["ffn_size"] = c.ffn_size;
  d["rope_theta"] = c.rope_theta;
  d["rope_style"] = c.rope_style() == engine::RopeStyle::kAdjacentPairs ? "adjacent_pairs" : "rotate_half";
  d["rms_eps"] = c.rms_eps;
  d["tied_embeddings"] = c.tied_embeddings;
  d["max_context"] = c.max_context;
  return d;
}

py::dict layer_dict(const ModelPtr& m, uint32_t i) {
  const auto& c = m->config();
  if (i >= c.num_layers) throw py::index_error("Model.layer: no layer " + std::to_string(i));
  const auto& w = m->weights().layers[i];
  const size_t h = c.hidden_size, qkv = c.q_dim() + 2 * size_t(c.kv_dim());  // qkv: bqkv's length
  py::dict d;
  d["attn_norm"] = weight_view(m, w.attn_norm.data(), h, 0);
  d["wqkv"] = matrix_f32(m, w.wqkv);
  if (!w.bqkv.empty()) d["bqkv"] = weight_view(m, w.bqkv.data(), qkv, 0);
  d["wo"] = matrix_f32(m, w.wo);
  d["ffn_norm"] = weight_view(m, w.ffn_norm.data(), h, 0);
  d["w_gate_up"] = matrix_f32(m, w.w_gate_up);
  d["w_down"] = matrix_f32(m, w.w_down);
  return d;
}

// kvtier's C++ engine over its own small cache (no tiers): full recompute.
struct ReferenceEngine {
  ModelPtr model;
  std::unique_ptr<KVCache> cache;
  std::unique_ptr<engine::Forward> engine;
  std::mutex mu;  // one generate() at a time: the cache and the engine belong to one thread

  // Greedy decoding: the last prompt position's logits (all positions' with
  // all_logits) and `steps` generated tokens.
  std::pair<py::array, std::vector<TokenId>> generate(std::vector<TokenId> prompt, int steps, bool all_logits) {
    engine::Logits first;
    std::vector<TokenId> out;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lk(mu);
      const Namespace ns{model->fingerprint(), "", ""};
      CacheLease lease = value_or_throw(cache->fresh(ns, prompt.size() + size_t(steps)));
      engine::SequenceKV kv;
      first = value_or_throw(cached_prefill(*engine, *cache, lease, kv, prompt, {.all_logits = all_logits}));
      TokenId t = engine::argmax(first.last());
      for (int i = 0; i < steps; ++i) {
        out.push_back(t);
        engine::SequenceKV* seqs[] = {&kv};
        t = engine::argmax(value_or_throw(engine->decode(seqs, std::span(&t, 1))).last());
      }
      cache->release(lease);
    }
    py::array_t<float> logits({py::ssize_t(first.rows), py::ssize_t(first.vocab)});
    std::copy(first.data.begin(), first.data.end(), logits.mutable_data());
    return {all_logits ? logits : py::array(logits[py::int_(first.rows - 1)]), out};
  }
};

std::shared_ptr<ReferenceEngine> make_reference(const Holder& model, uint32_t max_tokens, uint32_t threads) {
  auto r = std::make_shared<ReferenceEngine>();
  r->model = model;
  KVCacheOptions o;
  o.geometry = model->config().kv_geometry(DType::kF32, 16);
  o.device_bytes = (size_t(max_tokens) / 16 + 2) * o.geometry.page_bytes();
  o.host_bytes = 0;
  o.profile.gemm_flops_per_s = o.profile.attn_flops_per_s = 1e9;
  o.model_cost = model_cost(model->config(), o.geometry);
  r->cache = value_or_throw(KVCache::create(o));
  engine::EngineOptions eo;
  eo.threads = threads;
  r->engine = value_or_throw(engine::create_forward(model, r->cache->pool(), eo));
  return r;
}

}  // namespace

void register_model(py::module_& m) {
  py::class_<engine::Model, Holder>(m, "Model", "A Llama-family model read from a GGUF file by kvtier's reader (f32 weights).")
      .def_static("load",
                  [](const std::string& path) {
                    py::gil_scoped_release nogil;
                    return std::const_pointer_cast<engine::Model>(value_or_throw(engine::load_gguf(path)));
                  },
                  py::arg("path"))
      .def_property_readonly("config", [](const Holder& p) { return config_dict(p->config()); })
      .def_property_readonly("fingerprint", [](const Holder& p) { return p->fingerprint().to_hex(); },
                             "The model identity (hex): pass it as Cache(model_id=...).")
      .def_property_readonly("token_embd",
                             [](const Holder& p) { return matrix_f32(p, p->weights().token_embd); })
      .def_property_readonly("output_norm",
                             [](const Holder& p) { return weight_view(p, p->weights().output_norm.data(), p->config().hidden_size, 0); })
      .def_property_readonly("output",
                             [](const Holder& p) { return matrix_f32(p, p->output_matrix()); },
                             "The output projection [vocab][hidden] (the embedding when tied).")
      .def("layer", [](const Holder& p, uint32_t i) { return layer_dict(p, i); }, py::arg("index"),
           "Layer weights: attn_norm, wqkv [q+2kv][hidden] (Q rows, then K, then V), bqkv (qwen2), wo, ffn_norm, "
           "w_gate_up [2 ffn][hidden] (gate rows, then up rows), w_down. Matrices of a quantized file are "
           "dequantized to f32 on each call, one tensor at a time.")
      .def("rope_cos_sin",
           [](const Holder& p, std::vector<uint32_t> positions) {
             std::vector<float> cs;
             engine::rope_cos_sin(p->config(), positions.data(), positions.size(), cs);
             py::array_t<float> a({py::ssize_t(positions.size()), py::ssize_t(p->config().head_dim / 2), py::ssize_t(2)});
             std::copy(cs.begin(), cs.end(), a.mutable_data());
             return a;
           },
           py::arg("positions"), "[n][head_dim/2][cos, sin]: the RoPE table both C++ engines use (per the model's rope_style).")
      .def("kv_geometry", [](const Holder& p, const std::string& dtype, uint32_t page_tokens) {
             const KVGeometry g = p->config().kv_geometry(value_or_throw(parse_dtype(dtype)), page_tokens);
             throw_if_error(g.validate());  // page_tokens 0 reached kvtier.Cache as a ZeroDivisionError
             return g;
           },
           py::arg("dtype") = "f32", py::arg("page_tokens") = 16)
      .def("model_cost",
           [](const Holder& p, const KVGeometry& g) {
             const ModelCost c = model_cost(p->config(), g);
             py::dict d;
             d["dense_flops_per_token"] = c.dense_flops_per_token;
             d["attn_flops_per_pair"] = c.attn_flops_per_pair;
             return d;
           },
           py::arg("geometry"), "The planner's per-token work for this model: Cache(model_cost=...).");

  py::class_<ReferenceEngine, std::shared_ptr<ReferenceEngine>>(m, "ReferenceEngine",
                                                                "kvtier's C++ engine on a Model, full recompute (the reference).")
      .def(py::init(&make_reference), py::arg("model"), py::arg("max_tokens") = 4096, py::arg("threads") = 0)
      .def("generate", &ReferenceEngine::generate, py::arg("tokens"), py::arg("steps") = 0, py::arg("all_logits") = false,
           "Greedy decoding: (logits of the last prompt position — or of every position with all_logits —, generated tokens).");
}

}  // namespace kvtier::python
