#include "server/connection_drain.h"

#include <httplib.h>

#include "server/client_connection.h"
#include "server/http_front.h"

namespace kvtier::server {
namespace {

// The drain whose answer this worker thread is writing, if any: the logger
// also runs for answers that never reached routing (a malformed head), which
// were never counted.
thread_local const ConnectionDrain* answering = nullptr;

}  // namespace

void ConnectionDrain::install(httplib::Server& http, Logger logger, Gate before_body) {
  http.set_pre_routing_handler([this, before_body = std::move(before_body)](const httplib::Request& req,
                                                                           httplib::Response& res) {
    if (refuse_unbounded_body(req, res)) return httplib::Server::HandlerResponse::Handled;
    const bool body = req.has_header("Transfer-Encoding") ||
                      (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
    if (body && before_body && before_body(req, res)) {
      if (const auto c = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port))
        c->answer_and_close(res);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!body) started();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_logger([this, logger = std::move(logger)](const httplib::Request& req, const httplib::Response& res) {
    if (logger) logger(req, res);
    finished();
  });
}

ConnectionDrain::Handler ConnectionDrain::counted(Handler handler) {
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    started();
    handler(req, res);
  };
}

void ConnectionDrain::started() {
  if (answering == this) return;  // a pre-routing handler twice without a logger: counted once
  answering = this;
  std::lock_guard lk(mu_);
  ++in_flight_;
}

void ConnectionDrain::finished() {
  if (answering != this) return;
  answering = nullptr;
  std::lock_guard lk(mu_);
  if (--in_flight_ == 0) none_.notify_all();
}

size_t ConnectionDrain::in_flight() const {
  std::lock_guard lk(mu_);
  return in_flight_;
}

bool ConnectionDrain::wait_none(std::chrono::milliseconds bound) {
  std::unique_lock lk(mu_);
  return none_.wait_for(lk, bound, [&] { return in_flight_ == 0; });
}

}  // namespace kvtier::server
