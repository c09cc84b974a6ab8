// ClientConnection::send_whole, apart from client_connection.cc: httplib.h and
// <linux/tcp.h> (for tcp_info) cannot share a translation unit.
#include <httplib.h>

#include "server/client_connection.h"

namespace kvtier::server {

namespace {

// A whole (non-streaming) response as HTTP/1.1 bytes, the connection closed after it.
std::string whole_response_bytes(const httplib::Response& res) {
  // The reason phrase is informative only (RFC 9112 §4): clients read the code.
  const int status = res.status == -1 ? 200 : res.status;  // httplib's default, applied after the handler
  std::string out = "HTTP/1.1 " + std::to_string(status) + (status < 400 ? " OK\r\n" : " Error\r\n");
  for (const auto& [name, value] : res.headers)
    if (name != "Content-Length" && name != "Connection") out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\nConnection: close\r\n\r\n";
  return out + res.body;
}

}  // namespace

bool ClientConnection::send_whole(const httplib::Response& res) const { return send_all(whole_response_bytes(res)); }

void ClientConnection::answer_and_close(const httplib::Response& res, int linger_ms, size_t linger_bytes) const {
  if (send_whole(res)) linger_and_shut(linger_ms, linger_bytes);
}

void answer_half_closed_client(const httplib::Request& req, httplib::Response& res) {
  if (res.content_provider_) return;
  const auto c = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (c && c->half_closed()) c->send_whole(res);
}

}  // namespace kvtier::server
