// `kvtier route` end to end: the real router (in this process) in front of
// real `kvtier serve` backends (tiny model) on loopback. Each test waits on
// events (a backend's answer, a probe's outcome), never on a duration.
#include <gtest/gtest.h>
#include <signal.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "remote/redis_fixture.h"
#include "router/router.h"
#include "server/api.h"
#include "server/client_connection.h"
#include "test_http.h"

namespace kvtier::router {
namespace {

// Waits on the router's view poll every 5 ms up to kPolls times (300 s): a bound against a hang,
// never a measure; on a loaded machine (TSan builds beside other work) backends and their event
// streams can take seconds, and one slow wait must not fail a test.
constexpr int kPolls = 60000;

using nlohmann::json;
using testing::Reply;
using testing::ServerProcess;
using testing::TempDir;

std::vector<std::string> backend_args(const std::string& dir) {
  return {"--model", "tiny", "--disk-dir", dir, "--device-capacity", "16MiB", "--host-capacity", "16MiB",
          "--disk-capacity", "256MiB", "--threads", "1", "--shutdown-grace", "5"};
}

// A conversation's prompt: 64 ids of its own (four 16-token pages), then `turn` more pages.
json prompt(int conversation, int turn) {
  json ids = json::array();
  for (int i = 0; i < 64 + 16 * turn; ++i) ids.push_back(1 + (conversation * 131 + i * 7) % 500);
  return ids;
}

class RouterE2E : public ::testing::Test {
 protected:
  void start_backends(int n, const std::vector<std::string>& extra = {}) {
    for (int i = 0; i < n; ++i) {
      backends_.push_back(std::make_unique<ServerProcess>());
      auto args = backend_args(dir_.str() + "/b" + std::to_string(i));
      args.insert(args.end(), extra.begin(), extra.end());
      ASSERT_TRUE(backends_.back()->start(args)) << backends_.back()->log();
    }
  }
  void start_router(RoutePolicy policy, std::vector<std::string> extra = {},
                    std::function<void(RouterOptions&)> tweak = {}) {
    RouterOptions o;
    for (auto& b : backends_) o.backends.push_back("http://127.0.0.1:" + std::to_string(b->port()));
    for (auto& e : extra) o.backends.push_back(e);
    o.port = 0;
    o.policy = policy;
    o.health_interval_ms = 50;
    // A probe's timeout marks a backend down: under TSan on a loaded machine a live backend may
    // take seconds to answer /health, and the tests' dead backends refuse connections at once.
    o.probe_timeout_ms = 30000;
    o.threads = 8;
    if (tweak) tweak(o);
    auto r = Router::create(o, *text::Vocab::synthetic(512));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    router_ = std::move(r).value();
    auto port = router_->bind();
    ASSERT_TRUE(port.ok()) << port.status().to_string();
    port_ = *port;
    serving_ = std::thread([this] { router_->serve(); });
  }
  void TearDown() override {
    if (router_) router_->stop();
    if (serving_.joinable()) serving_.join();
  }
  // The completion's cached tokens, and which backend answered (by its routed count rising).
  std::pair<int, size_t> complete(int conversation, int turn) {
    const auto before = router_->backends();
    const Reply r = testing::post_json(port_, "/v1/completions",
                                       {{"prompt", prompt(conversation, turn)}, {"max_tokens", 1}});
    EXPECT_EQ(r.status, 200) << r.body.dump();
    const auto after = router_->backends();
    size_t which = 0;
    for (size_t i = 0; i < after.size(); ++i)
      if (after[i].routed > before[i].routed) which = i;
    const int cached = r.status == 200 ? r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() : -1;
    return {cached, which};
  }
  bool wait_backend(size_t i, bool healthy) {
    for (int k = 0; k < kPolls; ++k) {
      if (router_->backends()[i].healthy == healthy) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  TempDir dir_;
  std::vector<std::unique_ptr<ServerProcess>> backends_;
  std::unique_ptr<Router> router_;
  std::thread serving_;
  int port_ = 0;
};

// How many of `n` connections opened at once to `port` the kernel completes while nobody accepts
// them: those the listening socket's accept queue holds. Waits up to 20 s (a bound against a
// hang: a loopback handshake the queue has room for completes at once, one it has no room for
// never does while nothing is accepted).
int connections_queued(int port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fds.push_back(fd);
  }
  int done = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLOUT, 0};
    int err = -1;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 20000) == 1 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
      ++done;
    else
      break;  // the queue is full: the rest cannot complete either
  }
  for (int fd : fds) ::close(fd);
  return done;
}

// 24 chat users starting together connect at once: the router's listening socket queues them all
// (cpp-httplib's backlog of 5 dropped the rest's SYNs, which their clients retried a second later).
TEST(RouterListen, ABurstOfConnectionsIsQueuedWhileTheRouterIsBusy) {
  RouterOptions o;
  o.backends = {"http://127.0.0.1:1"};
  o.port = 0;
  o.policy = RoutePolicy::kRoundRobin;
  auto r = Router::create(o, *text::Vocab::synthetic(512));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto port = (*r)->bind();  // bound, not serving: nothing accepts
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  EXPECT_EQ(connections_queued(*port, 64), 64);
  (*r)->stop();
}

// Each conversation keeps going to the backend that holds its prefix, so every
// turn after the first hits that backend's cache; new conversations spread.
TEST_F(RouterE2E, CacheAwareKeepsEachConversationOnItsBackend) {
  start_backends(2);
  start_router(RoutePolicy::kCacheAware);
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  std::vector<size_t> home(4);
  std::vector<int> per_backend(2);
  // Each new conversation is sent once the router sees both backends idle (a probe that caught the
  // last request still queued would count it as load for up to a probe's period).
  const auto idle = [&] {
    for (int k = 0; k < kPolls; ++k) {
      const auto b = router_->backends();
      if (b[0].health.waiting + b[0].in_flight + b[1].health.waiting + b[1].in_flight == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  for (int c = 0; c < 4; ++c) {
    ASSERT_TRUE(idle());
    auto [cached, which] = complete(c, 0);
    EXPECT_EQ(cached, 0);
    home[c] = which;
    ++per_backend[which];
  }
  EXPECT_EQ(per_backend, (std::vector<int>{2, 2})) << "new conversations should spread over idle backends";
  for (int turn = 1; turn <= 2; ++turn)
    for (int c = 0; c < 4; ++c) {
      auto [cached, which] = complete(c, turn);
      EXPECT_EQ(which, home[c]) << "conversation " << c << " turn " << turn;
      EXPECT_GE(cached, 64) << "conversation " << c << " turn " << turn;
    }
  auto m = kvtier::testing::local_client(port_);
  auto metrics = m.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvtier_router_decisions_total{reason=\"cache\"} 8"), std::string::npos) << metrics->body;
  // Every answer reported its cached tokens; the router's prediction (priced by each backend's own
  // planner) is off by at most the one page a backend may compute anyway.
  const auto value = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics->body.substr(at + name.size() + 2));
  };
  EXPECT_EQ(value("kvtier_router_cached_tokens_compared_total"), 12) << metrics->body;
  EXPECT_GE(value("kvtier_router_predicted_cached_tokens_total"), 8 * 48) << metrics->body;
  EXPECT_LE(value("kvtier_router_cached_tokens_error_total"), 8 * 16) << metrics->body;
  auto health = m.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json h = json::parse(health->body);
  EXPECT_EQ(h["backends"].size(), 2u);
  EXPECT_TRUE(h["backends"][0]["priced"].get<bool>()) << h.dump();
}

// The router follows each backend's /v1/cache/events: prefixes cached there
// by requests that never went through it steer its choice. The holders
// (1, 1, 0, 0) are not a pattern rotation among idle backends could produce.
TEST_F(RouterE2E, EventStreamsShowWhatBackendsGotBehindTheRoutersBack) {
  start_backends(2);
  start_router(RoutePolicy::kCacheAware);
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  const size_t holder[] = {1, 1, 0, 0};
  for (int c = 0; c < 4; ++c) {
    const Reply r = testing::post_json(backends_[holder[c]]->port(), "/v1/completions",
                                       {{"prompt", prompt(20 + c, 0)}, {"max_tokens", 1}});
    ASSERT_EQ(r.status, 200) << r.body.dump();
  }
  // Each backend holds two conversations of four pages; wait (bounded) until the router has seen them.
  auto m = kvtier::testing::local_client(port_);
  bool seen = false;
  for (int k = 0; k < kPolls && !seen; ++k) {
    auto h = m.Get("/health");
    ASSERT_TRUE(h);
    const json b = json::parse(h->body)["backends"];
    seen = b[0]["events"]["pages"].get<int>() >= 8 && b[1]["events"]["pages"].get<int>() >= 8;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(seen) << m.Get("/health")->body;
  for (int c = 0; c < 4; ++c) {
    auto [cached, which] = complete(20 + c, 1);
    EXPECT_EQ(which, holder[c]) << "conversation " << c;
    EXPECT_GE(cached, 48) << "conversation " << c;
  }
  const json health = json::parse(m.Get("/health")->body);
  EXPECT_TRUE(health["backends"][0]["events"]["live"].get<bool>()) << health.dump();
}

// A stream is relayed as it arrives: the fake backend sends its second event
// only once the client has received the first through the router (an event,
// not a delay, orders them), so a buffering router would hang, not pass.
TEST_F(RouterE2E, StreamsAreRelayedAsTheyArrive) {
  httplib::Server fake;
  std::mutex mu;
  std::condition_variable cv;
  bool first_seen = false;
  fake.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok","waiting":0,"running":0})", "application/json");
  });
  fake.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [&, sent = 0](size_t, httplib::DataSink& sink) mutable {
      if (sent++ == 0) return sink.write("data: one\n\n", 11);
      std::unique_lock lk(mu);
      if (!cv.wait_for(lk, std::chrono::seconds(60), [&] { return first_seen; })) return false;
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
      return true;
    });
  });
  const int fport = fake.bind_to_any_port("127.0.0.1");
  std::thread fthread([&] { fake.listen_after_bind(); });
  start_router(RoutePolicy::kRoundRobin, {"http://127.0.0.1:" + std::to_string(fport)});
  ASSERT_TRUE(wait_backend(0, true));
  auto c = kvtier::testing::local_client(port_);
  std::string body;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json{{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", true}}.dump();
  req.headers.emplace("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    body.append(d, n);
    if (body.find("data: one") != std::string::npos) {
      std::lock_guard lk(mu);
      first_seen = true;
      cv.notify_all();
    }
    return true;
  };
  auto r = c.send(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(body, "data: one\n\ndata: [DONE]\n\n");
  router_->stop();
  if (serving_.joinable()) serving_.join();
  fake.stop();
  fthread.join();
}

// A backend that goes away while a stream request waits in its queue (it has
// sent the head and keep-alive comments, no event yet) loses nothing: the
// router has relayed nothing and sends the request to another backend.
TEST_F(RouterE2E, AStreamNotYetBegunGoesElsewhereWhenItsBackendDies) {
  httplib::Server dying, good;
  for (httplib::Server* s : {&dying, &good})
    s->Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok","waiting":0,"running":0})", "application/json");
    });
  dying.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [sent = false](size_t, httplib::DataSink& sink) mutable {
      if (sent) return false;  // the connection drops without its last chunk
      sent = true;
      return sink.write(": keep-alive\n\n", 14);
    });
  });
  good.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("data: ok\n\ndata: [DONE]\n\n", "text/event-stream");
  });
  const int dport = dying.bind_to_any_port("127.0.0.1"), gport = good.bind_to_any_port("127.0.0.1");
  std::thread dthread([&] { dying.listen_after_bind(); }), gthread([&] { good.listen_after_bind(); });
  start_router(RoutePolicy::kRoundRobin, {"http://127.0.0.1:" + std::to_string(dport), "http://127.0.0.1:" + std::to_string(gport)});
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  auto c = kvtier::testing::local_client(port_);
  for (int i = 0; i < 2; ++i) {  // round-robin: at least one of the two goes to the dying backend first
    ASSERT_TRUE(wait_backend(0, true));
    auto r = c.Post("/v1/completions", json{{"prompt", prompt(7, 0)}, {"max_tokens", 1}, {"stream", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "data: ok\n\ndata: [DONE]\n\n");
  }
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_EQ(metrics.find("kvtier_router_failovers_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kvtier_router_cut_streams_total 0\n"), std::string::npos) << metrics;
  router_->stop();
  if (serving_.joinable()) serving_.join();
  dying.stop();
  good.stop();
  dthread.join();
  gthread.join();
}

// A backend on loopback whose /v1/completions is `handler`; healthy, idle.
class FakeBackend {
 public:
  explicit FakeBackend(httplib::Server::Handler handler) {
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok","waiting":0,"running":0})", "application/json");
    });
    http_.Post("/v1/completions", std::move(handler));
    http_.set_write_timeout(1, 0);  // a write nobody reads fails soon (the relay test)
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeBackend() {
    http_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
};

// A backend that answers every request with a status line and then a header line every 20 ms,
// for up to 60 s (each read well inside any read timeout), then hangs up.
class TricklingBackend {
 public:
  TricklingBackend() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listener_, 8), 0);
    EXPECT_EQ(::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] {
      while (!stop_) {
        pollfd p{listener_, POLLIN, 0};
        if (::poll(&p, 1, 20) != 1) continue;
        if (const int fd = ::accept(listener_, nullptr, nullptr); fd >= 0) connections_.emplace_back([this, fd] { serve(fd); });
      }
    });
  }
  ~TricklingBackend() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : connections_) t.join();
    ::close(listener_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve(int fd) {
    std::string line = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 3000 && !stop_ && ::send(fd, line.data(), line.size(), MSG_NOSIGNAL) == ssize_t(line.size()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      line = "X-Still-Coming: yes\r\n";
    }
    ::close(fd);
  }
  int listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // joined after the acceptor, which alone adds to it
};

// Whether the router's connection for `req` is reset within 60 s (a bound against a hang): the
// backend's view of a client that left, as kvtier serve has it (it cancels the sequence then).
bool router_resets(const httplib::Request& req) {
  const auto from = server::ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (!from) return false;
  for (int i = 0; i < 6000; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(10)))
    if (from->closed()) return true;
  return false;
}

// A client on a raw socket: sends one POST, reads only when asked, and can hang up with a reset.
class RawClient {
 public:
  RawClient(int port, const json& body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string text = body.dump();
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
    EXPECT_EQ(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Reads until `what` has arrived (up to 60 s); whether it did.
  bool read_until(std::string_view what) {
    char buf[4096];
    for (int waited = 0; got_.find(what) == std::string::npos;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) == 0 && (waited += 100) < 60000) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got_.append(buf, size_t(n));
    }
    return true;
  }
  // Reads until the router closes the connection (up to 60 s); whether it did.
  bool read_to_end() {
    char buf[4096];
    for (int waited = 0;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) == 0) {
        if ((waited += 100) >= 60000) return false;
        continue;
      }
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return n == 0;
      got_.append(buf, size_t(n));
    }
  }
  // Shuts the sending side (a FIN, as `nc -N` and some proxies send after a request): not a hang-up.
  void half_close() { ::shutdown(fd_, SHUT_WR); }
  const std::string& got() const { return got_; }
  // Hangs up: with a reset, or with a close() that sends a FIN, as a client that half-closed does.
  void hang_up(bool reset) {
    const linger abort{1, 0};
    if (reset) (void)setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string got_;
};

// Waits (up to kPolls) until the router's /metrics has `line`.
bool metrics_show(int port, const std::string& line) {
  auto c = kvtier::testing::local_client(port);
  for (int k = 0; k < kPolls; ++k, std::this_thread::sleep_for(std::chrono::milliseconds(5)))
    if (auto r = c.Get("/metrics"); r && r->body.find(line) != std::string::npos) return true;
  return false;
}

// A client that hangs up while its backend computes frees its router thread and cancels the
// backend's request (the router resets that connection), streamed or not. The backend here
// never answers; the router used to wait up to an hour for it, with the thread held. A client
// that close()s without a reset before its whole answer is told from one that half-closed by the
// `100 Continue` the router writes to it (before that, it waited for the backend's answer).
TEST_F(RouterE2E, AClientThatHangsUpCancelsItsRequestOnTheBackend) {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0, resets = 0;
  auto count = [&](int& n) {
    std::lock_guard lk(mu);
    ++n;
    cv.notify_all();
  };
  FakeBackend fake([&](const httplib::Request& req, httplib::Response& res) {
    if (json::parse(req.body).value("stream", false)) {
      return res.set_chunked_content_provider("text/event-stream", [&, req](size_t, httplib::DataSink& sink) {
        count(entered);
        if (sink.write("data: one\n\n", 11) && router_resets(req)) count(resets);
        return false;
      });
    }
    count(entered);
    if (router_resets(req)) count(resets);
    res.set_content("{}", "application/json");
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()}, [](RouterOptions& o) { o.threads = 4; });
  ASSERT_TRUE(wait_backend(0, true));
  struct Case {
    bool stream, reset;
  };
  int n = 0;
  for (const Case c : {Case{false, true}, Case{false, false}, Case{true, true}}) {
    SCOPED_TRACE(std::string(c.stream ? "streamed" : "whole") + (c.reset ? ", reset" : ", closed"));
    RawClient client(port_, {{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", c.stream}});
    ++n;
    {
      std::unique_lock lk(mu);
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return entered == n; }));
    }
    if (c.stream) {
      ASSERT_TRUE(client.read_until("data: one"));
    }
    client.hang_up(c.reset);
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return resets == n; }));
  }
  EXPECT_TRUE(metrics_show(port_, "kvtier_router_client_left_total 2\n"));  // the whole answers'; the stream had begun
  // The stream's relay ends after it reset the backend's connection: wait for it (a bound, not a measure).
  for (int k = 0; k < kPolls && router_->backends()[0].in_flight > 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(router_->backends()[0].in_flight, 0u);
}

// Past three quarters of --threads forwarding at once, a request is answered 429 at once and
// /health still answers: requests past the threads used to wait in cpp-httplib's unbounded queue,
// /health behind them, for as long as the backends took.
TEST_F(RouterE2E, PastItsThreadsTheRouterRefusesAndStillAnswersHealth) {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool release = false;
  FakeBackend fake([&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock lk(mu);
    ++entered;
    cv.notify_all();
    cv.wait_for(lk, std::chrono::seconds(60), [&] { return release; });
    res.set_content(R"({"answer":1})", "application/json");
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()}, [](RouterOptions& o) { o.threads = 4; });
  ASSERT_TRUE(wait_backend(0, true));
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i)  // max_forwarding(): 3 of 4 threads
    held.push_back(std::make_unique<RawClient>(port_, json{{"prompt", prompt(i, 0)}, {"max_tokens", 8}}));
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return entered == 3; }));
  }
  const Reply busy = testing::post_json(port_, "/v1/completions", {{"prompt", prompt(9, 0)}, {"max_tokens", 8}});
  EXPECT_EQ(busy.status, 429) << busy.body.dump();
  EXPECT_EQ(busy.body["error"]["code"], "router_busy") << busy.body.dump();
  EXPECT_EQ(testing::get_json(port_, "/health").status, 200);
  {
    std::lock_guard lk(mu);
    release = true;
    cv.notify_all();
  }
  for (auto& c : held) EXPECT_TRUE(c->read_until(R"({"answer":1})")) << c->got();
  EXPECT_TRUE(metrics_show(port_, "kvtier_router_busy_total 1\n"));
}

// The body of a whole HTTP/1.1 response as read off the socket: chunked (each chunk's framing
// checked, nothing after the last) or as it stands; "<malformed>" where the framing is wrong.
std::string body_of(const std::string& raw) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return "<malformed>";
  std::string rest = raw.substr(head_end + 4), body;
  if (raw.substr(0, head_end).find("Transfer-Encoding: chunked") == std::string::npos) return rest;
  for (;;) {
    const size_t line_end = rest.find("\r\n");
    if (line_end == std::string::npos) return "<malformed>";
    const size_t n = std::stoul(rest.substr(0, line_end), nullptr, 16);
    if (rest.size() < line_end + 2 + n + 2 || rest.compare(line_end + 2 + n, 2, "\r\n") != 0) return "<malformed>";
    if (n == 0) return rest.size() == line_end + 4 ? body : "<malformed>";
    body += rest.substr(line_end + 2, n);
    rest.erase(0, line_end + 2 + n + 2);
  }
}

// A client that half-closes after its request (its FIN alone is no hang-up) still gets its answer,
// whole or streamed, as from kvtier serve itself; cpp-httplib would not write to such a socket.
// Whatever the answer, nothing follows it on the connection.
TEST_F(RouterE2E, AClientThatHalfClosesAfterItsRequestIsAnswered) {
  FakeBackend fake([](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body);
    if (body["max_tokens"] == 0) {
      res.status = 400;
      return res.set_content(R"({"error":{"message":"bad"}})", "application/json");
    }
    if (!body.value("stream", false)) return res.set_content(R"({"answer":1})", "application/json");
    res.set_content("data: one\n\ndata: [DONE]\n\n", "text/event-stream");
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  ASSERT_TRUE(wait_backend(0, true));
  struct Case {
    bool stream;
    int max_tokens;
    const char* status;
    const char* body;
  };
  for (const Case& c : {Case{false, 8, "HTTP/1.1 200", R"({"answer":1})"},
                        Case{true, 8, "HTTP/1.1 200", "data: one\n\ndata: [DONE]\n\n"},
                        Case{true, 0, "HTTP/1.1 400", R"({"error":{"message":"bad"}})"}}) {
    SCOPED_TRACE(std::string(c.stream ? "streamed " : "whole ") + c.status);
    RawClient client(port_, {{"prompt", prompt(7, 0)}, {"max_tokens", c.max_tokens}, {"stream", c.stream}});
    client.half_close();
    ASSERT_TRUE(client.read_to_end()) << client.got();
    const std::string got = testing::final_response(client.got());  // past a `100 Continue`, if one came
    EXPECT_EQ(got.rfind(c.status, 0), 0u) << client.got();
    EXPECT_EQ(body_of(got), c.body) << client.got();
  }
}

// At the router's end (SIGTERM), a connection whose request head is half sent is shut once no
// answer is being written: it held an httplib worker, and the exit, for the read timeout (30 s).
TEST_F(RouterE2E, ClosingConnectionsEndsHalfSentRequests) {
  FakeBackend fake([](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string half = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL), ssize_t(half.size()));
  sockaddr_in mine{};
  socklen_t len = sizeof mine;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len), 0);
  while (!server::ClientConnection::find("127.0.0.1", port_, "127.0.0.1", ntohs(mine.sin_port)))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // accepted: the router holds its end
  router_->stop();
  EXPECT_EQ(router_->close_connections(std::chrono::seconds(60)), 1u);
  pollfd ended{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&ended, 1, 4000), 1) << "the connection is still open";  // it would end after 30 s
  ::close(fd);
  serving_.join();
}

// A client that half-closes in the middle of a stream gets the rest of it, chunk-framed as it began,
// and the backend is not cancelled.
TEST_F(RouterE2E, AClientThatHalfClosesMidStreamGetsTheRest) {
  std::mutex mu;
  std::condition_variable cv;
  bool go_on = false;
  FakeBackend fake([&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [&, sent = 0](size_t, httplib::DataSink& sink) mutable {
      if (sent++ == 0) return sink.write("data: one\n\n", 11);
      std::unique_lock lk(mu);
      if (!cv.wait_for(lk, std::chrono::seconds(60), [&] { return go_on; })) return false;
      const std::string rest = "data: two\n\ndata: [DONE]\n\n";
      sink.write(rest.data(), rest.size());
      sink.done();
      return true;
    });
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  ASSERT_TRUE(wait_backend(0, true));
  RawClient client(port_, {{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", true}});
  ASSERT_TRUE(client.read_until("data: one"));
  client.half_close();
  {
    std::lock_guard lk(mu);
    go_on = true;
    cv.notify_all();
  }
  ASSERT_TRUE(client.read_to_end()) << client.got();
  EXPECT_NE(client.got().find("Transfer-Encoding: chunked"), std::string::npos) << client.got();  // as it began
  EXPECT_EQ(body_of(client.got()), "data: one\n\ndata: two\n\ndata: [DONE]\n\n") << client.got();
  EXPECT_TRUE(metrics_show(port_, "kvtier_router_cut_streams_total 0\n"));
}

// Backends must agree on the model and page layout; the first that answered sets it. A backend
// that came back with another page size (its only peer gone with the old one) stayed down for
// ever: the reference was never set again. It follows the backends that answer now.
TEST_F(RouterE2E, ABackendBackWithAnotherPageSizeIsRoutedToWhenNoneServesTheOldOne) {
  std::atomic<int> page_tokens{16};
  std::atomic<bool> up{true};
  httplib::Server http;
  http.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    if (!up) res.status = 503;
    res.set_content(up ? R"({"status":"ok","waiting":0,"running":0})" : R"({"status":"starting"})", "application/json");
  });
  http.Get("/v1/cache/config", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"model", "m"}, {"model_fingerprint", std::string(32, 'a')}, {"hash", "xxh3"},
                         {"page_tokens", page_tokens.load()}, {"chunk_pages", 4}}
                        .dump(),
                    "application/json");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread listening([&] { http.listen_after_bind(); });
  start_router(RoutePolicy::kRoundRobin, {"http://127.0.0.1:" + std::to_string(port)});
  EXPECT_TRUE(wait_backend(0, true)) << router_->backends()[0].reason;
  up = false;  // restarting
  EXPECT_TRUE(wait_backend(0, false));
  page_tokens = 32;
  up = true;
  EXPECT_TRUE(wait_backend(0, true)) << router_->backends()[0].reason;
  router_->stop();
  if (serving_.joinable()) serving_.join();
  router_.reset();
  http.stop();
  listening.join();
}

// A whole answer is held until it is complete, so it is bounded: a backend that sent 800 MB grew
// the router by as much. Past 256 MiB the client gets a 502 and the request is not sent again.
TEST_F(RouterE2E, AWholeAnswerPastItsBoundIsA502) {
  std::atomic<int> asked{0};
  FakeBackend fake([&](const httplib::Request&, httplib::Response& res) {
    ++asked;
    res.set_chunked_content_provider("application/json", [](size_t, httplib::DataSink& sink) {
      const std::string mib(size_t(1) << 20, 'x');
      for (int i = 0; i < 300; ++i)
        if (!sink.write(mib.data(), mib.size())) return false;  // the router stopped reading
      sink.done();
      return true;
    });
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  ASSERT_TRUE(wait_backend(0, true));
  auto c = kvtier::testing::local_client(port_);
  c.set_read_timeout(300, 0);
  auto r = c.Post("/v1/completions", json{{"prompt", prompt(7, 0)}, {"max_tokens", 8}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502) << r->body.substr(0, 200);
  EXPECT_NE(r->body.find("answer_too_large"), std::string::npos) << r->body.substr(0, 200);
  EXPECT_EQ(asked.load(), 1);
}

// A backend's error without a body is relayed with its status and an error of the server's kind
// (it read as the client's own invalid request).
TEST_F(RouterE2E, ABackendErrorWithoutABodyIsAServerError) {
  FakeBackend fake([](const httplib::Request&, httplib::Response& res) { res.status = 503; });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  ASSERT_TRUE(wait_backend(0, true));
  auto c = kvtier::testing::local_client(port_);
  auto r = c.Post("/v1/completions", json{{"prompt", prompt(7, 0)}, {"max_tokens", 8}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.contains("error")) << r->body;
  EXPECT_EQ(body["error"]["type"], "server_error") << r->body;
}

// A backend that drains (SIGTERM) refuses new requests with a marked 503 before doing anything of
// them: the router sends them to another backend, whole or streamed (the client got the 503 while
// another backend was up).
TEST_F(RouterE2E, ARequestADrainingBackendRefusesGoesToAnother) {
  std::atomic<int> refused{0}, answered{0};
  FakeBackend draining([&](const httplib::Request&, httplib::Response& res) {
    ++refused;
    res.status = 503;
    res.set_content(kvtier::server::error_json(kvtier::server::draining_error()), "application/json");
    res.set_header(kvtier::server::kDrainingHeader, "1");
  });
  FakeBackend up([&](const httplib::Request& req, httplib::Response& res) {
    ++answered;
    if (req.body.find("\"stream\":true") == std::string::npos)
      return res.set_content(R"({"choices":[{"text":"ok"}]})", "application/json");
    res.set_content("data: {\"choices\":[{\"text\":\"ok\"}]}\n\ndata: [DONE]\n\n", "text/event-stream");
  });
  start_router(RoutePolicy::kRoundRobin, {draining.url(), up.url()});
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  auto c = kvtier::testing::local_client(port_);
  for (bool stream : {false, true, false, true}) {
    auto r = c.Post("/v1/completions", json{{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", stream}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->body.find("ok"), std::string::npos) << r->body;
  }
  EXPECT_GE(refused.load(), 1);
  EXPECT_EQ(answered.load(), 4);
  EXPECT_FALSE(router_->backends()[0].healthy);
  EXPECT_NE(router_->backends()[0].reason.find("draining"), std::string::npos) << router_->backends()[0].reason;
}

// A backend that trickles its /health answer is down once the probe's whole time has passed: each
// line came within the read timeout, so the probe waited for as long as it trickled, and with it
// the router's start (bind() probes every backend) and every other backend's probe.
TEST_F(RouterE2E, ABackendThatTricklesItsHealthAnswerIsDownAfterTheProbeTimeout) {
  TricklingBackend slow;
  start_router(RoutePolicy::kRoundRobin, {slow.url()}, [](RouterOptions& o) { o.probe_timeout_ms = 1000; });
  const std::vector<BackendStatus> b = router_->backends();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_FALSE(b[0].healthy);
  EXPECT_NE(b[0].reason.find("timed out after"), std::string::npos) << b[0].reason;
}

// A stream whose backend falls silent (no event, no keep-alive) is cut off after
// --stream-idle-timeout: the client gets what was relayed, not an hour's wait, and then the
// connection closes without the chunked end (ended cleanly, a cut stream read as a whole one).
TEST_F(RouterE2E, AStreamWhoseBackendFallsSilentIsCutOff) {
  FakeBackend fake([](const httplib::Request& req, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [req](size_t, httplib::DataSink& sink) {
      if (sink.write("data: one\n\n", 11)) (void)router_resets(req);  // silent until the router gives up
      return false;
    });
  });
  // 10 s: room for the first event to arrive on a loaded machine; the silence after it lasts 60 s.
  start_router(RoutePolicy::kRoundRobin, {fake.url()}, [](RouterOptions& o) { o.stream_idle_timeout_s = 10; });
  ASSERT_TRUE(wait_backend(0, true));
  RawClient client(port_, {{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", true}});
  ASSERT_TRUE(client.read_to_end()) << "not closed within 60 s (the backend's silence): " << client.got();
  EXPECT_NE(client.got().find("HTTP/1.1 200"), std::string::npos) << client.got();
  EXPECT_NE(client.got().find("data: one\n\n"), std::string::npos) << client.got();
  EXPECT_EQ(client.got().find("\r\n0\r\n\r\n"), std::string::npos) << "the stream ended as if whole: " << client.got();
  EXPECT_TRUE(metrics_show(port_, "kvtier_router_cut_streams_total 1\n"));
}

// A client that reads a stream slower than its backend writes holds the backend back: the
// router reads at most about a megabyte ahead, so memory stays bounded whatever the stream's size.
TEST_F(RouterE2E, AStreamIsReadAtMostAMegabyteAheadOfItsClient) {
  constexpr size_t kStreamBytes = size_t(64) << 20, kEvent = size_t(64) << 10;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<size_t> written;  // by the backend before a write found no room for a second
  FakeBackend fake([&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
      const std::string event = "data: " + std::string(kEvent - 8, 'x') + "\n\n";
      size_t n = 0;
      while (n < kStreamBytes && sink.write(event.data(), event.size())) n += event.size();
      std::lock_guard lk(mu);
      written = n;
      cv.notify_all();
      return false;
    });
  });
  start_router(RoutePolicy::kRoundRobin, {fake.url()});
  ASSERT_TRUE(wait_backend(0, true));
  RawClient client(port_, {{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"stream", true}});  // reads nothing
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return written.has_value(); }));
  }
  // What the socket buffers on the way hold (a few MB each on loopback), plus the router's queue.
  EXPECT_LT(*written, kStreamBytes / 2);
  client.hang_up(true);
}

// A real backend's streams, errors and models come back as the backend gave them.
TEST_F(RouterE2E, StreamsAndErrorsPassThrough) {
  start_backends(1);
  start_router(RoutePolicy::kRoundRobin);
  ASSERT_TRUE(wait_backend(0, true));
  auto c = kvtier::testing::local_client(port_);
  auto r = c.Post("/v1/completions",
                  json{{"prompt", prompt(7, 0)}, {"max_tokens", 8}, {"ignore_eos", true}, {"stream", true},
                       {"stream_options", {{"include_usage", true}}}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"completion_tokens\":8"), std::string::npos) << r->body;
  const Reply bad = testing::post_json(port_, "/v1/completions", {{"prompt", prompt(7, 0)}, {"max_tokens", -1}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_TRUE(bad.body.contains("error")) << bad.body.dump();
  // A streamed request refused before its stream began: the backend's own error, not the router's
  // generic one (its error handler took the relayed body, which a stream keeps outside res.body, for none).
  const Reply bad_stream = testing::post_json(port_, "/v1/completions",
                                              {{"prompt", prompt(7, 0)}, {"max_tokens", -1}, {"stream", true}});
  EXPECT_EQ(bad_stream.status, 400);
  EXPECT_EQ(bad_stream.body.value("/error/param"_json_pointer, ""), "max_tokens") << bad_stream.body.dump();
  const Reply models = testing::get_json(port_, "/v1/models");
  ASSERT_EQ(models.status, 200);
  // One model by its id, as the SDKs' models.retrieve() asks.
  const std::string id = models.body["data"][0]["id"];
  EXPECT_EQ(testing::get_json(port_, "/v1/models/" + id).body.value("id", ""), id);
  // A keyless router refuses a web browser's request from another site, as a keyless backend does.
  auto c2 = kvtier::testing::local_client(port_);
  auto foreign = c2.Post("/v1/completions", {{"Origin", "http://attacker.example"}},
                         json{{"prompt", prompt(7, 0)}, {"max_tokens", 1}}.dump(), "text/plain");
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->status, 403) << foreign->body;
  auto rebound = c2.Get("/health", {{"Host", "rebind.attacker.example"}});
  ASSERT_TRUE(rebound);
  EXPECT_EQ(rebound->status, 403);
}

// A backend that dies is routed around: no request fails; one that answers
// its probe with garbage is down, and the router keeps serving.
TEST_F(RouterE2E, DeadAndGarbageBackendsAreRoutedAround) {
  httplib::Server garbage;
  garbage.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\": 7", "text/plain"); });
  garbage.Post(".*", [](const httplib::Request&, httplib::Response& res) { res.set_content("not json", "text/plain"); });
  const int gport = garbage.bind_to_any_port("127.0.0.1");
  std::thread gthread([&] { garbage.listen_after_bind(); });
  start_backends(2);
  start_router(RoutePolicy::kCacheAware, {"http://127.0.0.1:" + std::to_string(gport)});
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  EXPECT_FALSE(router_->backends()[2].healthy);
  EXPECT_NE(router_->backends()[2].reason.find("JSON"), std::string::npos) << router_->backends()[2].reason;
  for (int c = 0; c < 4; ++c) (void)complete(c, 0);
  backends_[0]->signal(SIGKILL);
  (void)backends_[0]->wait_exit();
  for (int c = 0; c < 4; ++c) {  // half of these were homed on the dead backend
    auto [cached, which] = complete(c, 1);
    EXPECT_GE(cached, 0);
    EXPECT_EQ(which == 0, false);
  }
  EXPECT_FALSE(router_->backends()[0].healthy);
  garbage.stop();
  gthread.join();
}

// Backends sharing one Redis tier: the chunks one of them puts there count
// for every backend of that store. A conversation computed on backend 0
// behind the router's back is continued after backend 0 died: the router
// believes backend 1 holds its prefix (in the store) and it does.
TEST_F(RouterE2E, SharedStoreChunksCountForEveryBackend) {
  testing::RedisServer redis;
  const Status up = redis.start();
  ASSERT_TRUE(up.ok()) << up.to_string();
  start_backends(2, {"--remote", redis.url(), "--remote-insecure", "--chunk-pages", "2"});
  start_router(RoutePolicy::kCacheAware);
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  auto m = kvtier::testing::local_client(port_);
  json health;
  // The store's chunks are known from events alone (no snapshot lists them): follow both streams first.
  for (int k = 0; k < kPolls; ++k) {
    health = json::parse(m.Get("/health")->body);
    if (health["backends"][0]["events"]["live"].get<bool>() && health["backends"][1]["events"]["live"].get<bool>()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Reply first = testing::post_json(backends_[0]->port(), "/v1/completions", {{"prompt", prompt(40, 2)}, {"max_tokens", 1}});
  ASSERT_EQ(first.status, 200) << first.body.dump();
  // 96 tokens: five whole pages cached, two chunks of two pages written through to Redis, and the
  // prompt's and the sequence's tails (store_tails): four entries. Waiting for all of them, not only
  // two (a tail can land before the second chunk: on a loaded machine the router then knew one chunk).
  for (int k = 0; k < kPolls; ++k) {
    health = json::parse(m.Get("/health")->body);
    const json& stores = health["remote_stores"];
    if (stores.size() == 1 && stores.begin()->at("chunks").get<int>() >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(health["remote_stores"].size(), 1u) << health.dump();
  EXPECT_GE(health["remote_stores"].begin()->at("chunks").get<int>(), 2) << health.dump();
  EXPECT_EQ(health["backends"][0]["remote_store"], health["backends"][1]["remote_store"]) << health.dump();
  EXPECT_EQ(health["backends"][0]["remote_store"].get<std::string>(), health["remote_stores"].begin().key());
  backends_[0]->signal(SIGKILL);
  (void)backends_[0]->wait_exit();
  ASSERT_TRUE(wait_backend(0, false));
  const std::string before = m.Get("/metrics")->body;
  auto [cached, which] = complete(40, 3);
  EXPECT_EQ(which, 1u);
  EXPECT_GE(cached, 64) << "the prefix should come back from the shared store";
  const auto value = [](const std::string& body, const std::string& name) {
    const size_t at = body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + name.size() + 2));
  };
  const std::string after = m.Get("/metrics")->body;
  EXPECT_GE(value(after, "kvtier_router_matched_pages_total") - value(before, "kvtier_router_matched_pages_total"), 4)
      << "the router should have believed backend 1 holds the stored chunks";
}

std::string private_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
  return path;
}

// With the backends' tenant keys the router checks keys itself (unknown: 401,
// never forwarded), forwards the client's key, reads the backends' config
// with the admin key, and hashes each tenant apart: two tenants sending the
// same prompt are two conversations, each kept on its own backend.
TEST_F(RouterE2E, TenantKeysAreCheckedAndHashedApart) {
  const std::string acme = "acme-router-key-0123456789", globex = "globex-router-key-0123456789",
                    admin = "admin-router-key-0123456789";
  const std::string keys = private_file(dir_.str() + "/keys", acme + " acme\n" + globex + " globex\n");
  const std::string admin_file = private_file(dir_.str() + "/admin", admin + "\n");
  for (int i = 0; i < 2; ++i) {
    backends_.push_back(std::make_unique<ServerProcess>());
    auto args = backend_args(dir_.str() + "/b" + std::to_string(i));
    args.insert(args.end(), {"--api-keys-file", keys, "--admin-key-file", admin_file});
    ASSERT_TRUE(backends_.back()->start(args)) << backends_.back()->log();
  }
  start_router(RoutePolicy::kCacheAware, {}, [&](RouterOptions& o) {
    o.api_keys_file = keys;
    o.backend_admin_key_file = admin_file;
  });
  ASSERT_TRUE(wait_backend(0, true) && wait_backend(1, true));
  auto send = [&](const std::string& key, int turn) {
    return testing::post_json(port_, "/v1/completions", {{"prompt", prompt(3, turn)}, {"max_tokens", 1}},
                              {{"Authorization", "Bearer " + key}});
  };
  EXPECT_EQ(testing::post_json(port_, "/v1/completions", {{"prompt", prompt(3, 0)}, {"max_tokens", 1}}).status, 401);
  EXPECT_EQ(send("unknown-key-0123456789", 0).status, 401);
  // The backends' addresses and every tenant's cache contents are the admin's: /health says only its
  // status to anyone else, and /metrics needs the admin key.
  auto c = kvtier::testing::local_client(port_);
  for (const std::string& key : {std::string(), acme}) {
    auto h = c.Get("/health", {{"Authorization", "Bearer " + key}});
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}})) << h->body;
    auto m = c.Get("/metrics", {{"Authorization", "Bearer " + key}});
    ASSERT_TRUE(m);
    EXPECT_EQ(m->status, 403);
  }
  auto full = c.Get("/health", {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(full);
  EXPECT_EQ(json::parse(full->body)["backends"].size(), 2u) << full->body;
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer " + admin}})->status, 200);
  EXPECT_EQ(router_->backends()[0].routed + router_->backends()[1].routed, 0u) << "a 401 never reaches a backend";
  // The same prompt from two tenants: two conversations, spread over the idle backends.
  std::vector<uint64_t> before = {0, 0};
  auto home = [&] {
    const auto now = router_->backends();
    const size_t which = now[1].routed > before[1] ? 1 : 0;
    before = {now[0].routed, now[1].routed};
    return which;
  };
  Reply r = send(acme, 0);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const size_t acme_home = home();
  r = send(globex, 0);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const size_t globex_home = home();
  EXPECT_NE(acme_home, globex_home) << "globex's prompt was taken for acme's conversation";
  EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (const auto& [key, where] : {std::pair{acme, acme_home}, std::pair{globex, globex_home}}) {
    r = send(key, 1);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(home(), where);
    EXPECT_GE(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 64);
  }
  // The backends' admin key is a client through the router as it is on the backends (it was a 401),
  // in a namespace of its own: acme's cached prompt is not its.
  r = send(admin, 0);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  r = send(admin, 1);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_GE(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 64);
  // --metrics-public opens /metrics to a scraper without the admin key, and nothing else.
  router_->stop();
  serving_.join();
  start_router(RoutePolicy::kCacheAware, {}, [&](RouterOptions& o) {
    o.api_keys_file = keys;
    o.backend_admin_key_file = admin_file;
    o.metrics_public = true;
  });
  auto open = kvtier::testing::local_client(port_);
  auto m = open.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  auto h = open.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_FALSE(json::parse(h->body).contains("backends")) << h->body;
}

}  // namespace
}  // namespace kvtier::router
