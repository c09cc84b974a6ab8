#include "client/loadgen.h"
#include "client/loadgen_detail.h"
#include "client/sse.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

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
    o.timeout_s = 1;
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

TEST(LoadgenTest, UnreachableServerIsAnError) {
  LoadgenOptions o;
  o.url = "http://127.0.0.1:1";
  EXPECT_FALSE(run_loadgen(o).ok());
}

}  // namespace
}  // namespace kvtier::server
