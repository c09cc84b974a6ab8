// An HTTP client for tests against a server on this machine. cpp-httplib's default read and
// write timeouts (5 s) are not a bound a loaded machine keeps (sanitizer builds, a suite running
// beside them: a /metrics request once took longer under TSan), and a test must not read "no
// answer" where it only stopped waiting too soon. Tests that mean a bound set their own.
#pragma once

#include <httplib.h>

namespace kvtier::testing {

inline httplib::Client local_client(int port, time_t timeout_s = 120) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(timeout_s, 0);
  c.set_write_timeout(timeout_s, 0);
  return c;
}

}  // namespace kvtier::testing
