#include "client/loadgen.h"
#include "client/loadgen_detail.h"
#include "client/sse.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

namespace kvtier::server {
namespace {

TEST(LoadgenTest, Percentiles) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({3, 1, 2}, 50), 2);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(percentile(v, 99), 99);
  EXPECT_EQ(percentile(v, 100), 100);
  EXPECT_EQ(percentile(v, 0), 1);
}

// A server's counts are read as counts or not at all: a wrong type never throws.
TEST(LoadgenTest, CountsOfAMisbehavingServerAreNotTrusted) {
  using loadgen_detail::count_of;
  const auto j = nlohmann::json::parse(R"({"n": 7, "s": "7", "neg": -1, "big": 5000000000, "f": 1.5, "o": {}})");
  EXPECT_EQ(count_of(j, "n"), 7u);
  for (const char* k : {"s", "neg", "big", "f", "o", "absent"}) EXPECT_EQ(count_of(j, k, 3), 3u) << k;
  EXPECT_EQ(count_of(nlohmann::json(5), "n", 4), 4u);
}

// One reader for every event stream: messages split anywhere, named events,
// ids, several data lines, CRLF line ends, comments, and a bound.
TEST(SseReader, SplitsMessagesFedInAnyPieces) {
  const std::string stream =
      ": hello\n\ndata: {\"a\":1}\n\nid: 7\r\nevent: kv\r\ndata: one\r\ndata:two\r\n\r\ndata:\n\n"
      "event: snapshot\nid: 8\nretry: 5\n\ndata: [DONE]\n\n";
  for (size_t step : {size_t(1), size_t(3), stream.size()}) {
    client::SseReader r;
    std::vector<client::SseMessage> got;
    for (size_t i = 0; i < stream.size(); i += step)
      ASSERT_TRUE(r.feed(std::string_view(stream).substr(i, step), [&](const client::SseMessage& m) {
                     got.push_back(m);
                     return Status::Ok();
                   }).ok());
    ASSERT_EQ(got.size(), 5u) << "step " << step;
    EXPECT_EQ(got[0].data, "{\"a\":1}");
    EXPECT_TRUE(got[0].event.empty());
    EXPECT_EQ(got[1].event, "kv");
    EXPECT_EQ(got[1].id, "7");
    EXPECT_EQ(got[1].data, "one\ntwo");
    EXPECT_TRUE(got[2].has_data);
    EXPECT_EQ(got[2].data, "");
    EXPECT_EQ(got[3].event, "snapshot");
    EXPECT_FALSE(got[3].has_data);
    EXPECT_EQ(got[4].data, "[DONE]");
  }
  // A handler's error stops the feed; an unfinished message past the bound is an error.
  client::SseReader r;
  EXPECT_TRUE(r.feed("data: x\n\n", [](const client::SseMessage&) { return Status::Corruption("no"); }).is(StatusCode::kCorruption));
  client::SseReader small(64);
  EXPECT_FALSE(small.feed(std::string(100, 'x'), [](const client::SseMessage&) { return Status::Ok(); }).ok());
}

TEST(LoadgenTest, OptionsAreValidated) {
  LoadgenOptions o;
  EXPECT_TRUE(o.validate().ok());
  for (const double t : {1e10, std::numeric_limits<double>::infinity()}) {  // the deadline's wait would overflow
    LoadgenOptions far;
    far.timeout_s = t;
    EXPECT_FALSE(far.validate().ok()) << t;
  }
  o.users = 0;
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.url = "ftp://x";
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.agent = o.prefetch = true;
  o.retain_s = 60;
  EXPECT_TRUE(o.validate().ok());
  o.chat = true;  // one workload at a time
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.prefetch = true;  // agent hints without agent sessions
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.agent = true;
  o.tools = 0;
  EXPECT_FALSE(o.validate().ok());
  o = {};
  o.vocab_size = 1u << 31;  // ids would come out negative
  EXPECT_FALSE(o.validate().ok());
}

// A hostile or broken server: one trickling keep-alives and never finishing, one refusing with
// an endless body. The request fails (it hung forever, and buffered without bound), the run ends.
class MisbehavingServer {
 public:
  explicit MisbehavingServer(bool endless_refusal) {
    http_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"data":[{"id":"m","kvtier":{"vocab_size":100}}]})", "application/json");
    });
    http_.Post("/v1/completions", [this, endless_refusal](const httplib::Request&, httplib::Response& res) {
      if (endless_refusal) res.status = 500;
      res.set_chunked_content_provider("text/event-stream", [this, endless_refusal](size_t, httplib::DataSink& sink) {
        if (stop_) return false;
        if (endless_refusal) return sink.write(std::string(1 << 20, 'x').data(), 1 << 20);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return ++sent_ < 1200 && sink.write(": keep-alive\n\n", 14);  // a minute of them, then an end without [DONE]
      });
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~MisbehavingServer() {
    stop_ = true;
    http_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server http_;
  std::atomic<bool> stop_{false};
  std::atomic<int> sent_{0};
  int port_ = 0;
  std::thread thread_;
};

TEST(LoadgenTest, AServerThatNeverFinishesTimesOutAndAnEndlessRefusalIsCut) {
  for (const bool refusal : {false, true}) {
    SCOPED_TRACE(refusal ? "endless 500" : "trickling stream");
    MisbehavingServer server(refusal);
    LoadgenOptions o;
    o.url = server.url();
    o.users = o.rounds = 1;
    o.timeout_s = refusal ? 120 : 1;  // the refusal is cut by its size, not by time (a loaded machine is slow)
    auto r = run_loadgen(o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->samples.size(), 1u);
    const std::string& error = r->samples[0].error;
    if (refusal) {
      EXPECT_EQ(error.rfind("HTTP 500: xxx", 0), 0u) << error.substr(0, 80);
      EXPECT_LE(error.size(), size_t(70) << 10);
    } else {
      EXPECT_NE(error.find("timed out after"), std::string::npos) << error;
    }
  }
}

// A server below HTTP: it answers GET /v1/models whole (or, with `trickle_models`, trickles that
// answer's header lines too) and trickles a header line of every other answer every 20 ms for as
// long as the client reads, so no single read ever waits long.
class TricklingHeadServer {
 public:
  explicit TricklingHeadServer(bool trickle_models) : trickle_models_(trickle_models) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listener_, 8), 0);
    EXPECT_EQ(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_all(); });
  }
  ~TricklingHeadServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : connections_) t.join();
    close(listener_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void accept_all() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd >= 0) connections_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    std::string head;
    char buf[4096];
    while (!stop_ && head.find("\r\n\r\n") == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      head.append(buf, size_t(n));
    }
    if (head.rfind("GET /v1/models", 0) == 0 && !trickle_models_) {
      const std::string body = R"({"data":[{"id":"m","kvtier":{"vocab_size":100}}]})";
      const std::string answer = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
                                 "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      (void)!write(fd, answer.data(), answer.size());
    } else {
      std::string line = "HTTP/1.1 200 OK\r\n";
      while (!stop_ && send(fd, line.data(), line.size(), MSG_NOSIGNAL) == ssize_t(line.size())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        line = "X-Still-Coming: yes\r\n";
      }
    }
    close(fd);
  }

  bool trickle_models_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // joined after the acceptor, which alone adds to it
};

TEST(LoadgenTest, AServerTricklingHeaderLinesTimesOut) {
  for (const bool models : {true, false}) {
    SCOPED_TRACE(models ? "GET /v1/models" : "a completion");
    TricklingHeadServer server(models);
    LoadgenOptions o;
    o.url = server.url();
    o.users = o.rounds = 1;
    o.timeout_s = 1;
    auto r = run_loadgen(o);  // hung forever, a header line at a time
    if (models) {
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("timed out after"), std::string::npos) << r.status().to_string();
    } else {
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(r->samples.size(), 1u);
      EXPECT_NE(r->samples[0].error.find("timed out after"), std::string::npos) << r->samples[0].error;
    }
  }
}

TEST(LoadgenTest, AnEndlessModelListIsCut) {
  httplib::Server http;
  std::atomic<bool> stop{false};
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("application/json", [&](size_t, httplib::DataSink& sink) {
      return !stop && sink.write(std::string(1 << 16, ' ').data(), 1 << 16);  // buffered without bound
    });
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread t([&] { http.listen_after_bind(); });
  LoadgenOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.timeout_s = 60;
  auto r = run_loadgen(o);
  stop = true;
  http.stop();
  t.join();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over 1 MiB"), std::string::npos) << r.status().to_string();
}

TEST(LoadgenTest, UnreachableServerIsAnError) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:1";
  EXPECT_FALSE(run_loadgen(o).ok());
}

}  // namespace
}  // namespace kvtier::server
