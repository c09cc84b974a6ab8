// GuardedHttpServer: httplib's server with bounds on how a request head may
// arrive. httplib serves each connection on one thread of its pool and reads
// a head byte by byte with a timeout per read, so every byte restarts it: a
// few hundred connections sending a byte every 20 s (slowloris) held every
// thread, and /health and every client waited for as long as they went on
// (a review showed it with 440 connections and no key; the router with 20).
// Here a head must arrive whole within `head_timeout` of its first byte, and
// one client address may have at most `max_slow_heads` connections at once
// whose head has taken longer than `slow_head` (a proxy in front sends whole
// heads at once; a client's fast heads never count). A connection past either
// bound is closed. Many addresses together (a distributed attack) are not
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
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(HeadBounds bounds = {}) : bounds_(bounds) {}

  // Connections closed for a head too slow (past head_timeout, or one slow head too many from one address).
  uint64_t heads_cut() const;

 private:
  class HeadStream;
  bool process_and_close_socket(socket_t sock) override;
  // One more slow head of `address`: false when it already has max_slow_heads.
  bool admit_slow_head(const std::string& address);
  void release_slow_head(const std::string& address);
  bool cut() const;  // counts a connection closed for its head; false, for the read that gives up

  const HeadBounds bounds_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, int> slow_heads_;  // by client address
  mutable uint64_t cut_ = 0;
};

}  // namespace kvtier::server
