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
// Borrows the descriptor: use it only while the handler runs (httplib closes
// the socket after the handler returns). Safe from any thread.
#pragma once

#include <optional>
#include <string_view>

namespace kvtier::server {

class ClientConnection {
 public:
  // nullopt when no socket of this process has these addresses.
  static std::optional<ClientConnection> find(std::string_view local_addr, int local_port,
                                              std::string_view remote_addr, int remote_port);

  // True once the client has closed or reset its side of the connection. A
  // client that half-closes (shutdown for writing) after sending its request
  // counts as gone too: it cannot be told apart from one that closed.
  bool closed() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvtier::server
