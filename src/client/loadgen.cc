#include "client/loadgen.h"

#include "client/sse.h"

#include <httplib.h>

#include "client/loadgen_detail.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

namespace kvtier::server {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

double since(SteadyClock::time_point t) { return std::chrono::duration<double>(SteadyClock::now() - t).count(); }

// An error object's message, or `fallback`.
std::string message_of(const json& error, const std::string& fallback) {
  if (!error.is_object()) return fallback;
  const auto it = error.find("message");
  return it != error.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

namespace loadgen_detail {

uint32_t count_of(const json& obj, const char* key, uint32_t fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) return fallback;
  return uint32_t(it->get<uint64_t>());
}

httplib::Headers auth_headers(const LoadgenOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

std::unique_ptr<httplib::Client> make_client(const LoadgenOptions& o) {
  auto c = std::make_unique<httplib::Client>(o.url);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(time_t(o.timeout_s), 0);
  c->set_write_timeout(30, 0);
  return c;
}

constexpr size_t kMaxSmallAnswer = 1 << 20;

Result<SmallAnswer> small_request(httplib::Client& client, const LoadgenOptions& o, const std::string& method,
                                  const std::string& path, const std::string& body) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.headers = auth_headers(o);
  if (!body.empty()) req.set_header("Content-Type", "application/json");
  req.body = body;
  return client::small_call(client, std::move(req), o.timeout_s, kMaxSmallAnswer, method + " " + o.url + path);
}

constexpr const char* kWords[] = {
    "the", "cache", "keeps", "every", "prefix", "a", "request", "has", "seen", "and", "loads", "it", "back", "when",
    "next", "prompt", "starts", "with", "same", "words", "so", "model", "does", "not", "compute", "again", "memory",
    "disk", "host", "device", "tier", "layer", "token", "answer", "question", "please", "explain", "why", "how",
    "long", "short", "fast", "slow", "today", "data", "page", "chunk", "write", "read", "history", "document",
};

std::string synth_text(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint32_t n) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (a << 40) ^ (b << 20) ^ c);
  std::string out;
  for (uint32_t i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += kWords[rng() % std::size(kWords)];
    if (i % 12 == 11) out += ".";
  }
  return out;
}

constexpr size_t kMaxErrorBody = 64 << 10;   // of a refusal's body: its message
constexpr size_t kMaxReplyBytes = 64 << 20;  // of a reply's text, kept for the next turn (--chat, --agent)

LoadgenSample send_one(httplib::Client& client, const LoadgenOptions& o, const std::string& model, json body,
                       std::string* text) {
  LoadgenSample s;
  if (body.contains("prompt")) s.prompt_tokens = uint32_t(body["prompt"].size());
  body.update(json{{"max_tokens", o.answer_tokens}, {"temperature", 0}, {"stream", true},
                   {"ignore_eos", true}, {"stream_options", {{"include_usage", true}}}});
  if (!model.empty()) body["model"] = model;
  httplib::Request req;
  req.method = "POST";
  req.path = o.chat || o.agent ? "/v1/chat/completions" : "/v1/completions";
  req.headers = auth_headers(o);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  const auto t0 = SteadyClock::now();
  bool got_first = false, done = false;
  std::string error;
  auto on_data = [&](std::string_view data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object()) return;
    if (j.contains("error")) {
      error = message_of(j["error"], "error event");
      return;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      if (!got_first) got_first = true, s.ttft_s = since(t0);
      const json& c = j["choices"][0];
      const json* piece = c.contains("delta") ? &c["delta"] : &c;
      if (piece->is_object() && piece->contains("tool_calls")) s.tool_calls = true;
      if (text != nullptr && piece->is_object() && piece->contains("content") && (*piece)["content"].is_string())
        *text += (*piece)["content"].get<std::string>();
      if (text != nullptr && piece->is_object() && piece->contains("text") && (*piece)["text"].is_string())
        *text += (*piece)["text"].get<std::string>();
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      s.completion_tokens = count_of(u, "completion_tokens");
      s.prompt_tokens = count_of(u, "prompt_tokens", s.prompt_tokens);
      if (u.contains("prompt_tokens_details")) s.cached_tokens = count_of(u["prompt_tokens_details"], "cached_tokens");
      const json& k = u.contains("kvtier") && u["kvtier"].is_object() ? u["kvtier"] : json::object();
      if (k.contains("blend")) s.blended_tokens = count_of(k["blend"], "reused_tokens");
      if (k.contains("cached_tokens_by_tier")) {
        const char* names[] = {"device", "host", "disk", "remote"};
        for (int t = 0; t < 4; ++t) s.cached_by_tier[t] = count_of(k["cached_tokens_by_tier"], names[t]);
      }
    }
  };
  client::SseReader sse;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& r) {
    s.http_status = r.status;
    return true;
  };
  // --timeout bounds the whole request (RequestDeadline); what is kept of an answer is bounded too.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (s.http_status != 200) {
      error_body.append(data, std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
      return error_body.size() < kMaxErrorBody;  // enough to name the error
    }
    if (const Status st = sse.feed_data({data, n}, on_data); !st.ok()) {
      error = st.message();
      return false;
    }
    if (text != nullptr && text->size() > kMaxReplyBytes) {
      error = "the reply is over " + std::to_string(kMaxReplyBytes >> 20) + " MiB";
      return false;
    }
    return true;
  };
  const auto res = [&] {
    const RequestDeadline deadline(client, o.timeout_s);
    auto r = client.send(req);
    if (deadline.passed() && error.empty() && !done)
      error = "timed out after " + std::to_string(o.timeout_s) + " s (--timeout)";
    return r;
  }();
  s.e2e_s = since(t0);
  if (!error.empty()) {  // an error event, the receiver stopped the read, or the deadline passed
    s.error = error;
  } else if (s.http_status != 0 && s.http_status != 200) {  // its body perhaps cut at kMaxErrorBody
    const json j = json::parse(error_body, nullptr, false);
    s.error = "HTTP " + std::to_string(s.http_status) + ": " +
              (j.is_object() && j.contains("error") ? message_of(j["error"], error_body) : error_body);
  } else if (!res) {
    s.error = "connection failed: " + httplib::to_string(res.error());
  } else if (!done || !got_first) {
    s.error = "stream ended without [DONE]";
  } else {
    s.ok = true;
  }
  return s;
}

}  // namespace loadgen_detail

namespace {

using namespace loadgen_detail;

// Deterministic ids in [1, vocab): a stream per (purpose, user, round).
std::vector<int32_t> synth_tokens(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint32_t n, uint32_t vocab) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (a << 40) ^ (b << 20) ^ c);
  std::uniform_int_distribution<int32_t> dist(1, int32_t(vocab) - 1);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = dist(rng);
  return out;
}

struct ServerInfo {
  std::string model;
  uint32_t vocab = 0;
};

Result<ServerInfo> query_models(const LoadgenOptions& o) {
  auto c = make_client(o);
  KVTIER_ASSIGN_OR_RETURN(const SmallAnswer res, small_request(*c, o, "GET", "/v1/models"));
  if (res.status != 200)
    return Status::Unavailable("GET /v1/models returned HTTP " + std::to_string(res.status) + ": " + res.body);
  const json j = json::parse(res.body, nullptr, false);
  ServerInfo info;
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) {
    const json& m = j["data"][0];
    if (m.contains("id") && m["id"].is_string()) info.model = m["id"].get<std::string>();
    if (m.contains("kvtier") && m["kvtier"].is_object() && m["kvtier"].contains("vocab_size")) {
      const json& v = m["kvtier"]["vocab_size"];
      if (!v.is_number_unsigned() || v.get<uint64_t>() < 2 || v.get<uint64_t>() > uint64_t(INT32_MAX))
        return Status::InvalidArgument("loadgen: the server reports vocab_size " + v.dump() +
                                       ", not an integer in [2, 2^31): pass --vocab-size");
      info.vocab = v.get<uint32_t>();
    }
  }
  return info;
}

// A RAG request: the system prompt, documents of the pool in random order (reusable segments), a question.
json rag_body(const LoadgenOptions& o, const std::vector<int32_t>& system, std::mt19937_64& rng, uint32_t user,
              uint32_t round, uint32_t vocab) {
  std::vector<uint32_t> order(o.docs_pool);
  for (uint32_t i = 0; i < o.docs_pool; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  json pieces = json::array({{{"tokens", system}, {"reuse", false}}});
  for (uint32_t d = 0; d < o.docs_per_request; ++d)
    pieces.push_back({{"tokens", synth_tokens(o.seed, 5, order[d], 0, o.doc_tokens, vocab)}});
  pieces.push_back({{"tokens", synth_tokens(o.seed, 3, user, round, o.question_tokens, vocab)}, {"reuse", false}});
  return {{"segments", pieces}};
}

}  // namespace

Status LoadgenOptions::validate() const {
  if (users == 0 || rounds == 0) return Status::InvalidArgument("loadgen: --users and --rounds must be at least 1");
  // One thread per user, one sample per user and round.
  if (users > kMaxUsers) return Status::InvalidArgument("loadgen: --users must be at most " + std::to_string(kMaxUsers));
  if (uint64_t(users) * rounds > kMaxRequests)
    return Status::InvalidArgument("loadgen: --users times --rounds must be at most " + std::to_string(kMaxRequests));
  if (!std::isfinite(qps)) return Status::InvalidArgument("loadgen: --qps must be a finite number");
  if (answer_tokens == 0) return Status::InvalidArgument("loadgen: --answer-tokens must be at least 1");
  if (system_prompt_tokens + history_tokens + question_tokens == 0)
    return Status::InvalidArgument("loadgen: the prompt would be empty");
  if (qps < 0 || duration_s < 0) return Status::InvalidArgument("loadgen: --qps and --duration must be >= 0");
  if (vocab_size == 1 || vocab_size > uint32_t(INT32_MAX))
    return Status::InvalidArgument("loadgen: --vocab-size must be in [2, 2^31)");
  if (!(timeout_s > 0 && timeout_s <= kMaxTimeoutSeconds))  // a wait past it overflows the clock's nanoseconds
    return Status::InvalidArgument("loadgen: --timeout must be in (0, " + std::to_string(int64_t(kMaxTimeoutSeconds)) + "] s");
  if (rag && (docs_per_request == 0 || docs_per_request > docs_pool || doc_tokens == 0))
    return Status::InvalidArgument("loadgen: --docs-per-request must be in [1, --docs-pool] and --doc-tokens >= 1");
  if (int(rag) + int(chat) + int(agent) > 1) return Status::InvalidArgument("loadgen: --rag, --chat and --agent are exclusive");
  if (agent && (tools == 0 || tools > 128)) return Status::InvalidArgument("loadgen: --tools must be in [1, 128]");
  if (!(tool_latency_jitter >= 0 && tool_latency_jitter <= 1))
    return Status::InvalidArgument("loadgen: --tool-latency-jitter must be in [0, 1]");
  if ((prefetch || retain_s > 0) && !agent)
    return Status::InvalidArgument("loadgen: --prefetch and --retain-s go with --agent");
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    return Status::InvalidArgument("loadgen: --url must start with http:// or https://");
  return {};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * double(v.size()));
  const size_t idx = rank < 1 ? 0 : std::min(v.size() - 1, size_t(rank) - 1);
  return v[idx];
}

namespace {

// One load run's shared state: each user's thread sends its rounds and records
// each request's sample at its slot (round-major).
class LoadRun {
 public:
  LoadRun(const LoadgenOptions& o, std::string model, uint32_t vocab,
          const std::function<void(size_t, size_t)>& progress)
      : o_(o),
        model_(std::move(model)),
        vocab_(vocab),
        progress_(progress),
        system_(synth_tokens(o.seed, 1, 0, 0, o.system_prompt_tokens, vocab)),
        total_(size_t(o.users) * o.rounds),
        t0_(SteadyClock::now()) {
    result_.samples.resize(total_);
    sent_.assign(total_, 0);
  }

  void user_loop(uint32_t u) {
    if (o_.agent)
      return run_agent_session(
          o_, model_, u, [&](uint32_t r) { return may_send(index(u, r)); },
          [&](uint32_t r, LoadgenSample s) { record(index(u, r), std::move(s)); });
    if (o_.chat) return chat_loop(u);
    if (o_.rag) return rag_loop(u);
    token_loop(u);
  }

  // The samples of the requests sent (none starts once the duration has run out).
  LoadgenResult finish() {
    result_.wall_s = since(t0_);
    std::vector<LoadgenSample> kept;
    for (size_t k = 0; k < total_; ++k)
      if (sent_[k]) kept.push_back(std::move(result_.samples[k]));
    result_.samples = std::move(kept);
    return std::move(result_);
  }

 private:
  size_t index(uint32_t u, uint32_t r) const { return size_t(r) * o_.users + u; }

  // Request k waits for its slot with qps; none starts once the duration has run out.
  bool may_send(size_t k) const {
    if (o_.qps > 0)
      std::this_thread::sleep_until(
          t0_ + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(double(k) / o_.qps)));
    return !(o_.duration_s > 0 && since(t0_) >= o_.duration_s);
  }

  void record(size_t k, LoadgenSample s) {
    std::lock_guard lk(mu_);
    result_.samples[k] = std::move(s);
    sent_[k] = 1;
    ++done_;
    if (progress_) progress_(done_, total_);
  }

  void send(httplib::Client& client, uint32_t u, uint32_t r, json body, std::string* reply = nullptr) {
    LoadgenSample s = send_one(client, o_, model_, std::move(body), reply);
    s.user = u, s.round = r;
    record(index(u, r), std::move(s));
  }

  // Chat messages; each round adds the server's own reply, as a client would.
  void chat_loop(uint32_t u) {
    auto client = make_client(o_);
    json messages =
        json::array({{{"role", "system"}, {"content", synth_text(o_.seed, 1, 0, 0, o_.system_prompt_tokens)}}});
    const std::string own = synth_text(o_.seed, 2, u, 0, o_.history_tokens);
    for (uint32_t r = 0; r < o_.rounds && may_send(index(u, r)); ++r) {
      const std::string question = synth_text(o_.seed, 3, u, r, o_.question_tokens);
      messages.push_back({{"role", "user"}, {"content", r == 0 && !own.empty() ? own + "\n\n" + question : question}});
      std::string reply;
      send(*client, u, r, json{{"messages", messages}}, &reply);
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    }
  }

  void rag_loop(uint32_t u) {
    auto client = make_client(o_);
    std::mt19937_64 rng(o_.seed * 31 + u);
    for (uint32_t r = 0; r < o_.rounds && may_send(index(u, r)); ++r)
      send(*client, u, r, rag_body(o_, system_, rng, u, r, vocab_));
  }

  // Token prompts: system, the user's own history, then each round's question and a synthetic answer.
  void token_loop(uint32_t u) {
    auto client = make_client(o_);
    std::vector<int32_t> prompt = system_;
    const auto own = synth_tokens(o_.seed, 2, u, 0, o_.history_tokens, vocab_);
    prompt.insert(prompt.end(), own.begin(), own.end());
    for (uint32_t r = 0; r < o_.rounds && may_send(index(u, r)); ++r) {
      const auto question = synth_tokens(o_.seed, 3, u, r, o_.question_tokens, vocab_);
      prompt.insert(prompt.end(), question.begin(), question.end());
      send(*client, u, r, json{{"prompt", prompt}});
      const auto answer = synth_tokens(o_.seed, 4, u, r, o_.answer_tokens, vocab_);
      prompt.insert(prompt.end(), answer.begin(), answer.end());
    }
  }

  const LoadgenOptions& o_;
  const std::string model_;
  const uint32_t vocab_;
  const std::function<void(size_t, size_t)>& progress_;
  const std::vector<int32_t> system_;
  const size_t total_;
  const SteadyClock::time_point t0_;
  std::mutex mu_;
  LoadgenResult result_;    // samples at their slots until finish()
  std::vector<char> sent_;  // which slots were sent
  size_t done_ = 0;
};

}  // namespace

Result<LoadgenResult> run_loadgen(const LoadgenOptions& o, const std::function<void(size_t, size_t)>& progress) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  KVTIER_ASSIGN_OR_RETURN(ServerInfo info, query_models(o));
  const uint32_t vocab = o.vocab_size != 0 ? o.vocab_size : (info.vocab != 0 ? info.vocab : 256);
  LoadRun run(o, o.model.empty() ? info.model : o.model, vocab, progress);
  std::vector<std::thread> threads;
  threads.reserve(o.users);
  for (uint32_t u = 0; u < o.users; ++u) threads.emplace_back([&run, u] { run.user_loop(u); });
  for (auto& t : threads) t.join();
  return run.finish();
}

LoadgenSummary summarize(const LoadgenResult& r) {
  LoadgenSummary s;
  s.wall_s = r.wall_s;
  std::vector<double> ttft, e2e;
  uint64_t prompt = 0, cached = 0, blended = 0, output = 0, ideal = 0, ideal_cached = 0;
  for (const auto& x : r.samples) {
    ++s.requests;
    if (!x.ok) {
      ++s.errors;
      if (s.first_error.empty()) s.first_error = x.error;
      continue;
    }
    ttft.push_back(x.ttft_s);
    e2e.push_back(x.e2e_s);
    prompt += x.prompt_tokens;
    cached += x.cached_tokens;
    blended += x.blended_tokens;
    output += x.completion_tokens;
    for (int t = 0; t < 4; ++t) s.cached_by_tier[t] += x.cached_by_tier[t];
    s.tool_call_replies += x.tool_calls;
    s.prefetch_matched += x.prefetch_matched;
    s.prefetch_loading += x.prefetch_loading;
    if (x.ideal_cached_tokens > 0) {
      ideal += x.ideal_cached_tokens;
      ideal_cached += x.cached_tokens;
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return v.empty() ? 0.0 : t / double(v.size());
  };
  s.ttft_mean = mean(ttft), s.ttft_p50 = percentile(ttft, 50), s.ttft_p90 = percentile(ttft, 90),
  s.ttft_p99 = percentile(ttft, 99);
  s.e2e_mean = mean(e2e), s.e2e_p50 = percentile(e2e, 50), s.e2e_p90 = percentile(e2e, 90), s.e2e_p99 = percentile(e2e, 99);
  if (r.wall_s > 0) {
    s.requests_per_s = double(ttft.size()) / r.wall_s;
    s.output_tokens_per_s = double(output) / r.wall_s;
    s.prompt_tokens_per_s = double(prompt) / r.wall_s;
  }
  s.cached_share = prompt ? double(cached) / double(prompt) : 0;
  s.blended_share = prompt ? double(blended) / double(prompt) : 0;
  s.computed_share = prompt ? 1.0 - s.cached_share - s.blended_share : 0;
  s.ideal_share = ideal ? double(ideal_cached) / double(ideal) : 0;
  return s;
}

std::string summary_table(const LoadgenOptions& o, const LoadgenSummary& s) {
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "loadgen: %s, %u users x %u rounds, system %u + history %u + question %u tokens, answer %u tokens%s\n"
                "  requests         %zu (%zu errors) in %.2f s\n"
                "  TTFT (ms)        mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f\n"
                "  e2e latency (ms) mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f\n"
                "  throughput       %.2f req/s  %.1f output tok/s  %.1f prompt tok/s\n"
                "  prompt tokens    %.1f%% exactly cached, %.1f%% blended (approximate), %.1f%% computed\n",
                o.url.c_str(), o.users, o.rounds, o.system_prompt_tokens, o.history_tokens, o.question_tokens,
                o.answer_tokens, o.qps > 0 ? (", qps " + std::to_string(o.qps)).c_str() : ", closed loop", s.requests,
                s.errors, s.wall_s, s.ttft_mean * 1e3, s.ttft_p50 * 1e3, s.ttft_p90 * 1e3, s.ttft_p99 * 1e3,
                s.e2e_mean * 1e3, s.e2e_p50 * 1e3, s.e2e_p90 * 1e3, s.e2e_p99 * 1e3, s.requests_per_s,
                s.output_tokens_per_s, s.prompt_tokens_per_s, s.cached_share * 100, s.blended_share * 100,
                s.computed_share * 100);
  std::string out = buf;
  if (o.agent) {
    std::snprintf(buf, sizeof buf,
                  "  agent            %u tools, tool result %u words after %u ms%s%s\n"
                  "  cached / ideal   %.1f%% (turns after the first: cached tokens over the previous turn's prompt)\n"
                  "  cached by tier   device %llu  host %llu  disk %llu  remote %llu tokens\n"
                  "  tool calls       %zu of %zu replies parsed into tool_calls (the client scripts its own)\n"
                  "  prefetch         %llu tokens found cached, %llu of them read ahead from disk or remote\n",
                  o.tools, o.tool_result_tokens, o.tool_latency_ms, o.prefetch ? ", prefetch" : "",
                  o.retain_s > 0 ? (", retain " + std::to_string(o.retain_s) + " s").c_str() : "",
                  s.ideal_share * 100, (unsigned long long)s.cached_by_tier[0], (unsigned long long)s.cached_by_tier[1],
                  (unsigned long long)s.cached_by_tier[2], (unsigned long long)s.cached_by_tier[3], s.tool_call_replies,
                  s.requests - s.errors, (unsigned long long)s.prefetch_matched, (unsigned long long)s.prefetch_loading);
    out += buf;
  }
  if (!s.first_error.empty()) out += "  first error      " + s.first_error + "\n";
  return out;
}

std::string summary_json(const LoadgenOptions& o, const LoadgenSummary& s) {
  json j = {{"url", o.url},
            {"users", o.users},
            {"rounds", o.rounds},
            {"system_prompt_tokens", o.system_prompt_tokens},
            {"history_tokens", o.history_tokens},
            {"question_tokens", o.question_tokens},
            {"answer_tokens", o.answer_tokens},
            {"qps", o.qps},
            {"seed", o.seed},
            {"requests", s.requests},
            {"errors", s.errors},
            {"wall_s", s.wall_s},
            {"ttft_ms", {{"mean", s.ttft_mean * 1e3}, {"p50", s.ttft_p50 * 1e3}, {"p90", s.ttft_p90 * 1e3}, {"p99", s.ttft_p99 * 1e3}}},
            {"e2e_ms", {{"mean", s.e2e_mean * 1e3}, {"p50", s.e2e_p50 * 1e3}, {"p90", s.e2e_p90 * 1e3}, {"p99", s.e2e_p99 * 1e3}}},
            {"requests_per_s", s.requests_per_s},
            {"output_tokens_per_s", s.output_tokens_per_s},
            {"prompt_tokens_per_s", s.prompt_tokens_per_s},
            {"cached_share", s.cached_share},
            {"blended_share", s.blended_share},
            {"computed_share", s.computed_share}};
  if (o.agent)
    j["agent"] = {{"tools", o.tools},
                  {"tool_result_tokens", o.tool_result_tokens},
                  {"tool_latency_ms", o.tool_latency_ms},
                  {"tool_latency_jitter", o.tool_latency_jitter},
                  {"prefetch", o.prefetch},
                  {"retain_s", o.retain_s},
                  {"ideal_share", s.ideal_share},
                  {"cached_tokens_by_tier",
                   {{"device", s.cached_by_tier[0]}, {"host", s.cached_by_tier[1]}, {"disk", s.cached_by_tier[2]},
                    {"remote", s.cached_by_tier[3]}}},
                  {"tool_call_replies", s.tool_call_replies},
                  {"prefetch_tokens", {{"matched", s.prefetch_matched}, {"loading", s.prefetch_loading}}}};
  if (o.rag)
    j["rag"] = {{"docs_pool", o.docs_pool}, {"docs_per_request", o.docs_per_request}, {"doc_tokens", o.doc_tokens}};
  if (!s.first_error.empty()) j["first_error"] = s.first_error;
  return j.dump();
}

}  // namespace kvtier::server
