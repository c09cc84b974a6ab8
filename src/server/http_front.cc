#include "server/http_front.h"

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <cctype>
#include <string_view>

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

namespace {

// "host" of "host:port", "[v6]:port", "host" (lower case).
std::string host_part(std::string_view hostport) {
  std::string h;
  if (!hostport.empty() && hostport.front() == '[') {
    h = std::string(hostport.substr(0, hostport.find(']') + 1));
  } else {
    h = std::string(hostport.substr(0, hostport.find(':')));
  }
  for (char& c : h) c = char(std::tolower(static_cast<unsigned char>(c)));
  return h;
}

// A name for this machine: what a local client dials (Debian maps the host name to 127.0.1.1).
bool loopback_name(const std::string& host) {
  const bool numeric = host.find_first_not_of("0123456789.") == std::string::npos;  // not "127.evil.example"
  if (host == "localhost" || host == "localhost." || host == "[::1]" || host == "[::ffff:127.0.0.1]" ||
      host == "0.0.0.0" || (numeric && host.rfind("127.", 0) == 0))
    return true;
  static const std::vector<std::string> own = [] {  // the host name, and its full name (once: no lookup per request)
    std::vector<std::string> names;
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return names;
    names.emplace_back(name);
    addrinfo hints{};
    hints.ai_flags = AI_CANONNAME;
    addrinfo* info = nullptr;
    if (::getaddrinfo(name, nullptr, &hints, &info) == 0) {
      if (info && info->ai_canonname) names.emplace_back(info->ai_canonname);
      ::freeaddrinfo(info);
    }
    for (std::string& n : names)
      for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
    return names;
  }();
  return std::find(own.begin(), own.end(), host) != own.end();
}

bool loopback_address(const std::string& addr) {
  return addr == "::1" || addr.rfind("127.", 0) == 0 || addr.rfind("::ffff:127.", 0) == 0;
}

}  // namespace

std::string foreign_site_reason(const httplib::Request& req) {
  const std::string host = req.get_header_value("Host");
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const size_t scheme = origin.find("://");
    const std::string site = scheme == std::string::npos ? std::string() : origin.substr(scheme + 3);
    // The Host, or the one a proxy in front was asked for (X-Forwarded-Host) where it rewrites Host.
    if (site.empty() || (site != host && site != req.get_header_value("X-Forwarded-Host")))
      return "a request from another site (Origin " + origin.substr(0, 200) + ") is refused";
  }
  if (loopback_address(req.local_addr) && !loopback_name(host_part(host)))
    return "a keyless server on a loopback address answers requests for this machine only (Host " +
           host.substr(0, 200) +
           "): a site name pointing here may be a web page's DNS rebinding. Give the server keys "
           "(--api-keys-file), or have the proxy in front send Host as 127.0.0.1";
  return {};
}

}  // namespace kvtier::server
