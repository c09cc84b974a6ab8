#include "server/http_front.h"

#include <httplib.h>

#include <string>

#include "server/api.h"
#include "server/client_connection.h"

namespace kvtier::server {
namespace {

constexpr const char* kJson = "application/json";

// httplib refuses a body over the limit, and a form-encoded one (curl -d's default type) over
// 8 KiB whatever the limit says: the answer names the limit that applied.
std::string body_too_large_message(const httplib::Request& req, size_t max_body) {
  if (req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded"))
    return "request body sent as application/x-www-form-urlencoded is over 8 KiB, the HTTP layer's limit for "
           "form data: send the JSON with Content-Type: application/json";
  return "request body is over " + std::to_string(max_body) + " bytes (--max-body)";
}

}  // namespace

void install_body_limit_and_errors(httplib::Server& http, size_t max_body_bytes) {
  http.set_payload_max_length(max_body_bytes);
  http.set_error_handler([max_body_bytes](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return;  // a route already gave its answer (a relayed stream's too)
    ApiError e;
    e.http_status = res.status;
    // A 5xx with no body (a relayed backend's) is the server's failure, not the request's.
    e.type = res.status == 404 ? "not_found_error" : res.status >= 500 ? "server_error" : "invalid_request_error";
    if (res.status == 404) e.message = "no route for " + req.method + " " + req.path;
    else if (res.status == 413) e.message = body_too_large_message(req, max_body_bytes);
    else if (res.status >= 500) e.message = "the server failed with HTTP " + std::to_string(res.status) + " and no detail";
    else e.message = "request rejected with HTTP " + std::to_string(res.status);
    res.set_content(error_json(e), kJson);
  });
}

bool refuse_unbounded_body(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH") return false;
  if (!req.has_header("Transfer-Encoding")) {
    // httplib's Request is its own (non-const) object, handed to this hook as const: what it
    // reads next is the body, and the header tells it that there is none.
    if (!req.has_header("Content-Length")) const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
    return false;
  }
  ApiError e;
  e.http_status = 411;
  e.type = "invalid_request_error";
  e.code = "length_required";
  e.message = "request bodies are taken with a Content-Length only (Transfer-Encoding: " +
              req.get_header_value("Transfer-Encoding") + " is refused): send the JSON with its length";
  res.status = e.http_status;
  res.set_content(error_json(e), kJson);
  if (const auto c = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port))
    c->answer_and_close(res);
  return true;
}

}  // namespace kvtier::server
