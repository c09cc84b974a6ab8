// The dashboard's routes of HttpServer: the page itself (no key: it holds no
// data) and the JSON it polls (the admin key when keys are set).
#include <httplib.h>

#include "server/cache_view.h"
#include "server/dashboard_json.h"
#include "server/dashboard_page.h"
#include "server/http_server.h"

namespace kvtier::server {
namespace {

constexpr const char* kJson = "application/json";

// The page may talk to this server only: no other origin, no frames, no plugins.
constexpr const char* kPagePolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void bad_count(httplib::Response& res, const std::string& name, uint64_t min, uint64_t max) {
  ApiError e = bad_request(name + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
                           name, "invalid_value");
  res.status = e.http_status;
  res.set_content(error_json(e), kJson);
}

}  // namespace

void HttpServer::install_dashboard_routes() {
  httplib::Server& s = *http_;
  s.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", kPagePolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-cache");
    const std::string_view page = dashboard_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });

  s.Get("/v1/cache/tree", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    const auto max_nodes = query_count(req.get_param_value("max_nodes"), kDefaultTreeNodes, 1, kMaxTreeNodes);
    if (!max_nodes) return bad_count(res, "max_nodes", 1, kMaxTreeNodes);
    const auto tree = view_->tree();
    res.set_header("Cache-Control", "no-store");
    const TextCodec* labels = config_.dashboard_labels ? &scheduler_->model().text : nullptr;
    res.set_content(tree_json(tree.get(), uint32_t(*max_nodes), labels, std::chrono::steady_clock::now()), kJson);
  });

  s.Get("/v1/cache/tiers", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    const std::vector<TierSample> samples = view_->samples();
    res.set_header("Cache-Control", "no-store");
    res.set_content(tiers_json(samples), kJson);
  });

  s.Get("/v1/requests/recent", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    const size_t capacity = scheduler_->recent().capacity();
    const auto limit = query_count(req.get_param_value("limit"), std::min(kDefaultRecentRequests, capacity), 1, capacity);
    if (!limit) return bad_count(res, "limit", 1, capacity);
    res.set_header("Cache-Control", "no-store");
    res.set_content(recent_requests_json(scheduler_->recent().newest(*limit)), kJson);
  });
}

}  // namespace kvtier::server
