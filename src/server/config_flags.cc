#include "server/config_flags.h"

#include <sstream>
#include <tuple>

#include "server/size.h"

namespace kvtier::server {
namespace {

template <class T>
std::string dflt(const T& v) {
  std::ostringstream os;
  os << v;
  return " (default: " + os.str() + ")";
}
std::string dflt_str(const std::string& v, const char* empty_means) {
  return v.empty() ? std::string(" (default: ") + empty_means + ")" : " (default: " + v + ")";
}

}  // namespace

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  const ServerConfig d;
  const RuntimeOptions& r = d.runtime;
  const ServerLimits& l = d.limits;
  app.add_option("--config", f.config_path, "TOML config file (sections server, model, cache, limits); flags override it");
  app.add_flag("--print-config", f.print_config, "Print the effective configuration as TOML and exit");
  // Model.
  app.add_option("--model", f.model, "Model: preset (tiny, small, 1b) or a GGUF path" + dflt(r.model))->group("Model");
  app.add_option("--served-model-name", f.served_model_name,
                 "Name reported by /v1/models and in responses" + dflt_str(d.served_model_name, "the --model value"))
      ->group("Model");
  app.add_option("--chat-template", f.chat_template,
                 "Jinja chat template file for /v1/chat/completions (default: the model's tokenizer.chat_template)")
      ->group("Model");
  app.add_option("--model-seed", f.model_seed, "Seed of synthetic weights (presets)" + dflt(r.model_seed))->group("Model");
  app.add_option("--threads", f.threads, "Compute threads; 0 = all cores" + dflt(r.threads))->group("Model");
  app.add_option("--device", f.device, "Where KV pages and compute live: cpu, cuda (CUDA build with a GPU)" + dflt(r.device))
      ->group("Model");
  // Listener.
  app.add_option("--host", f.host, "Listen address" + dflt(d.host))->group("Server");
  app.add_option("--port", f.port, "Listen port; 0 picks a free one (printed at startup)" + dflt(d.port))->group("Server");
  app.add_option("--api-key", f.api_key,
                 "Require 'Authorization: Bearer <key>' on /v1/* (default: none, no authentication)")
      ->group("Server");
  app.add_flag("--metrics-public", f.metrics_public, "Serve /metrics without the API key (default: it needs the key when one is set)")
      ->group("Server");
  // Cache.
  app.add_flag("--no-cache", f.no_cache, "Disable the KV cache: every prompt is fully recomputed (the baseline)")->group("Cache");
  app.add_option("--kv-dtype", f.kv_dtype, "KV cache dtype: f32, f16, bf16" + dflt(dtype_name(r.kv_dtype)))->group("Cache");
  app.add_option("--page-tokens", f.page_tokens, "Tokens per KV page" + dflt(r.page_tokens))->group("Cache");
  app.add_option("--chunk-pages", f.chunk_pages, "Pages per lower-tier I/O chunk" + dflt(r.chunk_pages))->group("Cache");
  app.add_option("--device-capacity", f.device_capacity,
                 "Device tier size (512MiB, 8GiB, bytes)" + dflt(format_size(r.device_bytes)))->group("Cache");
  app.add_option("--host-capacity", f.host_capacity, "Host DRAM tier size" + dflt(format_size(r.host_bytes)))->group("Cache");
  app.add_option("--disk-capacity", f.disk_capacity, "Disk tier size" + dflt(format_size(r.disk_bytes)))->group("Cache");
  app.add_option("--disk-dir", f.disk_dir, "Disk tier directory" + dflt_str(r.disk_dir, "none, no disk tier"))->group("Cache");
  app.add_option("--remote", f.remote, "Remote tier, redis://host:port[,host:port]" + dflt_str(r.remote, "none"))->group("Cache");
  app.add_option("--remote-password-file", f.remote_password_file,
                 "Redis password read from this file instead of the URL (default: the URL's, if any)")->group("Cache");
  app.add_option("--tier-secret-file", f.tier_secret_file,
                 "Shared secret (>= 16 bytes) that authenticates remote entries and keys their names (docs/SECURITY.md)"
                 " (default: none)")->group("Cache");
  app.add_flag("--disk-authenticate", f.disk_authenticate, "Authenticate disk entries with the tier secret too")->group("Cache");
  app.add_option("--disk-codec", f.disk_codec,
                 "Disk entry codec: none (exact), q8 (8.5 bits/value), q4 (lossy, smaller; docs/FORMATS.md)" +
                     dflt(kv_codec_name(r.disk_codec)))->group("Cache");
  app.add_option("--remote-codec", f.remote_codec, "Remote (Redis) entry codec: none, q8, q4" + dflt(kv_codec_name(r.remote_codec)))
      ->group("Cache");
  app.add_option("--host-codec", f.host_codec,
                 "Host DRAM slot codec: none, q8, q4 (lossy codecs need write_through or selective)" + dflt(kv_codec_name(r.host_codec)))
      ->group("Cache");
  app.add_option("--write-policy", f.write_policy,
                 "Lower-tier writes: write_through, write_back, selective" + dflt(write_policy_label(r.write_policy)))
      ->group("Cache");
  app.add_option("--selective-hits", f.selective_hits, "Hits before a page is written down (selective)" + dflt(r.selective_hits))
      ->group("Cache");
  app.add_option("--eviction", f.eviction, "Eviction policy: lru, lfu, fifo, priority, slru" + dflt(r.eviction))->group("Cache");
  app.add_option("--profile", f.profile, "Calibration profile (JSON)" + dflt_str(r.profile_path, "built-in quick calibration"))
      ->group("Cache");
  app.add_option("--hash", f.hash, "Page hash: xxh3, sha256" + dflt(hash_algo_name(r.hash)))->group("Cache");
  app.add_flag("--no-layerwise", f.no_layerwise, "Load all layers before prefill instead of overlapping per layer")->group("Cache");
  app.add_flag("--no-blend", f.no_blend, "Never blend marked segments (non-prefix reuse); default: the planner may")->group("Blend");
  app.add_option("--blend-ratio", f.blend_ratio,
                 "Share of a blended segment's tokens recomputed, by KV deviation" + dflt(r.blend.recompute_ratio))
      ->group("Blend");
  app.add_option("--blend-check-layer", f.blend_check_layer,
                 "Layers below it are computed for every token of a blended prompt" + dflt(r.blend.check_layer))
      ->group("Blend");
  app.add_option("--blend-separator", f.blend_separator,
                 "Text that splits a plain prompt into reusable segments (its tokens are computed, not reused)"
                 " (default: none)")->group("Blend");
  // Limits.
  app.add_option("--max-queue", f.max_queue, "Waiting requests before 429" + dflt(l.max_queue))->group("Limits");
  app.add_option("--max-tokens", f.max_tokens, "Largest max_tokens a request may ask for" + dflt(l.max_tokens))->group("Limits");
  app.add_option("--default-max-tokens", f.default_max_tokens, "max_tokens when a request omits it" + dflt(l.default_max_tokens))
      ->group("Limits");
  app.add_option("--max-prompt-tokens", f.max_prompt_tokens, "Longest prompt; 0 = model context" + dflt(l.max_prompt_tokens))
      ->group("Limits");
  app.add_option("--max-sequences", f.max_sequences, "Sequences decoded together (batch)" + dflt(r.max_sequences))->group("Limits");
  app.add_option("--request-timeout", f.request_timeout_s, "Seconds before a request is cancelled" + dflt(l.request_timeout_s))
      ->group("Limits");
  app.add_option("--shutdown-grace", f.shutdown_grace_s,
                 "Seconds in-flight requests get after SIGINT/SIGTERM" + dflt(l.shutdown_grace_s))->group("Limits");
  app.add_option("--http-threads", f.http_threads, "HTTP connection threads (one per open stream)" + dflt(l.http_threads))
      ->group("Limits");
  app.add_option("--max-body", f.max_body, "Largest request body" + dflt(format_size(l.max_body_bytes)))->group("Limits");
}

Result<ServerConfig> resolve_config(const ServeFlags& f) {
  ServerConfig c;
  if (f.config_path) KVTIER_RETURN_IF_ERROR(apply_toml_file(*f.config_path, c));
  RuntimeOptions& r = c.runtime;
  ServerLimits& l = c.limits;
  auto size_flag = [](const std::optional<std::string>& v, const char* name, auto& out) -> Status {
    if (!v) return {};
    auto s = parse_size(*v);
    if (!s.ok()) return Status::InvalidArgument(std::string(name) + ": " + s.status().message());
    out = static_cast<std::remove_reference_t<decltype(out)>>(*s);
    return {};
  };
  if (f.model) r.model = *f.model;
  if (f.served_model_name) c.served_model_name = *f.served_model_name;
  if (f.chat_template) c.chat_template_file = *f.chat_template;
  if (f.model_seed) r.model_seed = *f.model_seed;
  if (f.threads) r.threads = *f.threads;
  if (f.host) c.host = *f.host;
  if (f.port) c.port = *f.port;
  if (f.api_key) c.api_key = *f.api_key;
  if (f.no_cache) r.cache_enabled = false;
  if (f.no_layerwise) r.layerwise = false;
  if (f.no_blend) r.blend.enabled = false;
  if (f.blend_ratio) r.blend.recompute_ratio = *f.blend_ratio;
  if (f.blend_check_layer) r.blend.check_layer = *f.blend_check_layer;
  if (f.blend_separator) c.blend_separator = *f.blend_separator;
  if (f.kv_dtype) {
    auto d = parse_dtype(*f.kv_dtype);
    if (!d.ok()) return Status::InvalidArgument("--kv-dtype must be f32, f16 or bf16");
    r.kv_dtype = *d;
  }
  if (f.device) r.device = *f.device;
  if (f.page_tokens) r.page_tokens = *f.page_tokens;
  if (f.chunk_pages) r.chunk_pages = *f.chunk_pages;
  KVTIER_RETURN_IF_ERROR(size_flag(f.device_capacity, "--device-capacity", r.device_bytes));
  KVTIER_RETURN_IF_ERROR(size_flag(f.host_capacity, "--host-capacity", r.host_bytes));
  KVTIER_RETURN_IF_ERROR(size_flag(f.disk_capacity, "--disk-capacity", r.disk_bytes));
  KVTIER_RETURN_IF_ERROR(size_flag(f.max_body, "--max-body", l.max_body_bytes));
  if (f.disk_dir) r.disk_dir = *f.disk_dir;
  if (f.remote) r.remote = *f.remote;
  if (f.remote_password_file) r.remote_password_file = *f.remote_password_file;
  if (f.tier_secret_file) r.tier_secret_file = *f.tier_secret_file;
  if (f.disk_authenticate) r.disk_authenticate = true;
  for (auto [flag, name, codec] : {std::tuple{&f.disk_codec, "--disk-codec", &r.disk_codec},
                                    std::tuple{&f.remote_codec, "--remote-codec", &r.remote_codec},
                                    std::tuple{&f.host_codec, "--host-codec", &r.host_codec}}) {
    if (!*flag) continue;
    auto parsed = parse_kv_codec(**flag);
    if (!parsed.ok()) return Status::InvalidArgument(std::string(name) + ": " + parsed.status().message());
    *codec = *parsed;
  }
  if (f.metrics_public) c.metrics_public = true;
  if (f.write_policy) {
    KVTIER_ASSIGN_OR_RETURN(r.write_policy, parse_write_policy_name(*f.write_policy));
  }
  if (f.selective_hits) r.selective_hits = *f.selective_hits;
  if (f.eviction) r.eviction = *f.eviction;
  if (f.profile) r.profile_path = *f.profile;
  if (f.hash) {
    auto h = parse_hash_algo(*f.hash);
    if (!h.ok()) return Status::InvalidArgument("--hash must be xxh3 or sha256");
    r.hash = *h;
  }
  if (f.max_queue) l.max_queue = *f.max_queue;
  if (f.max_tokens) l.max_tokens = *f.max_tokens;
  if (f.default_max_tokens) l.default_max_tokens = *f.default_max_tokens;
  if (f.max_prompt_tokens) l.max_prompt_tokens = *f.max_prompt_tokens;
  if (f.max_sequences) r.max_sequences = *f.max_sequences;
  if (f.request_timeout_s) l.request_timeout_s = *f.request_timeout_s;
  if (f.shutdown_grace_s) l.shutdown_grace_s = *f.shutdown_grace_s;
  if (f.http_threads) l.http_threads = *f.http_threads;
  if (l.default_max_tokens > l.max_tokens) l.default_max_tokens = l.max_tokens;
  KVTIER_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace kvtier::server
