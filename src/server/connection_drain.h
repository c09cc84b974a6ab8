// ConnectionDrain: how an HTTP front end (kvtier serve, kvtier route) ends
// without waiting on clients that keep connections open.
//
// cpp-httplib 0.11's stop() closes the listening socket and lets each worker
// finish the request it is answering. A worker holding an idle keep-alive
// connection then waits out the keep-alive timeout (5 s), and one reading a
// request whose head is still arriving waits out the read timeout (30 s): the
// process exits that much later, past a supervisor's grace period when a
// client (or a slow or hostile one) holds a connection open, and a killed
// `kvtier serve` never writes its disk tier's index.
//
// install() counts the answers being written, to the logger (httplib calls it
// on the worker's thread after the last byte, streamed or whole): from the
// pre-routing handler for a request without a body, from its handler for one
// with a body (counted(): httplib reads the body after pre-routing, and a body
// still arriving, perhaps a byte at a time, is no answer being written). A server waits for those to end (before its
// stop(): after it, httplib writes no more of a stream), stops, then shuts
// every connection still open on its port (shut_connections_on, in
// client_connection.h): their workers wake at once and return.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace kvtier::server {

class ConnectionDrain {
 public:
  using Logger = std::function<void(const httplib::Request&, const httplib::Response&)>;
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // Answers a request before its body is read (true: it wrote the answer), e.g. one without a
  // valid key: httplib reads a whole body, up to its limit, before any route runs.
  using Gate = std::function<bool(const httplib::Request&, httplib::Response&)>;

  // Sets `http`'s pre-routing handler and its logger (`logger` runs first,
  // when given). Call once, before the server serves. The pre-routing handler
  // also refuses the bodies httplib cannot bound (refuse_unbounded_body,
  // server/http_front.h) before they are read, and asks `before_body` of each
  // request that has one: an answer it writes goes out and the connection
  // closes (its body is never read).
  void install(httplib::Server& http, Logger logger = nullptr, Gate before_body = nullptr);
  // A route that takes a body (every POST): counted from when it runs, its body read.
  Handler counted(Handler handler);
  // Answers being written now.
  size_t in_flight() const;
  // Waits up to `bound` for none to be in flight; false if some still are.
  bool wait_none(std::chrono::milliseconds bound);

 private:
  void started();
  void finished();

  mutable std::mutex mu_;
  std::condition_variable none_;
  size_t in_flight_ = 0;
};

}  // namespace kvtier::server
