// What every kvtier HTTP front end (kvtier serve, kvtier route) sets on its cpp-httplib server
// about request bodies and the answers the library writes itself.
#pragma once

#include <cstddef>
#include <string>

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace kvtier::server {

// The body limit (a body over it is answered 413 naming it), and OpenAI-shaped JSON errors for
// what httplib answers on its own (no route, a body too large, a malformed request). Routes that
// gave their own answer (a body, or a stream: a router relays a backend's refusal as one) keep it.
void install_body_limit_and_errors(httplib::Server& http, size_t max_body_bytes);

// For the pre-routing handler (ConnectionDrain's), before httplib reads a request's body.
// cpp-httplib 0.11 holds a body to its limit only when it comes with a Content-Length: a chunked
// body is read whole into memory first, whatever its size, and a POST with neither header is read
// until the client closes. So a POST, PUT or PATCH with neither header is given Content-Length 0
// (RFC 9112 §6.3: it has no body), and one with a Transfer-Encoding is answered 411 (a JSON
// error) and its connection closed. True when it answered.
bool refuse_unbounded_body(const httplib::Request& req, httplib::Response& res);

// Why a keyless server (or router) must refuse a request from a web browser, or empty. A page of
// another site can make a browser send requests to what it can reach (127.0.0.1 included), though
// it cannot read the answers of another origin (kvtier sends no CORS headers): so a request whose
// Origin is not this server's own (its Host, or the X-Forwarded-Host of a proxy that rewrites Host)
// is refused. And a page whose site name was rebound to 127.0.0.1 (DNS rebinding) is this server's
// origin to the browser, which then reads the answers too: so where the request came in on a
// loopback address, its Host must name this machine (localhost, 127.x.y.z, [::1], the host name).
// With keys neither applies: a page cannot make a browser send a key without a CORS preflight, which
// kvtier never grants. Clients that are not browsers send no Origin, and the Host they dialled.
std::string foreign_site_reason(const httplib::Request& req);

}  // namespace kvtier::server
