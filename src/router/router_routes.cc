// The router's HTTP routes: pass-through of the OpenAI endpoints, its own
// /health and /metrics.
#include <chrono>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "router/router_impl.h"
#include "common/json_text.h"
#include "server/json_limits.h"

namespace kvtier::router {

using nlohmann::json;

namespace {

// Bounded as the backends parse it: a body of nested arrays parsed whole cost the router a GB.
bool wants_stream(const std::string& body) {
  const auto j = server::parse_bounded_json<json>(body);
  if (!j.is_object()) return false;
  auto s = j.find("stream");
  return s != j.end() && s->is_boolean() && s->get<bool>();
}

}  // namespace

void Router::Impl::install_routes() {
  http.Post("/v1/completions", drain.counted([this](const httplib::Request& q, httplib::Response& r) { route(Endpoint::kCompletions, q, r); }));
  http.Post("/v1/chat/completions", drain.counted([this](const httplib::Request& q, httplib::Response& r) { route(Endpoint::kChat, q, r); }));
  http.Post("/v1/cache/prefetch", drain.counted([this](const httplib::Request& q, httplib::Response& r) { route(Endpoint::kPrefetch, q, r); }));
  http.Get(R"(/v1/models(/.+)?)", [this](const httplib::Request& q, httplib::Response& res) {  // the list, or one by its id
    if (refuse_foreign(q, res)) return;
    std::vector<BackendAddress> up;
    {
      std::lock_guard lk(mu);
      for (const BackendState& b : backends)
        if (b.healthy) up.push_back(b.addr);
    }
    for (const BackendAddress& b : up) {
      httplib::Client c(b.host, b.port);
      c.set_connection_timeout(2, 0);
      if (auto r = c.Get(q.path, passed_headers(q))) {
        res.status = r->status;
        return res.set_content(r->body, "application/json");
      }
    }
    send_error(res, 503, "server_error", "no_backend", "no backend is up");
  });
  // With keys, the backends' addresses, load and cache contents (every tenant's together) are the
  // admin's, as on the backends: anyone else's /health is its status alone, and /metrics is refused.
  http.Get("/health", [this](const httplib::Request& q, httplib::Response& res) {
    if (refuse_foreign(q, res)) return;
    const bool admin = is_admin(q);
    std::lock_guard lk(mu);
    bool any = false;
    for (const BackendState& b : backends) any = any || b.healthy;
    res.status = any ? 200 : 503;
    res.set_content(!keys || admin ? health_json() : json_text(json{{"status", any ? "ok" : "no_backend"}}),
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request& q, httplib::Response& res) {
    if (refuse_foreign(q, res)) return;
    if (keys && !o.metrics_public && !is_admin(q))
      return send_error(res, 403, "permission_error", "admin_only", "/metrics needs the backends' admin key");
    std::lock_guard lk(mu);
    res.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Belief Router::Impl::believe(const BackendState& b, const RoutedPrompt& p) const {
  const auto store = b.config && !b.config->remote_store.empty() ? stores.find(b.config->remote_store) : stores.end();
  return router::believe(b.held, b.tracker, store == stores.end() ? nullptr : &store->second,
                         b.config ? &*b.config : nullptr, p);
}

void Router::Impl::route(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
  // Found while the handler runs, before anything is sent (a reset socket has no peer to match).
  const auto from = server::ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  bool admitted = false;
  {
    std::lock_guard lk(mu);
    admitted = forwarding < o.max_forwarding();
    forwarding += admitted;
    counters.busy += !admitted;
  }
  if (admitted) {
    route_to_backend(ep, req, from, res);
    auto finished = [this] {
      std::lock_guard lk(mu);
      --forwarding;
    };
    if (!res.content_provider_) {
      finished();
    } else {  // a stream holds its thread until httplib releases its provider (always, when the response goes)
      res.content_provider_resource_releaser_ = [finished, relayed = std::move(res.content_provider_resource_releaser_)](
                                                    bool success) {
        if (relayed) relayed(success);
        finished();
      };
    }
  } else {
    send_error(res, 429, "server_error", "router_busy",
               std::to_string(o.max_forwarding()) + " requests are being forwarded, as many as --threads " +
                   std::to_string(o.threads) + " allows (a quarter answers health checks and refusals); retry later");
  }
}

void Router::Impl::route_to_backend(Endpoint ep, const httplib::Request& req,
                                    const std::optional<server::ClientConnection>& from, httplib::Response& res) {
  const auto tenant = tenant_of(req, res);
  if (!tenant) return;
  const auto t0 = std::chrono::steady_clock::now();
  const RoutedPrompt prompt = page_chain(ep, req.body, *tenant);
  const bool stream = ep != Endpoint::kPrefetch && wants_stream(req.body);
  std::set<size_t> tried;
  for (;;) {
    std::optional<RouteChoice> choice;
    BackendAddress addr;
    uint64_t predicted_cached = 0;
    double queued_s = 0;  // its price in the chosen backend's prefill queue, until its answer begins
    {
      std::lock_guard lk(mu);
      std::vector<Belief> beliefs;
      for (const BackendState& b : backends) beliefs.push_back(believe(b, prompt));
      normalize_prices(beliefs);
      std::vector<BackendView> views;
      for (size_t i = 0; i < backends.size(); ++i) {
        const BackendState& b = backends[i];
        const uint32_t load = b.in_flight + b.health.waiting;
        const double price = beliefs[i].price_s;
        views.push_back({b.healthy && !tried.count(i), load, beliefs[i].pages, price < 0 ? -1 : price + b.prefill_queue_s});
      }
      choice = choose_backend(o.policy, views, rotation, o.balance_slack);
      if (!choice) {
        ++counters.unroutable;
        break;
      }
      BackendState& b = backends[choice->backend];
      const Belief& chosen = beliefs[choice->backend];
      ++b.in_flight, ++b.routed;
      queued_s = std::max(0.0, chosen.price_s);
      b.prefill_queue_s += queued_s;
      ++counters.routed[size_t(choice->reason)];
      counters.matched_pages += chosen.pages;
      counters.request_pages += prompt.chain.size();
      if (tried.empty()) {
        counters.decide_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++counters.decisions;
      }
      if (b.config) predicted_cached = uint64_t(chosen.reused_pages) * b.config->page_tokens;
      addr = b.addr;
    }
    const size_t i = choice->backend;
    auto done = [this, i, chain = prompt.chain, predicted_cached](int status, std::string_view tail) {
      const auto actual = status == 200 ? reported_cached_tokens(tail) : std::nullopt;
      std::lock_guard lk(mu);
      --backends[i].in_flight;
      if (status == 200) backends[i].tracker.insert(chain);  // its pages are there now, in some tier
      if (status == kCutStream) ++counters.cut_streams;
      if (status == kClientLeft) ++counters.client_left;
      if (actual) {
        ++counters.compared;
        counters.predicted_cached += predicted_cached;
        counters.actual_cached += *actual;
        counters.cached_abs_error += predicted_cached > *actual ? predicted_cached - *actual : *actual - predicted_cached;
      }
    };
    std::string why;
    const Forwarded f = forward(addr, req, from, {stream, int(o.stream_idle_timeout_s)}, res, why, done);  // returns once the answer has begun
    std::lock_guard lk(mu);
    backends[i].prefill_queue_s = std::max(0.0, backends[i].prefill_queue_s - queued_s);
    if (f == Forwarded::kAnswered) return;
    --backends[i].in_flight;
    backends[i].healthy = false;
    backends[i].reason = "unreachable: " + why;
    backends[i].tracker.clear();  // a restarted backend may hold nothing (its disk tier survives: relearned as routed)
    ++counters.failovers;
    tried.insert(i);
  }
  send_error(res, 503, "server_error", "no_backend", tried.empty() ? "no backend is up" : "no backend could be reached");
}

std::string Router::Impl::health_json() const {
  json list = json::array();
  for (const BackendState& b : backends)
    list.push_back({{"url", b.addr.url},
                    {"healthy", b.healthy},
                    {"reason", b.reason},
                    {"waiting", b.health.waiting},
                    {"running", b.health.running},
                    {"free_device_pages", b.health.free_device_pages},
                    {"in_flight", b.in_flight},
                    {"tracked_pages", b.tracker.size()},
                    {"events", {{"live", b.events_live},
                                {"reason", b.events_reason},
                                {"seq", b.events_seq.value_or(0)},
                                {"pages", b.held.pages()},
                                {"disk_chunks", b.held.chunks()}}},
                    {"priced", b.config && b.config->planner != nullptr},
                    {"remote_store", b.config && !b.config->remote_store.empty() ? json(b.config->remote_store) : json(nullptr)},
                    {"routed", b.routed}});
  json shared = json::object();
  for (const auto& [name, held] : stores) shared[name] = {{"chunks", held.remote_chunks()}};
  json j = {{"status", "ok"}, {"policy", policy_name(o.policy)}, {"backends", list}, {"remote_stores", shared}};
  if (reference) j["model_fingerprint"] = reference->fingerprint.to_hex();
  return json_text(j);
}

std::string Router::Impl::metrics_text() const {
  std::ostringstream m;
  auto head = [&](const char* name, const char* type, const char* help) {
    m << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  head("kvtier_router_backend_up", "gauge", "1 when the backend answers its health probe and agrees with its peers.");
  for (const BackendState& b : backends) m << "kvtier_router_backend_up{backend=\"" << b.addr.url << "\"} " << b.healthy << '\n';
  head("kvtier_router_backend_requests_total", "counter", "Requests sent to each backend (failed attempts included).");
  for (const BackendState& b : backends)
    m << "kvtier_router_backend_requests_total{backend=\"" << b.addr.url << "\"} " << b.routed << '\n';
  head("kvtier_router_backend_in_flight", "gauge", "Requests being answered by each backend through this router.");
  for (const BackendState& b : backends)
    m << "kvtier_router_backend_in_flight{backend=\"" << b.addr.url << "\"} " << b.in_flight << '\n';
  head("kvtier_router_decisions_total", "counter", "Routing decisions by reason: cache (a backend held a prefix), load, rotation.");
  for (RouteReason r : {RouteReason::kCache, RouteReason::kLoad, RouteReason::kRotation})
    m << "kvtier_router_decisions_total{reason=\"" << reason_name(r) << "\"} " << counters.routed[size_t(r)] << '\n';
  auto scalar = [&](const char* name, const char* help, uint64_t value) {
    head(name, "counter", help);
    m << name << ' ' << value << '\n';
  };
  scalar("kvtier_router_matched_pages_total", "Prompt pages the chosen backend was believed to hold.", counters.matched_pages);
  scalar("kvtier_router_request_pages_total", "Whole prompt pages of routed requests.", counters.request_pages);
  scalar("kvtier_router_failovers_total", "Attempts whose backend could not be reached (the request went to the next).",
         counters.failovers);
  scalar("kvtier_router_unroutable_total", "Requests answered 503 because no backend was up.", counters.unroutable);
  scalar("kvtier_router_cut_streams_total", "Streams whose backend went away after they began (relayed as far as they got).",
         counters.cut_streams);
  scalar("kvtier_router_busy_total", "Requests answered 429 because the router forwarded as many as its threads allow.",
         counters.busy);
  scalar("kvtier_router_client_left_total",
         "Requests whose client hung up before the answer began (the backend's request was reset, cancelling it).",
         counters.client_left);
  scalar("kvtier_router_cached_tokens_compared_total",
         "Answers whose backend reported its cached tokens (non-streamed, or streamed with a usage).", counters.compared);
  scalar("kvtier_router_predicted_cached_tokens_total", "Of those answers: the cached tokens the router predicted.",
         counters.predicted_cached);
  scalar("kvtier_router_actual_cached_tokens_total", "Of those answers: the cached tokens the backends reported.",
         counters.actual_cached);
  scalar("kvtier_router_cached_tokens_error_total", "Of those answers: the sum of |predicted - reported| cached tokens.",
         counters.cached_abs_error);
  head("kvtier_router_decision_seconds", "summary", "Time to render, tokenize, hash and choose, per request.");
  m << "kvtier_router_decision_seconds_sum " << counters.decide_s << "\nkvtier_router_decision_seconds_count "
    << counters.decisions << '\n';
  return m.str();
}

}  // namespace kvtier::router
