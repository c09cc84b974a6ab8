// An HTTP client for tests against a server on this machine. cpp-httplib's default read and
// write timeouts (5 s) are not a bound a loaded machine keeps (sanitizer builds, a suite running
// beside them: a /metrics request once took longer under TSan), and a test must not read "no
// answer" where it only stopped waiting too soon. Tests that mean a bound set their own.
#pragma once

#include <httplib.h>

#include <string>

namespace kvtier::testing {

inline httplib::Client local_client(int port, time_t timeout_s = 120) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(timeout_s, 0);
  c.set_write_timeout(timeout_s, 0);
  return c;
}

// What an HTTP/1.1 client reads off a raw socket, past the interim (1xx) responses before the final
// one, as every such client skips them: the final response's bytes. kvtier writes a `100 Continue`
// to a client whose FIN arrived while it waits for a whole answer (server::WaitingClient).
inline std::string final_response(std::string raw) {
  while (raw.rfind("HTTP/1.1 1", 0) == 0 && raw.find("\r\n\r\n") != std::string::npos)
    raw.erase(0, raw.find("\r\n\r\n") + 4);
  return raw;
}

}  // namespace kvtier::testing
