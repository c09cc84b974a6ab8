// The HTTP front end over loopback, with the fake runtime behind the scheduler.
#include "server/http_server.h"
#include "server/http_front.h"

#include <gtest/gtest.h>

#include "client/sse.h"
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <cstdlib>
#include "common/secrets.h"
#include "e2e/e2e_util.h"
#include "e2e/prom_check.h"
#include "server/fake_runtime.h"
#include "test_http.h"
#include "client/loadgen.h"

namespace kvtier::server {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::FakeRuntime;
using testing::FakeShared;

class HttpServerTest : public ::testing::Test {
 protected:
  void start(std::function<void(ServerConfig&)> tweak = {}, std::function<void(FakeShared&)> fake_setup = {}) {
    ServerConfig c;
    c.port = 0;
    c.runtime.model = "fake-model";
    c.limits.max_tokens = 64;
    if (tweak) tweak(c);
    if (fake_setup) fake_setup(*fake_);
    SchedulerOptions so;
    so.max_queue = c.limits.max_queue;
    so.max_running = c.runtime.max_sequences;
    so.clock = clock_;
    so.request_timeout_s = c.limits.request_timeout_s;
    auto s = Scheduler::create(so, std::make_unique<FakeRuntime>(fake_, 64, 256));
    ASSERT_TRUE(s.ok());
    sched_ = std::move(s).value();
    auto h = HttpServer::create(c, sched_.get());
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    http_ = std::move(h).value();
    auto port = http_->bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { (void)http_->serve(); });
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
    http_.reset();
    sched_.reset();
  }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    return c;
  }
  httplib::Result post(const std::string& body, httplib::Headers h = {}) {
    return client().Post("/v1/completions", h, body, "application/json");
  }
  void expect_a_hang_up_cancels(bool reset);

  std::shared_ptr<FakeShared> fake_ = std::make_shared<FakeShared>();
  ManualClock manual_clock_;                // outlives the scheduler, which reads it until TearDown
  const Clock* clock_ = &Clock::system();  // the scheduler's (set before start(): &manual_clock_ or this)
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

// Streams one request; returns the data payloads. `stop_after` > 0 hangs up after that many events.
std::vector<std::string> stream_events(int port, const std::string& body, int* status, int stop_after = 0,
                                       std::string* error = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  std::vector<std::string> events;
  client::SseReader sse;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    *status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    return sse.feed_data({d, n}, [&](std::string_view data) { events.emplace_back(data); }).ok() &&
           (stop_after == 0 || int(events.size()) < stop_after);
  };
  auto res = c.send(req);
  if (!res && error) *error = httplib::to_string(res.error());
  return events;
}

// "ready_in_ms" on a prefetch: read ahead now, and again shortly before the client's request is due
// (the prefix just used is on the device when an agent's tool starts; the other sessions' turns during
// the tool are what send it down). The fake runtime has no planner, so the lead is the slack alone:
// again 100 ms before the deadline. That read-ahead holds what it lifts until the deadline and 2 s
// past it (3 s, rounded up); the first one, long before the deadline, holds nothing.
TEST_F(HttpServerTest, PrefetchReadsAheadAgainBeforeTheRequestIsDue) {
  ManualClock& clock = manual_clock_;
  clock_ = &clock;
  start();
  auto c = client();
  const auto prefetches = [&] {
    std::lock_guard lk(fake_->mu);
    return std::count(fake_->log.begin(), fake_->log.end(), "prefetch:5");
  };
  const auto turn = [&] { ASSERT_TRUE(sched_->call([](Runtime&) { return 0; }).ok()); };
  const auto holds = [&] {
    std::lock_guard lk(fake_->mu);
    return std::count(fake_->log.begin(), fake_->log.end(), "prefetch-hold:3");
  };
  auto r = c.Post("/v1/cache/prefetch", R"({"prompt":[5,6,7],"ready_in_ms":2000})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202) << r->body;
  EXPECT_EQ(json::parse(r->body)["again_in_ms"], 1900) << r->body;
  EXPECT_EQ(prefetches(), 1);
  EXPECT_EQ(holds(), 0);
  clock.advance(1899ms);
  turn();
  EXPECT_EQ(prefetches(), 1);
  clock.advance(1ms);
  turn();
  EXPECT_EQ(prefetches(), 2);
  EXPECT_EQ(holds(), 1);
  r = c.Post("/v1/cache/prefetch", R"({"prompt":[5,6,7],"ready_in_ms":100})", "application/json");  // too soon: once
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 202) << r->body;
  EXPECT_FALSE(json::parse(r->body).contains("again_in_ms")) << r->body;
  clock.advance(std::chrono::hours(2));
  turn();
  EXPECT_EQ(prefetches(), 3);
  EXPECT_EQ(holds(), 2);  // that one was the read-ahead before the deadline
  r = c.Post("/v1/cache/prefetch", R"({"prompt":[5,6,7],"ready_in_ms":-5})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "ready_in_ms") << r->body;
  EXPECT_EQ(prefetches(), 3);  // refused before anything was read
}

// A second server on a port in use is refused (cpp-httplib's SO_REUSEPORT let it bind, and the
// kernel shared the first server's connections with it).
TEST_F(HttpServerTest, ASecondServerOnAPortInUseIsRefused) {
  start();
  ServerConfig c;
  c.port = port_;
  c.runtime.model = "fake-model";
  auto second = HttpServer::create(c, sched_.get());
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  auto bound = (*second)->bind();
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), StatusCode::kUnavailable);
}

// --chat-template names a regular file of at most 1 MiB: a directory ended the start with the
// C++ library's own words, and /dev/zero was read until memory ran out.
TEST_F(HttpServerTest, AChatTemplateThatIsNotASmallRegularFileIsRefusedByName) {
  start();
  for (const char* path : {"/tmp", "/dev/zero"}) {
    ServerConfig c;
    c.runtime.model = "fake-model";
    c.chat_template_file = path;
    auto second = HttpServer::create(c, sched_.get());
    ASSERT_FALSE(second.ok()) << path;
    EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument) << second.status().to_string();
    EXPECT_NE(second.status().message().find("chat template"), std::string::npos) << second.status().to_string();
  }
}

TEST_F(HttpServerTest, Completion) {
  start();
  auto r = post(R"({"prompt":[1,2,3],"max_tokens":4})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "efgh");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // Text prompts are tokenized by the runtime; the second request shares a prefix.
  auto a = post(R"({"prompt":"abcdefghij","max_tokens":2})");
  auto b = post(R"({"prompt":"abcdefghij","max_tokens":2})");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(json::parse(b->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(json::parse(b->body)["usage"]["kvtier"]["cached_tokens_by_tier"]["host"], 8);
}

// A text prompt is tokenized on its own connection's thread: while one is
// stuck in the tokenizer, other requests are admitted, decoded and answered.
TEST_F(HttpServerTest, TokenizingNeverHoldsUpTheScheduler) {
  start({}, [](FakeShared& s) { s.tokenize_gate_closed = true; });
  std::thread slow([&] {
    auto r = post(R"({"prompt":"abcdefgh","max_tokens":2})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  });
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_tokenize; }));
  auto other = post(R"({"prompt":[1,2,3],"max_tokens":4})");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(json::parse(other->body)["choices"][0]["text"], "efgh");
  {
    std::lock_guard lk(fake_->mu);
    EXPECT_TRUE(fake_->in_tokenize);  // the slow one is still tokenizing
  }
  fake_->open_tokenize_gate();
  slow.join();
}

// Any end-of-generation token ends the completion, not only EOS.
TEST_F(HttpServerTest, StopsAtEveryEndOfGenerationToken) {
  start({}, [](FakeShared& s) { s.end_of_turn = 7; });  // the fake counts up from prompt.back() % 35 + 1
  auto r = post(R"({"prompt":[4],"max_tokens":10})");
  ASSERT_TRUE(r);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["text"], "fg");  // 5, 6, then 7 ends the turn
  auto ignore = post(R"({"prompt":[4],"max_tokens":4,"ignore_eos":true})");
  EXPECT_EQ(json::parse(ignore->body)["choices"][0]["text"], "fghi");
}

TEST_F(HttpServerTest, CacheSaltsDoNotShare) {
  start();
  ASSERT_TRUE(post(R"({"prompt":"abcdefghij","max_tokens":1,"cache_salt":"a"})"));
  auto other = post(R"({"prompt":"abcdefghij","max_tokens":1,"cache_salt":"b"})");
  auto same = post(R"({"prompt":"abcdefghij","max_tokens":1,"cache_salt":"a"})");
  EXPECT_EQ(json::parse(other->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(json::parse(same->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
}

TEST_F(HttpServerTest, Stream) {
  start();
  int status = 0;
  auto ev = stream_events(port_, R"({"prompt":[1],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}})",
                          &status);
  EXPECT_EQ(status, 200);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text;
  std::string finish;
  bool usage_only = false;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const json j = json::parse(ev[i]);
    EXPECT_EQ(j["object"], "text_completion");
    if (j["choices"].empty()) {
      usage_only = true;
      EXPECT_EQ(j["usage"]["completion_tokens"], 5);
      continue;
    }
    EXPECT_FALSE(j.contains("usage")) << "the usage goes in its own chunk, once: " << ev[i];
    text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, "cdefg");
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(usage_only);
  // Not asked for: no chunk carries a usage (as OpenAI).
  for (const std::string& e : stream_events(port_, R"({"prompt":[1],"max_tokens":5,"stream":true})", &status))
    if (e != "[DONE]") {
      EXPECT_FALSE(json::parse(e).contains("usage")) << e;
    }
}

TEST_F(HttpServerTest, BadInputs) {
  start();
  struct Case {
    std::string body;
    int status;
  };
  const std::vector<Case> cases = {
      {"{oops", 400},
      {R"({"prompt":5})", 400},
      {R"({"prompt":[1,64]})", 400},                       // vocab is 64
      {R"({"prompt":")" + std::string(257, 'a') + R"("})", 400},  // context is 256
      {R"({"prompt":[1],"max_tokens":65})", 400},          // limit 64
      {R"({"prompt":[1],"max_tokens":"x"})", 400},
  };
  for (const auto& c : cases) {
    auto r = post(c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << c.body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
  }
  // Too large: the 413 names the limit, also httplib's 8 KiB on form-encoded bodies (curl -d's default).
  const std::string big = R"({"prompt":")" + std::string(9000, 'a') + R"("})";
  auto form = client().Post("/v1/completions", big, "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(json::parse(form->body)["error"]["message"].get<std::string>().find("application/json"), std::string::npos)
      << form->body;
  auto huge = post(R"({"prompt":")" + std::string((16 << 20) + 1, 'a') + R"("})");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_NE(json::parse(huge->body)["error"]["message"].get<std::string>().find("--max-body"), std::string::npos)
      << huge->body;
  auto nf = client().Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body)["error"].is_object());
  // The server still works.
  auto ok = post(R"({"prompt":[1],"max_tokens":1})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, ApiKey) {
  start([](ServerConfig& c) { c.api_key = "sekret-0123456789"; });
  auto none = post(R"({"prompt":[1]})");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(post(R"({"prompt":[1]})", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(post(R"({"prompt":[1]})", {{"Authorization", "Bearer sekret-0123456789"}})->status, 200);
  EXPECT_EQ(client().Post("/v1/cache/flush")->status, 401);
  EXPECT_EQ(client().Post("/v1/cache/flush", {{"Authorization", "Bearer sekret-0123456789"}}, "", "application/json")->status, 200);
  EXPECT_EQ(client().Get("/v1/models")->status, 401);
  EXPECT_EQ(client().Get("/health")->status, 200);  // probes need no key
  // /metrics tells who uses the cache and how much: it needs the key too (Prometheus sends a bearer token).
  EXPECT_EQ(client().Get("/metrics")->status, 401);
  auto m = client().Get("/metrics", {{"Authorization", "Bearer sekret-0123456789"}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("kvtier_running_sequences 1"), std::string::npos);
}

// A file of keys, readable by its owner only.
std::string private_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
  return path;
}

constexpr const char* kAcme = "acme-key-0123456789";
constexpr const char* kAcme2 = "acme-key-second-0123";
constexpr const char* kGlobex = "globex-key-0123456789";
constexpr const char* kAdmin = "admin-key-0123456789";

httplib::Headers bearer(const char* key) { return {{"Authorization", std::string("Bearer ") + key}}; }

// Tenant keys: a tenant's requests run in its own namespace (no hit on
// another's prompt, same salt or not); the admin key alone reaches the
// cache's views, flush and /metrics; /health says which mode is on.
TEST_F(HttpServerTest, TenantKeysIsolateTenantsAndOnlyTheAdminSeesTheCache) {
  kvtier::testing::TempDir dir;
  start([&](ServerConfig& c) {
    c.api_keys_file = private_file(dir.str() + "/keys", std::string(kAcme) + " acme\n" + kAcme2 + " acme\n" + kGlobex +
                                                            " globex\n");
    c.admin_key_file = private_file(dir.str() + "/admin", std::string(kAdmin) + "\n");
  });
  const std::string body = R"({"prompt":[1,2,3,4,5,6,7,8,9],"max_tokens":1,"cache_salt":"shared"})";
  auto cached = [&](const char* key) {
    auto r = post(body, bearer(key));
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached(kAcme), 0);
  EXPECT_EQ(cached(kGlobex), 0) << "another tenant hit acme's prompt";
  EXPECT_EQ(cached(kAdmin), 0) << "the admin's completions have a namespace of their own";
  EXPECT_EQ(cached(kAcme2), 8) << "two keys of one tenant share its namespace";
  const json usage = json::parse(post(body, bearer(kGlobex))->body)["usage"]["kvtier"];
  EXPECT_EQ(usage["tenant"]["tenant"], "globex") << usage.dump();  // its bytes per tier: the e2e test
  EXPECT_EQ(post(body)->status, 401);
  EXPECT_EQ(post(body, bearer("unknown-key-0123456789"))->status, 401);
  EXPECT_EQ(client().Get("/v1/models", bearer(kGlobex))->status, 200);
  for (const char* path : {"/v1/cache/stats", "/v1/cache/tree", "/v1/cache/tiers", "/v1/requests/recent", "/metrics"}) {
    auto tenant = client().Get(path, bearer(kAcme));
    EXPECT_EQ(tenant->status, 403) << path;
    EXPECT_EQ(json::parse(tenant->body)["error"]["code"], "admin_only") << path;
    EXPECT_EQ(client().Get(path)->status, 401) << path;
    EXPECT_EQ(client().Get(path, bearer(kAdmin))->status, 200) << path;
  }
  EXPECT_EQ(client().Post("/v1/cache/flush", bearer(kAcme), "", "application/json")->status, 403);
  EXPECT_EQ(client().Post("/v1/cache/flush", bearer(kAdmin), "", "application/json")->status, 200);
  auto health = client().Get("/health");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["auth"], "tenant-keys");
  EXPECT_FALSE(json::parse(health->body).contains("remote_authenticated"));
  EXPECT_EQ(client().Get("/dashboard")->status, 200);  // the page holds no data
}

// A client key beside an admin key: the client may not flush; its namespace is today's.
TEST_F(HttpServerTest, AdminKeyApartFromTheClientKey) {
  set_secret_lookup([](const char* name) -> const char* { return std::getenv(name); });  // as the executable's main() does
  ::setenv("KVTIER_ADMIN_KEY", kAdmin, 1);  // read when the server starts
  start([](ServerConfig& c) { c.api_key = "sekret-0123456789"; });
  ::unsetenv("KVTIER_ADMIN_KEY");
  auto r = post(R"({"prompt":[1],"max_tokens":1})", bearer("sekret-0123456789"));
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(json::parse(r->body)["usage"]["kvtier"].contains("tenant")) << "no tenant, no tenant usage";
  EXPECT_EQ(client().Post("/v1/cache/flush", bearer("sekret-0123456789"), "", "application/json")->status, 403);
  EXPECT_EQ(client().Get("/metrics", bearer(kAdmin))->status, 200);
  EXPECT_EQ(json::parse(client().Get("/health")->body)["auth"], "api-key");
}

TEST_F(HttpServerTest, MetricsPublicServesMetricsWithoutTheKey) {
  start([](ServerConfig& c) {
    c.api_key = "sekret-0123456789";
    c.metrics_public = true;
  });
  EXPECT_EQ(client().Get("/metrics")->status, 200);
  EXPECT_EQ(client().Get("/v1/models")->status, 401);  // only /metrics is opened
}

// A request that ran out its time says so, and tells OpenAI's SDKs not to retry it: they retry a
// 503 on their own (twice by default), and each retry ran the request to its deadline again.
TEST_F(HttpServerTest, ATimedOutRequestTellsClientsNotToRetryIt) {
  clock_ = &manual_clock_;
  start([](ServerConfig& c) { c.limits.request_timeout_s = 10; }, [](FakeShared& s) { s.gate_closed = true; });
  std::optional<httplib::Result> r;
  std::thread a([&] { r.emplace(post(R"({"prompt":[1],"max_tokens":60,"ignore_eos":true})")); });
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
  manual_clock_.advance(std::chrono::seconds(11));
  fake_->open_gate();
  a.join();
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->status, 503);
  EXPECT_EQ(json::parse((*r)->body)["error"]["code"], "timeout") << (*r)->body;
  EXPECT_EQ((*r)->get_header_value("x-should-retry"), "false");
}

// The model by its id, as the SDKs' models.retrieve() asks; another id is a 404.
TEST_F(HttpServerTest, TheModelByItsId) {
  start();
  auto one = client().Get("/v1/models/fake-model");
  ASSERT_TRUE(one);
  ASSERT_EQ(one->status, 200) << one->body;
  const json m = json::parse(one->body);
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["id"], "fake-model");
  EXPECT_EQ(m, json::parse(client().Get("/v1/models")->body)["data"][0]);
  auto other = client().Get("/v1/models/gpt-4o");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["code"], "model_not_found");
}

// A browser's request from another site is refused before anything is done (a page could make a
// browser flush a keyless server's cache or run prompts on it); so is a request for a site name on
// a keyless server reached on loopback (DNS rebinding let such a page read the cache's views).
// Clients that are not browsers send no Origin and the Host they dialled: they are served.
TEST_F(HttpServerTest, RequestsFromAnotherSiteAreRefused) {
  start();
  const httplib::Headers evil{{"Origin", "http://attacker.example"}};
  auto flush = client().Post("/v1/cache/flush", evil, "", "text/plain");
  ASSERT_TRUE(flush);
  EXPECT_EQ(flush->status, 403);
  EXPECT_EQ(json::parse(flush->body)["error"]["code"], "foreign_site");
  auto run = client().Post("/v1/completions", evil, R"({"prompt":[1],"max_tokens":1})", "text/plain");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, 403);
  for (const char* name : {"rebind.attacker.example", "127.attacker.example"}) {
    auto rebound = client().Get("/v1/cache/tree", {{"Host", std::string(name) + ":" + std::to_string(port_)}});
    ASSERT_TRUE(rebound);
    EXPECT_EQ(rebound->status, 403) << name;
  }
  const std::string self = "http://127.0.0.1:" + std::to_string(port_);
  auto own = client().Post("/v1/completions", {{"Origin", self}}, R"({"prompt":[1],"max_tokens":1})", "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 200) << own->body;  // the dashboard's own page
  auto local = client().Get("/v1/models", {{"Host", "localhost:" + std::to_string(port_)}});
  ASSERT_TRUE(local);
  EXPECT_EQ(local->status, 200);
  EXPECT_EQ(post(R"({"prompt":[1],"max_tokens":1})")->status, 200);
}

// With keys the browser rules do not apply: no page can make a browser send a key (that needs a
// CORS preflight, which kvtier never grants), and a proxy in front may pass any Host and Origin.
TEST_F(HttpServerTest, AServerWithKeysServesAnyOriginThatSendsAKey) {
  start([](ServerConfig& c) { c.api_key = "sekret-0123456789"; });
  auto r = client().Post("/v1/completions",
                         {{"Origin", "https://chat.example.com"}, {"Host", "kvtier.internal"},
                          {"Authorization", "Bearer sekret-0123456789"}},
                         R"({"prompt":[1],"max_tokens":1})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(HttpServerTest, QueueFullIs429) {
  start([](ServerConfig& c) { c.limits.max_queue = 1; }, [](FakeShared& s) { s.gate_closed = true; });
  std::thread a([&] { post(R"({"prompt":[1],"max_tokens":1})"); });
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
  std::thread b([&] { post(R"({"prompt":[2],"max_tokens":1})"); });
  while (sched_->counts().waiting < 1) std::this_thread::sleep_for(1ms);
  auto r = post(R"({"prompt":[3],"max_tokens":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "queue_full");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_FALSE(r->has_header("x-should-retry"));  // nothing was done: a retry is what it needs
  fake_->open_gate();
  a.join();
  b.join();
}

TEST_F(HttpServerTest, DrainingIs503) {
  start();
  sched_->begin_drain();
  auto r = post(R"({"prompt":[1]})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  // Marked as a draining refusal, which a router sends to another backend.
  EXPECT_EQ(r->get_header_value(kDrainingHeader), "1");
  EXPECT_NE(r->body.find("\"code\":\"server_draining\""), std::string::npos) << r->body;
  EXPECT_EQ(client().Get("/health")->status, 503);
}

TEST_F(HttpServerTest, DisconnectMidStreamFreesTheSequence) {
  start({}, [](FakeShared& s) { s.decode_delay = 1ms; });
  int status = 0;
  auto ev = stream_events(port_, R"({"prompt":[1],"max_tokens":60,"stream":true,"ignore_eos":true})", &status, 2);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(ev.size(), 2u);
  EXPECT_TRUE(fake_->wait_for([&] { return fake_->finished.size() == 1 && fake_->live.empty(); }));
  EXPECT_EQ(post(R"({"prompt":[1],"max_tokens":1})")->status, 200);
}

// Opens a connection and sends `bytes` on it, without reading the answer.
int send_raw(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != ssize_t(bytes.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Opens a connection and sends one POST /v1/completions, without reading the answer.
int send_raw_completion(int port, const std::string& body) {
  return send_raw(port, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

// A non-streaming request whose client hangs up is cancelled: the handler
// watches the socket while it waits. Ordered by events: the request is held
// in start() until the scheduler has been told of the cancel, so it can only
// have generated its first token or two of the 64 asked. `reset`: the client
// resets the connection; else it close()s it, sending a FIN as a client that
// half-closed does, which the handler tells apart by the `100 Continue` it
// writes (before that, such a request ran to its end).
void HttpServerTest::expect_a_hang_up_cancels(bool reset) {
  const int fd = send_raw_completion(port_, R"({"prompt":[1],"max_tokens":64,"ignore_eos":true})");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
  const linger abort{1, 0};  // close with a reset, as a client that gives up with unread bytes does
  if (reset) ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  ::close(fd);
  const auto give_up = std::chrono::steady_clock::now() + 120s;  // a hang is a failure, not a timing check
  while (sched_->counts().cancels == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(sched_->counts().cancels, 1u) << "the hang-up was not noticed";
  fake_->open_gate();
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->finished.size() == 1 && fake_->live.empty(); }));
  {
    std::lock_guard lk(fake_->mu);
    const auto decodes = std::count_if(fake_->log.begin(), fake_->log.end(),
                                       [](const std::string& e) { return e.rfind("decode:", 0) == 0; });
    EXPECT_LE(decodes, 2) << "the request ran on after its client left";
  }
  // The handler records the cancelled generation once it wakes up.
  auto metrics = [&] { return kvtier::testing::parse_prometheus_text(client().Get("/metrics")->body); };
  auto p = metrics();
  while (p.ok() && p.value("kvtier_server_requests_total", {{"outcome", "cancelled"}}) == 0 &&
         std::chrono::steady_clock::now() < give_up)
    p = metrics();
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_EQ(p.value("kvtier_server_client_disconnects_total"), 1);
  EXPECT_EQ(p.value("kvtier_server_requests_total", {{"outcome", "cancelled"}}), 1);
  EXPECT_LT(p.value("kvtier_server_completion_tokens_total"), 64);
  EXPECT_EQ(post(R"({"prompt":[1],"max_tokens":1})")->status, 200);  // the server goes on
}

TEST_F(HttpServerTest, DisconnectBeforeAWholeAnswerCancelsTheRequest) {
  start({}, [](FakeShared& s) { s.gate_closed = true; });
  expect_a_hang_up_cancels(true);
}

TEST_F(HttpServerTest, ACloseWithoutAResetBeforeAWholeAnswerCancelsTheRequest) {
  start({}, [](FakeShared& s) { s.gate_closed = true; });
  expect_a_hang_up_cancels(false);
}

// After a client half-closed: lets the held request run, then reads what the server writes until it closes.
std::string release_and_read_to_end(FakeShared& fake, int fd) {
  std::this_thread::sleep_for(300ms);  // not a timing check: a longer wait only makes the test stricter
  fake.open_gate();
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(n));
  ::close(fd);
  return reply;
}

// A client that half-closes after sending (shutdown for writing) still gets
// its whole answer: a FIN is not a hang-up. Held in start() until the
// half-close has surely arrived, so the handler sees it while it waits.
// The handler's `100 Continue` (it cannot tell the FIN from a close) arrives first, and is all
// that arrives before the answer is done.
TEST_F(HttpServerTest, HalfClosedClientIsStillAnswered) {
  start({}, [](FakeShared& s) { s.gate_closed = true; });
  const int fd = send_raw_completion(port_, R"({"prompt":[1],"max_tokens":16,"ignore_eos":true})");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  const std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
  std::string first(interim.size(), '\0');
  pollfd readable{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&readable, 1, 120000), 1) << "no 100 Continue";  // a bound on a hang, not a timing check
  ASSERT_EQ(::recv(fd, first.data(), first.size(), MSG_WAITALL), ssize_t(first.size()));
  ASSERT_EQ(first, interim);
  const std::string reply = release_and_read_to_end(*fake_, fd);
  ASSERT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
  const json body = json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["usage"]["completion_tokens"], 16);
  EXPECT_EQ(sched_->counts().cancels, 0u);
}

// Refusals reach a half-closed client too (a 400 here, as a 429 or a 503 would): they were written
// to nobody, since only the success path wrote past httplib.
TEST_F(HttpServerTest, HalfClosedClientGetsItsRefusal) {
  start();
  const int fd = send_raw_completion(port_, R"({"prompt":[1],"max_tokens":-1})");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, size_t(n));
  ::close(fd);
  reply = kvtier::testing::final_response(reply);
  ASSERT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("max_tokens"), std::string::npos) << reply;
}

// The same for a streamed answer, whether the client's FIN arrives before the
// answer's head (the whole stream is written past httplib) or after it (the
// rest is): every event arrives, framed as chunks, and nothing is cancelled.
TEST_F(HttpServerTest, HalfClosedStreamingClientIsStillAnswered) {
  start({}, [](FakeShared& s) { s.gate_closed = true; });
  for (const bool before_head : {true, false}) {
    SCOPED_TRACE(before_head ? "FIN before the head" : "FIN mid-stream");
    {
      std::lock_guard lk(fake_->mu);
      fake_->gate_closed = true;
      fake_->in_start = false;
    }
    const int fd = send_raw_completion(port_, R"({"prompt":[1],"max_tokens":16,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
    ASSERT_GE(fd, 0);
    if (before_head) {
      ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    }
    ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
    if (!before_head) {
      std::string head;
      char c;
      while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) head += c;
      ASSERT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
      ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    }
    const std::string reply = release_and_read_to_end(*fake_, fd);
    if (before_head) {
      EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
    }
    EXPECT_NE(reply.find("\"completion_tokens\":16"), std::string::npos) << reply;
    EXPECT_NE(reply.find("data: [DONE]"), std::string::npos) << reply;
    EXPECT_EQ(reply.substr(reply.size() - 5), "0\r\n\r\n") << "the chunked body's end";
  }
  EXPECT_EQ(sched_->counts().cancels, 0u);
}

// At a server's end, shut_down() shuts the connections still open once no answer is being
// written. Without it an idle keep-alive connection holds its httplib worker, and serve()'s
// return, for the keep-alive timeout (5 s), and a request whose head is half sent for the read
// timeout (30 s): `kvtier serve` exited that much after SIGTERM.
TEST_F(HttpServerTest, ClosingConnectionsEndsIdleAndHalfSentOnes) {
  start();
  const int idle = send_raw(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  ASSERT_GE(idle, 0);
  std::string answer;
  char c;
  while (answer.find("}") == std::string::npos && ::recv(idle, &c, 1, 0) == 1) answer += c;  // the JSON body's end
  ASSERT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  const int half = send_raw(port_, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  ASSERT_GE(half, 0);
  sockaddr_in mine{};
  socklen_t len = sizeof mine;
  ASSERT_EQ(::getsockname(half, reinterpret_cast<sockaddr*>(&mine), &len), 0);
  // Accepted (this process holds the server's end): a connection still in the backlog would be
  // reset when the listening socket closes, with or without close_connections().
  while (!ClientConnection::find("127.0.0.1", port_, "127.0.0.1", ntohs(mine.sin_port)))
    std::this_thread::sleep_for(1ms);
  EXPECT_GE(http_->shut_down(60s), 1u);
  for (const int fd : {idle, half}) {
    pollfd ended{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&ended, 1, 4000), 1) << "the connection is still open";  // it would end after 5 s or 30 s
    EXPECT_LE(::recv(fd, &c, 1, MSG_DONTWAIT), 0);
    ::close(fd);
  }
  thread_.join();  // serve() has returned
}

// ... and it waits for the answers being written first (after stop(), httplib would cut a stream
// at its next chunk): a stream in flight ends whole.
TEST_F(HttpServerTest, ClosingConnectionsWaitsForTheAnswersBeingWritten) {
  start({}, [](FakeShared& s) { s.gate_closed = true; });
  const int fd = send_raw_completion(port_, R"({"prompt":[1],"max_tokens":8,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(fake_->wait_for([&] { return fake_->in_start; }));
  std::thread closer([&] { http_->shut_down(60s); });
  const std::string reply = release_and_read_to_end(*fake_, fd);  // its end: the closer's shutdown
  closer.join();
  EXPECT_NE(reply.find("\"completion_tokens\":8"), std::string::npos) << reply;
  EXPECT_NE(reply.find("data: [DONE]"), std::string::npos) << reply;
  EXPECT_EQ(reply.substr(reply.size() - 5), "0\r\n\r\n") << "the chunked body's end";
}

// A request whose body is still arriving is no answer being written: the drain counts a POST from
// its handler, after the body (it counted from the pre-routing handler, before the body is read,
// so a client trickling a body held a router's exit for an hour and a server's for its grace).
TEST(ConnectionDrain, ABodyStillArrivingIsNotCounted) {
  httplib::Server http;
  ConnectionDrain drain;
  drain.install(http);
  std::atomic<bool> in_get{false}, release{false};
  http.Get("/hold", [&](const httplib::Request&, httplib::Response& res) {
    in_get = true;
    while (!release) std::this_thread::sleep_for(1ms);
    res.set_content("ok", "text/plain");
  });
  http.Post("/post", drain.counted([](const httplib::Request&, httplib::Response& res) { res.set_content("ok", "text/plain"); }));
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { http.listen_after_bind(); });
  const int trickling = send_raw(port, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{");
  ASSERT_GE(trickling, 0);
  std::this_thread::sleep_for(300ms);  // not a timing check: a longer wait only makes the test stricter
  const int holding = send_raw(port, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_GE(holding, 0);
  while (!in_get) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(drain.in_flight(), 1u) << "only the GET is being answered";
  release = true;
  EXPECT_TRUE(drain.wait_none(60s));
  ::close(trickling);
  ::close(holding);
  http.stop();
  serving.join();
}

// Reads what the server sends on `fd` until it closes the connection.
std::string read_to_close(int fd) {
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, size_t(n));
  return got;
}

// Bodies cpp-httplib 0.11 cannot hold to its limit (it checks only a Content-Length) are not read
// (ConnectionDrain's pre-routing handler, so kvtier serve and kvtier route alike): a chunked body
// is answered 411 and its connection closed (before, the whole body was read into memory whatever
// its size and then routed), and a POST with no length has no body (before, it was read until the
// client closed or the 30-s read timeout, and answered "request rejected with HTTP 400").
TEST(ConnectionDrain, BodiesWithoutALengthAreNeverReadWhole) {
  httplib::Server http;
  install_body_limit_and_errors(http, 4096);
  ConnectionDrain drain;
  drain.install(http);
  std::atomic<int> posts{0};
  http.Post("/post", drain.counted([&](const httplib::Request& req, httplib::Response& res) {
    ++posts;
    res.set_content("body of " + std::to_string(req.body.size()), "text/plain");
  }));
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { http.listen_after_bind(); });
  const std::string chunk(65536, 'a');
  const int chunked = send_raw(port, "POST /post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n" +
                                         chunk + "\r\n0\r\n\r\n");
  ASSERT_GE(chunked, 0);
  const std::string refused = read_to_close(chunked);  // returns: the server closed the connection
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 411")) << refused.substr(0, 200);
  EXPECT_NE(refused.find("Content-Length"), std::string::npos);
  EXPECT_NE(refused.find("\"error\""), std::string::npos) << refused;
  const int no_length = send_raw(port, "POST /post HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_GE(no_length, 0);
  const std::string empty = read_to_close(no_length);
  EXPECT_TRUE(empty.starts_with("HTTP/1.1 200")) << empty;
  EXPECT_NE(empty.find("body of 0"), std::string::npos) << empty;
  EXPECT_EQ(posts.load(), 1) << "the chunked request never reached its route";
  ::close(chunked);
  ::close(no_length);
  http.stop();
  serving.join();
}

// A model path that is not UTF-8 (any bytes are a valid file name) is answered, replaced: /health,
// /v1/cache/config and /v1/cache/stats answered 500 (nlohmann's dump throws on it).
TEST_F(HttpServerTest, ANonUtf8ModelPathIsAnsweredNotA500) {
  start([](ServerConfig& c) { c.runtime.model = "mod\xe8le.gguf"; });
  auto c = client();
  for (const char* path : {"/health", "/v1/cache/config", "/v1/cache/stats", "/v1/models"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  }
}

// A client that waits for its whole answer is not mistaken for one that left.
TEST_F(HttpServerTest, WaitingClientIsNotCancelled) {
  start({}, [](FakeShared& s) { s.decode_delay = 2ms; });
  auto r = post(R"({"prompt":[1],"max_tokens":60,"ignore_eos":true})");  // > one watch interval
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 60);
  EXPECT_EQ(sched_->counts().cancels, 0u);
}

// A text prompt longer than max_prompt_tokens × the longest token's bytes
// has more tokens than allowed whatever they are: refused before the
// tokenizer sees it (here a megabyte, for a limit of 256 one-byte tokens).
TEST_F(HttpServerTest, TextTooLongIsRefusedBeforeTokenizing) {
  start();
  auto r = post(R"({"prompt":")" + std::string(size_t(1) << 20, 'a') + R"(","max_tokens":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("not tokenized"), std::string::npos) << r->body;
  {
    std::lock_guard lk(fake_->mu);
    EXPECT_EQ(fake_->tokenize_calls, 0u);
  }
  auto ok = post(R"({"prompt":")" + std::string(200, 'a') + R"(","max_tokens":1})");  // within the bound: tokenized
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// The device pool bounds prompt + max_tokens: what could never fit is a 400
// at admission that says why, the limits are published, and while such
// requests are refused, 8 ordinary ones complete.
TEST_F(HttpServerTest, RequestsBeyondTheKvPoolAreRefusedAtAdmission) {
  start({}, [](FakeShared& s) { s.pool_tokens = 128; });
  auto models = json::parse(client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["kvtier"]["max_prompt_tokens"], 128);
  EXPECT_EQ(models["data"][0]["kvtier"]["max_kv_tokens"], 128);
  auto health = json::parse(client().Get("/health")->body);
  EXPECT_EQ(health["max_prompt_tokens"], 128);
  json giant = {{"prompt", std::vector<int>(200, 5)}, {"max_tokens", 1}};
  json long_tail = {{"prompt", std::vector<int>(100, 5)}, {"max_tokens", 40}};
  std::vector<std::thread> clients;
  std::atomic<int> ok{0}, refused{0};
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&, i] {
      auto g = post(giant.dump());
      auto t = post(long_tail.dump());
      if (g && g->status == 400 && json::parse(g->body)["error"]["message"].get<std::string>().find("device KV pool") !=
                                       std::string::npos)
        ++refused;
      if (t && t->status == 400 && json::parse(t->body)["error"]["code"] == "kv_pool_exceeded") ++refused;
      auto r = post(json{{"prompt", {i + 1, 2, 3}}, {"max_tokens", 4}}.dump());
      if (r && r->status == 200) ++ok;
    });
  for (auto& c : clients) c.join();
  EXPECT_EQ(refused.load(), 16);
  EXPECT_EQ(ok.load(), 8);
  std::lock_guard lk(fake_->mu);
  EXPECT_TRUE(fake_->busy.empty());  // never queued nor tried
}

TEST_F(HttpServerTest, ConcurrentStreams) {
  start({}, [](FakeShared& s) { s.decode_delay = 200us; });
  constexpr int kClients = 32;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      int status = 0;
      std::string error;
      auto ev = stream_events(port_, R"({"prompt":[)" + std::to_string(i % 60 + 1) + R"(],"max_tokens":16,"stream":true})",
                              &status, 0, &error);
      if (status == 200 && !ev.empty() && ev.back() == "[DONE]") ++good;
      else ADD_FAILURE() << "client " << i << ": status " << status << " events " << ev.size() << " error " << error;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), kClients);
  EXPECT_GT(fake_->max_batch, 1u);
}

TEST_F(HttpServerTest, ModelsHealthStatsMetrics) {
  start();
  ASSERT_EQ(post(R"({"prompt":[1,2],"max_tokens":2})")->status, 200);
  auto models = json::parse(client().Get("/v1/models")->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "fake-model");
  EXPECT_EQ(models["data"][0]["kvtier"]["vocab_size"], 64);
  auto health = json::parse(client().Get("/health")->body);
  EXPECT_EQ(health["status"], "ok");
  auto stats = json::parse(client().Get("/v1/cache/stats")->body);
  EXPECT_EQ(stats["cache"]["requests"], 7);  // the fake's typed statistics, rendered by the server
  // Every option of the server, the [server] and [limits] sections and the codecs included.
  for (const Option<ServerConfig>& row : server_option_table())
    EXPECT_TRUE(stats["config"][std::string(row.section())].contains(std::string(row.name()))) << row.info.key;
  EXPECT_TRUE(stats["config"]["server"]["port"].is_number()) << stats["config"].dump();
  // httplib counts a response (its logger) after writing it, so the client may read /metrics first on a
  // loaded machine: read it until the completion's response is counted (bounded).
  auto m = client().Get("/metrics");
  for (int i = 0; i < 2000 && m && m->body.find("endpoint=\"/v1/completions\",code=\"200\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    m = client().Get("/metrics");
  }
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const auto p = kvtier::testing::parse_prometheus_text(m->body);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_EQ(p.value("kvtier_running_sequences"), 1);
  EXPECT_EQ(p.value("kvtier_server_prompt_tokens_total"), 2);
  EXPECT_GE(p.value("kvtier_http_responses_total", {{"endpoint", "/v1/completions"}, {"code", "200"}}), 1);
  auto flush = client().Post("/v1/cache/flush");
  EXPECT_EQ(flush->status, 200);
  EXPECT_TRUE(fake_->wait_for([&] { return std::count(fake_->log.begin(), fake_->log.end(), "flush") == 1; }));
}

TEST_F(HttpServerTest, LoadgenAgainstTheServer) {
  start();
  LoadgenOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port_);
  o.users = 3;
  o.rounds = 3;
  o.system_prompt_tokens = 40;
  o.history_tokens = 20;
  o.question_tokens = 4;
  o.answer_tokens = 4;
  auto r = run_loadgen(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto s = summarize(*r);
  EXPECT_EQ(s.requests, 9u);
  EXPECT_EQ(s.errors, 0u) << s.first_error;
  EXPECT_GT(s.cached_share, 0.3);  // later rounds reuse earlier prompts
  EXPECT_GT(s.ttft_p50, 0);
  EXPECT_TRUE(json::parse(summary_json(o, s)).is_object());
}

}  // namespace
}  // namespace kvtier::server
