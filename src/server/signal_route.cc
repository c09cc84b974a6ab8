#include "server/signal_route.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::server {
namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_shutdown_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

}  // namespace

SignalRoute::SignalRoute() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_shutdown_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGHUP, &sa, &old_hup_);
  ok_ = true;
}

SignalRoute::~SignalRoute() {
  if (!ok_) return;
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGHUP, &old_hup_, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

int SignalRoute::wait(int timeout_ms) const {
  pollfd p{g_signal_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return 0;
  unsigned char b = 0;
  return ::read(g_signal_pipe[0], &b, 1) == 1 ? int(b) : 0;
}

}  // namespace kvtier::server
