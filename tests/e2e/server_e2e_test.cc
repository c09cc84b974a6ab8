// End-to-end: the real `kvtier serve --model tiny` over loopback HTTP.
#include <gtest/gtest.h>

#include <optional>

#include <cstring>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/prom_check.h"
#include "e2e/server_process.h"
#include "load_always_profile.h"
#include "engine/gguf.h"
#include "client/loadgen.h"
#include "client/sse.h"
#include "test_data.h"
#include "text/tokenizer.h"
#include "test_http.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::vector<std::string> base_args(const std::string& disk_dir) {
  return {"--model", "tiny", "--disk-dir", disk_dir, "--device-capacity", "64MiB", "--host-capacity", "128MiB",
          "--disk-capacity", "256MiB", "--threads", "1", "--max-tokens", "30000", "--shutdown-grace", "30"};
}

// Runs the load generator; every request must succeed, `requests` of them.
server::LoadgenSummary run_clean_loadgen(const server::LoadgenOptions& lo, size_t requests) {
  auto run = server::run_loadgen(lo);
  if (!run.ok()) {
    ADD_FAILURE() << run.status().to_string();
    return {};
  }
  const auto summary = server::summarize(*run);
  EXPECT_EQ(summary.errors, 0u) << summary.first_error;
  EXPECT_EQ(summary.requests, requests);
  return summary;
}

Reply post(int port, const json& body, httplib::Headers h = {}) { return post_json(port, "/v1/completions", body, h); }
Reply post_raw(int port, const std::string& body) {
  auto c = kvtier::testing::local_client(port);
  return to_reply(c.Post("/v1/completions", body, "application/json"));
}
Reply get(int port, const std::string& path) { return get_json(port, path); }

struct StreamResult {
  int status = 0;
  std::vector<std::string> events;
  std::string text;
  json usage;
  bool done = false;
};
// Streams one request. Hangs up after `stop_after` events (0: never) or once `stop` becomes true.
StreamResult stream(int port, json body, int stop_after = 0, const std::atomic<bool>* stop = nullptr,
                    std::atomic<int>* events_seen = nullptr) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};  // the usage, in a chunk of its own
  StreamResult out;
  auto c = kvtier::testing::local_client(port);
  client::SseReader sse;
  auto on_data = [&](std::string_view d) {
    out.events.emplace_back(d);
    if (events_seen) ++*events_seen;
    if (d == "[DONE]") {
      out.done = true;
      return;
    }
    const json j = json::parse(d, nullptr, false);
    if (j.contains("choices") && !j["choices"].empty()) out.text += j["choices"][0]["text"].get<std::string>();
    if (j.contains("usage")) out.usage = j["usage"];
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    if (!sse.feed_data({d, n}, on_data).ok()) return false;
    if (stop != nullptr && stop->load()) return false;
    return stop_after == 0 || int(out.events.size()) < stop_after;
  };
  c.send(req);
  return out;
}

std::vector<int> ids(int n, int offset = 0) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = 3 + (i * 7 + offset) % 500;
  return v;
}

bool wait_until(const std::function<bool()>& pred, double timeout_s = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// One server shared by the tests that do not restart or reconfigure it.
class SharedServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerProcess();
    ASSERT_FALSE(kvtier_binary().empty()) << "KVTIER_BINARY is not set";
    auto args = base_args(dir_->str());
    args.push_back("--blend");
    ASSERT_TRUE(server_->start(args)) << server_->log();
  }
  static void TearDownTestSuite() {
    server_->signal(SIGTERM);
    EXPECT_EQ(server_->wait_exit(), 0) << server_->log();
    delete server_;
    delete dir_;
  }
  static int port() { return server_->port(); }
  static inline ServerProcess* server_ = nullptr;
  static inline TempDir* dir_ = nullptr;
};

TEST_F(SharedServer, CompletionAndStreamAgree) {
  const json req = {{"prompt", "The tiered cache keeps KV around."}, {"max_tokens", 8}, {"ignore_eos", true}};
  Reply r = post(port(), req);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 8);
  EXPECT_GT(r.body["usage"]["prompt_tokens"].get<int>(), 30);
  EXPECT_TRUE(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number());
  EXPECT_TRUE(r.body["usage"]["kvtier"]["ttft_ms"].is_number());

  StreamResult s = stream(port(), req);
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_GE(s.events.size(), 2u);
  // Greedy decoding: the stream (now partly served from cache) says exactly the same.
  EXPECT_EQ(s.text, r.body["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(s.usage["completion_tokens"], 8);
  EXPECT_GT(s.usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
}

TEST_F(SharedServer, SharedPrefixReportsCachedTokens) {
  const auto prefix = ids(200, 11);
  Reply a = post(port(), {{"prompt", prefix}, {"max_tokens", 4}, {"ignore_eos", true}});
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(a.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto longer = prefix;
  for (int t : ids(30, 99)) longer.push_back(t);
  Reply b = post(port(), {{"prompt", longer}, {"max_tokens", 4}, {"ignore_eos", true}});
  ASSERT_EQ(b.status, 200);
  const int cached = b.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(cached, 160);
  EXPECT_LE(cached, 200);
  int by_tier = 0;
  for (auto& [tier, n] : b.body["usage"]["kvtier"]["cached_tokens_by_tier"].items()) by_tier += n.get<int>();
  EXPECT_EQ(by_tier, cached);
}

TEST_F(SharedServer, CacheSaltsDoNotShare) {
  const auto p = ids(120, 5);
  ASSERT_EQ(post(port(), {{"prompt", p}, {"max_tokens", 2}, {"cache_salt", "tenant-a"}}).status, 200);
  Reply other = post(port(), {{"prompt", p}, {"max_tokens", 2}, {"cache_salt", "tenant-b"}});
  Reply same = post(port(), {{"prompt", p}, {"max_tokens", 2}, {"cache_salt", "tenant-a"}});
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(other.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GE(same.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 96);
}

TEST_F(SharedServer, BadInputs) {
  const std::vector<std::string> bodies = {
      "{\"prompt\": [1, 2",                                        // malformed JSON
      R"({"prompt": {"a": 1}})",                                 // wrong type
      R"({"prompt": [1, 2], "max_tokens": "ten"})",              // wrong type
      R"({"prompt": [1, 512]})",                                 // tiny's vocabulary is 512
      R"({"prompt": [1, -3]})",
      R"({"prompt": [1], "max_tokens": 30001})",                 // over --max-tokens
      R"({"prompt": [1], "max_tokens": 0})",
      R"({"prompt": [1], "temperature": -1})",
      R"({"prompt": [1], "stop": 3})",
  };
  for (const auto& b : bodies) {
    Reply r = post_raw(port(), b);
    EXPECT_EQ(r.status, 400) << b;
    EXPECT_TRUE(r.body.is_object() && r.body["error"]["message"].is_string()) << b;
  }
  // Longer than the context (32768), and prompt + max_tokens over it.
  EXPECT_EQ(post(port(), {{"prompt", ids(32769)}}).status, 400);
  EXPECT_EQ(post(port(), {{"prompt", ids(32000)}, {"max_tokens", 1000}}).status, 400);
  // Still healthy.
  EXPECT_EQ(post(port(), {{"prompt", ids(10)}, {"max_tokens", 2}}).status, 200);
  EXPECT_EQ(get(port(), "/health").status, 200);
}

TEST_F(SharedServer, ThirtyTwoConcurrentStreams) {
  constexpr int kClients = 32;
  std::vector<std::thread> threads;
  std::vector<StreamResult> results(kClients);
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      results[i] = stream(port(), {{"prompt", ids(64 + i, i)}, {"max_tokens", 16}, {"ignore_eos", true}});
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(results[i].status, 200) << i;
    EXPECT_TRUE(results[i].done) << i;
    EXPECT_EQ(results[i].usage["completion_tokens"], 16) << i;
  }
}

TEST_F(SharedServer, DisconnectMidStreamFreesTheSequence) {
  StreamResult s = stream(port(), {{"prompt", ids(50, 3)}, {"max_tokens", 20000}, {"ignore_eos", true}}, 3);
  EXPECT_EQ(s.status, 200);
  EXPECT_FALSE(s.done);
  EXPECT_TRUE(wait_until([&] {
    Reply h = get(port(), "/health");
    return h.status == 200 && h.body["running"] == 0 && h.body["waiting"] == 0;
  })) << "the abandoned sequence is still running";
  EXPECT_EQ(post(port(), {{"prompt", ids(10)}, {"max_tokens", 2}}).status, 200);
}

TEST_F(SharedServer, ModelsStatsAndMetrics) {
  ASSERT_EQ(post(port(), {{"prompt", ids(40)}, {"max_tokens", 2}}).status, 200);
  Reply m = get(port(), "/v1/models");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.body["data"][0]["id"], "tiny");
  Reply st = get(port(), "/v1/cache/stats");
  EXPECT_EQ(st.status, 200);
  EXPECT_TRUE(st.body["cache"].is_object());
  auto c = kvtier::testing::local_client(port());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const PromParse p = parse_prometheus_text(r->body);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_GE(p.value("kvtier_server_ttft_seconds_count"), 1);
  EXPECT_GE(p.value("kvtier_server_prompt_tokens_total"), 40);
  EXPECT_EQ(p.types.at("kvtier_server_e2e_latency_seconds"), "histogram");
  EXPECT_GT(p.samples.size(), 40u);
  auto flush = c.Post("/v1/cache/flush");
  ASSERT_TRUE(flush);
  EXPECT_EQ(flush->status, 200);
}

// A RAG prompt as "segments": [system | document | document | question].
json rag_body(int system_offset, std::initializer_list<int> doc_offsets, int question_offset) {
  json pieces = json::array({{{"tokens", ids(21, system_offset)}, {"reuse", false}}});
  for (int d : doc_offsets) pieces.push_back({{"tokens", ids(128, d)}});
  pieces.push_back({{"tokens", ids(9, question_offset)}, {"reuse", false}});
  return {{"segments", pieces}, {"max_tokens", 3}, {"ignore_eos", true}};
}

// Documents marked as segments are cached on their own the first time, then
// blended wherever they sit; the usage says so, and /metrics counts it apart
// from exact cache hits.
TEST_F(SharedServer, SegmentsAreBlendedAndLabelled) {
  // Documents no other test's prompt starts with (ids() repeats every 500 offsets; the streams above
  // send ids(64 + i, i), whose tails the disk keeps): first seen here, so stored whole.
  Reply first = post(port(), rag_body(1010, {2201, 3302}, 4020));
  ASSERT_EQ(first.status, 200) << first.body.dump();
  const json b1 = first.body["usage"]["kvtier"]["blend"];
  EXPECT_EQ(b1["stored_segment_tokens"], 256);
  Reply second = post(port(), rag_body(1110, {3302, 2201}, 4120));  // other system prompt, documents swapped
  ASSERT_EQ(second.status, 200) << second.body.dump();
  const json b2 = second.body["usage"]["kvtier"]["blend"];
  EXPECT_TRUE(b2["blended"].get<bool>()) << b2.dump();
  EXPECT_EQ(b2["stored_segment_tokens"], 0);
  EXPECT_EQ(b2["reused_tokens"].get<int>() + b2["recomputed_tokens"].get<int>(), 256);
  EXPECT_GT(b2["reused_tokens"].get<int>(), 200);
  EXPECT_EQ(second.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // no exact hit: blended ones are apart
  auto c = kvtier::testing::local_client(port());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  const PromParse p = parse_prometheus_text(r->body);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  EXPECT_GE(p.value("kvtier_blend_tokens_total", {{"kind", "reused"}}), b2["reused_tokens"].get<double>());
  EXPECT_GE(p.value("kvtier_blend_requests_total"), 1);
}

// `kvtier loadgen --rag`: documents from a small pool in random order; after
// the first requests store them, later ones are blended, and the summary splits
// prompt tokens into exactly cached, blended and computed.
TEST_F(SharedServer, LoadgenRagReportsBlendedShare) {
  server::LoadgenOptions lo;
  lo.url = "http://127.0.0.1:" + std::to_string(port());
  lo.rag = true;
  lo.users = 2, lo.rounds = 3, lo.docs_pool = 4, lo.docs_per_request = 3, lo.doc_tokens = 64;
  lo.system_prompt_tokens = 40, lo.question_tokens = 10, lo.answer_tokens = 2;
  lo.seed = 7;
  const server::LoadgenSummary summary = run_clean_loadgen(lo, 6);
  EXPECT_GT(summary.blended_share, 0.2);
  EXPECT_NEAR(summary.cached_share + summary.blended_share + summary.computed_share, 1.0, 1e-9);
}

// Blending needs both permissions. The server's default (no --blend):
// segments are ordinary prompt text. With --blend and --blend-separator, a
// plain prompt is split on the separator's tokens only when the request asks
// ("kvtier": {"blend": true}); "blend": false turns segments off. The usage
// says why a prompt was not blended.
TEST(ServerE2E, BlendNeedsServerAndRequest) {
  TempDir dir;
  const char* prompts[] = {"system text##first document, long enough to fill a page or two of tokens "
                           "in the tiny vocabulary##second document, also long enough to fill pages##question",
                           "other system##second document, also long enough to fill pages##first document, long "
                           "enough to fill a page or two of tokens in the tiny vocabulary##question"};
  auto second_blend = [&](int port, const json& extra, bool segments) {
    json usage;
    for (const char* prompt : prompts) {
      json body = segments ? rag_body(500 + int(std::strlen(prompt)), {2001, 3002}, 4020)
                           : json{{"prompt", prompt}, {"max_tokens", 2}};
      body.update(extra);
      Reply r = post(port, body);
      EXPECT_EQ(r.status, 200) << r.body.dump();
      usage = r.body["usage"]["kvtier"]["blend"];
    }
    return usage;
  };
  {
    ServerProcess s;  // the default: the server does not blend
    ASSERT_TRUE(s.start(base_args(dir.str() + "/off"))) << s.log();
    const json b = second_blend(s.port(), json::object(), true);
    EXPECT_FALSE(b["blended"].get<bool>()) << b.dump();
    EXPECT_EQ(b["decision"], "disabled") << b.dump();
    s.signal(SIGTERM);
    EXPECT_EQ(s.wait_exit(), 0) << s.log();
  }
  ServerProcess s;
  auto args = base_args(dir.str() + "/sep");
  args.insert(args.end(), {"--blend", "--blend-separator", "##"});
  ASSERT_TRUE(s.start(args)) << s.log();
  const json asked = second_blend(s.port(), {{"kvtier", {{"blend", true}}}}, false);
  EXPECT_TRUE(asked["blended"].get<bool>()) << asked.dump();
  EXPECT_EQ(asked["decision"], "blended") << asked.dump();
  EXPECT_GT(asked["reused_tokens"].get<int>(), 0) << asked.dump();
  const json plain = second_blend(s.port(), json::object(), false);  // the request did not ask
  EXPECT_FALSE(plain["blended"].get<bool>()) << plain.dump();
  EXPECT_EQ(plain["decision"], "no_segments") << plain.dump();
  const json refused = second_blend(s.port(), {{"kvtier", {{"blend", false}}}}, true);
  EXPECT_FALSE(refused["blended"].get<bool>()) << refused.dump();
  EXPECT_EQ(refused["decision"], "no_segments") << refused.dump();
  EXPECT_EQ(post(s.port(), {{"prompt", "x"}, {"kvtier", {{"blend", 1}}}}).status, 400);
  EXPECT_EQ(post(s.port(), {{"prompt", "x"}, {"kvtier", {{"retain", true}}}}).status, 400);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

TEST(ServerE2E, ApiKey) {
  TempDir dir;
  ServerProcess s;
  auto args = base_args(dir.str());
  args.insert(args.end(), {"--api-key", "sesame-0123456789"});
  ASSERT_TRUE(s.start(args)) << s.log();
  const json req = {{"prompt", ids(8)}, {"max_tokens", 1}};
  Reply none = post(s.port(), req);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(post(s.port(), req, {{"Authorization", "Bearer nope"}}).status, 401);
  EXPECT_EQ(post(s.port(), req, {{"Authorization", "Bearer sesame-0123456789"}}).status, 200);
  auto c = kvtier::testing::local_client(s.port());
  EXPECT_EQ(c.Post("/v1/cache/flush")->status, 401);
  EXPECT_EQ(c.Post("/v1/cache/flush", {{"Authorization", "Bearer sesame-0123456789"}}, "", "application/json")->status, 200);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// The Redis password in the URL never reaches --print-config, the log of a
// run whose Redis fails, /metrics or /v1/cache/stats.
TEST(ServerE2E, RedisPasswordNeverShows) {
  TempDir dir;
  const std::string secret_file = dir.str() + "/tier.secret";
  std::ofstream(secret_file) << "0123456789abcdef-e2e-tier-secret\n";
  const std::string url = "redis://app:hunter2-e2e@127.0.0.1:1?connect_timeout_ms=50&timeout_ms=100&backoff_ms=10";
  const std::string cmd = kvtier_binary() + " serve --model tiny --remote '" + url + "' --tier-secret-file " + secret_file +
                          " --print-config 2>&1";
  std::string printed;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) printed.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << printed;
  }
  EXPECT_NE(printed.find("redis://app:<redacted>@127.0.0.1:1"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("hunter2"), std::string::npos) << printed;
  ServerProcess s;
  auto args = base_args(dir.str() + "/disk");
  args.insert(args.end(), {"--remote", url, "--tier-secret-file", secret_file, "--api-key", "sesame-0123456789"});
  ASSERT_TRUE(s.start(args)) << s.log();
  const json req = {{"prompt", ids(300)}, {"max_tokens", 2}};
  const httplib::Headers key = {{"Authorization", "Bearer sesame-0123456789"}};
  for (int i = 0; i < 2; ++i) EXPECT_EQ(post(s.port(), req, key).status, 200);  // Redis refuses: recomputed
  auto c = kvtier::testing::local_client(s.port());
  auto metrics = c.Get("/metrics", key);
  auto stats = c.Get("/v1/cache/stats", key);
  ASSERT_TRUE(metrics && stats);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 401);  // the API key guards /metrics too
  EXPECT_NE(metrics->body.find("kvtier_forged_entries_total 0"), std::string::npos);
  EXPECT_EQ(metrics->body.find("hunter2"), std::string::npos);
  EXPECT_EQ(stats->body.find("hunter2"), std::string::npos);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
  EXPECT_EQ(s.log().find("hunter2"), std::string::npos) << s.log();
}

// Runs `kvtier <args>` to its end; its exit code and output (stdout and stderr).
std::pair<int, std::string> run_kvtier(const std::string& args) {
  std::string out;
  int rc = -1;
  if (FILE* p = ::popen((kvtier_binary() + " " + args + " 2>&1").c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = ::pclose(p);
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return {rc, out};
}

std::string private_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
  return path;
}

// Tenant keys on the real server: two tenants sending the same prompt with
// the same salt never share a hit (the tenant is part of the namespace, so
// of every tier's keys), a tenant's key gets 403 on the admin endpoints,
// SIGHUP reloads the keys file, and no secret (keys, tier secret, Redis
// password from the environment) reaches the log, --print-config, /health or
// an error body.
TEST(ServerE2E, TenantKeysSecretsAndReload) {
  TempDir dir;
  const std::string acme = "acme-e2e-key-0123456789", globex = "globex-e2e-key-0123456789",
                    fresh = "fresh-e2e-key-0123456789", admin = "admin-e2e-key-0123456789",
                    tier_secret = "tier-secret-from-env-0123456789", redis_pw = "redis-pw-from-env-42";
  const std::string keys = private_file(dir.str() + "/keys", acme + " acme host=64MiB disk=1GiB\n" + globex + " globex\n");
  const std::string admin_file = private_file(dir.str() + "/admin", admin + "\n");
  ::setenv("KVTIER_TIER_SECRET", tier_secret.c_str(), 1);
  ::setenv("KVTIER_REDIS_PASSWORD", redis_pw.c_str(), 1);
  ServerProcess s;
  auto args = base_args(dir.str() + "/disk");
  args.insert(args.end(), {"--api-keys-file", keys, "--admin-key-file", admin_file, "--remote",
                           "redis://127.0.0.1:1?connect_timeout_ms=50&timeout_ms=100&backoff_ms=10"});
  ASSERT_TRUE(s.start(args)) << s.log();
  const auto printed = run_kvtier("serve --model tiny --api-keys-file " + keys + " --admin-key-file " + admin_file +
                                  " --remote redis://127.0.0.1:1 --print-config");
  ::unsetenv("KVTIER_TIER_SECRET");
  ::unsetenv("KVTIER_REDIS_PASSWORD");
  EXPECT_EQ(printed.first, 0) << printed.second;
  auto bearer = [](const std::string& k) { return httplib::Headers{{"Authorization", "Bearer " + k}}; };
  const json req = {{"prompt", ids(96)}, {"max_tokens", 1}, {"cache_salt", "same-salt"}};
  json usage;
  auto cached = [&](const std::string& key) {
    const Reply r = post(s.port(), req, bearer(key));
    EXPECT_EQ(r.status, 200) << r.body.dump();
    usage = r.body["usage"];
    return r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  EXPECT_EQ(cached(acme), 0);
  EXPECT_EQ(cached(globex), 0) << "globex hit acme's prompt";
  EXPECT_GT(cached(acme), 0) << "acme's own prompt must hit";
  // Each response reports its tenant's cached bytes and quotas.
  const json tenant = usage["kvtier"]["tenant"];
  EXPECT_EQ(tenant["tenant"], "acme") << usage.dump();
  EXPECT_GT(tenant["device_bytes"].get<uint64_t>(), 0u) << usage.dump();
  EXPECT_EQ(tenant["quota"]["host_bytes"].get<uint64_t>(), uint64_t(64) << 20);
  EXPECT_EQ(tenant["quota"]["disk_bytes"].get<uint64_t>(), uint64_t(1) << 30);
  auto c = kvtier::testing::local_client(s.port());
  std::string bodies;
  for (const char* path : {"/v1/cache/stats", "/v1/cache/tree", "/metrics"}) {
    auto denied = c.Get(path, bearer(acme));
    ASSERT_TRUE(denied);
    EXPECT_EQ(denied->status, 403) << path;
    bodies += denied->body;
    EXPECT_EQ(c.Get(path, bearer(admin))->status, 200) << path;
  }
  // Each tenant's cached bytes and quota, for the admin.
  auto metrics = c.Get("/metrics", bearer(admin));
  ASSERT_TRUE(metrics);
  auto prom = parse_prometheus_text(metrics->body);
  ASSERT_TRUE(prom.ok()) << prom.errors.front();
  EXPECT_GT(prom.value("kvtier_tenant_bytes", {{"tenant", "acme"}, {"tier", "device"}}), 0);
  EXPECT_GT(prom.value("kvtier_tenant_bytes", {{"tenant", "globex"}, {"tier", "device"}}), 0);
  EXPECT_EQ(prom.value("kvtier_tenant_quota_bytes", {{"tenant", "acme"}, {"tier", "host"}}), double(64 << 20));
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  const json h = json::parse(health->body);
  EXPECT_EQ(h["auth"], "tenant-keys");
  EXPECT_EQ(h["remote_authenticated"], true);
  bodies += health->body + post(s.port(), req, bearer("wrong-key-0123456789")).body.dump();
  // SIGHUP: globex's key is replaced by a fresh one, without a restart.
  private_file(keys, acme + " acme host=64MiB disk=1GiB\n" + fresh + " globex\n");
  s.signal(SIGHUP);
  EXPECT_TRUE(wait_until([&] { return post(s.port(), req, bearer(fresh)).status == 200; })) << s.log();
  EXPECT_EQ(post(s.port(), req, bearer(globex)).status, 401);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
  EXPECT_NE(s.log().find("SIGHUP: keys reloaded"), std::string::npos) << s.log();
  for (const std::string& secret : {acme, globex, fresh, admin, tier_secret, redis_pw}) {
    EXPECT_EQ(s.log().find(secret), std::string::npos) << "the log shows a secret";
    EXPECT_EQ(printed.second.find(secret), std::string::npos) << "--print-config shows a secret";
    EXPECT_EQ(bodies.find(secret), std::string::npos) << "a response shows a secret";
  }
}

// --remote without a tier secret stops at config validation (before Redis,
// before the model), naming the flag; --remote-insecure runs with a warning
// and says so in /health. A keys file others may read is refused too.
TEST(ServerE2E, InsecureSetUpsAreRefusedOrLoud) {
  TempDir dir;
  ::unsetenv("KVTIER_TIER_SECRET");
  const auto refused = run_kvtier("serve --model tiny --port 0 --remote redis://127.0.0.1:1");
  EXPECT_NE(refused.first, 0);
  EXPECT_NE(refused.second.find("--tier-secret-file"), std::string::npos) << refused.second;
  const std::string keys = dir.str() + "/keys";
  std::ofstream(keys) << "acme-e2e-key-0123456789 acme\n";
  ::chmod(keys.c_str(), 0644);
  const auto readable = run_kvtier("serve --model tiny --port 0 --api-keys-file " + keys);
  EXPECT_NE(readable.first, 0);
  EXPECT_NE(readable.second.find("readable by every user"), std::string::npos) << readable.second;
  ServerProcess s;
  auto args = base_args(dir.str() + "/disk");
  args.insert(args.end(), {"--remote", "redis://127.0.0.1:1?connect_timeout_ms=50&timeout_ms=100&backoff_ms=10",
                           "--remote-insecure", "--host", "0.0.0.0"});
  ASSERT_TRUE(s.start(args)) << s.log();
  const Reply h = get(s.port(), "/health");
  EXPECT_EQ(h.body["remote_authenticated"], false);
  EXPECT_EQ(h.body["auth"], "none");
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
  EXPECT_NE(s.log().find("warning: --remote-insecure"), std::string::npos) << s.log();
  EXPECT_NE(s.log().find("warning: listening on 0.0.0.0 without any key"), std::string::npos) << s.log();
}

TEST(ServerE2E, QueueFullIs429) {
  TempDir dir;
  ServerProcess s;
  auto args = base_args(dir.str());
  args.insert(args.end(), {"--max-queue", "1", "--max-sequences", "1"});
  ASSERT_TRUE(s.start(args)) << s.log();
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  std::thread running([&] { stream(s.port(), {{"prompt", ids(20)}, {"max_tokens", 29000}, {"ignore_eos", true}}, 0, &stop, &seen); });
  ASSERT_TRUE(wait_until([&] { return seen > 0; }));
  Reply queued;
  std::thread waiting([&] { queued = post(s.port(), {{"prompt", ids(20, 1)}, {"max_tokens", 2}}); });
  ASSERT_TRUE(wait_until([&] { return get(s.port(), "/health").body["waiting"] == 1; }));
  Reply full = post(s.port(), {{"prompt", ids(20, 2)}, {"max_tokens", 2}});
  EXPECT_EQ(full.status, 429);
  EXPECT_EQ(full.body["error"]["code"], "queue_full");
  stop = true;  // hang up the long stream: the queued request gets its turn
  running.join();
  waiting.join();
  EXPECT_EQ(queued.status, 200);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

TEST(ServerE2E, ShutdownRefusesNewWorkWith503AndExitsZero) {
  TempDir dir;
  ServerProcess s;
  ASSERT_TRUE(s.start(base_args(dir.str()))) << s.log();
  std::atomic<bool> stop{false};
  std::atomic<int> seen{0};
  StreamResult long_stream;
  std::thread running([&] {
    long_stream = stream(s.port(), {{"prompt", ids(20)}, {"max_tokens", 29000}, {"ignore_eos", true}}, 0, &stop, &seen);
  });
  ASSERT_TRUE(wait_until([&] { return seen > 0; }));
  s.signal(SIGINT);
  ASSERT_TRUE(wait_until([&] { return get(s.port(), "/health").status == 503; })) << s.log();
  Reply refused = post(s.port(), {{"prompt", ids(8)}, {"max_tokens", 1}});
  EXPECT_EQ(refused.status, 503);
  EXPECT_TRUE(refused.body["error"]["message"].is_string());
  stop = true;
  running.join();
  EXPECT_EQ(long_stream.status, 200);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// What a restarted server serves from its disk tier is what it answered before the restart.
TEST(ServerE2E, RestartServesAPrefixFromDisk) {
  TempDir dir, profile_dir;
  auto args = base_args(dir.str());  // priced so that what the disk holds is loaded, however slow the machine
  args.insert(args.end(), {"--profile", kvtier::testing::write_load_always_profile(profile_dir.str())});
  const auto prompt = ids(600, 42);
  const json request = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
                        {"logprobs", 1}, {"return_token_ids", true}};
  json before;
  {
    ServerProcess s;
    ASSERT_TRUE(s.start(args)) << s.log();
    Reply r = post(s.port(), request);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << r.body.dump();
    before = r.body["choices"][0];
    s.signal(SIGTERM);
    ASSERT_EQ(s.wait_exit(), 0) << s.log();
  }
  ServerProcess s;
  ASSERT_TRUE(s.start(args)) << s.log();
  Reply r = post(s.port(), request);
  ASSERT_EQ(r.status, 200);
  // The disk tier held the prefix; the planner may load it all or recompute
  // a front part while loading the rest (Cake split), but it found it there.
  const json& k = r.body["usage"]["kvtier"];
  EXPECT_GT(k["cached_tokens_by_tier"]["disk"].get<int>(), 0) << r.body.dump();
  EXPECT_GE(k["cached_tokens_by_tier"]["disk"].get<int>() + k["recomputed_cached_tokens"].get<int>(), 256) << r.body.dump();
  // The same tokens with the same log-probabilities as before the restart (the suffix is
  // computed in a different batch shape, so the logprobs agree to float rounding).
  const json& after = r.body["choices"][0];
  ASSERT_EQ(after["token_ids"], before["token_ids"]) << r.body.dump();
  EXPECT_EQ(after["text"], before["text"]);
  const auto lp_before = before["logprobs"]["token_logprobs"].get<std::vector<double>>();
  const auto lp_after = after["logprobs"]["token_logprobs"].get<std::vector<double>>();
  ASSERT_EQ(lp_after.size(), lp_before.size());
  for (size_t i = 0; i < lp_before.size(); ++i) EXPECT_NEAR(lp_after[i], lp_before[i], 1e-3) << "token " << i;
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// A model file with the tiny preset's weights and the tokenizer (and chat
// template) of a fixture, made with `kvtier model make --vocab` as a user would.
std::string make_vocab_model(const TempDir& dir, const std::string& vocab, const std::string& chat_template = "") {
  const std::string model = dir.str() + "/tiny-" + vocab + ".gguf";
  std::string make = kvtier_binary() + " model make --preset tiny --vocab " +
                     testdata::test_data_path("vocab/ggml-vocab-" + vocab + ".gguf") + " --out " + model;
  if (!chat_template.empty()) make += " --chat-template " + testdata::test_data_path("chat-templates/" + chat_template);
  EXPECT_EQ(std::system((make + " > /dev/null 2>&1").c_str()), 0) << make;
  return model;
}

// A model carrying a real vocabulary (Qwen2's, tests/data/vocab), made with
// `kvtier model make --vocab`: the server tokenizes text as the vocabulary's
// tokenizer does (special tokens whole, unless "special": false), and answers
// with logprobs, the echoed prompt and token ids.
TEST(ServerE2E, RealVocabularyTokensLogprobsAndEcho) {
  TempDir dir;
  const std::string model = make_vocab_model(dir, "qwen2");
  auto vocab = engine::load_gguf_vocab(testdata::test_data_path("vocab/ggml-vocab-qwen2.gguf"));
  ASSERT_TRUE(vocab.ok());
  auto tok = text::Tokenizer::create(*vocab);
  ASSERT_TRUE(tok.ok());

  ServerProcess s;
  auto args = base_args(dir.str() + "/cache");
  args[1] = model;
  ASSERT_TRUE(s.start(args)) << s.log();
  const std::string prompt = "<|im_start|>user\nWie geht's? 你好 🦙<|im_end|>\n<|im_start|>assistant\n";
  Reply r = post(s.port(), {{"prompt", prompt}, {"max_tokens", 3}, {"ignore_eos", true}, {"logprobs", 2},
                            {"echo", true}, {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body.dump();
  const json& choice = r.body["choices"][0];
  const auto expected = tok->encode(prompt, {.add_bos = true});
  EXPECT_EQ(choice["prompt_token_ids"].get<std::vector<TokenId>>(), expected);
  EXPECT_EQ(expected.front(), 151644);  // <|im_start|> as one token
  ASSERT_EQ(choice["token_ids"].size(), 3u);
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), expected.size() + 3);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < lp["token_logprobs"].size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
  }
  EXPECT_EQ(r.body["usage"]["kvtier"]["computed_in_full_for_logprobs"], true);
  const std::string text = choice["text"];
  EXPECT_EQ(text.rfind("user\nWie geht's? 你好 🦙\nassistant\n", 0), 0u) << text;  // control tokens print nothing

  // Streamed, the chunks carry the same tokens, logprobs and offsets, in order.
  json body = {{"prompt", prompt}, {"max_tokens", 3}, {"ignore_eos", true}, {"logprobs", 2}, {"echo", true},
               {"return_token_ids", true}};
  StreamResult st = stream(s.port(), body);
  ASSERT_TRUE(st.done);
  EXPECT_EQ(st.text, text);
  json tokens = json::array(), offsets = json::array(), logprobs = json::array(), ids = json::array();
  for (const std::string& e : st.events) {
    const json j = json::parse(e, nullptr, false);
    if (!j.is_object() || j["choices"].empty()) continue;
    const json& c = j["choices"][0];
    if (c.contains("prompt_token_ids")) {
      EXPECT_EQ(c["prompt_token_ids"], choice["prompt_token_ids"]);
    }
    for (const auto& id : c.value("token_ids", json::array())) ids.push_back(id);
    if (c["logprobs"].is_null()) continue;
    for (const auto& t : c["logprobs"]["tokens"]) tokens.push_back(t);
    for (const auto& t : c["logprobs"]["text_offset"]) offsets.push_back(t);
    for (const auto& t : c["logprobs"]["token_logprobs"]) logprobs.push_back(t);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(offsets, lp["text_offset"]);
  EXPECT_EQ(ids, choice["token_ids"]);
  ASSERT_EQ(logprobs.size(), lp["token_logprobs"].size());
  for (size_t i = 1; i < logprobs.size(); ++i)
    EXPECT_NEAR(logprobs[i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4);

  // As plain text the markers are ordinary tokens.
  Reply plain = post(s.port(), {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"special", false},
                                {"return_token_ids", true}});
  ASSERT_EQ(plain.status, 200) << plain.body.dump();
  const auto plain_ids = plain.body["choices"][0]["prompt_token_ids"].get<std::vector<TokenId>>();
  EXPECT_EQ(plain_ids, tok->encode(prompt, {.add_bos = true, .parse_special = false}));
  for (TokenId id : plain_ids) EXPECT_LT(id, 151643);
  EXPECT_EQ(plain.body["choices"][0]["token_ids"].size(), 0u);  // max_tokens 0: the prompt only
  EXPECT_EQ(plain.body["choices"][0]["finish_reason"], "length");
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// /v1/chat/completions on a model carrying Qwen2's vocabulary and Qwen2.5's
// chat template: multi-turn, each turn's prompt is found in the cache for at
// least 95 % of the previous turn's prompt plus reply; streaming sends the
// role first, then content, then the finish reason.
// Server arguments for a model with Qwen2's vocabulary and Qwen2.5's chat template, written into `dir`.
std::vector<std::string> qwen_chat_args(const TempDir& dir) {
  auto args = base_args(dir.str() + "/cache");
  args[1] = make_vocab_model(dir, "qwen2", "Qwen-Qwen2.5-7B-Instruct.jinja");
  return args;
}

TEST(ServerE2E, ChatTurnsHitTheCache) {
  TempDir dir;
  ServerProcess s;
  auto args = qwen_chat_args(dir);
  args.push_back("--blend");  // for the cacheable parts at the end
  ASSERT_TRUE(s.start(args)) << s.log();

  std::string system;
  for (int i = 0; i < 12; ++i) system += "The cache keeps every prefix a request has seen and loads it back. ";
  json messages = json::array({{{"role", "system"}, {"content", system}}});
  uint32_t previous = 0;
  for (int turn = 0; turn < 4; ++turn) {
    std::string user = "Turn " + std::to_string(turn) + ":";
    for (int i = 0; i < 8; ++i) user += " please explain how the tiers work, briefly.";
    messages.push_back({{"role", "user"}, {"content", user}});
    auto c = kvtier::testing::local_client(s.port());
    auto r = c.Post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 24}, {"ignore_eos", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "chat.completion");
    const json& usage = j["usage"];
    const uint32_t cached = usage["prompt_tokens_details"]["cached_tokens"];
    if (previous > 0) {
      EXPECT_GE(cached, 0.95 * previous) << "turn " << turn << ": " << usage.dump();
    }
    previous = usage["prompt_tokens"].get<uint32_t>() + usage["completion_tokens"].get<uint32_t>();
    messages.push_back({{"role", "assistant"}, {"content", j["choices"][0]["message"]["content"]}});
  }

  // Replies whose text re-tokenizes differently came back as their own ids.
  auto metrics_answer = kvtier::testing::local_client(s.port()).Get("/metrics");
  ASSERT_TRUE(metrics_answer);
  const std::string metrics = metrics_answer->body;
  EXPECT_NE(metrics.find("\nkvtier_chat_reply_ids_reused_total "), std::string::npos);

  // Content parts marked cacheable are segments: the documents, swapped, are blended the second time.
  std::string doc_a, doc_b;
  for (int i = 0; i < 10; ++i) doc_a += "Disk regions hold whole chunks of pages and are verified on every read. ";
  for (int i = 0; i < 10; ++i) doc_b += "The planner loads what is cheaper to load than to compute again. ";
  json blend_usage;
  for (bool swapped : {false, true}) {
    const json parts = json::array({{{"type", "text"}, {"text", "Read these."}},
                                    {{"type", "text"}, {"text", swapped ? doc_b : doc_a}, {"cacheable", true}},
                                    {{"type", "text"}, {"text", swapped ? doc_a : doc_b}, {"cacheable", true}},
                                    {{"type", "text"}, {"text", swapped ? "Which is verified?" : "What is loaded?"}}});
    auto c = kvtier::testing::local_client(s.port());
    auto r = c.Post("/v1/chat/completions",
                    json{{"messages", json::array({{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 2}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    blend_usage = json::parse(r->body)["usage"]["kvtier"]["blend"];
  }
  EXPECT_TRUE(blend_usage["blended"].get<bool>()) << blend_usage.dump();
  EXPECT_GT(blend_usage["reused_tokens"].get<int>(), 100) << blend_usage.dump();

  // Cacheable parts are tokenized as pieces only where the request may blend: one that says no reads
  // the conversation as the whole text tokenizes (the pieces split " The" after doc_a's last space).
  auto prompt_tokens = [&](bool cacheable, std::optional<bool> blend) {
    const json parts = json::array({{{"type", "text"}, {"text", doc_a}, {"cacheable", cacheable}},
                                    {{"type", "text"}, {"text", doc_b}, {"cacheable", cacheable}},
                                    {{"type", "text"}, {"text", "What is loaded?"}}});
    json body{{"messages", json::array({{{"role", "user"}, {"content", parts}}})}, {"max_tokens", 1}};
    if (blend) body["kvtier"] = {{"blend", *blend}};
    auto r = kvtier::testing::local_client(s.port()).Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    return r && r->status == 200 ? json::parse(r->body)["usage"]["prompt_tokens"].get<int>() : -1;
  };
  const int whole = prompt_tokens(false, std::nullopt);
  EXPECT_EQ(prompt_tokens(true, false), whole);
  EXPECT_NE(prompt_tokens(true, true), whole);  // where it may blend, the pieces tokenize otherwise

  // Streamed: role, then content deltas, then the finish reason; [DONE] last.
  messages.push_back({{"role", "user"}, {"content", "And streaming?"}});
  std::vector<json> chunks;
  auto c = kvtier::testing::local_client(s.port());
  client::SseReader sse;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = json{{"messages", messages}, {"max_tokens", 4}, {"ignore_eos", true}, {"stream", true}}.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    return sse
        .feed_data({d, n}, [&](std::string_view data) {
          if (data != "[DONE]") chunks.push_back(json::parse(data));
        })
        .ok();
  };
  ASSERT_TRUE(c.send(req));
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");

  // `kvtier loadgen --chat`: text conversations whose assistant turns are the server's replies.
  server::LoadgenOptions lo;
  lo.url = "http://127.0.0.1:" + std::to_string(s.port());
  lo.chat = true;
  lo.users = 2, lo.rounds = 3, lo.system_prompt_tokens = 200, lo.history_tokens = 50, lo.question_tokens = 30;
  lo.answer_tokens = 8;
  const server::LoadgenSummary summary = run_clean_loadgen(lo, 6);
  EXPECT_GT(summary.cached_share, 0.5);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// An agent session through the real server on Qwen2.5's template: tools in every request, the
// client's scripted tool calls (arguments as a JSON string) and tool results appended after each
// reply. Each turn's prompt finds the previous turn's prompt cached; tool_choice "required" is a
// 400 (not supported); a streamed request with tools ends with a finish reason.
TEST(ServerE2E, AgentTurnsWithToolsHitTheCache) {
  TempDir dir;
  ServerProcess s;
  ASSERT_TRUE(s.start(qwen_chat_args(dir))) << s.log();
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "search", "description": "Search <docs> & 'notes'",
      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}])");
  std::string system;
  for (int i = 0; i < 10; ++i) system += "You are an agent: call tools to find facts about caches. ";
  json messages = json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "Find the tiers."}}});
  auto c = kvtier::testing::local_client(s.port());
  uint32_t previous_prompt = 0;
  for (int turn = 0; turn < 3; ++turn) {
    auto r = c.Post("/v1/chat/completions",
                    json{{"messages", messages}, {"tools", tools}, {"tool_choice", "auto"}, {"max_tokens", 8}, {"ignore_eos", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json usage = json::parse(r->body)["usage"];
    if (previous_prompt > 0) {
      EXPECT_GE(usage["prompt_tokens_details"]["cached_tokens"].get<uint32_t>(), 0.95 * previous_prompt) << usage.dump();
    }
    previous_prompt = usage["prompt_tokens"];
    const std::string id = "call_" + std::to_string(turn);
    messages.push_back({{"role", "assistant"}, {"content", nullptr},
                        {"tool_calls", json::array({{{"id", id}, {"type", "function"},
                                                     {"function", {{"name", "search"}, {"arguments", "{\"q\": \"tier " + std::to_string(turn) + "\"}"}}}}})}});
    messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "Result " + std::to_string(turn) + ": host, disk, Redis."}});
  }
  auto required = c.Post("/v1/chat/completions", json{{"messages", messages}, {"tools", tools}, {"tool_choice", "required"}}.dump(),
                         "application/json");
  ASSERT_TRUE(required);
  EXPECT_EQ(required->status, 400);
  EXPECT_EQ(json::parse(required->body)["error"]["code"], "unsupported");
  auto streamed = c.Post("/v1/chat/completions",
                         json{{"messages", messages}, {"tools", tools}, {"max_tokens", 4}, {"ignore_eos", true}, {"stream", true}}.dump(),
                         "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  EXPECT_NE(streamed->body.find("\"finish_reason\":\"length\""), std::string::npos) << streamed->body;
  EXPECT_NE(streamed->body.find("data: [DONE]"), std::string::npos);
  EXPECT_TRUE(kvtier::testing::local_client(s.port()).Get("/health"));
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

// Sessions that stay warm: retention hints (cache_control on a message,
// "kvtier": {"retain_s"}) are reported and counted; after a flush of the
// local tiers, POST /v1/cache/prefetch reads the conversation's prefix back
// from disk into host memory, where the next turn finds it; bad hints are 400s.
TEST(ServerE2E, RetentionHintsAndPrefetchKeepSessionsWarm) {
  TempDir dir;
  ServerProcess s;
  ASSERT_TRUE(s.start(qwen_chat_args(dir))) << s.log();
  std::string system;
  for (int i = 0; i < 40; ++i) system += "You are an agent: call tools to find facts about caches. ";
  const json messages = json::array({{{"role", "system"}, {"content", system}, {"cache_control", {{"type", "ephemeral"}, {"ttl", "1h"}}}},
                                     {{"role", "user"}, {"content", "Find the tiers."}}});
  auto c = kvtier::testing::local_client(s.port());
  auto chat = [&](json body) { return c.Post("/v1/chat/completions", body.dump(), "application/json"); };
  const json body = {{"messages", messages}, {"max_tokens", 4}, {"ignore_eos", true},
                     {"kvtier", {{"retain_s", 600}, {"session", "agent-7"}}}};
  auto first = chat(body);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const json usage = json::parse(first->body)["usage"];
  EXPECT_GT(usage["kvtier"]["retained_tokens"].get<uint32_t>(), 0u) << usage.dump();
  EXPECT_LE(usage["kvtier"]["retained_tokens"].get<uint32_t>(), usage["total_tokens"].get<uint32_t>());
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->body.find("kvtier_retained_bytes{tier=\"host\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("kvtier_retention_hints_total{outcome=\"taken\"} 2"), std::string::npos) << metrics->body;
  auto recent = c.Get("/v1/requests/recent");
  ASSERT_TRUE(recent);
  EXPECT_NE(recent->body.find("\"session\":\"agent-7\""), std::string::npos);

  ASSERT_EQ(c.Post("/v1/cache/flush")->status, 200);  // device and host; the disk keeps the chunks
  auto prefetch = c.Post("/v1/cache/prefetch", json{{"messages", messages}}.dump(), "application/json");
  ASSERT_TRUE(prefetch);
  ASSERT_EQ(prefetch->status, 202) << prefetch->body;
  const json started = json::parse(prefetch->body);
  EXPECT_EQ(started["prefetch_id"].get<std::string>().rfind("pf-", 0), 0u);
  EXPECT_GT(started["tokens_matched"].get<uint32_t>(), 0u) << started.dump();
  EXPECT_EQ(started["tokens_loading"], started["tokens_matched"]);
  EXPECT_EQ(started["tokens_to_device"], 0u);  // they reach the host first, then free device pages
  auto again = chat(body);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  const json by_tier = json::parse(again->body)["usage"]["kvtier"]["cached_tokens_by_tier"];
  // The prefetched chunks, on the host and then (the device's pages being free) on the device.
  EXPECT_GT(by_tier["device"].get<uint32_t>(), 0u) << by_tier.dump();
  EXPECT_EQ(by_tier["disk"], 0u);
  auto promoted = c.Get("/metrics");
  ASSERT_TRUE(promoted);
  EXPECT_EQ(promoted->body.find("kvtier_promoted_pages_total 0\n"), std::string::npos) << promoted->body;

  auto bad = [&](const std::string& path, const std::string& b, const std::string& param) {
    auto r = c.Post(path, b, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << b;
    if (!param.empty()) {
      EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
    }
  };
  json ttl = messages;
  ttl[0]["cache_control"]["ttl"] = "2d";
  bad("/v1/chat/completions", json{{"messages", ttl}}.dump(), "messages[0].cache_control.ttl");
  ttl[0]["cache_control"] = {{"type", "persistent"}};
  bad("/v1/chat/completions", json{{"messages", ttl}}.dump(), "messages[0].cache_control");
  bad("/v1/chat/completions", json{{"messages", messages}, {"kvtier", {{"retain_s", 90000}}}}.dump(), "kvtier.retain_s");
  bad("/v1/chat/completions", json{{"messages", messages}, {"kvtier", {{"keep", true}}}}.dump(), "kvtier.keep");
  bad("/v1/chat/completions", json{{"messages", messages}, {"kvtier", {{"session", 7}}}}.dump(), "kvtier.session");
  bad("/v1/cache/prefetch", "{}", "prompt");
  bad("/v1/cache/prefetch", "not json", "");
  bad("/v1/cache/prefetch", json{{"prompt", json::array({-1})}}.dump(), "prompt");
  EXPECT_EQ(c.Get("/health")->status, 200);

  // `kvtier loadgen --agent --prefetch --retain-s`: every turn after the first finds the previous turn's prompt.
  server::LoadgenOptions lo;
  lo.url = "http://127.0.0.1:" + std::to_string(s.port());
  lo.agent = lo.prefetch = true;
  lo.retain_s = 60;
  lo.users = 2, lo.rounds = 3, lo.tools = 3, lo.system_prompt_tokens = 100, lo.history_tokens = 60, lo.question_tokens = 20;
  lo.tool_result_tokens = 40, lo.tool_latency_ms = 10, lo.answer_tokens = 4;
  const server::LoadgenSummary summary = run_clean_loadgen(lo, 6);
  EXPECT_GT(summary.ideal_share, 0.9);
  // Each prefetch (sent as a tool starts) answered with the prefix it found: the turn just sent.
  EXPECT_GT(summary.prefetch_matched, 0u);
  EXPECT_LE(summary.prefetch_loading, summary.prefetch_matched);
  EXPECT_NE(server::summary_table(lo, summary).find("cached / ideal"), std::string::npos);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait_exit(), 0) << s.log();
}

}  // namespace
}  // namespace kvtier::testing
