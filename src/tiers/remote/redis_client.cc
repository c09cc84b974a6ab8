#include "tiers/remote/redis_client.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <string_view>

#include "tiers/remote/redis_wire.h"

namespace kvtier {

using namespace redis_wire;

void RedisReplyDeleter::operator()(redisReply* r) const {
  if (r) freeReplyObject(r);
}

namespace {

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381".
bool parse_redirect(std::string_view err, std::string_view verb, const RedisEndpoint& from, uint16_t& slot,
                    RedisEndpoint& to) {
  if (err.substr(0, verb.size()) != verb || err.size() <= verb.size() || err[verb.size()] != ' ') return false;
  err.remove_prefix(verb.size() + 1);
  const size_t sp = err.find(' ');
  if (sp == std::string_view::npos) return false;
  unsigned s = 0;
  auto [end, ec] = std::from_chars(err.data(), err.data() + sp, s);
  if (ec != std::errc() || end != err.data() + sp || s >= kRedisSlots) return false;
  std::string_view addr = err.substr(sp + 1);
  std::string with_host;
  if (!addr.empty() && addr.front() == ':') {  // a node that does not know its address
    with_host = from.host + std::string(addr);
    addr = with_host;
  }
  auto ep = parse_redis_endpoint(addr);
  if (!ep.ok()) return false;
  slot = static_cast<uint16_t>(s);
  to = *ep;
  return true;
}

}  // namespace

Status RedisClientOptions::validate() const {
  if (seeds.empty()) return Status::InvalidArgument("redis: at least one host:port is needed");
  for (const auto& s : seeds)
    if (s.host.empty() || s.port == 0) return Status::InvalidArgument("redis: bad seed address '" + s.to_string() + "'");
  if (connect_timeout.count() <= 0 || command_timeout.count() <= 0 || call_timeout.count() <= 0)
    return Status::InvalidArgument("redis: timeouts must be > 0 ms");
  if (pool_size == 0 || pool_size > 1024) return Status::InvalidArgument("redis: pool_size must be in [1, 1024]");
  if (max_reply_bytes < 1024) return Status::InvalidArgument("redis: max_reply_bytes must be at least 1 KiB");
  if (!username.empty() && password.empty()) return Status::InvalidArgument("redis: a username needs a password");
  return Status::Ok();
}

struct RedisClient::Topology {
  bool cluster = false;
  RedisSlotMap map;  // standalone: nodes = {the server}
};

struct RedisClient::Session {
  RedisClient* client = nullptr;
  uint64_t epoch = 0;
  std::vector<std::pair<RedisEndpoint, redisContext*>> conns;  // a few nodes at most: linear search

  ~Session() { drop_all(); }
  void drop_all() {
    for (auto& [ep, c] : conns) redisFree(c);
    conns.clear();
  }
  // Closes the connections to nodes the map does not name (an ASK's or a MOVED's target the refresh
  // did not confirm, a seed that is no master): what a confused or hostile node named cannot keep a
  // connection open per address. Only between calls: none of the session's contexts is in use.
  void drop_strays(const Topology* t) {
    std::erase_if(conns, [&](const auto& conn) {
      const bool named = t && std::find(t->map.nodes.begin(), t->map.nodes.end(), conn.first) != t->map.nodes.end();
      if (!named) redisFree(conn.second);
      return !named;
    });
  }
  void drop(redisContext* c) {
    for (size_t i = 0; i < conns.size(); ++i)
      if (conns[i].second == c) {
        redisFree(c);
        conns.erase(conns.begin() + static_cast<long>(i));
        return;
      }
  }
  Result<redisContext*> get(const RedisEndpoint& ep, const WaitBounds& b) {
    for (auto& [e, c] : conns)
      if (e == ep) return c;
    const RedisClientOptions& o = client->options_;
    const std::chrono::milliseconds left(ms_left(b.end));
    if (left.count() == 0) {
      ++client->counters_.connect_failures;
      return Status::Unavailable("redis " + ep.to_string() + ": the call's " + std::to_string(o.call_timeout.count()) +
                                 " ms ran out before connecting (timeout)");
    }
    redisContext* c = redisConnectWithTimeout(ep.host.c_str(), ep.port, to_timeval(std::min(o.connect_timeout, left)));
    if (!c || c->err) {
      std::string msg = c ? context_error(c, ep) : "redis " + ep.to_string() + ": out of memory";
      if (c) redisFree(c);
      ++client->counters_.connect_failures;
      return Status::Unavailable(msg);
    }
    redisSetTimeout(c, to_timeval(o.command_timeout));
    redisEnableKeepAlive(c);
    c->reader->maxbuf = 0;  // keep the read buffer between large values instead of freeing it
    if (!o.password.empty()) {
      const RedisReplyPtr r =
          o.username.empty() ? call(c, b, {"AUTH", o.password}) : call(c, b, {"AUTH", o.username, o.password});
      std::string err;
      if (!r) err = context_error(c, ep);
      else if (r->type == REDIS_REPLY_ERROR) err = "redis " + ep.to_string() + ": AUTH failed: " + std::string(r->str, r->len);
      if (!err.empty()) {
        redisFree(c);
        ++client->counters_.connect_failures;
        return Status::Unavailable(err);
      }
    }
    ++client->counters_.connects;
    conns.emplace_back(ep, c);
    return c;
  }
};

RedisClient::RedisClient(const RedisClientOptions& o) : options_(o) {}
RedisClient::~RedisClient() = default;

Result<std::unique_ptr<RedisClient>> RedisClient::create(const RedisClientOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  return std::unique_ptr<RedisClient>(new RedisClient(o));
}

std::unique_ptr<RedisClient::Session> RedisClient::acquire() {
  std::unique_lock lock(mu_);
  const uint64_t arrived = epoch_.load();
  ++waiting_;
  pool_cv_.wait(lock, [&] { return !idle_.empty() || sessions_ < options_.pool_size || epoch_.load() != arrived; });
  --waiting_;
  // A connection failed while this caller waited: the server is likely down or hung, and the
  // caller would only wait again for a reconnect; it fails now, as the one that saw the failure did.
  if (epoch_.load() != arrived) return nullptr;
  std::unique_ptr<Session> s;
  if (!idle_.empty()) {
    s = std::move(idle_.back());
    idle_.pop_back();
  } else {
    ++sessions_;
    s = std::make_unique<Session>();
    s->client = this;
    s->epoch = epoch_.load();
  }
  lock.unlock();
  // A transport error anywhere means the server may have restarted: connections
  // opened before it are suspect, so they are replaced rather than probed.
  const uint64_t e = epoch_.load();
  if (s->epoch != e) {
    s->drop_all();
    s->epoch = e;
  }
  return s;
}

Status RedisClient::waited_through_failure() {
  ++counters_.failed_waits;
  return Status::Unavailable("redis: a connection failed while this call waited for one of the " +
                             std::to_string(options_.pool_size) + " pooled sessions");
}

void RedisClient::release(std::unique_ptr<Session> s) {
  s->drop_strays(topology().get());
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(s));
  pool_cv_.notify_one();
}

std::shared_ptr<const RedisClient::Topology> RedisClient::topology() const {
  std::lock_guard lock(mu_);
  return topology_;
}

void RedisClient::note_transport_error(bool timeout) {
  ++counters_.transport_errors;
  if (timeout) ++counters_.timeouts;
  {
    std::lock_guard lock(mu_);  // a waiter checks the epoch under it: no wake-up is lost
    ++epoch_;
  }
  pool_cv_.notify_all();
}

void RedisClient::note_moved(uint16_t slot, const RedisEndpoint& to) {
  ++counters_.moved;
  std::lock_guard lock(mu_);
  auto t = std::make_shared<Topology>(topology_ ? *topology_ : Topology{});
  t->cluster = true;
  t->map.owner[slot] = t->map.node_index(to);
  topology_ = std::move(t);
  stale_ = true;
}

namespace {

// What a server without cluster support answers CLUSTER SLOTS with; any other
// error (LOADING, NOPERM, "max number of clients reached") says nothing about it.
bool says_not_a_cluster(std::string_view err) {
  return err.find("cluster support disabled") != std::string_view::npos || err.starts_with("ERR unknown command");
}

}  // namespace

WaitBounds RedisClient::call_bounds() const {
  return WaitBounds{options_.command_timeout, Clock::now() + options_.call_timeout};
}

Status RedisClient::learn_topology(Session& s, const WaitBounds& b) {
  Status last = Status::Unavailable("redis: no seed reachable");
  // Known masters first (they survive seed failures), then the seeds.
  std::vector<RedisEndpoint> candidates;
  if (auto t = topology()) candidates = t->map.nodes;
  for (const auto& e : options_.seeds)  // once each: a standalone server is its own seed, and a hung one cost a timeout per try
    if (std::find(candidates.begin(), candidates.end(), e) == candidates.end()) candidates.push_back(e);
  for (const auto& ep : candidates) {
    auto c = s.get(ep, b);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    auto t = std::make_shared<Topology>();
    if (options_.cluster != RedisClusterMode::kOff) {
      RedisReplyPtr r = call(*c, b, {"CLUSTER", "SLOTS"});
      if (!r) {
        last = Status::Unavailable(context_error(*c, ep));
        note_transport_error(is_timeout(*c));
        s.drop(*c);
        continue;
      }
      if (r->type == REDIS_REPLY_ERROR) {
        const std::string err(r->str, r->len);
        if (options_.cluster == RedisClusterMode::kOn)
          return Status::FailedPrecondition("redis " + ep.to_string() + " is not a cluster node: " + err);
        if (!says_not_a_cluster(err)) {  // LOADING, NOPERM, too many clients...: ask again next time
          last = Status::Unavailable("redis " + ep.to_string() + " answered CLUSTER SLOTS with " + err);
          continue;
        }
      } else {
        auto map = parse_cluster_slots(r.get(), ep.host);
        if (!map.ok()) return map.status();
        if (map->covered_slots() == 0) {
          last = Status::Unavailable("redis cluster at " + ep.to_string() + " serves no slots yet");
          continue;
        }
        t->cluster = true;
        t->map = std::move(*map);
      }
    }
    if (!t->cluster) t->map.nodes = {ep};
    ++counters_.refreshes;
    std::lock_guard lock(mu_);
    topology_ = std::move(t);
    stale_ = false;
    return Status::Ok();
  }
  return last;
}

Status RedisClient::connect() {
  SigpipeGuard guard;
  auto s = acquire();
  if (!s) return waited_through_failure();
  Status st = topology() ? Status::Ok() : learn_topology(*s, call_bounds());
  release(std::move(s));
  return st;
}

Status RedisClient::run(std::span<RedisCommand> cmds) {
  if (cmds.empty()) return Status::Ok();
  SigpipeGuard guard;
  auto s = acquire();
  if (!s) {
    const Status e = waited_through_failure();
    for (RedisCommand& c : cmds) c.status = e;
    return e;
  }
  Status st = run_in(*s, cmds, call_bounds());
  release(std::move(s));
  return st;
}

Result<RedisReplyPtr> RedisClient::command(std::vector<std::string_view> args, uint32_t key_arg) {
  RedisCommand c;
  c.args = std::move(args);
  c.key_arg = key_arg;
  KVTIER_RETURN_IF_ERROR(run({&c, 1}));
  return std::move(c.reply);
}

struct RedisClient::Pipeline {
  std::span<RedisCommand> cmds;
  WaitBounds bounds;
  std::shared_ptr<const Topology> topo;
  std::vector<size_t> pending;        // commands without a reply or a failure yet
  std::vector<RedisEndpoint> ask_to;  // per command; port 0: no ASK pending
  std::vector<char> asked;            // per command: this hop sent ASKING before it
  Status first_error;

  void fail(size_t i, const Status& e) {
    cmds[i].status = e;
    if (first_error.ok()) first_error = e;
  }
};

struct RedisClient::NodeBatch {
  RedisEndpoint ep;
  std::vector<size_t> idx;  // commands, in sending order
  redisContext* c = nullptr;
};

// The pending commands grouped by the node that serves them: an ASK target,
// the slot's master in a cluster, else the one server.
std::vector<RedisClient::NodeBatch> RedisClient::route(Pipeline& p) {
  std::vector<NodeBatch> nodes;
  for (size_t i : p.pending) {
    RedisEndpoint ep;
    if (p.ask_to[i].port != 0) {
      ep = p.ask_to[i];
    } else if (p.topo->cluster) {
      const auto& a = p.cmds[i].args;
      const uint16_t slot = p.cmds[i].key_arg < a.size() ? redis_key_slot(a[p.cmds[i].key_arg]) : 0;
      const uint16_t owner = p.topo->map.owner[slot];
      if (owner == RedisSlotMap::kNoOwner) {
        p.fail(i, Status::Unavailable("redis cluster: slot " + std::to_string(slot) + " has no master"));
        stale_ = true;
        continue;
      }
      ep = p.topo->map.nodes[owner];
    } else {
      ep = p.topo->map.nodes[0];
    }
    auto n = std::find_if(nodes.begin(), nodes.end(), [&](const NodeBatch& x) { return x.ep == ep; });
    if (n == nodes.end()) n = nodes.insert(nodes.end(), NodeBatch{ep, {}, nullptr});
    n->idx.push_back(i);
  }
  return nodes;
}

// Queues every node's pipeline (ASKING first where a command was redirected
// by ASK), then writes them all, so the nodes work in parallel. A node whose
// connection fails or breaks fails its commands and has no context after.
void RedisClient::send(Session& s, Pipeline& p, std::vector<NodeBatch>& nodes) {
  p.asked.assign(p.cmds.size(), 0);
  for (auto& n : nodes) {
    auto c = s.get(n.ep, p.bounds);
    if (!c.ok()) {
      note_transport_error(false);
      stale_ = true;  // the node may be gone for good: the next call asks the others (and the seeds)
      for (size_t i : n.idx) p.fail(i, c.status());
      continue;
    }
    n.c = *c;
    for (size_t i : n.idx) {
      if (p.ask_to[i].port != 0) {
        redisAppendCommand(n.c, "ASKING");
        p.asked[i] = 1;
        p.ask_to[i] = RedisEndpoint{};
      }
      if (!p.cmds[i].formatted.empty()) {
        // Whatever is queued goes first; a failure surfaces in the write loop below.
        if (!flush_output(n.c, p.bounds) || !send_pieces(n.c, p.cmds[i].formatted, p.bounds)) break;
        continue;
      }
      (void)append_command(n.c, p.cmds[i].args);  // a failure surfaces in the write loop below
    }
  }
  for (auto& n : nodes)
    if (n.c && (n.c->err || !flush_output(n.c, p.bounds))) broken(s, p, n, 0);
}

// A node's connection broke at its k-th command: that one and the rest fail, the context is dropped.
void RedisClient::broken(Session& s, Pipeline& p, NodeBatch& n, size_t k) {
  const bool timeout = is_timeout(n.c);
  note_transport_error(timeout);
  stale_ = true;  // as in send(): a dead node's slots (or a standalone server's role) may have moved
  std::string why = context_error(n.c, n.ep);
  if (timeout)
    why += Clock::now() >= p.bounds.end ? " (timeout: the call's " + std::to_string(options_.call_timeout.count()) + " ms ran out)"
                                        : " (timeout: " + std::to_string(options_.command_timeout.count()) + " ms)";
  const Status e = Status::Unavailable(why);
  for (; k < n.idx.size(); ++k) p.fail(n.idx[k], e);
  s.drop(n.c);
  n.c = nullptr;
}

// Reads every node's replies; returns the commands a MOVED or ASK sends to another node.
std::vector<size_t> RedisClient::receive(Session& s, Pipeline& p, std::vector<NodeBatch>& nodes) {
  std::vector<size_t> next;
  for (auto& n : nodes) {
    for (size_t k = 0; n.c && k < n.idx.size(); ++k) {
      const size_t i = n.idx[k];
      void* raw = nullptr;
      if (p.asked[i]) {
        if (!read_reply(n.c, p.bounds.reply_deadline(), options_.max_reply_bytes, &raw)) {
          broken(s, p, n, k);
          break;
        }
        freeReplyObject(raw);
      }
      if (!read_reply(n.c, p.bounds.reply_deadline(), options_.max_reply_bytes, &raw)) {
        broken(s, p, n, k);
        break;
      }
      RedisReplyPtr r(static_cast<redisReply*>(raw));
      if (p.topo->cluster && r->type == REDIS_REPLY_ERROR) {
        const std::string_view err(r->str, r->len);
        uint16_t slot = 0;
        RedisEndpoint to;
        if (parse_redirect(err, "MOVED", n.ep, slot, to)) {
          note_moved(slot, to);
          next.push_back(i);
          continue;
        }
        if (parse_redirect(err, "ASK", n.ep, slot, to)) {
          ++counters_.ask;
          p.ask_to[i] = to;
          next.push_back(i);
          continue;
        }
      }
      p.cmds[i].reply = std::move(r);
    }
  }
  return next;
}

Status RedisClient::run_in(Session& s, std::span<RedisCommand> cmds, const WaitBounds& b) {
  if (!topology() || stale_.load()) {
    Status t = learn_topology(s, b);
    if (!t.ok() && !topology()) {
      for (auto& c : cmds) c.status = t;
      return t;
    }
    // A refresh that failed keeps the map it had; the next MOVED asks again (not every call).
    if (!t.ok()) stale_ = false;
  }
  Pipeline p{.cmds = cmds, .bounds = b, .topo = topology(), .pending = {}, .ask_to = {}, .asked = {}, .first_error = {}};
  p.ask_to.resize(cmds.size());
  for (size_t i = 0; i < cmds.size(); ++i) {
    p.pending.push_back(i);
    cmds[i].reply.reset();
    cmds[i].status = Status::Ok();
  }
  for (uint32_t hop = 0; !p.pending.empty(); ++hop) {
    if (hop > options_.max_redirects) {
      for (size_t i : p.pending) p.fail(i, Status::Unavailable("redis: too many MOVED/ASK redirects"));
      break;
    }
    std::vector<NodeBatch> nodes = route(p);
    send(s, p, nodes);
    p.pending = receive(s, p, nodes);
    p.topo = topology();  // MOVED replies updated it
  }
  return p.first_error;
}

bool RedisClient::is_cluster() const {
  auto t = topology();
  return t && t->cluster;
}

std::vector<RedisEndpoint> RedisClient::nodes() const {
  auto t = topology();
  return t ? t->map.nodes : std::vector<RedisEndpoint>{};
}

RedisClientStats RedisClient::stats() const {
  RedisClientStats s;
  s.connects = counters_.connects.load();
  s.connect_failures = counters_.connect_failures.load();
  s.transport_errors = counters_.transport_errors.load();
  s.timeouts = counters_.timeouts.load();
  s.failed_waits = counters_.failed_waits.load();
  {
    std::lock_guard lock(mu_);
    s.pool_waiting = waiting_;
  }
  s.moved = counters_.moved.load();
  s.ask = counters_.ask.load();
  s.topology_refreshes = counters_.refreshes.load();
  return s;
}

}  // namespace kvtier
