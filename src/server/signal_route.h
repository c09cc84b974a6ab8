// SignalRoute: SIGINT, SIGTERM and SIGHUP delivered to a thread that asks
// for them (`kvtier serve`, `kvtier route`). The handler only write()s the
// signal number into a self-pipe (async-signal-safe); wait() reads it. A
// handler, not sigwait(), because threads that exist before us (OpenBLAS
// starts its pool when the library loads) would otherwise take the default
// action. One at a time per process; the previous handlers come back when it
// is destroyed.
#pragma once

#include <signal.h>

namespace kvtier::server {

class SignalRoute {
 public:
  SignalRoute();
  ~SignalRoute();
  SignalRoute(const SignalRoute&) = delete;
  SignalRoute& operator=(const SignalRoute&) = delete;
  bool ok() const { return ok_; }
  // The next signal number, or 0 after `timeout_ms` without one.
  int wait(int timeout_ms) const;

 private:
  bool ok_ = false;
  struct sigaction old_int_ {}, old_term_ {}, old_hup_ {};
};

}  // namespace kvtier::server
