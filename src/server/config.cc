#include "server/config.h"
#include "common/file_text.h"
#include "common/secrets.h"

#include <functional>
#include <map>
#include <sstream>
#include <toml++/toml.h>

#include "server/size.h"

namespace kvtier::server {
namespace {

Status bad(std::string_view origin, std::string_view key, std::string_view what) {
  return Status::InvalidArgument(std::string(origin) + ": '" + std::string(key) + "' " + std::string(what));
}

// Typed readers: a wrong TOML type is an error naming the key.
Status read_string(const toml::node& n, std::string_view origin, std::string_view key, std::string& out) {
  auto v = n.value<std::string>();
  if (!n.is_string() || !v) return bad(origin, key, "must be a string");
  out = *v;
  return {};
}

template <class T>
Status read_uint(const toml::node& n, std::string_view origin, std::string_view key, T& out, uint64_t max) {
  if (!n.is_integer()) return bad(origin, key, "must be an integer");
  const int64_t v = *n.value<int64_t>();
  if (v < 0 || uint64_t(v) > max) return bad(origin, key, "is out of range [0, " + std::to_string(max) + "]");
  out = static_cast<T>(v);
  return {};
}

Status read_double(const toml::node& n, std::string_view origin, std::string_view key, double& out) {
  if (!n.is_number()) return bad(origin, key, "must be a number");
  out = *n.value<double>();
  return {};
}

Status read_bool(const toml::node& n, std::string_view origin, std::string_view key, bool& out) {
  if (!n.is_boolean()) return bad(origin, key, "must be true or false");
  out = *n.value<bool>();
  return {};
}

Status read_codec(const toml::node& n, std::string_view origin, std::string_view key, KvCodec& out) {
  std::string v;
  KVTIER_RETURN_IF_ERROR(read_string(n, origin, key, v));
  auto codec = parse_kv_codec(v);
  if (!codec.ok()) return bad(origin, key, codec.status().message());
  out = *codec;
  return {};
}

// A size is either an integer (bytes) or a string with a unit ("8GiB").
template <class T>
Status read_size(const toml::node& n, std::string_view origin, std::string_view key, T& out) {
  if (n.is_integer()) return read_uint(n, origin, key, out, UINT64_MAX >> 1);
  if (!n.is_string()) return bad(origin, key, "must be a size (\"8GiB\") or an integer number of bytes");
  auto r = parse_size(*n.value<std::string>());
  if (!r.ok()) return bad(origin, key, r.status().message());
  out = static_cast<T>(*r);
  return {};
}

using KeyHandler = std::function<Status(const toml::node&, std::string_view origin, std::string_view key)>;
using Section = std::map<std::string, KeyHandler, std::less<>>;

std::map<std::string, Section, std::less<>> sections(ServerConfig& c) {
  RuntimeOptions& r = c.runtime;
  ServerLimits& l = c.limits;
  std::map<std::string, Section, std::less<>> s;
  s["server"] = {
      {"host", [&](auto& n, auto o, auto k) { return read_string(n, o, k, c.host); }},
      {"port", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, c.port, 65535); }},
      {"api_key", [&](auto& n, auto o, auto k) { return read_string(n, o, k, c.api_key); }},
      {"metrics_public", [&](auto& n, auto o, auto k) { return read_bool(n, o, k, c.metrics_public); }},
      {"served_model_name", [&](auto& n, auto o, auto k) { return read_string(n, o, k, c.served_model_name); }},
  };
  s["model"] = {
      {"name", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.model); }},
      {"seed", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.model_seed, UINT64_MAX >> 1); }},
      {"threads", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.threads, 4096); }},
      {"device", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.device); }},
      {"chat_template", [&](auto& n, auto o, auto k) { return read_string(n, o, k, c.chat_template_file); }},
  };
  s["cache"] = {
      {"enabled", [&](auto& n, auto o, auto k) { return read_bool(n, o, k, r.cache_enabled); }},
      {"kv_dtype",
       [&](auto& n, auto o, auto k) {
         std::string v;
         KVTIER_RETURN_IF_ERROR(read_string(n, o, k, v));
         auto d = parse_dtype(v);
         if (!d.ok()) return bad(o, k, "must be f32, f16 or bf16");
         r.kv_dtype = *d;
         return Status();
       }},
      {"page_tokens", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.page_tokens, 1u << 16); }},
      {"chunk_pages", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.chunk_pages, 1u << 16); }},
      {"device_capacity", [&](auto& n, auto o, auto k) { return read_size(n, o, k, r.device_bytes); }},
      {"host_capacity", [&](auto& n, auto o, auto k) { return read_size(n, o, k, r.host_bytes); }},
      {"disk_capacity", [&](auto& n, auto o, auto k) { return read_size(n, o, k, r.disk_bytes); }},
      {"disk_dir", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.disk_dir); }},
      {"remote", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.remote); }},
      {"remote_password_file", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.remote_password_file); }},
      {"tier_secret_file", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.tier_secret_file); }},
      {"disk_authenticate", [&](auto& n, auto o, auto k) { return read_bool(n, o, k, r.disk_authenticate); }},
      {"disk_codec", [&](auto& n, auto o, auto k) { return read_codec(n, o, k, r.disk_codec); }},
      {"remote_codec", [&](auto& n, auto o, auto k) { return read_codec(n, o, k, r.remote_codec); }},
      {"host_codec", [&](auto& n, auto o, auto k) { return read_codec(n, o, k, r.host_codec); }},
      {"write_policy",
       [&](auto& n, auto o, auto k) {
         std::string v;
         KVTIER_RETURN_IF_ERROR(read_string(n, o, k, v));
         auto p = parse_write_policy_name(v);
         if (!p.ok()) return bad(o, k, p.status().message());
         r.write_policy = *p;
         return Status();
       }},
      {"selective_hits", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.selective_hits, 1u << 20); }},
      {"eviction", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.eviction); }},
      {"profile", [&](auto& n, auto o, auto k) { return read_string(n, o, k, r.profile_path); }},
      {"hash",
       [&](auto& n, auto o, auto k) {
         std::string v;
         KVTIER_RETURN_IF_ERROR(read_string(n, o, k, v));
         auto h = parse_hash_algo(v);
         if (!h.ok()) return bad(o, k, "must be xxh3 or sha256");
         r.hash = *h;
         return Status();
       }},
      {"layerwise", [&](auto& n, auto o, auto k) { return read_bool(n, o, k, r.layerwise); }},
  };
  s["blend"] = {
      {"enabled", [&](auto& n, auto o, auto k) { return read_bool(n, o, k, r.blend.enabled); }},
      {"recompute_ratio",
       [&](auto& n, auto o, auto k) {
         double v = r.blend.recompute_ratio;
         KVTIER_RETURN_IF_ERROR(read_double(n, o, k, v));
         r.blend.recompute_ratio = float(v);
         return Status();
       }},
      {"check_layer", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.blend.check_layer, 1u << 16); }},
      {"separator", [&](auto& n, auto o, auto k) { return read_string(n, o, k, c.blend_separator); }},
  };
  s["limits"] = {
      {"max_queue", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, l.max_queue, 1u << 24); }},
      {"max_tokens", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, l.max_tokens, 1u << 24); }},
      {"default_max_tokens", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, l.default_max_tokens, 1u << 24); }},
      {"max_prompt_tokens", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, l.max_prompt_tokens, 1u << 24); }},
      {"max_sequences", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, r.max_sequences, 1u << 16); }},
      {"request_timeout_s", [&](auto& n, auto o, auto k) { return read_double(n, o, k, l.request_timeout_s); }},
      {"shutdown_grace_s", [&](auto& n, auto o, auto k) { return read_double(n, o, k, l.shutdown_grace_s); }},
      {"http_threads", [&](auto& n, auto o, auto k) { return read_uint(n, o, k, l.http_threads, 4096); }},
      {"max_body_bytes", [&](auto& n, auto o, auto k) { return read_size(n, o, k, l.max_body_bytes); }},
  };
  return s;
}

std::string quoted(std::string_view s) {
  std::ostringstream os;
  os << toml::value<std::string>(std::string(s));
  return os.str();
}

}  // namespace

Result<WritePolicy> parse_write_policy_name(std::string_view s) {
  if (s == "write_through") return WritePolicy::kWriteThrough;
  if (s == "write_back") return WritePolicy::kWriteBack;
  if (s == "selective") return WritePolicy::kSelective;
  return Status::InvalidArgument("unknown write policy '" + std::string(s) +
                                 "' (expected write_through, write_back or selective)");
}

std::string_view write_policy_label(WritePolicy p) {
  switch (p) {
    case WritePolicy::kWriteThrough: return "write_through";
    case WritePolicy::kWriteBack: return "write_back";
    case WritePolicy::kSelective: return "selective";
  }
  return "?";
}

Status ServerLimits::validate() const {
  if (max_queue == 0) return Status::InvalidArgument("limits.max_queue must be at least 1");
  if (max_tokens == 0) return Status::InvalidArgument("limits.max_tokens must be at least 1");
  if (default_max_tokens == 0 || default_max_tokens > max_tokens)
    return Status::InvalidArgument("limits.default_max_tokens must be in [1, max_tokens]");
  if (!(request_timeout_s > 0)) return Status::InvalidArgument("limits.request_timeout_s must be positive");
  if (!(shutdown_grace_s >= 0)) return Status::InvalidArgument("limits.shutdown_grace_s must be >= 0");
  if (http_threads < 2) return Status::InvalidArgument("limits.http_threads must be at least 2");
  if (max_body_bytes < 1024) return Status::InvalidArgument("limits.max_body_bytes must be at least 1KiB");
  return {};
}

Status ServerConfig::validate() const {
  if (host.empty()) return Status::InvalidArgument("server.host must not be empty");
  KVTIER_RETURN_IF_ERROR(limits.validate());
  if (runtime.model.empty()) return Status::InvalidArgument("model.name must not be empty");
  if (runtime.page_tokens == 0) return Status::InvalidArgument("cache.page_tokens must be at least 1");
  if (runtime.chunk_pages == 0) return Status::InvalidArgument("cache.chunk_pages must be at least 1");
  if (runtime.max_sequences == 0) return Status::InvalidArgument("limits.max_sequences must be at least 1");
  static constexpr const char* kEvictions[] = {"lru", "lfu", "fifo", "priority", "slru"};
  bool known = false;
  for (const char* e : kEvictions) known |= runtime.eviction == e;
  if (!known) return Status::InvalidArgument("cache.eviction must be lru, lfu, fifo, priority or slru");
  return {};
}

Status apply_toml(std::string_view toml_text, std::string_view origin, ServerConfig& config) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text, std::string(origin));
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return Status::InvalidArgument(os.str());
  }
  // Apply onto a copy so a failing file leaves `config` untouched.
  ServerConfig next = config;
  auto secs = sections(next);
  for (const auto& [name, node] : doc) {
    auto sec = secs.find(name.str());
    if (sec == secs.end())
      return Status::InvalidArgument(std::string(origin) + ": unknown section [" + std::string(name.str()) +
                                     "] (expected server, model, cache or limits)");
    const toml::table* tbl = node.as_table();
    if (tbl == nullptr) return Status::InvalidArgument(std::string(origin) + ": '" + std::string(name.str()) + "' must be a table");
    for (const auto& [key, value] : *tbl) {
      auto h = sec->second.find(key.str());
      const std::string full = std::string(name.str()) + "." + std::string(key.str());
      if (h == sec->second.end()) return Status::InvalidArgument(std::string(origin) + ": unknown key '" + full + "'");
      KVTIER_RETURN_IF_ERROR(h->second(value, origin, full));
    }
  }
  config = std::move(next);
  return {};
}

Status apply_toml_file(const std::string& path, ServerConfig& config) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, read_file(path, "config file"));
  return apply_toml(text, path, config);
}

std::string to_toml(const ServerConfig& c) {
  const RuntimeOptions& r = c.runtime;
  const ServerLimits& l = c.limits;
  std::ostringstream os;
  os << "[server]\nhost = " << quoted(c.host) << "\nport = " << c.port << "\napi_key = "
     << quoted(c.api_key.empty() ? "" : "<set>") << "\nmetrics_public = " << (c.metrics_public ? "true" : "false")
     << "\nserved_model_name = " << quoted(c.served_model_name) << "\n\n";
  os << "[model]\nname = " << quoted(r.model) << "\nseed = " << r.model_seed << "\nthreads = " << r.threads
     << "\ndevice = " << quoted(r.device) << "\nchat_template = " << quoted(c.chat_template_file) << "\n\n";
  os << "[cache]\nenabled = " << (r.cache_enabled ? "true" : "false") << "\nkv_dtype = " << quoted(dtype_name(r.kv_dtype))
     << "\npage_tokens = " << r.page_tokens << "\nchunk_pages = " << r.chunk_pages
     << "\ndevice_capacity = " << quoted(format_size(r.device_bytes)) << "\nhost_capacity = " << quoted(format_size(r.host_bytes))
     << "\ndisk_capacity = " << quoted(format_size(r.disk_bytes)) << "\ndisk_dir = " << quoted(r.disk_dir)
     << "\nremote = " << quoted(redact_url_credentials(r.remote))
     << "\nremote_password_file = " << quoted(r.remote_password_file) << "\ntier_secret_file = " << quoted(r.tier_secret_file)
     << "\ndisk_authenticate = " << (r.disk_authenticate ? "true" : "false")
     << "\ndisk_codec = " << quoted(kv_codec_name(r.disk_codec)) << "\nremote_codec = " << quoted(kv_codec_name(r.remote_codec))
     << "\nhost_codec = " << quoted(kv_codec_name(r.host_codec))
     << "\nwrite_policy = " << quoted(write_policy_label(r.write_policy))
     << "\nselective_hits = " << r.selective_hits << "\neviction = " << quoted(r.eviction)
     << "\nprofile = " << quoted(r.profile_path) << "\nhash = " << quoted(hash_algo_name(r.hash))
     << "\nlayerwise = " << (r.layerwise ? "true" : "false") << "\n\n";
  os << "[blend]\nenabled = " << (r.blend.enabled ? "true" : "false") << "\nrecompute_ratio = " << r.blend.recompute_ratio
     << "\ncheck_layer = " << r.blend.check_layer << "\nseparator = " << quoted(c.blend_separator) << "\n\n";
  os << "[limits]\nmax_queue = " << l.max_queue << "\nmax_tokens = " << l.max_tokens
     << "\ndefault_max_tokens = " << l.default_max_tokens << "\nmax_prompt_tokens = " << l.max_prompt_tokens
     << "\nmax_sequences = " << r.max_sequences << "\nrequest_timeout_s = " << l.request_timeout_s
     << "\nshutdown_grace_s = " << l.shutdown_grace_s << "\nhttp_threads = " << l.http_threads
     << "\nmax_body_bytes = " << quoted(format_size(l.max_body_bytes)) << "\n";
  return os.str();
}

}  // namespace kvtier::server
