// Admission against the real runtime: a device pool too small for a prompt
// must not stall the server (issue 18). `kvtier serve --model tiny
// --device-capacity 1MiB` and a 20,000-character prompt used to be requeued
// forever while every other request waited behind it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/http_server.h"

namespace kvtier::server {
namespace {

using nlohmann::json;

struct TinyServer {
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<HttpServer> http;
  std::thread serving;
  uint16_t port = 0;

  ~TinyServer() {
    if (http) http->stop();
    if (serving.joinable()) serving.join();
    http.reset();
    scheduler.reset();
  }
};

void start_tiny(TinyServer& s, size_t device_bytes) {
  ServerConfig c;
  c.port = 0;
  c.runtime.model = "tiny";
  c.runtime.device_bytes = device_bytes;
  c.runtime.host_bytes = size_t(4) << 20;
  c.runtime.max_sequences = 8;
  c.runtime.threads = 1;
  auto runtime = Runtime::create(c.runtime);
  ASSERT_TRUE(runtime.ok()) << runtime.status().to_string();
  SchedulerOptions so;
  so.max_running = c.runtime.max_sequences;
  auto scheduler = Scheduler::create(so, std::move(runtime).value());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().to_string();
  s.scheduler = std::move(scheduler).value();
  auto http = HttpServer::create(c, s.scheduler.get());
  ASSERT_TRUE(http.ok()) << http.status().to_string();
  s.http = std::move(http).value();
  auto port = s.http->bind();
  ASSERT_TRUE(port.ok());
  s.port = *port;
  s.serving = std::thread([&s] { (void)s.http->serve(); });
}

TEST(Admission, PromptBeyondTheDevicePoolIsA400WhileOthersComplete) {
  TinyServer server;
  ASSERT_NO_FATAL_FAILURE(start_tiny(server, size_t(1) << 20));
  httplib::Client client("127.0.0.1", server.port);
  client.set_read_timeout(120, 0);  // a stall fails the test instead of hanging it
  const json model = json::parse(client.Get("/v1/models")->body)["data"][0];
  const uint32_t pool = model["kvtier"]["max_kv_tokens"];
  EXPECT_GT(pool, 0u);
  EXPECT_LT(pool, model["max_model_len"].get<uint32_t>());  // the pool, not the context, is the limit here
  EXPECT_EQ(model["kvtier"]["max_prompt_tokens"], pool);

  std::string giant;
  while (giant.size() < 20000) giant += "The quick brown fox jumps over the lazy dog. ";
  giant.resize(20000);
  std::atomic<int> refused{0}, completed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", server.port);
      c.set_read_timeout(120, 0);
      auto g = c.Post("/v1/completions", json{{"prompt", giant}, {"max_tokens", 4}}.dump(), "application/json");
      if (g && g->status == 400 &&
          json::parse(g->body)["error"]["message"].get<std::string>().find("device KV pool") != std::string::npos)
        ++refused;
      auto r = c.Post("/v1/completions", json{{"prompt", "Request number " + std::to_string(i)}, {"max_tokens", 4}}.dump(),
                      "application/json");
      if (r && r->status == 200 && json::parse(r->body)["usage"]["completion_tokens"] == 4) ++completed;
    });
  for (auto& c : clients) c.join();
  EXPECT_EQ(refused.load(), 8);
  EXPECT_EQ(completed.load(), 8);
  EXPECT_EQ(server.scheduler->counts().waiting, 0u);  // nothing left behind in the queue
}

}  // namespace
}  // namespace kvtier::server
