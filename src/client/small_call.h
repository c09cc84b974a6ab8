// Small HTTP exchanges whose whole time and answer are bounded (a health probe, a config fetch,
// GET /v1/models): httplib bounds each read, so a server that trickles header lines or body
// bytes never trips its timeouts, and it keeps whatever length an answer has.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "kvtier/status.h"

namespace kvtier::client {

// Stops the request `client` has in flight once `seconds` have passed, from a thread of its own.
// Destroying it ends the wait.
class RequestDeadline {
 public:
  RequestDeadline(httplib::Client& client, double seconds);
  ~RequestDeadline();
  RequestDeadline(const RequestDeadline&) = delete;
  RequestDeadline& operator=(const RequestDeadline&) = delete;
  bool passed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, passed_ = false;
  std::thread thread_;  // last: it uses the members above
};

struct SmallAnswer {
  int status = 0;
  std::string body;
};
// `req` sent on `client`: its answer within `seconds`, the body kept up to `max_bytes`. An error
// (Unavailable, naming `where`) only where no whole answer came: unreachable, timed out, too large.
Result<SmallAnswer> small_call(httplib::Client& client, httplib::Request req, double seconds, size_t max_bytes,
                               const std::string& where);

}  // namespace kvtier::client
