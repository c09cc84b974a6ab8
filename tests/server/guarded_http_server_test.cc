// Request heads that arrive too slowly end their connection (slowloris): past the head's deadline,
// or one slow head too many from one address. Ordered by events, not by time: each test waits for
// what the server does, however long a loaded machine takes.
#include "server/guarded_http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kvtier::server {
namespace {

using namespace std::chrono_literals;

class GuardedServerTest : public ::testing::Test {
 protected:
  void start(HeadBounds bounds) {
    http_ = std::make_unique<GuardedHttpServer>(bounds);
    http_->set_read_timeout(600, 0);  // only the head's bounds end a slow head here
    http_->set_keep_alive_timeout(600);  // and only the idle bound a silent connection
    http_->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); });
    port_ = http_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { http_->listen_after_bind(); });
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
  }
  // A connection that sent `text`; -1 when it could not connect.
  int open_with(const std::string& text) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
    (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    return fd;
  }
  // True once the server closed `fd` (what it sent, if anything, read and dropped).
  static bool closed_now(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    char buf[256];
    return ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0;
  }
  // Opens three connections that send `text`, waits until the server closes one (past its bound),
  // checks that it closed only that one, then sends `rest` on the other two: each is answered.
  // `fresh_request`: a new whole request is answered meanwhile (not where the bound is on idle
  // connections: a loaded machine may delay its bytes past slow_head, and the bound is full).
  void expect_one_of_three_closed(const std::string& text, const std::string& rest, bool fresh_request) {
    std::vector<int> fds;
    for (int i = 0; i < 3; ++i) fds.push_back(open_with(text));
    for (int fd : fds) ASSERT_GE(fd, 0);
    int closed = -1;
    const auto give_up = std::chrono::steady_clock::now() + 120s;  // a hang is a failure, not a timing check
    while (closed < 0 && std::chrono::steady_clock::now() < give_up) {
      for (size_t i = 0; i < fds.size() && closed < 0; ++i)
        if (closed_now(fds[i])) closed = int(i);
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_GE(closed, 0) << "none was closed";
    for (size_t i = 0; i < fds.size(); ++i) {
      if (int(i) != closed) {
        EXPECT_FALSE(closed_now(fds[i])) << "two are within the bound";
      }
    }
    EXPECT_EQ(http_->heads_cut(), 1u);
    if (fresh_request) {
      EXPECT_NE(get_health().find("200 OK"), std::string::npos);  // a whole request from the same address
    }
    for (size_t i = 0; i < fds.size(); ++i) {  // the others finish, are answered, and give their places back
      if (int(i) == closed) continue;
      (void)::send(fds[i], rest.data(), rest.size(), MSG_NOSIGNAL);
      std::string reply;
      char buf[256];
      for (ssize_t n; (n = ::recv(fds[i], buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(n));
      EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply;
    }
    for (int fd : fds) ::close(fd);
  }
  std::string get_health() const {
    const int fd = open_with("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string reply;
    char buf[256];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(n));
    ::close(fd);
    return reply;
  }

  std::unique_ptr<GuardedHttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

// A head trickled a byte at a time (each byte well inside the read timeout) is cut at its deadline.
TEST_F(GuardedServerTest, AHeadTrickledPastItsDeadlineIsCut) {
  start({.head_timeout = 300ms, .slow_head = 100ms, .max_slow_heads = 100});
  const int fd = open_with("GET /health HTTP/1.1\r\n");
  ASSERT_GE(fd, 0);
  bool closed = false;
  const auto give_up = std::chrono::steady_clock::now() + 120s;  // a hang is a failure, not a timing check
  while (!closed && std::chrono::steady_clock::now() < give_up) {
    closed = ::send(fd, "X", 1, MSG_NOSIGNAL) != 1 || closed_now(fd);
    std::this_thread::sleep_for(50ms);
  }
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_EQ(http_->heads_cut(), 1u);
  EXPECT_NE(get_health().find("200 OK"), std::string::npos);  // whole heads are answered
}

// One address holds at most max_slow_heads slow heads at once: the next is cut while they wait,
// and a whole request from the same address is still answered.
TEST_F(GuardedServerTest, OneAddressHoldsAtMostItsShareOfSlowHeads) {
  start({.head_timeout = 600s, .slow_head = 50ms, .max_slow_heads = 2});
  expect_one_of_three_closed("GET /health HTTP/1.1\r\nHost: x\r\n", "Connection: close\r\n\r\n", true);
}

// Silent connections (connected, nothing sent) held a thread each for the keep-alive timeout before
// any head began: past slow_head they count among their address's idle connections, and one past
// max_idle is closed while the others wait on.
TEST_F(GuardedServerTest, OneAddressHoldsAtMostItsShareOfIdleConnections) {
  start({.head_timeout = 600s, .slow_head = 50ms, .max_slow_heads = 4, .max_idle = 2});
  expect_one_of_three_closed("", "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false);
}

// Requests pipelined on one connection are each answered (bytes read past one request are kept).
TEST_F(GuardedServerTest, PipelinedRequestsAreEachAnswered) {
  start({});
  const int fd = open_with("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(fd, 0);
  std::string reply;
  char buf[256];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(n));
  ::close(fd);
  size_t answers = 0;
  for (size_t at = reply.find("200 OK"); at != std::string::npos; at = reply.find("200 OK", at + 1)) ++answers;
  EXPECT_EQ(answers, 2u) << reply;
}

}  // namespace
}  // namespace kvtier::server
