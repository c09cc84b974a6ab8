// A backend of the router: a `kvtier serve` instance (or any OpenAI-
// compatible server) by its base URL, and what the router learns by asking
// it: GET /health (load, free device pages) and GET /v1/cache/config (how it
// hashes prompts into pages). Probes are plain functions with a timeout;
// anything but a well-formed answer is an error (the backend is then
// unhealthy, never a crash). Safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "planner/planner.h"

namespace kvtier::router {

struct BackendAddress {
  std::string url;  // as given: "http://host:port"
  std::string host;
  int port = 0;
};
// "http://HOST:PORT" (an IPv4 address or name; no path, no TLS).
Result<BackendAddress> parse_backend_url(std::string_view url);

struct BackendHealth {
  uint32_t waiting = 0, running = 0, free_device_pages = 0;
};

// What a router needs to compute the pages a backend would (GET /v1/cache/config).
struct BackendCacheConfig {
  std::string model;
  PageHash fingerprint;
  uint32_t page_tokens = 0, chunk_pages = 0;
  HashAlgo hash = HashAlgo::kXXH3_128;
  bool cache_enabled = true;
  // Its planner's inputs, to price a prompt there as it would (null: it did
  // not publish them: another server, or an older kvtier).
  std::shared_ptr<const Planner> planner;
  std::string remote_store;  // its shared remote store's name (empty: none)
};

// A PageHash from its 32 hex digits (PageHash::to_hex); an error says `what` is not one.
Result<PageHash> hash_from_hex(std::string_view hex, const std::string& what);

using Millis = std::chrono::milliseconds;
// 200 with {"status": "ok", waiting, running[, free_device_pages]}; a 503
// (shutting down), a connection failure or garbage is an error saying which.
Result<BackendHealth> probe_health(const BackendAddress& b, Millis timeout);
// `key`: a key the backend accepts (empty: none sent).
Result<BackendCacheConfig> probe_cache_config(const BackendAddress& b, const std::string& key, Millis timeout);

}  // namespace kvtier::router
