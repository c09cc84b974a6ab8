#include "router/router.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/page_hash.h"
#include "common/secrets.h"
#include "router/event_follower.h"
#include "router/router_impl.h"
#include "server/chat_api.h"
#include "server/http_server.h"
#include "server/config.h"
#include "server/http_front.h"
#include "server/signal_route.h"
#include "text/tokenizer.h"

namespace kvtier::router {

Status RouterOptions::validate() const {
  if (backends.empty()) return Status::InvalidArgument("route: give at least one --backend URL");
  for (const std::string& b : backends) KVTIER_RETURN_IF_ERROR(parse_backend_url(b).status());
  if (port < 0 || port > 65535) return Status::InvalidArgument("route: --port must be in [0, 65535]");
  if (health_interval_ms == 0 || probe_timeout_ms == 0)
    return Status::InvalidArgument("route: the health interval and probe timeout must be > 0");
  if (max_tracked_pages == 0) return Status::InvalidArgument("route: --max-tracked-pages must be > 0");
  if (threads == 0) return Status::InvalidArgument("route: --threads must be > 0");
  if (stream_idle_timeout_s == 0) return Status::InvalidArgument("route: --stream-idle-timeout must be > 0");
  return Status::Ok();
}

const OptionTable<RouterOptions>& router_option_table() {
  using R = RouterOptions;
  static const OptionTable<R> table = [] {
    OptionTable<R> t;
    t.push_back(string_option<R>({"route.host", "--host", {}, "Listen address"}, KVTIER_FIELD(host)));
    t.push_back(uint_option<R>({"route.port", "--port", {}, "Listen port (0: any free port)"}, KVTIER_FIELD(port), 0, 65535));
    t.push_back(enum_option<R>({"route.policy", "--policy", {}, "Which backend takes a request (docs/SCALING.md)"},
                               KVTIER_FIELD(policy), parse_policy, policy_name, "cache-aware, round-robin, least-loaded"));
    t.push_back(string_option<R>({"route.api_keys_file", "--api-keys-file", {},
                                  "The backends' tenant keys file: the router checks keys and hashes each tenant's prompts "
                                  "apart",
                                  "none: keys are not checked"},
                                 KVTIER_FIELD(api_keys_file)));
    t.push_back(string_option<R>({"route.backend_admin_key_file", "--backend-admin-key-file", {},
                                  "The backends' admin key, for their /v1/cache/events streams (their other routes take it too)",
                                  "none: the backends have no keys"},
                                 KVTIER_FIELD(backend_admin_key_file)));
    t.push_back(bool_option<R>({"route.metrics_public", "--metrics-public", {},
                                "Serve /metrics without a key (else it needs the backends' admin key when keys are set)"},
                               KVTIER_FIELD(metrics_public)));
    t.push_back(uint_option<R>({"route.health_interval_ms", "--health-interval-ms", {},
                                "Backend health probes (and event-stream retries) every this many ms"},
                               KVTIER_FIELD(health_interval_ms), 1, 3600000));
    t.push_back(uint_option<R>({"route.probe_timeout_ms", "--probe-timeout-ms", {}, "A health probe's timeout, ms"},
                               KVTIER_FIELD(probe_timeout_ms), 1, 600000));
    t.push_back(uint_option<R>({"route.max_tracked_pages", "--max-tracked-pages", {},
                                "Page hashes remembered per backend of what was routed there (LRU)"},
                               KVTIER_FIELD(max_tracked_pages), 1, uint64_t(1) << 32));
    t.push_back(uint_option<R>({"route.balance_slack", "--balance-slack", {},
                                "Where a backend does not publish its planner: cache-aware sends a request to the least "
                                "loaded backend instead once the cached one has this many more requests"},
                               KVTIER_FIELD(balance_slack), 0, 1u << 20));
    t.push_back(uint_option<R>({"route.threads", "--threads", {}, "HTTP threads (each open stream holds one); three quarters forward requests at once, past that a request is answered 429, and the rest answer health checks"},
                               KVTIER_FIELD(threads), 1, 4096));
    t.push_back(uint_option<R>({"route.stream_idle_timeout_s", "--stream-idle-timeout", {},
                                "A stream whose backend sends nothing for this many seconds is cut off (a kvtier "
                                "backend sends a keep-alive each second, queued or computing)"},
                               KVTIER_FIELD(stream_idle_timeout_s), 1, 3600));
    t.push_back(size_option<R>({"route.max_body_bytes", "--max-body", {}, "Largest request body"},
                               KVTIER_FIELD(max_body_bytes), 1024));
    return t;
  }();
  return table;
}

std::string route_config_markdown() {
  return "\n## [route]\n\n`kvtier route`'s options (docs/SCALING.md), as flags only; besides them it takes `--backend URL` "
         "(repeat for each instance) and `--model FILE`.\n\n" +
         option_rows_markdown(router_option_table(), "route");
}

void send_error(httplib::Response& res, int status, std::string type, std::string code, std::string message) {
  server::ApiError e;
  e.http_status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  res.status = status;
  res.set_content(server::error_json(e), "application/json");
}

Result<std::unique_ptr<Router>> Router::create(RouterOptions options, std::optional<text::Vocab> vocab) {
  KVTIER_RETURN_IF_ERROR(options.validate());
  if (options.policy == RoutePolicy::kCacheAware && !vocab)
    return Status::InvalidArgument("route: the cache-aware policy needs --model (its tokenizer and chat template)");
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(options);
  for (const std::string& url : impl->o.backends)
    impl->backends.emplace_back(*parse_backend_url(url), impl->o.max_tracked_pages);
  if (vocab) {
    KVTIER_ASSIGN_OR_RETURN(text::Tokenizer tok, text::Tokenizer::create(*vocab));
    impl->codec = text_codec(tok, *vocab);
    impl->limits.vocab_size = uint32_t(vocab->tokens.size());
    auto chat = ChatPrompts::create(*impl->codec, vocab->chat_template);
    impl->chat = chat.ok() ? std::move(chat).value() : ChatPrompts::unavailable(*impl->codec, chat.status().message());
    impl->chat->set_splicing(false);  // the router never sees replies: it hashes what re-tokenizing gives
  }
  impl->limits.max_context = impl->limits.max_prompt_tokens = UINT32_MAX / 2;  // the backends enforce their limits
  impl->limits.max_tokens = UINT32_MAX / 4;
  if (!impl->o.api_keys_file.empty()) {
    server::ServerConfig sc;
    sc.api_keys_file = impl->o.api_keys_file;
    // The backends' admin key is a client there too (its requests run in the admin's namespace): the
    // router takes it as they do, and hashes its prompts in that namespace.
    sc.admin_key_file = impl->o.backend_admin_key_file;
    KVTIER_ASSIGN_OR_RETURN(impl->keys, server::KeyRing::create(sc));
  }
  if (!impl->o.backend_admin_key_file.empty()) {
    KVTIER_RETURN_IF_ERROR(require_private_file(impl->o.backend_admin_key_file, "--backend-admin-key-file"));
    KVTIER_ASSIGN_OR_RETURN(impl->backend_key, read_secret_file(impl->o.backend_admin_key_file, "--backend-admin-key-file", 16));
  }
  return std::unique_ptr<Router>(new Router(std::move(impl)));
}

Router::Router(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->install_routes(); }

Router::~Router() {
  stop();
  if (impl_->health_thread.joinable()) impl_->health_thread.join();
  for (std::thread& t : impl_->event_threads) t.join();
}

Result<int> Router::bind() {
  Impl& m = *impl_;
  const int threads = int(m.o.threads);
  m.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  m.http.set_post_routing_handler(server::answer_half_closed_client);  // cpp-httplib writes nothing to one
  server::install_body_limit_and_errors(m.http, m.o.max_body_bytes);
  // A body comes only with a valid key (it was read whole, up to --max-body, before its 401).
  m.drain.install(m.http, nullptr, [&m](const httplib::Request& req, httplib::Response& res) { return !m.tenant_of(req, res); });
  m.http.set_socket_options(server::reuse_address_only);
  const int port = m.o.port == 0 ? m.http.bind_to_any_port(m.o.host.c_str()) : m.o.port;
  if (port < 0 || (m.o.port != 0 && !m.http.bind_to_port(m.o.host.c_str(), m.o.port)))
    return Status::Unavailable("route: cannot listen on " + m.o.host + ":" + std::to_string(m.o.port));
  server::widen_listen_backlog(uint16_t(port));
  m.port = port;
  m.probe_all();
  m.health_thread = std::thread([&m] { m.health_loop(); });
  if (m.o.policy == RoutePolicy::kCacheAware)
    for (size_t i = 0; i < m.backends.size(); ++i) m.event_threads.emplace_back([&m, i] { m.events_loop(i); });
  return port;
}

void Router::serve() {
  {
    std::lock_guard lk(impl_->stop_mu);
    if (impl_->stopping) return;
    impl_->serving = true;
  }
  impl_->http.listen_after_bind();
  impl_->serving = false;
}

void Router::stop() {
  {
    std::lock_guard lk(impl_->stop_mu);
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  // httplib's stop() does nothing before its listen loop runs: a serve() that is entering it is
  // waited for (one that has not started will not: it sees `stopping`).
  while (impl_->serving.load() && !impl_->http.is_running()) std::this_thread::yield();
  impl_->http.stop();
}

size_t Router::close_connections(std::chrono::milliseconds bound) {
  impl_->drain.wait_none(bound);
  return impl_->port == 0 ? 0 : server::shut_connections_on(uint16_t(impl_->port));
}

Status Router::reload_keys() { return impl_->keys ? impl_->keys->reload() : Status::Ok(); }

std::vector<BackendStatus> Router::backends() const {
  std::lock_guard lk(impl_->mu);
  std::vector<BackendStatus> out;
  for (const BackendState& b : impl_->backends)
    out.push_back({b.addr.url, b.healthy, b.reason, b.health, b.in_flight, b.tracker.size(), b.routed});
  return out;
}

// ---- health ----

bool Router::Impl::stopped() {
  std::lock_guard lk(stop_mu);
  return stopping;
}

bool Router::Impl::pause(std::chrono::milliseconds d) {
  std::unique_lock lk(stop_mu);
  return !stop_cv.wait_for(lk, d, [&] { return stopping; });
}

void Router::Impl::health_loop() {
  while (pause(std::chrono::milliseconds(o.health_interval_ms))) probe_all();
}

// ---- what each backend holds ----

void Router::Impl::events_loop(size_t i) {
  const BackendAddress addr = backends[i].addr;  // immutable after create
  std::optional<uint64_t> since;
  auto apply = [&](EventMessage&& m) {
    std::lock_guard lk(mu);
    BackendState& b = backends[i];
    if (m.snapshot) b.held.reset(m.device, m.host, m.disk);
    const std::string* store = b.config && !b.config->remote_store.empty() ? &b.config->remote_store : nullptr;
    for (const EventMessage::Record& r : m.records) {
      if (r.tier != TierKind::kRemote) b.held.apply(r.kind, r.tier, r.from, r.hashes);
      else if (store) stores[*store].apply(r.kind, r.tier, r.from, r.hashes);  // shared: counts for all its users
    }
    b.events_seq = since = m.seq;
    b.events_live = true;
    b.events_reason.clear();
  };
  do {
    const Status st = follow_events(addr, backend_key, since, apply, [&] { return !stopped(); });
    std::lock_guard lk(mu);
    backends[i].events_live = false;
    backends[i].events_reason = st.ok() ? "stream ended" : st.message();
  } while (pause(std::chrono::milliseconds(o.health_interval_ms)));
}

namespace {

bool same_layout(const BackendCacheConfig& a, const BackendCacheConfig& b) {
  return a.fingerprint == b.fingerprint && a.page_tokens == b.page_tokens && a.hash == b.hash;
}

std::string layout_name(const BackendCacheConfig& c) {
  return "model " + c.fingerprint.to_hex() + ", " + std::to_string(c.page_tokens) + "-token pages";
}

}  // namespace

// Every backend probed (unlocked), then their states set together. Backends must agree on the
// model and page layout to be routed to: the reference is the first answering backend's, and
// once no backend that answers has it (all restarted with another model or page size) it is the
// first answering one's again; it was kept for ever, and every backend stayed down.
void Router::Impl::probe_all() {
  const Millis timeout(o.probe_timeout_ms);
  std::vector<Result<BackendHealth>> health;
  std::vector<std::optional<Result<BackendCacheConfig>>> configs(backends.size());
  for (size_t i = 0; i < backends.size(); ++i) {
    const BackendAddress addr = backends[i].addr;  // immutable after create
    health.push_back(probe_health(addr, timeout));
    bool need_config = false;
    {
      std::lock_guard lk(mu);
      need_config = health[i].ok() && !backends[i].config;
    }
    if (need_config) configs[i] = probe_cache_config(addr, backend_key, timeout);
  }
  std::lock_guard lk(mu);
  for (size_t i = 0; i < backends.size(); ++i) {
    BackendState& b = backends[i];
    if (configs[i] && configs[i]->ok()) b.config = **configs[i];
    if (!health[i].ok()) b.config.reset();  // asked again when it is back: it may come back with another model
  }
  const auto agrees = [&](const BackendState& b) { return b.config && same_layout(*b.config, *reference); };
  if (!reference || std::none_of(backends.begin(), backends.end(), agrees)) {
    reference.reset();
    for (const BackendState& b : backends)
      if (b.config) {
        reference = *b.config;
        break;
      }
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    BackendState& b = backends[i];
    if (!health[i].ok()) {
      b.healthy = false, b.reason = health[i].status().message();
    } else if (b.config && reference && !same_layout(*b.config, *reference)) {
      b.healthy = false, b.reason = "serves " + layout_name(*b.config) + ", not the " + layout_name(*reference) +
                                    " of the first backend that answered";
    } else {
      b.healthy = true, b.reason.clear(), b.health = *health[i];
    }
  }
}

// ---- requests ----

bool Router::Impl::refuse_foreign(const httplib::Request& req, httplib::Response& res) const {
  const std::string why = keys ? std::string() : server::foreign_site_reason(req);
  if (!why.empty()) send_error(res, 403, "permission_error", "foreign_site", why);
  return !why.empty();
}

std::optional<std::string> Router::Impl::tenant_of(const httplib::Request& req, httplib::Response& res) const {
  if (refuse_foreign(req, res)) return std::nullopt;
  if (!keys) return std::string();
  const std::string given = server::request_key(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"));
  if (auto who = keys->authenticate(given)) return who->tenant;
  send_error(res, 401, "authentication_error", "invalid_api_key",
             given.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key");
  return std::nullopt;
}

bool Router::Impl::is_admin(const httplib::Request& req) const {
  if (!keys) return false;
  const auto who =
      keys->authenticate(server::request_key(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key")));
  return who && who->admin;
}

RoutedPrompt Router::Impl::page_chain(Endpoint ep, const std::string& body, const std::string& tenant) const {
  std::optional<BackendCacheConfig> cfg;
  {
    std::lock_guard lk(mu);
    cfg = reference;
  }
  if (!codec || !cfg || !cfg->cache_enabled) return {};
  const server::Tokenizer tokenize = [this](std::string_view text, const text::EncodeOptions& options) {
    return codec->tokenize(text, options);
  };
  std::optional<server::CompletionRequest> r;
  const bool chat_shape = ep == Endpoint::kChat || (ep == Endpoint::kPrefetch && body.find("\"messages\"") != std::string::npos);
  if (chat_shape) {
    auto build = [this](const text::ChatInput& in, std::string_view, std::string& rendered) {
      return chat->build(in, rendered);
    };
    auto parsed = server::parse_chat_request(body, limits, build);
    if (auto* c = std::get_if<server::ChatRequest>(&parsed)) r = std::move(c->completion);
  } else {
    auto parsed = server::parse_completion_request(body, limits, tokenize);
    if (auto* c = std::get_if<server::CompletionRequest>(&parsed)) r = std::move(*c);
  }
  if (!r) return {};  // the backend answers the error
  const Namespace ns{.model_fingerprint = cfg->fingerprint, .adapter_id = {}, .cache_salt = r->cache_salt, .tenant = tenant};
  const size_t full = r->prompt.size() / cfg->page_tokens * cfg->page_tokens;
  RoutedPrompt p;
  p.tokens = r->prompt.size();
  hash_pages(cfg->hash, namespace_seed(ns, cfg->hash), std::span(r->prompt).first(full), cfg->page_tokens, p.chain);
  return p;
}

// ---- the command ----

Status run_router(RouterOptions options, std::optional<text::Vocab> vocab, std::FILE* log) {
  server::SignalRoute signals;
  if (!signals.ok()) return Status::FromErrno(errno, "cannot set up the signal pipe");
  const std::string host = options.host;
  const RoutePolicy policy = options.policy;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Router> router, Router::create(std::move(options), std::move(vocab)));
  KVTIER_ASSIGN_OR_RETURN(int port, router->bind());
  std::fprintf(log, "kvtier route: listening on http://%s:%d, %s\n", host.c_str(), port,
               std::string(policy_name(policy)).c_str());
  std::vector<bool> up;
  for (const BackendStatus& b : router->backends()) {
    std::fprintf(log, "kvtier route: backend %s %s%s\n", b.url.c_str(), b.healthy ? "up" : "down: ",
                 b.healthy ? "" : b.reason.c_str());
    up.push_back(b.healthy);
  }
  std::fflush(log);
  std::thread server([&] { router->serve(); });
  for (;;) {
    const int sig = signals.wait(500);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig == SIGHUP) {
      const Status st = router->reload_keys();
      std::fprintf(log, "kvtier route: SIGHUP: %s\n", st.ok() ? "keys reloaded" : ("keys not reloaded: " + st.message()).c_str());
    }
    const auto now = router->backends();
    for (size_t i = 0; i < now.size(); ++i)
      if (now[i].healthy != up[i]) {
        up[i] = now[i].healthy;
        std::fprintf(log, "kvtier route: backend %s %s%s\n", now[i].url.c_str(), up[i] ? "up" : "down: ",
                     up[i] ? "" : now[i].reason.c_str());
      }
    std::fflush(log);
  }
  std::fprintf(log, "kvtier route: stopping\n");
  router->stop();
  // Whole answers being written end (streams stop at their next chunk), then idle keep-alive
  // connections and requests half sent are shut, or the exit would wait out httplib's timeouts.
  router->close_connections(std::chrono::hours(1));
  server.join();
  return Status::Ok();
}

}  // namespace kvtier::router
