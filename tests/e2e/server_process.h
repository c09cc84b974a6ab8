// ServerProcess: runs the real `kvtier serve` binary for end-to-end tests.
//
// start() spawns $KVTIER_BINARY serve --port 0 <args>, reads its stdout until
// "listening on http://127.0.0.1:PORT" and keeps draining the output on a
// thread (kept in log()). signal()/wait_exit() test shutdown; the destructor
// kills a server that is still running. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::testing {

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Returns false (with the reason in log()) when the server did not come up in time.
  bool start(const std::vector<std::string>& args, double timeout_s = 120);
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  void signal(int sig);
  // The exit code, or -1 on timeout, or -(100 + signal) when killed by a signal.
  int wait_exit(double timeout_s = 60);
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int out_fd_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::string log_;
};

// KVTIER_BINARY, or empty when the test runs outside CTest.
std::string kvtier_binary();

}  // namespace kvtier::testing
