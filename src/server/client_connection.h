// ClientConnection: the socket an HTTP request arrived on, so that a handler
// waiting for a result notices when its client hangs up.
//
// cpp-httplib 0.11 gives a non-streaming handler neither its socket nor a
// "connection closed" query. A TCP connection is identified by its local and
// remote address and port, which the request carries, so find() looks for
// the socket with those addresses among the process's descriptors (it tries
// the one it found last on this thread first: httplib serves a keep-alive
// connection on one thread). closed() peeks without consuming anything, so
// httplib reads the connection as if nobody had looked.
// Borrows the descriptor: use it only while httplib serves the request (the
// handler, then a streamed answer's content provider and its releaser;
// httplib closes the socket after them). Safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

namespace httplib {
struct Request;
struct Response;
}

namespace kvtier::server {

class ClientConnection {
 public:
  // nullopt when no socket of this process has these addresses.
  static std::optional<ClientConnection> find(std::string_view local_addr, int local_port,
                                              std::string_view remote_addr, int remote_port);

  // True once the connection is gone: the client reset it, or both of its
  // directions are shut. An end of stream on read (the client's FIN) is not
  // enough: a client may half-close (shutdown for writing) after sending its
  // request and still read the answer. A client that close()s without a
  // reset looks the same until something is written (then it resets):
  // WaitingClient tells them apart.
  bool closed() const;
  // The client shut its writing side (its FIN arrived) and the connection
  // is not reset: it may still read an answer.
  bool half_closed() const;
  // Writes all of `bytes` (each send waits at most 30 s for room); false
  // when the connection fails.
  bool send_all(std::string_view bytes) const;
  // Writes a whole (non-streaming) response, the connection to be closed
  // after it. For a client that half-closed: cpp-httplib 0.11 takes its FIN
  // for a hang-up and will not write the answer.
  bool send_whole(const httplib::Response& res) const;
  // Writes a whole response, shuts this side's writing (the client reads the answer to its end),
  // then reads and drops what the client still sends, for at most `linger_ms` and `linger_bytes`,
  // and shuts the reading side: closing a socket with unread bytes resets it, and a reset can
  // lose the answer before the client reads it. httplib then finds the connection closed.
  void answer_and_close(const httplib::Response& res, int linger_ms = 2000, size_t linger_bytes = size_t(16) << 20) const;
  // Bytes this side has sent on the connection so far (TCP_INFO), or
  // nullopt when the kernel does not say: whether anything went out since.
  std::optional<uint64_t> bytes_sent() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  void linger_and_shut(int linger_ms, size_t linger_bytes) const;
  int fd_;
};

// A client awaiting an answer of which nothing has been written yet, watched for leaving. Its FIN
// alone cannot tell a half-close (it still reads the answer) from a close() without a reset (it is
// gone): they look alike until something arrives, which a closed socket's kernel answers with a
// reset. So once the FIN is there, left() writes an interim `HTTP/1.1 100 Continue` once, which
// every HTTP/1.1 client reads past before the final response (RFC 9110 §15.2: it must parse 1xx
// responses it did not ask for); a client that closed resets the connection in answer, and a later
// left() sees it. Only for HTTP/1.1 requests (an HTTP/1.0 client gets no 1xx) and only before any
// byte of the answer is written (`may_probe`). One thread at a time.
class WaitingClient {
 public:
  WaitingClient(std::optional<ClientConnection> connection, bool may_probe)
      : connection_(std::move(connection)), may_probe_(may_probe) {}
  // True once the client is gone (ClientConnection::closed(), or the probe could not be written).
  bool left();
  const std::optional<ClientConnection>& connection() const { return connection_; }

 private:
  std::optional<ClientConnection> connection_;
  bool may_probe_;
};

// Shuts (both directions) every connected TCP socket of this process whose
// local port is `port`: the connections a server accepted there. Returns how many.
size_t shut_connections_on(uint16_t port);

// For httplib::Server::set_post_routing_handler (it runs after every route, a refused request's
// too): a client that half-closed after sending its request gets the whole answer written, any
// status (a streamed answer writes its own).
void answer_half_closed_client(const httplib::Request& req, httplib::Response& res);

}  // namespace kvtier::server
