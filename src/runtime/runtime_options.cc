// RuntimeOptions: validation and its option table (runtime/runtime.h).
#include "runtime/runtime.h"

namespace kvtier {

Status RuntimeOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(CacheConfig::validate());
  if (model.empty()) return Status::InvalidArgument("model.name must name a preset or a GGUF file");
  if (page_tokens == 0 || page_tokens > 1024) return Status::InvalidArgument("cache.page_tokens must be in [1, 1024]");
  if (device != "cpu" && device != "cuda") return Status::InvalidArgument("model.device must be cpu or cuda, not '" + device + "'");
  if (device_bytes == 0) return Status::InvalidArgument("cache.device_capacity must be > 0");
  if (max_sequences == 0) return Status::InvalidArgument("limits.max_sequences must be at least 1");
  KVTIER_RETURN_IF_ERROR(blend.validate());
  if (disk_authenticate && !has_tier_secret(*this))
    return Status::InvalidArgument("cache.disk_authenticate needs a tier secret (--tier-secret-file or KVTIER_TIER_SECRET)");
  return Status::Ok();
}

namespace {

using R = RuntimeOptions;

OptionTable<R> make_table() {
  OptionTable<R> t;
  t.push_back(string_option<R>({"model.name", "--model", {}, "Model: preset (tiny, small, 1b) or a GGUF path"},
                               KVTIER_FIELD(model)));
  t.push_back(uint_option<R>({"model.seed", "--model-seed", {}, "Seed of synthetic weights (presets)"},
                             KVTIER_FIELD(model_seed), 0, UINT64_MAX >> 1));
  t.push_back(uint_option<R>({"model.threads", "--threads", {}, "Compute threads; 0 = all cores"}, KVTIER_FIELD(threads),
                             0, 256));  // the engine's bound (EngineOptions::validate)
  t.push_back(string_option<R>({"model.device", "--device", {},
                                "Where KV pages and compute live: cpu, cuda (CUDA build with a GPU)"},
                               KVTIER_FIELD(device)));
  t.push_back(bool_option<R>({"cache.enabled", "--no-cache", {},
                              "Disable the KV cache: every prompt is fully recomputed (the baseline)"},
                             KVTIER_FIELD(cache_enabled)));
  t.push_back(enum_option<R>({"cache.kv_dtype", "--kv-dtype", {}, "KV cache dtype"}, KVTIER_FIELD(kv_dtype), parse_dtype,
                             dtype_name, "f32, f16, bf16"));
  t.push_back(uint_option<R>({"cache.page_tokens", "--page-tokens", {}, "Tokens per KV page"}, KVTIER_FIELD(page_tokens),
                             1, 1024));
  append_options(t, cache_option_table(), KVTIER_FIELD(cache_config()));
  t.push_back(bool_option<R>({"blend.enabled", "--blend", {},
                              "Allow blending (non-prefix reuse, approximate) for requests that ask: `segments`, "
                              "`cacheable` chat parts or \"kvtier\": {\"blend\": true}; the planner decides"},
                             KVTIER_FIELD(blend.enabled)));
  t.push_back(number_option<R>({"blend.recompute_ratio", "--blend-ratio", {},
                                "Share of a blended segment's tokens recomputed, by KV deviation"},
                               KVTIER_FIELD(blend.recompute_ratio), 0, 1));
  t.push_back(uint_option<R>({"blend.check_layer", "--blend-check-layer", {},
                              "Layers below it are computed for every token of a blended prompt"},
                             KVTIER_FIELD(blend.check_layer), 0, 1u << 16));
  t.push_back(uint_option<R>({"limits.max_sequences", "--max-sequences", {}, "Sequences decoded together (batch)"},
                             KVTIER_FIELD(max_sequences), 1, 1u << 16));
  t.push_back(uint_option<R>({"limits.reply_prefill_tokens", "--reply-prefill-tokens", {},
                              "Where decode rounds otherwise than prefill (F32 weights, CUDA), generated tokens "
                              "prefilled again as a sequence ends so their KV is cached exactly; a longer reply is "
                              "cached this far, 0: replies are not cached. The prefill holds other streams for its "
                              "time. Quantized and F16 weights on the CPU cache replies as decoded"},
                             KVTIER_FIELD(reply_prefill_tokens), 0, 1u << 20));
  return t;
}

}  // namespace

const OptionTable<RuntimeOptions>& runtime_option_table() {
  static const OptionTable<RuntimeOptions> table = make_table();
  return table;
}

}  // namespace kvtier
