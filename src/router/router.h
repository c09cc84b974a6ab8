// Router: `kvtier route`, an OpenAI-compatible front for several kvtier
// instances that sends each request to the backend believed to hold the
// longest prefix of its KV (docs/SCALING.md).
//
// For each request the router renders and tokenizes the prompt as the
// backends do (the server's own request parsers and chat templates, from the
// model file's tokenizer keys), hashes its pages in the backends' namespace
// (the fingerprint, page size and hash algorithm from their
// /v1/cache/config; the tenant from the keys file shared with them; the
// client's cache_salt), asks the policy (router/policy.h) with each backend's
// PrefixTracker match and load, and passes the request through: whole
// answers as they are, streams chunk by chunk as they arrive. A backend that
// cannot be reached is marked down and the request goes to the next choice;
// once a backend has answered, its answer (or error) is the client's.
// Backends are probed every health_interval_ms (GET /health); a backend that
// answers garbage is down, never a crash.
//
// Thread-safe: HTTP handlers run on the server's thread pool; one mutex
// guards the backends' state, held only to decide (never during I/O).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/option_table.h"
#include "kvtier/status.h"
#include "router/backend.h"
#include "router/policy.h"
#include "text/vocab.h"

namespace kvtier::router {

struct RouterOptions {
  std::vector<std::string> backends;  // "http://HOST:PORT", at least one
  std::string host = "127.0.0.1";
  int port = 8090;  // 0: any free port
  RoutePolicy policy = RoutePolicy::kCacheAware;
  std::string api_keys_file;           // the backends' tenant keys: the router checks keys and hashes per tenant
  std::string backend_admin_key_file;  // a key the backends accept, for their /v1/cache/config
  bool metrics_public = false;         // /metrics without a key (else, with keys, the admin key only)
  uint32_t health_interval_ms = 1000;
  uint32_t probe_timeout_ms = 1000;
  size_t max_tracked_pages = size_t(1) << 20;  // per backend (PrefixTracker)
  uint32_t balance_slack = 4;                  // cache-aware yields to load past this many requests
  uint32_t threads = 64;                       // HTTP threads (a stream holds one while it lasts)
  // Requests forwarded at once: three quarters of the threads (at least one); the rest answer
  // /health, /metrics and the 429s past it, which would otherwise wait in an unbounded queue.
  uint32_t max_forwarding() const { return std::max<uint32_t>(1, threads * 3 / 4); }
  uint32_t stream_idle_timeout_s = 30;         // a stream's backend silent this long is cut off
  size_t max_body_bytes = size_t(16) << 20;    // largest request body (the backends' own default)
  Status validate() const;
};

// The options of `kvtier route` but its --backend list and --model (the command's own), one row each
// (common/option_table.h: flags, docs/CONFIG.md's [route] section).
const OptionTable<RouterOptions>& router_option_table();
// Its section of docs/CONFIG.md, after the server's (server::config_markdown()).
std::string route_config_markdown();

struct BackendStatus {
  std::string url;
  bool healthy = false;
  std::string reason;  // why not healthy
  BackendHealth health;
  uint32_t in_flight = 0;
  size_t tracked_pages = 0;
  uint64_t routed = 0;
};

class Router {
 public:
  // `vocab`: the model's tokenizer and chat template (required by cache-aware).
  static Result<std::unique_ptr<Router>> create(RouterOptions options, std::optional<text::Vocab> vocab);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds host:port and probes every backend once; returns the port.
  Result<int> bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  void stop();
  // After stop(): waits up to `bound` for the answers being written (a stream ends at its next
  // chunk), then shuts the connections still open (idle keep-alive ones, requests half sent) so
  // that serve() returns at once. Returns how many it shut.
  size_t close_connections(std::chrono::milliseconds bound);
  // Re-reads the keys file (SIGHUP); on an error the keys in use stay.
  Status reload_keys();
  std::vector<BackendStatus> backends() const;

 private:
  struct Impl;
  explicit Router(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `kvtier route`: create, bind, serve until SIGINT/SIGTERM (SIGHUP reloads
// the keys file), with a line on `log` at start and for each backend that
// goes down or comes back.
Status run_router(RouterOptions options, std::optional<text::Vocab> vocab, std::FILE* log);

}  // namespace kvtier::router
