// What every kvtier HTTP front end (kvtier serve, kvtier route) sets on its cpp-httplib server
// about request bodies and the answers the library writes itself.
#pragma once

#include <cstddef>

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

}  // namespace kvtier::server
