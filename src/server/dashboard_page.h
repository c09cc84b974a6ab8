// The dashboard page served at GET /dashboard: one self-contained HTML
// document (its CSS and JavaScript inline, written in src/server/dashboard/
// and compiled in by the build). It holds no data: it polls
// /v1/cache/tree, /v1/cache/tiers and /v1/requests/recent, sending the API
// key it asks for as an Authorization header. docs/DASHBOARD.md.
#pragma once

#include <string_view>

namespace kvtier::server {

std::string_view dashboard_html();

}  // namespace kvtier::server
