// Assembling what a Runtime serves with: the model (a preset or a GGUF file), the cache with
// its tiers and a calibrated cost profile, the engine over the cache's pool; and the text codec
// of the model's tokenizer. Apart from runtime.cc, which serves requests on them.
#include <algorithm>
#include <filesystem>

#include "engine/engine.h"
#include "engine/gguf.h"
#include "runtime/calibration.h"
#include "runtime/runtime.h"
#include "tiers/tier_factory.h"

namespace kvtier {

namespace {

Result<std::shared_ptr<const engine::Model>> load_model(const RuntimeOptions& o) {
  auto preset = engine::model_preset(o.model);
  if (preset.ok()) return engine::Model::synthetic(*preset, o.model_seed);
  std::error_code ec;
  if (std::filesystem::exists(o.model, ec)) {
    // The weights are checked against the memory available together with what this runtime
    // allocates beside them (engine/memory_budget.h).
    engine::GgufLoadOptions lo;
    if (o.device != "cuda") lo.also_needed.push_back({"KV pool", o.device_bytes});
    if (o.cache_enabled) lo.also_needed.push_back({"host tier", o.host_bytes});
    return engine::load_gguf(o.model, lo);
  }
  std::string names;
  for (const auto& n : engine::model_preset_names()) names += (names.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("model '" + o.model + "' is neither a preset (" + names + ") nor an existing GGUF file");
}

}  // namespace

ServingStack::~ServingStack() {
  engine.reset();
  cache.reset();
}

Result<ServingStack> build_stack(const RuntimeOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  ServingStack st;
  KVTIER_ASSIGN_OR_RETURN(st.model, load_model(o));
  const auto& cfg = st.model->config();
  const KVGeometry geo = cfg.kv_geometry(o.kv_dtype, o.page_tokens);
  KVCacheOptions co;
  co.cache_config() = o.cache_config();
  co.geometry = geo;
  co.device = o.device == "cuda" ? MemoryBackend::kCuda : MemoryBackend::kCpu;
  if (!o.cache_enabled) {  // the baseline: the pool and host tier only, nothing persists
    co.disk_dir.clear();
    co.remote_url.clear();
  }
  co.model_cost = model_cost(cfg, geo);
  // --remote redis://...: shared chunks in Redis (docs/REMOTE.md). Built here, from the tier factory,
  // so that calibration can measure its link before the cache exists.
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<RemoteTier> remote, make_remote_tier(co, ChunkGeometry{geo, o.chunk_pages}));
  co.remote = remote;
  co.remote_url.clear();
  engine::EngineOptions eo;
  eo.threads = o.threads;
  if (!o.profile_path.empty()) {
    KVTIER_ASSIGN_OR_RETURN(co.profile, CostProfile::load(o.profile_path));
  } else {
    // Calibrate on a throwaway cache and engine (the cache needs a profile to exist).
    KVCacheOptions probe = co;
    probe.profile.gemm_flops_per_s = probe.profile.attn_flops_per_s = 1e9;
    probe.disk_dir.clear();
    probe.remote.reset();
    KVTIER_ASSIGN_OR_RETURN(auto cache, KVCache::create(probe));
    KVTIER_ASSIGN_OR_RETURN(auto eng, engine::create_forward(st.model, cache->pool(), eo));
    CalibrationOptions cal;
    cal.disk_dir = co.disk_dir;
    cal.disk_capacity_bytes = co.disk_bytes;
    cal.disk_direct_io = co.disk_direct_io;
    if (remote && !remote->degraded()) {
      // One round trip and a few chunk-sized GETs; on failure the profile keeps its default remote link.
      auto link = remote->measure_link(std::max<size_t>(size_t(1) << 20, ChunkGeometry{geo, o.chunk_pages}.max_payload_bytes()));
      if (link.ok()) {
        cal.remote_latency_s = link->latency_s;
        cal.remote_bytes_per_s = link->bytes_per_s;
      }
    }
    KVTIER_ASSIGN_OR_RETURN(co.profile, calibrate(*eng, cache->pool(), cal));
  }
  auto cache = KVCache::create(co);
  if (!cache.ok()) return cache.status();
  st.cache = std::move(cache).value();
  KVTIER_ASSIGN_OR_RETURN(st.engine, engine::create_forward(st.model, st.cache->pool(), eo));
  st.profile = co.profile;
  return st;
}

std::string TextCodec::detokenize_showing(std::span<const TokenId> ids, std::span<const TokenId> shown) const {
  if (shown.empty()) return detokenize(ids);
  std::string out;
  size_t run = 0;  // ids[run, i) decode as usual
  for (size_t i = 0; i < ids.size(); ++i) {
    if (std::find(shown.begin(), shown.end(), ids[i]) == shown.end()) continue;
    out += detokenize(ids.subspan(run, i - run)) + detokenize_special(ids.subspan(i, 1));
    run = i + 1;
  }
  return out + detokenize(ids.subspan(run));
}

TextCodec text_codec(const text::Tokenizer& tok, const text::Vocab& vocab) {
  TextCodec c;
  c.tokenize = [tok](std::string_view text, const text::EncodeOptions& options) { return tok.encode(text, options); };
  c.detokenize = [tok](std::span<const TokenId> ids) { return tok.decode(ids); };
  c.detokenize_special = [tok](std::span<const TokenId> ids) { return tok.decode(ids, true); };
  c.chat_template = vocab.chat_template;
  c.bos_token = vocab.tokens[size_t(vocab.bos)];
  c.eos_token = vocab.tokens[size_t(vocab.eos)];
  for (const std::string& token : vocab.tokens) c.max_token_bytes = std::max(c.max_token_bytes, uint32_t(token.size()));
  return c;
}

}  // namespace kvtier
