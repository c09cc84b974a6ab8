#include "server/guarded_http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvtier::server {

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds ms_of(time_t sec, time_t usec) {
  return std::chrono::milliseconds(int64_t(sec) * 1000 + int64_t(usec) / 1000);
}

// Waits up to `wait` for `events` on the socket: > 0 ready, 0 not yet, < 0 failed.
int poll_for(int sock, short events, std::chrono::milliseconds wait) {
  for (;;) {
    pollfd p{sock, events, 0};
    const int r = ::poll(&p, 1, int(std::max<int64_t>(0, std::min<int64_t>(wait.count(), 1 << 30))));
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

// The client a bound counts: its address, or for IPv6 its /64 (one host may hold a whole /64).
std::string client_of(const std::string& ip) {
  if (ip.find(':') == std::string::npos || ip.rfind("::ffff:", 0) == 0) return ip;
  in6_addr a{};
  if (::inet_pton(AF_INET6, ip.c_str(), &a) != 1) return ip;
  char out[24];
  std::snprintf(out, sizeof out, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", a.s6_addr[0], a.s6_addr[1], a.s6_addr[2],
                a.s6_addr[3], a.s6_addr[4], a.s6_addr[5], a.s6_addr[6], a.s6_addr[7]);
  return std::string(out) + "::/64";
}

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len)
            : ::getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
    return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(serv);
}

}  // namespace

// One connection's socket, kept across its requests (bytes read past one request are the next's).
class GuardedHttpServer::HeadStream final : public httplib::Stream {
 public:
  HeadStream(GuardedHttpServer& server, int sock)
      : server_(server),
        sock_(sock),
        read_timeout_(ms_of(server.read_timeout_sec_, server.read_timeout_usec_)),
        write_timeout_(ms_of(server.write_timeout_sec_, server.write_timeout_usec_)) {
    int port = 0;
    address_of(sock_, true, peer_, port);
    peer_ = client_of(peer_);
  }
  ~HeadStream() override { end_head(); }

  // Waits for a request's first byte, up to the keep-alive timeout or the server's stop; past
  // slow_head the wait counts among its client's idle connections (closed past max_idle).
  bool wait_for_request(std::chrono::milliseconds keep_alive) {
    if (dead_) return false;
    if (off_ < len_) return true;
    const auto start = Clock::now(), until = start + keep_alive, idle_at = start + server_.bounds_.slow_head;
    bool idle = false;
    int r = 0;
    while (r == 0 && server_.svr_sock_ != INVALID_SOCKET) {
      const auto now = Clock::now();
      if (now >= until) break;
      if (!idle && now >= idle_at) {
        if (!server_.admit(peer_, /*idle=*/true)) return cut();
        idle = true;
      }
      const auto next = std::min({until, now + std::chrono::milliseconds(100), idle ? until : idle_at});
      r = poll_for(sock_, POLLIN, std::chrono::ceil<std::chrono::milliseconds>(next - now));
    }
    if (idle) server_.release(peer_, /*idle=*/true);
    return r > 0;
  }
  void begin_head() {
    in_head_ = true;
    const auto now = Clock::now();
    deadline_ = now + server_.bounds_.head_timeout;
    slow_at_ = now + server_.bounds_.slow_head;
  }
  // The head is read: the body and the answer have httplib's own timeouts.
  void end_head() {
    in_head_ = false;
    if (slow_) server_.release(peer_, /*idle=*/false);
    slow_ = false;
  }

  bool is_readable() const override { return !dead_ && (off_ < len_ || wait_readable()); }
  // As httplib's own stream: writable, and the client has not closed its side (a half-closed
  // client is answered by the handlers' own writes: client_connection.h).
  bool is_writable() const override { return !dead_ && poll_for(sock_, POLLOUT, write_timeout_) > 0 && alive(); }
  ssize_t read(char* ptr, size_t size) override {
    if (dead_) return -1;
    if (off_ == len_) {
      if (!wait_readable()) return -1;
      ssize_t n;
      do n = ::recv(sock_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0, len_ = size_t(n);
    }
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  // Readable within the read timeout and, inside a head, by its deadline and its address's share
  // of slow heads; false (the connection ends) otherwise.
  bool wait_readable() const {
    const auto read_until = Clock::now() + read_timeout_;
    for (;;) {
      const auto now = Clock::now();
      auto until = read_until;
      if (in_head_) {
        if (now >= deadline_) return cut();
        if (!slow_ && now >= slow_at_) {
          if (!server_.admit(peer_, /*idle=*/false)) return cut();
          slow_ = true;
        }
        until = std::min({until, deadline_, slow_ ? deadline_ : slow_at_});
      }
      const int r = poll_for(sock_, POLLIN, std::chrono::ceil<std::chrono::milliseconds>(until - now));
      if (r != 0) return r > 0;
      if (Clock::now() >= read_until) return false;
    }
  }

  // The head took too long: nothing more is read or written (httplib would answer a 400 and read
  // the next request), and the connection ends.
  bool cut() const {
    dead_ = true;
    return server_.cut();
  }
  bool alive() const {
    if (poll_for(sock_, POLLIN, std::chrono::milliseconds(0)) <= 0) return true;
    char c;
    ssize_t n;
    do n = ::recv(sock_, &c, 1, MSG_PEEK);
    while (n < 0 && errno == EINTR);
    return n > 0;
  }

  GuardedHttpServer& server_;
  const int sock_;
  const std::chrono::milliseconds read_timeout_, write_timeout_;
  std::string peer_;
  bool in_head_ = false;
  mutable bool slow_ = false;  // counted among its address's slow heads
  mutable bool dead_ = false;  // cut
  Clock::time_point deadline_, slow_at_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  bool ret = false;
  {
    HeadStream strm(*this, sock);
    const auto keep_alive = std::chrono::milliseconds(int64_t(keep_alive_timeout_sec_) * 1000);
    for (size_t left = keep_alive_max_count_; left > 0 && strm.wait_for_request(keep_alive); --left) {
      bool closed = false;
      strm.begin_head();
      ret = process_request(strm, left == 1, closed, [&](httplib::Request&) { strm.end_head(); });
      strm.end_head();
      if (!ret || closed) break;
    }
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

bool GuardedHttpServer::admit(const std::string& address, bool idle) {
  std::lock_guard lk(mu_);
  int& n = (idle ? idle_ : slow_heads_)[address];
  if (n >= (idle ? bounds_.max_idle : bounds_.max_slow_heads)) return false;
  ++n;
  return true;
}

void GuardedHttpServer::release(const std::string& address, bool idle) {
  std::lock_guard lk(mu_);
  auto& counts = idle ? idle_ : slow_heads_;
  auto it = counts.find(address);
  if (it != counts.end() && --it->second <= 0) counts.erase(it);
}

bool GuardedHttpServer::cut() const {
  std::lock_guard lk(mu_);
  ++cut_;
  return false;
}

uint64_t GuardedHttpServer::heads_cut() const {
  std::lock_guard lk(mu_);
  return cut_;
}

}  // namespace kvtier::server
