// Keys on the real `kvtier serve`, where they meet the connection: a key revoked by SIGHUP ends
// the event stream it opened, and a request without a valid key is refused before its body is
// read (found by a review: the stream went on with every tenant's page hashes, and any client
// could make the server hold --max-body bytes per connection before its 401).
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "test_http.h"

namespace kvtier::testing {
namespace {

void write_private(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
}

bool eventually(const std::function<bool()>& pred) {  // a hang bound, not a timing check
  for (int i = 0; i < 3000; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    if (pred()) return true;
  return false;
}

struct KeyedServer {
  TempDir dir;
  const std::string tenant = "acme-auth-key-0123456789", admin = "admin-auth-key-0123456789",
                    rotated = "admin-rotated-key-0123456789";
  ServerProcess s;
  bool start() {
    write_private(dir.str() + "/keys", tenant + " acme\n");
    write_private(dir.str() + "/admin", admin + "\n");
    return s.start({"--model", "tiny", "--threads", "1", "--device-capacity", "64MiB", "--api-keys-file",
                    dir.str() + "/keys", "--admin-key-file", dir.str() + "/admin"});
  }
  httplib::Headers bearer(const std::string& key) const { return {{"Authorization", "Bearer " + key}}; }
};

TEST(AuthE2E, ARevokedAdminKeyEndsTheEventStreamItOpened) {
  KeyedServer k;
  ASSERT_TRUE(k.start()) << k.s.log();
  std::atomic<bool> begun{false}, ended{false};
  std::thread listener([&] {
    auto c = local_client(k.s.port(), 600);
    (void)c.Get("/v1/cache/events", k.bearer(k.admin), [&](const char*, size_t) {
      begun = true;
      return true;
    });
    ended = true;
  });
  ASSERT_TRUE(eventually([&] { return begun.load(); }));
  write_private(k.dir.str() + "/admin", k.rotated + "\n");
  k.s.signal(SIGHUP);
  auto c = local_client(k.s.port());
  ASSERT_TRUE(eventually([&] {
    auto r = c.Get("/v1/cache/stats", k.bearer(k.admin));
    return r && r->status == 401;
  }));
  EXPECT_TRUE(eventually([&] { return ended.load(); })) << "the stream went on after its key was revoked";
  k.s.signal(SIGTERM);  // ends the stream too, should the check above have failed
  listener.join();
  EXPECT_EQ(k.s.wait_exit(), 0) << k.s.log();
}

TEST(AuthE2E, ARequestWithoutAValidKeyIsRefusedBeforeItsBodyIsRead) {
  KeyedServer k;
  ASSERT_TRUE(k.start()) << k.s.log();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(k.s.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // A head that promises 16 MB, then nothing: the answer cannot wait for the body.
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 16000000\r\n\r\n{\"prompt\":";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
  std::string got;
  char buf[4096];
  for (int waited = 0; got.find("\r\n\r\n") == std::string::npos && waited < 60000;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) == 0) {
      waited += 100;
      continue;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 401", 0), 0u) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  // With a key, the same request is read and answered.
  auto c = local_client(k.s.port());
  auto r = c.Post("/v1/completions", k.bearer(k.tenant), R"({"prompt":[5,6,7],"max_tokens":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  k.s.signal(SIGTERM);
  EXPECT_EQ(k.s.wait_exit(), 0) << k.s.log();
}

}  // namespace
}  // namespace kvtier::testing
