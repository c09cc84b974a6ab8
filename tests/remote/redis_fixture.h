// Test fixtures that run real Redis servers: a standalone server on a free
// loopback port with a throwaway directory, and a three-master Redis Cluster.
// Each server is a child process (killed with SIGKILL if the test process
// dies); destructors stop and reap them and delete their directories.
// If redis-server is not installed, start() fails with a clear message
// (`make deps` installs it).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"

struct redisReply;

namespace kvtier::testing {

// Path of redis-server / redis-cli: /usr/bin first, then PATH; empty when missing.
std::string redis_binary(const std::string& name);

class RedisServer {
 public:
  RedisServer() = default;
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts on a free port (or `port` when nonzero) with extra `--flag value` arguments.
  Status start(std::vector<std::string> extra = {}, uint16_t port = 0);
  // Crash: SIGKILL and reap (the port and directory stay for restart()).
  void kill();
  // Freezes/thaws the process (SIGSTOP/SIGCONT): clients see timeouts.
  void pause();
  void resume();
  // Starts again on the same port with the same arguments (data is gone: no persistence).
  Status restart();
  // Clean stop (SIGTERM, then SIGKILL after a grace period).
  void stop();

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url() const { return "redis://" + address(); }
  const std::string& dir() const { return dir_; }
  bool running() const { return pid_ > 0; }

  // One command on a fresh connection; the reply rendered as text
  // (integers in decimal, nil as "(nil)", errors as "ERR ...").
  Result<std::string> cmd(const std::vector<std::string>& args) const;

 private:
  Status spawn();
  bool served_by_child() const;
  pid_t pid_ = -1;
  bool pid_exited_ = false;  // the last spawn died at start (e.g. its port was taken)
  uint16_t port_ = 0;
  std::string dir_;
  std::vector<std::string> extra_;
};

// Three masters, no replicas, slots spread by `redis-cli --cluster create`.
class RedisCluster {
 public:
  Status start();
  RedisServer& node(size_t i) { return *nodes_[i]; }
  size_t size() const { return nodes_.size(); }
  std::string url() const;  // redis://a,b,c
  // The node serving `slot`, by index, from CLUSTER SLOTS on node 0.
  Result<size_t> owner_of(uint16_t slot);
  // Moves one slot and its keys from node `from` to node `to`, and tells every node.
  // With `finish` false it stops half-way (MIGRATING/IMPORTING, keys not moved): ASK territory.
  Status move_slot(uint16_t slot, size_t from, size_t to, bool finish = true);
  Status finish_move(uint16_t slot, size_t from, size_t to);

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

// Renders a reply as RedisServer::cmd does.
std::string render_reply(const redisReply* r);

}  // namespace kvtier::testing
