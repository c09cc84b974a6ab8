// The flags of `kvtier serve` and how they combine with a config file.
//
// add_serve_flags() registers every option on a CLI11 app, each with its
// default in the help text; resolve_config() starts from the defaults,
// applies --config (TOML) and then every flag that was given, so flags win.
// Lives in the library (not tools/) so tests can reach it. Not thread-safe:
// used once at startup.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "server/config.h"

namespace kvtier::server {

// Every field is "not given" until CLI11 sets it.
struct ServeFlags {
  std::optional<std::string> config_path;
  std::optional<std::string> model, served_model_name, chat_template, host, api_key, disk_dir, remote, device;
  std::optional<uint16_t> port;
  std::optional<uint64_t> model_seed;
  std::optional<uint32_t> threads;
  std::optional<std::string> device_capacity, host_capacity, disk_capacity, max_body;
  std::optional<std::string> kv_dtype, write_policy, eviction, profile, hash;
  std::optional<uint32_t> page_tokens, chunk_pages, selective_hits;
  bool no_cache = false;
  bool no_layerwise = false;
  bool no_blend = false;
  std::optional<float> blend_ratio;
  std::optional<uint32_t> blend_check_layer;
  std::optional<std::string> blend_separator;
  std::optional<std::string> remote_password_file, tier_secret_file, disk_codec, remote_codec, host_codec;
  bool disk_authenticate = false;
  bool metrics_public = false;
  std::optional<uint32_t> max_queue, max_tokens, default_max_tokens, max_prompt_tokens, max_sequences, http_threads;
  std::optional<double> request_timeout_s, shutdown_grace_s;
  bool print_config = false;
};

void add_serve_flags(CLI::App& app, ServeFlags& flags);

// defaults < --config file < flags. The result is validate()d.
Result<ServerConfig> resolve_config(const ServeFlags& flags);

}  // namespace kvtier::server
