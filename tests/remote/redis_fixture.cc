#include "redis_fixture.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>
#include <sstream>
#include <thread>

namespace kvtier::testing {

namespace {

using namespace std::chrono_literals;

bool port_free(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The kernel's ephemeral range (where outgoing connections take their local
// port): /proc/sys/net/ipv4/ip_local_port_range, or Linux's default.
std::pair<uint32_t, uint32_t> ephemeral_ports() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  uint32_t lo = 0, hi = 0;
  if (f >> lo >> hi && lo > 0 && lo <= hi && hi <= 65535) return {lo, hi};
  return {32768, 60999};
}

// A port whose cluster bus port (+10000) is free too, both outside the
// ephemeral range: a server killed and restarted on its port must find it
// free, and any client's outgoing connection (another test's, or one to this
// very port while nothing listens, which can connect to itself) could take a
// port inside that range in between.
uint16_t pick_port() {
  static std::mt19937 rng(static_cast<uint32_t>(::getpid()) * 7919u + static_cast<uint32_t>(time(nullptr)));
  const auto [eph_lo, eph_hi] = ephemeral_ports();
  const auto outside = [&](uint32_t p) { return p < eph_lo || p > eph_hi; };
  for (int i = 0; i < 5000; ++i) {
    const uint32_t p = 10000 + rng() % 45000;
    if (!outside(p) || !outside(p + 10000)) continue;
    if (port_free(static_cast<uint16_t>(p)) && port_free(static_cast<uint16_t>(p + 10000))) return static_cast<uint16_t>(p);
  }
  return 0;
}

std::string tail_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > 1500 ? s.substr(s.size() - 1500) : s;
}

// fork+exec with stdout/stderr into `log`; the child dies with the test process.
pid_t spawn_process(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ::execv(args[0], args.data());
  ::_exit(127);
}

}  // namespace

std::string redis_binary(const std::string& name) {
  const std::string fixed = "/usr/bin/" + name;
  if (::access(fixed.c_str(), X_OK) == 0) return fixed;
  if (const char* path = ::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      const std::string p = dir + "/" + name;
      if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return {};
}

std::string render_reply(const redisReply* r) {
  if (!r) return "(no reply)";
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) {
        if (i) out += '\n';
        out += render_reply(r->element[i]);
      }
      return out;
    }
  }
  return "(unknown)";
}

RedisServer::~RedisServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

Status RedisServer::start(std::vector<std::string> extra, uint16_t port) {
  if (redis_binary("redis-server").empty())
    return Status::FailedPrecondition(
        "redis-server is not installed (Debian package redis-server; `make deps` or `make test` installs it)");
  extra_ = std::move(extra);
  if (dir_.empty()) {
    std::string tmpl = "/tmp/kvtier-redis-XXXXXX";
    if (!::mkdtemp(tmpl.data())) return Status::IOError("mkdtemp failed");
    dir_ = tmpl;
  }
  Status st;
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = port ? port : pick_port();
    if (port_ == 0) return Status::Unavailable("no free loopback port");
    st = spawn();
    if (st.ok() || port || pid_exited_ == false) return st;  // only a lost port race is retried elsewhere
  }
  return st;
}

Status RedisServer::spawn() {
  std::vector<std::string> argv{redis_binary("redis-server"), "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", dir_, "--daemonize", "no"};
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  const std::string log = dir_ + "/redis.log";
  pid_exited_ = false;
  pid_ = spawn_process(argv, log);
  if (pid_ < 0) return Status::Internal("fork failed");
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < deadline) {
    int wst = 0;
    if (::waitpid(pid_, &wst, WNOHANG) == pid_) {
      pid_ = -1;
      pid_exited_ = true;
      return Status::Unavailable("redis-server on port " + std::to_string(port_) + " exited at start:\n" + tail_of(log));
    }
    auto r = cmd({"PING"});  // any answer but LOADING means it serves (NOAUTH included)
    if (r.ok() && r->rfind("LOADING", 0) != 0 && served_by_child()) return Status::Ok();
    std::this_thread::sleep_for(20ms);
  }
  kill();
  return Status::Unavailable("redis-server on port " + std::to_string(port_) + " did not answer PING:\n" + tail_of(log));
}

// Whether the server answering on port_ is the child (not another test's server that took the port
// while the child failed to bind it): its INFO's process_id, asked after AUTH where it needs one.
bool RedisServer::served_by_child() const {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, timeval{1, 0});
  if (!c || c->err) {
    if (c) redisFree(c);
    return false;
  }
  redisSetTimeout(c, timeval{10, 0});
  for (size_t i = 0; i + 1 < extra_.size(); ++i) {
    if (extra_[i] != "--requirepass") continue;
    if (auto* a = static_cast<redisReply*>(redisCommand(c, "AUTH %s", extra_[i + 1].c_str()))) freeReplyObject(a);
  }
  std::string info;
  if (auto* r = static_cast<redisReply*>(redisCommand(c, "INFO server"))) {
    info = render_reply(r);
    freeReplyObject(r);
  }
  redisFree(c);
  return info.find("\nprocess_id:" + std::to_string(pid_) + "\r") != std::string::npos;
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisServer::pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

Status RedisServer::restart() {
  kill();
  // The port is outside the ephemeral range, but another process may still
  // hold it for a moment: try again for a while when the server exits at start.
  Status st = spawn();
  for (int attempt = 0; attempt < 50 && !st.ok() && pid_exited_; ++attempt) {
    std::this_thread::sleep_for(100ms);
    st = spawn();
  }
  return st;
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  kill();
}

Result<std::string> RedisServer::cmd(const std::vector<std::string>& args) const {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (!c || c->err) {
    std::string e = c ? c->errstr : "oom";
    if (c) redisFree(c);
    return Status::Unavailable(e);
  }
  redisSetTimeout(c, timeval{10, 0});
  std::vector<const char*> argv;
  std::vector<size_t> argl;
  for (const auto& a : args) {
    argv.push_back(a.data());
    argl.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), argl.data()));
  if (!r) {
    std::string e = c->errstr;
    redisFree(c);
    return Status::Unavailable(e);
  }
  std::string out = render_reply(r);
  freeReplyObject(r);
  redisFree(c);
  return out;
}

// ------------------------------------------------------------- cluster ----

Status RedisCluster::start() {
  const std::string cli = redis_binary("redis-cli");
  if (cli.empty()) return Status::FailedPrecondition("redis-cli is not installed (Debian package redis-tools; `make deps`)");
  for (int i = 0; i < 3; ++i) {
    nodes_.push_back(std::make_unique<RedisServer>());
    KVTIER_RETURN_IF_ERROR(nodes_.back()->start(
        {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}));
  }
  std::vector<std::string> argv{cli, "--cluster", "create"};
  for (auto& n : nodes_) argv.push_back(n->address());
  argv.insert(argv.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  const std::string log = nodes_[0]->dir() + "/cluster-create.log";
  const pid_t pid = spawn_process(argv, log);
  int wst = 0;
  ::waitpid(pid, &wst, 0);
  if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) return Status::Internal("redis-cli --cluster create failed:\n" + tail_of(log));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (auto& n : nodes_) {
    while (true) {
      auto info = n->cmd({"CLUSTER", "INFO"});
      if (info.ok() && info->find("cluster_state:ok") != std::string::npos) break;
      if (std::chrono::steady_clock::now() > deadline) return Status::Unavailable("cluster did not reach cluster_state:ok");
      std::this_thread::sleep_for(50ms);
    }
  }
  return Status::Ok();
}

std::string RedisCluster::url() const {
  std::string u = "redis://";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i) u += ',';
    u += nodes_[i]->address();
  }
  return u;
}

Result<size_t> RedisCluster::owner_of(uint16_t slot) {
  std::vector<std::string> ids;
  for (auto& n : nodes_) {
    KVTIER_ASSIGN_OR_RETURN(std::string id, n->cmd({"CLUSTER", "MYID"}));
    ids.push_back(id);
  }
  KVTIER_ASSIGN_OR_RETURN(std::string all, nodes_[0]->cmd({"CLUSTER", "NODES"}));
  std::stringstream ss(all);
  std::string line;
  while (std::getline(ss, line)) {
    // "<id> <addr> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges...>"
    std::stringstream ls(line);
    std::string id, tok;
    ls >> id;
    for (int f = 0; f < 7 && ls >> tok; ++f) {
    }
    while (ls >> tok) {
      if (tok.front() == '[') continue;  // migrating/importing markers
      const size_t dash = tok.find('-');
      const long lo = std::stol(tok.substr(0, dash));
      const long hi = dash == std::string::npos ? lo : std::stol(tok.substr(dash + 1));
      if (slot < lo || slot > hi) continue;
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == id) return i;
    }
  }
  return Status::NotFound("no node owns slot " + std::to_string(slot));
}

Status RedisCluster::move_slot(uint16_t slot, size_t from, size_t to, bool finish) {
  KVTIER_ASSIGN_OR_RETURN(std::string from_id, nodes_[from]->cmd({"CLUSTER", "MYID"}));
  KVTIER_ASSIGN_OR_RETURN(std::string to_id, nodes_[to]->cmd({"CLUSTER", "MYID"}));
  const std::string s = std::to_string(slot);
  KVTIER_ASSIGN_OR_RETURN(std::string a, nodes_[to]->cmd({"CLUSTER", "SETSLOT", s, "IMPORTING", from_id}));
  KVTIER_ASSIGN_OR_RETURN(std::string b, nodes_[from]->cmd({"CLUSTER", "SETSLOT", s, "MIGRATING", to_id}));
  if (a != "OK" || b != "OK") return Status::Internal("SETSLOT IMPORTING/MIGRATING failed: " + a + " / " + b);
  return finish ? finish_move(slot, from, to) : Status::Ok();
}

Status RedisCluster::finish_move(uint16_t slot, size_t from, size_t to) {
  const std::string s = std::to_string(slot);
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(std::string keys, nodes_[from]->cmd({"CLUSTER", "GETKEYSINSLOT", s, "100"}));
    if (keys.empty()) break;
    std::vector<std::string> m{"MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()), "", "0", "5000", "KEYS"};
    std::stringstream ss(keys);
    std::string k;
    while (std::getline(ss, k)) m.push_back(k);
    KVTIER_ASSIGN_OR_RETURN(std::string r, nodes_[from]->cmd(m));
    if (r != "OK") return Status::Internal("MIGRATE failed: " + r);
  }
  KVTIER_ASSIGN_OR_RETURN(std::string to_id, nodes_[to]->cmd({"CLUSTER", "MYID"}));
  for (auto& n : nodes_) {
    KVTIER_ASSIGN_OR_RETURN(std::string r, n->cmd({"CLUSTER", "SETSLOT", s, "NODE", to_id}));
    if (r != "OK") return Status::Internal("SETSLOT NODE failed: " + r);
  }
  return Status::Ok();
}

}  // namespace kvtier::testing
