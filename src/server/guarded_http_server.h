// GuardedHttpServer: httplib's server with bounds on how a request head may
// arrive. httplib serves each connection on one thread of its pool and reads
// a head byte by byte with a timeout per read, so every byte restarts it: a
// few hundred connections sending a byte every 20 s (slowloris) held every
// thread, and /health and every client waited for as long as they went on
// (a review showed it with 440 connections and no key; the router with 20).
// Here a head must arrive whole within `head_timeout` of its first byte, and
// one client address may have at most `max_slow_heads` connections at once
// whose head has taken longer than `slow_head` (a proxy in front sends whole
// heads at once; a client's fast heads never count), and at most `max_idle`
// connections that have waited longer than `slow_head` for a request to begin
// (a silent socket holds a thread for the keep-alive timeout too; a client's
// pool of a few idle connections never meets the bound). A connection past
// any bound is closed. An IPv6 client is its /64. Many addresses together (a distributed attack) are not
// bounded here: that is a proxy's or a firewall's job.
//
// It serves a connection as httplib does (keep-alive count and timeout, read
// and write timeouts, the server's routes and handlers) through its own
// socket stream, which keeps bytes read past one request for the next.
// Thread safety: as httplib::Server.
#pragma once

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kvtier::server {

struct HeadBounds {
  std::chrono::milliseconds head_timeout{10000};
  std::chrono::milliseconds slow_head{500};
  int max_slow_heads = 4;
  int max_idle = 32;
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(HeadBounds bounds = {}) : bounds_(bounds) {}

  // Connections closed by a bound (a head past head_timeout, one slow head or idle wait too many from one client).
  uint64_t heads_cut() const;

 private:
  class HeadStream;
  bool process_and_close_socket(socket_t sock) override;
  // One more slow head (or idle wait) of `address`: false when it already has its bound's worth.
  bool admit(const std::string& address, bool idle);
  void release(const std::string& address, bool idle);
  bool cut() const;  // counts a connection closed for its head; false, for the read that gives up

  const HeadBounds bounds_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> slow_heads_, idle_;  // by client address
  mutable uint64_t cut_ = 0;
};

}  // namespace kvtier::server
