// RedisClient: a small synchronous hiredis client for the remote tier —
// a pool of connection sessions, pipelining, and Redis Cluster routing.
//
// run(cmds) sends a batch of commands as one pipeline per node (all
// pipelines are written before any reply is read, so N nodes cost one round
// trip, not N) and stores each reply in its command. In cluster mode every
// command is routed by the CRC16 slot of its key through the slot map
// learned from CLUSTER SLOTS; a MOVED reply updates the map, re-sends the
// command to the new owner and schedules a full map refresh; an ASK reply
// re-sends it once to the named node, preceded by ASKING. Cluster mode is
// detected on the first connection (kAuto), or forced on/off.
//
// Errors: a transport failure (refused, timeout, reset, EOF, bad AUTH) is a
// Status on every command it touched and on run(); the broken connection is
// dropped and, because a dead server breaks every pooled connection to it,
// all sessions reconnect before their next use. Error *replies* (OOM,
// WRONGTYPE) are not transport failures: they come back as replies.
//
// Timeouts: connect_timeout bounds a connect; command_timeout bounds each
// reply's whole arrival (not each read: a server trickling bytes times out)
// and each write's progress; call_timeout bounds a whole run() — its
// connects, writes, every reply of its pipelines and its redirects — so a
// server answering each reply just inside command_timeout cannot hold a
// caller for a pipeline's length times it.
//
// Thread safety: run() and stats() are thread-safe; each call borrows one
// session (one connection per node) from a pool of `pool_size` and waits
// when all are in use; a call waiting when a connection fails fails too
// (Unavailable), instead of queueing for a server that is likely gone.
// Ownership: the client owns its connections; a command's args are views
// the caller keeps alive during run().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "tiers/remote/redis_slots.h"

struct redisReply;

namespace kvtier {

namespace redis_wire {
struct WaitBounds;
}

enum class RedisClusterMode : uint8_t { kAuto = 0, kOff = 1, kOn = 2 };

struct RedisClientOptions {
  std::vector<RedisEndpoint> seeds;  // standalone: the server; cluster: any nodes of it
  std::string username;              // empty: AUTH <password> (Redis < 6 style)
  std::string password;              // empty: no AUTH
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{2000};  // each reply arrives whole within it
  std::chrono::milliseconds call_timeout{10000};    // a whole run() ends within it
  RedisClusterMode cluster = RedisClusterMode::kAuto;
  uint32_t pool_size = 4;      // sessions (each: one connection per node it talks to)
  uint32_t max_redirects = 5;  // MOVED/ASK hops per command before giving up
  // A reply longer fails its command and drops the connection, as a broken one: what a wrong or
  // hostile server sends cannot grow the process's memory past it. (512 MiB: Redis's value limit.)
  size_t max_reply_bytes = size_t(512) << 20;

  Status validate() const;
};

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

struct RedisCommand {
  std::vector<std::string_view> args;  // args[key_arg] is the routing key
  uint32_t key_arg = 1;
  // When set, these RESP bytes (concatenated in order) are sent instead of
  // `args`, which then only route. They go straight to the socket as one
  // gather write, never through the client's buffer: a large value is
  // sent from where it lies, with no copy.
  std::vector<std::string_view> formatted;
  RedisReplyPtr reply;  // out: the server's reply (may be an error reply)
  Status status;        // out: transport or routing failure; OK when `reply` is set
};

struct RedisClientStats {
  uint64_t connects = 0;          // successful connections (the first ones included)
  uint64_t connect_failures = 0;
  uint64_t transport_errors = 0;  // broken pipelines (reset, EOF, timeout)
  uint64_t timeouts = 0;          // replies not whole within command_timeout (or hiredis's own read timeouts)
  uint64_t failed_waits = 0;      // calls failed because a connection failed while they waited for a session
  uint32_t pool_waiting = 0;      // calls waiting for a session now
  uint64_t moved = 0, ask = 0;
  uint64_t topology_refreshes = 0;
};

class RedisClient {
 public:
  // Validates options; connects lazily (create succeeds with the server down).
  static Result<std::unique_ptr<RedisClient>> create(const RedisClientOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends every command and collects its reply. Returns the first transport
  // failure (the affected commands carry it too); OK when every command has a reply.
  Status run(std::span<RedisCommand> cmds);
  // Convenience: one command, its reply or the failure.
  Result<RedisReplyPtr> command(std::vector<std::string_view> args, uint32_t key_arg = 1);
  // Learns the topology now if not known yet (cluster detection, slot map).
  Status connect();

  bool is_cluster() const;
  // Masters of the current slot map (the one server when standalone); empty before the first connect.
  std::vector<RedisEndpoint> nodes() const;
  RedisClientStats stats() const;
  const RedisClientOptions& options() const { return options_; }

 private:
  struct Session;
  struct Topology;
  explicit RedisClient(const RedisClientOptions& o);
  // A session, waiting while all are in use; nullptr when a connection failed meanwhile.
  std::unique_ptr<Session> acquire();
  Status waited_through_failure();
  void release(std::unique_ptr<Session> s);
  std::shared_ptr<const Topology> topology() const;
  // The bounds of a call starting now.
  redis_wire::WaitBounds call_bounds() const;
  Status learn_topology(Session& s, const redis_wire::WaitBounds& b);
  Status run_in(Session& s, std::span<RedisCommand> cmds, const redis_wire::WaitBounds& b);
  // One run_in's commands across redirect hops, and one hop's commands for one node.
  struct Pipeline;
  struct NodeBatch;
  std::vector<NodeBatch> route(Pipeline& p);
  void send(Session& s, Pipeline& p, std::vector<NodeBatch>& nodes);
  std::vector<size_t> receive(Session& s, Pipeline& p, std::vector<NodeBatch>& nodes);
  void broken(Session& s, Pipeline& p, NodeBatch& n, size_t k);
  void note_moved(uint16_t slot, const RedisEndpoint& to);
  void note_transport_error(bool timeout);

  RedisClientOptions options_;
  mutable std::mutex mu_;  // topology_, pool
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<Session>> idle_;
  uint32_t sessions_ = 0;
  uint32_t waiting_ = 0;  // callers in acquire()
  std::shared_ptr<const Topology> topology_;
  std::atomic<uint64_t> epoch_{0};  // bumped on transport errors: sessions reconnect
  std::atomic<bool> stale_{false};  // slot map needs a refresh
  struct Counters {
    std::atomic<uint64_t> connects{0}, connect_failures{0}, transport_errors{0}, timeouts{0}, moved{0}, ask{0},
        refreshes{0}, failed_waits{0};
  };
  mutable Counters counters_;
  friend struct Session;
};

}  // namespace kvtier
