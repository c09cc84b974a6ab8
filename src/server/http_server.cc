#include "server/http_server.h"

#include "common/file_text.h"
#include "common/json_text.h"
#include "common/strings.h"
#include "server/stats_render.h"

#include <httplib.h>

#include <iterator>

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/cache_view.h"
#include "server/chat_api.h"
#include "server/client_connection.h"
#include "server/http_front.h"
#include "server/guarded_http_server.h"
#include "server/http_server_detail.h"

namespace kvtier::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kJson = "application/json";
// How often a handler waiting for a whole result looks whether its client is still there.
constexpr auto kClientCheckInterval = 100ms;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Unique for the process's life: the whole counter (its low 24 bits alone repeated every 16.7 M
// requests, and tool-call ids are made from these).
std::string new_completion_id() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t boot = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[48];
  std::snprintf(buf, sizeof buf, "cmpl-%012llx%06llx", static_cast<unsigned long long>(boot & 0xffffffffffffull),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                                 "/v1/cache/stats", "/v1/cache/flush", "/dashboard", "/v1/cache/tree",
                                 "/v1/cache/tiers", "/v1/requests/recent", "/v1/cache/prefetch"};
  for (const char* k : kKnown)
    if (path == k) return k;
  return "other";
}

}  // namespace

// Finds our socket by its port.
void reuse_address_only(int socket) {
  const int yes = 1;
  setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

void widen_listen_backlog(uint16_t port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    uint16_t p = 0;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    else if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(int(fd), SOMAXCONN);
  }
  closedir(dir);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (!e.retry) res.set_header("x-should-retry", "false");
  if (e.http_status == 429) res.set_header("Retry-After", "1");  // a full queue: try again in a moment
  res.set_content(error_json(e), kJson);
}

void refuse_draining(httplib::Response& res) {
  send_error(res, draining_error());
  res.set_header(kDrainingHeader, "1");
}


std::function<std::string(TokenId)> token_text(const TextCodec& codec) {
  return [&codec](TokenId id) { return codec.detokenize(std::span(&id, 1)); };
}

std::string memo_scope(std::string_view tenant, std::string_view salt) {
  std::string s(tenant);
  s += '\0';
  s += salt;
  return s;
}

HttpServer::HttpServer(const ServerConfig& config, Scheduler* scheduler, std::shared_ptr<const KeyRing> keys)
    : config_(config), scheduler_(scheduler), keys_(std::move(keys)), http_(std::make_unique<GuardedHttpServer>()) {
  model_name_ = config.served_model_name.empty() ? config.runtime.model : config.served_model_name;
  RequestLimits configured;
  configured.max_prompt_tokens = config.limits.max_prompt_tokens;
  configured.max_tokens = config.limits.max_tokens;
  configured.default_max_tokens = config.limits.default_max_tokens;
  limits_ = derive_limits(configured, scheduler->model());
  if (config.runtime.blend.enabled && !config.blend_separator.empty()) {  // applies only when blending is on
    // As it reads inside a prompt: after ordinary text (a SentencePiece vocabulary gave it a space
    // prefix, which the prompt's separators lack: none was ever found, and the whole prompt was one
    // segment, blended against itself).
    const TextCodec& text = scheduler->model().text;
    const std::vector<TokenId> word = text.tokenize("a", {.add_bos = false});
    const std::optional<TokenId> after = word.empty() ? std::nullopt : std::optional<TokenId>(word.back());
    blend_separator_ = text.tokenize(config.blend_separator, {.add_bos = false, .parse_special = true, .follows = after});
  }
}

HttpServer::~HttpServer() { stop(); }

// The --chat-template file, or the model's own template. A model template we
// cannot parse leaves /v1/completions working; chat requests then get its error.
Status HttpServer::load_chat_template() {
  const TextCodec& codec = scheduler_->model().text;
  std::string source = codec.chat_template;
  if (!config_.chat_template_file.empty()) {  // a regular file of at most 1 MiB (not a directory, a FIFO, /dev/zero)
    KVTIER_ASSIGN_OR_RETURN(source, read_file(config_.chat_template_file, "chat template"));
  }
  auto prompts = ChatPrompts::create(codec, source);
  if (!prompts.ok() && !config_.chat_template_file.empty()) return prompts.status();
  tool_parser_ = config_.tool_parser.value_or(tool_parser_for_template(source));
  for (const std::string_view marker : tool_call_markers(tool_parser_)) {  // those the vocabulary has as one token
    const std::vector<TokenId> ids = codec.tokenize(marker, {.add_bos = false, .parse_special = true});
    if (ids.size() == 1) tool_marker_ids_.push_back(ids[0]);
  }
  chat_ = std::make_unique<ChatPrompts>(prompts.ok() ? std::move(prompts).value()
                                                     : ChatPrompts::unavailable(codec, prompts.status().message()));
  chat_->set_splicing(config_.reply_splice);
  return Status::Ok();
}

Result<std::unique_ptr<HttpServer>> HttpServer::create(const ServerConfig& config, Scheduler* scheduler,
                                                       std::shared_ptr<const KeyRing> keys) {
  KVTIER_RETURN_IF_ERROR(config.validate());
  if (scheduler == nullptr) return Status::InvalidArgument("http server: scheduler is null");
  if (keys == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(keys, KeyRing::create(config));
  }
  auto s = std::unique_ptr<HttpServer>(new HttpServer(config, scheduler, std::move(keys)));
  KVTIER_RETURN_IF_ERROR(s->load_chat_template());
  auto post = [scheduler](std::function<void(Runtime&)> fn) { return scheduler->post(std::move(fn)); };
  KVTIER_ASSIGN_OR_RETURN(s->view_, CacheView::create(CacheViewOptions{}, post));
  s->install_routes();
  return s;
}

Result<uint16_t> HttpServer::bind() {
  http_->set_socket_options(reuse_address_only);
  if (config_.port == 0) {
    const int port = http_->bind_to_any_port(config_.host);
    if (port <= 0) return Status::Unavailable("cannot listen on " + config_.host + " (any port)");
    widen_listen_backlog(uint16_t(port));
    return port_ = uint16_t(port);
  }
  if (!http_->bind_to_port(config_.host, config_.port))
    return Status::Unavailable("cannot listen on " + config_.host + ":" + std::to_string(config_.port) +
                               " (address in use or not local?)");
  widen_listen_backlog(config_.port);
  return port_ = config_.port;
}

Status HttpServer::serve() {
  serve_entered_ = true;
  // stop() may have run before we got here (a signal right after startup).
  if (stop_requested_) {
    serve_returned_ = true;
    return {};
  }
  const bool ok = http_->listen_after_bind();
  serve_returned_ = true;
  if (!ok && !stop_requested_) return Status::Unavailable("http server stopped with an error");
  return {};
}

void HttpServer::stop() {
  // httplib's stop() does nothing until listen_after_bind() has marked the
  // server running, so a stop racing with serve()'s start must wait for
  // that moment (or for serve() to notice stop_requested_ first).
  stop_requested_ = true;
  while (serve_entered_ && !serve_returned_ && !http_->is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (http_->is_running()) http_->stop();
}

size_t HttpServer::shut_down(std::chrono::milliseconds bound) {
  drain_.wait_none(bound);
  stop();
  return port_ == 0 ? 0 : shut_connections_on(port_);
}

std::optional<Principal> HttpServer::authorize(const httplib::Request& req, httplib::Response& res, Access access) const {
  const std::string given = request_key(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"));
  std::optional<Principal> who = keys_->authenticate(given);
  ApiError e;
  if (const std::string why = keys_->mode() == AuthMode::kNone ? foreign_site_reason(req) : std::string(); !why.empty()) {
    e.http_status = 403;
    e.type = "permission_error";
    e.code = "foreign_site";
    e.message = why;
  } else if (!who) {
    e.http_status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    e.message = given.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key";
  } else if (access == Access::kAdmin && !who->admin) {
    e.http_status = 403;
    e.type = "permission_error";
    e.code = "admin_only";
    e.message = req.path + " needs the admin key";
  } else {
    return who;
  }
  send_error(res, e);
  return std::nullopt;
}

// The cache's own endpoints: its config (any key), statistics and flush (admin).
void HttpServer::install_cache_routes() {
  httplib::Server& s = *http_;
  s.Get("/v1/cache/config", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kClient)) return;
    const RuntimeOptions& o = config_.runtime;
    const ModelInfo& m = scheduler_->model();
    json j{{"model", model_name_},
           {"model_fingerprint", m.fingerprint.to_hex()},
           {"page_tokens", o.page_tokens},
           {"chunk_pages", o.chunk_pages},
           {"hash", hash_algo_name(o.hash)},
           {"cache_enabled", o.cache_enabled},
           {"remote_store", m.remote_store.empty() ? json(nullptr) : json(m.remote_store)}};
    if (m.planner) j["planner"] = json::parse(m.planner->to_json());
    res.set_content(json_text(j), kJson);
  });

  s.Get("/v1/cache/stats", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    auto rt = scheduler_->call([](Runtime& r) { return r.stats(); });
    if (!rt.ok()) return send_error(res, error_from_status(rt.status()));
    const auto c = scheduler_->counts();
    res.set_content(json_text(json{{"server", {{"waiting", c.waiting}, {"running", c.running}}},
                                   {"cache", runtime_stats_json(*rt)},
                                   {"config", config_json(config_)}}),
                    kJson);
  });

  s.Post("/v1/cache/flush", drain_.counted([this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    const Status st = scheduler_->call([](Runtime& r) { return r.flush(); });
    if (st.code() == StatusCode::kUnavailable) return send_error(res, error_from_status(st));
    if (!st.ok()) return send_error(res, error_from_status(Status::Internal("flush failed: " + st.to_string())));
    res.set_content(json{{"flushed", true}}.dump(), kJson);
  }));
}

// The OpenAI endpoints that generate: completions and chat completions.
void HttpServer::install_generation_routes() {
  httplib::Server& s = *http_;
  s.Post("/v1/completions", drain_.counted([this](const httplib::Request& req, httplib::Response& res) {
    const auto who = authorize(req, res, Access::kClient);
    if (!who) return;
    if (scheduler_->draining()) return refuse_draining(res);
    // Text prompts are tokenized here, on the connection's thread: a long
    // prompt never holds up the scheduler.
    auto parsed = parse_completion_request(req.body, limits_, tokenizer());
    if (auto* err = std::get_if<ApiError>(&parsed)) return send_error(res, *err);
    CompletionRequest& r = std::get<CompletionRequest>(parsed);
    metrics_.record_ignored_fields(r.ignored_fields);
    r.tenant = who->tenant;
    respond(req, res, {std::move(r), Endpoint::kCompletions, {}});
  }));

  s.Post("/v1/chat/completions", drain_.counted([this](const httplib::Request& req, httplib::Response& res) {
    const auto who = authorize(req, res, Access::kClient);
    if (!who) return;
    if (scheduler_->draining()) return refuse_draining(res);
    // Rendered and tokenized here, on the connection's thread; a text too long to fit is not tokenized.
    auto parsed = parse_chat_request(req.body, limits_, chat_builder(who->tenant));
    if (auto* err = std::get_if<ApiError>(&parsed)) return send_error(res, *err);
    ChatRequest& chat = std::get<ChatRequest>(parsed);
    metrics_.record_ignored_fields(chat.completion.ignored_fields);
    chat.completion.tenant = who->tenant;
    // Cacheable parts are tokenized as pieces (which may split what the whole text tokenizes as) only
    // where the request may blend: the server allows it and the request did not say no.
    if (!chat.segment_texts.empty() && config_.runtime.blend.enabled && chat.completion.blend != false) {
      if (auto seg = chat_->segmented(chat.rendered, chat.segment_texts, chat.completion.prompt)) {
        chat.completion.prompt = std::move(seg->tokens);
        chat.completion.segments = std::move(seg->segments);
        if (auto err = finish_request(chat.completion, limits_)) return send_error(res, *err);
      }
    }
    if (!chat.tool_names.empty()) chat.completion.shown_specials = tool_marker_ids_;
    respond(req, res, {std::move(chat.completion), Endpoint::kChat, std::move(chat.rendered), std::move(chat.tool_names)});
  }));
}

void HttpServer::install_routes() {
  httplib::Server& s = *http_;
  const uint32_t threads = config_.connection_threads();
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  install_body_limit_and_errors(s, config_.limits.max_body_bytes);
  s.set_read_timeout(30, 0);
  s.set_write_timeout(30, 0);
  s.set_keep_alive_max_count(1000);
  // A body comes only with a valid key: one without was read whole (up to --max-body) before its 401.
  drain_.install(
      s, [this](const httplib::Request& req, const httplib::Response& res) { metrics_.record_response(endpoint_label(req.path), res.status); },
      [this](const httplib::Request& req, httplib::Response& res) { return !authorize(req, res, Access::kClient); });
  s.set_post_routing_handler(answer_half_closed_client);  // a 400, 429 or 503 as well as a 200
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = "internal error";
    send_error(res, e);
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const auto c = scheduler_->counts();
    const bool draining = scheduler_->draining();
    res.status = draining ? 503 : 200;
    json body{{"status", draining ? "shutting_down" : "ok"},
              {"model", model_name_},
              {"waiting", c.waiting},
              {"running", c.running},
              {"free_device_pages", c.free_device_pages},
              {"max_prompt_tokens", max_prompt_tokens(limits_)},
              {"max_kv_tokens", limits_.max_kv_tokens},
              {"auth", auth_mode_name(keys_->mode())}};
    if (!config_.runtime.remote_url.empty()) body["remote_authenticated"] = has_tier_secret(config_.runtime);
    res.set_content(json_text(body), kJson);
  });

  // What a router needs to hash prompts into the same pages as this instance (docs/SCALING.md).
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kClient)) return;
    res.set_content(models_json(model_name_, scheduler_->model(), limits_, unix_now()), kJson);
  });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kClient)) return;
    if (req.matches[1] != model_name_) {
      ApiError e = bad_request("no model named " + kvtier::quoted(req.matches[1].str()) + " (this server serves " +
                                   kvtier::quoted(model_name_) + ")",
                               "model", "model_not_found");
      e.http_status = 404;
      return send_error(res, e);
    }
    res.set_content(models_json(model_name_, scheduler_->model(), limits_, unix_now(), /*one=*/true), kJson);
  });

  // /metrics needs the admin key unless the operator made it public (--metrics-public).
  s.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!config_.metrics_public && !authorize(req, res, Access::kAdmin)) return;
    const auto c = scheduler_->counts();
    std::string text = metrics_.render({c.waiting, c.running, scheduler_->draining()});
    auto rt = scheduler_->call([](Runtime& r) { return r.stats(); });
    if (rt.ok()) append_prometheus_text(text, runtime_metrics_text(*rt));
    else text += "# the cache's series are missing: " + rt.status().to_string() + "\n";
    text += "# HELP kvtier_chat_reply_ids_reused_total Chat prompts that reuse an earlier reply's own token ids.\n"
            "# TYPE kvtier_chat_reply_ids_reused_total counter\nkvtier_chat_reply_ids_reused_total " +
            std::to_string(chat_->spliced()) + "\n";
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });

  install_cache_routes();
  install_dashboard_routes();
  install_prefetch_route();
  install_events_route();
  install_generation_routes();
}

Tokenizer HttpServer::tokenizer() const {
  return [this](std::string_view text, const text::EncodeOptions& options) {
    return scheduler_->model().text.tokenize(text, options);
  };
}

ChatPromptBuilder HttpServer::chat_builder(const std::string& tenant) const {
  return [this, tenant](const text::ChatInput& chat, std::string_view salt, std::string& rendered) {
    const size_t max_bytes = limits_.max_prompt_bytes == 0 ? SIZE_MAX : size_t(limits_.max_prompt_bytes);
    return chat_->build(chat, rendered, max_bytes, memo_scope(tenant, salt));
  };
}

namespace {

// When a prefetch that should be ready in `ready_in_ms` reads ahead again: a
// prefix just used sits on the device when an agent's tool starts, so the
// read-ahead then finds nothing to do; what sends it down is the other
// sessions' turns while the tool runs. So it runs again before the deadline,
// by twice the longest its read-ahead can take (`read_ahead_s`, the planner's
// slowest lower tier) plus kReadAheadSlackMs (the call waits for the
// scheduler's current step, a prefill perhaps), and no earlier, leaving the
// traffic in between as little time as possible to evict it again. Nullopt:
// no time for a second one.
constexpr double kReadAheadSlackMs = 100;
std::optional<std::chrono::milliseconds> read_ahead_again_in(uint32_t ready_in_ms, double read_ahead_s) {
  const double at = double(ready_in_ms) - 2e3 * read_ahead_s - kReadAheadSlackMs;
  if (at < 1) return std::nullopt;
  return std::chrono::milliseconds(int64_t(at));
}

// How long a read-ahead `lead_ms` before the client's deadline holds what it
// finds and lifts on the host (KVCache::prefetch's hold, a retention hint
// under --max-retained-share like any other): until the request it is for
// finds it, or at most until the deadline and kHoldGraceMs past it for a
// client that comes late or a request that queues. Kept past its request
// (the session's tool then runs again), a hold counted against the retained
// share until its time ended, and the oldest hold in force, the one whose
// turn came next, yielded for the next read-ahead's.
constexpr double kHoldGraceMs = 2000;
RetainHint deadline_hold(double lead_ms) {
  return RetainHint{UINT32_MAX, uint32_t(std::ceil((std::max(0.0, lead_ms) + kHoldGraceMs) / 1e3)), true};
}

}  // namespace

// The body of a chat or completions request (messages + tools +
// chat_template_kwargs, or prompt; cache_salt) and "ready_in_ms", validated as
// that endpoint would. The prompt's disk/remote prefix starts loading into
// host memory on the scheduler's next turn, and again shortly before
// ready_in_ms (read_ahead_again_in); a request for it that arrives meanwhile
// waits for those reads instead of issuing its own (KVCache::prefetch).
void HttpServer::install_prefetch_route() {
  http_->Post("/v1/cache/prefetch", drain_.counted([this](const httplib::Request& req, httplib::Response& res) {
    const auto who = authorize(req, res, Access::kClient);
    if (!who) return;
    if (scheduler_->draining()) return refuse_draining(res);
    ApiError error;
    auto doc = parse_json_object(req.body, error);
    if (!doc.ok()) return send_error(res, error);
    std::variant<CompletionRequest, ApiError> parsed = CompletionRequest{};
    if (doc->contains("messages")) {
      auto chat = parse_chat_request(req.body, limits_, chat_builder(who->tenant));
      if (auto* err = std::get_if<ApiError>(&chat)) return send_error(res, *err);
      parsed = std::move(std::get<ChatRequest>(chat).completion);
    } else {
      parsed = parse_completion_request(req.body, limits_, tokenizer());
    }
    if (auto* err = std::get_if<ApiError>(&parsed)) return send_error(res, *err);
    const auto ready_in = read_prefetch_ready_ms(*doc);
    if (auto* err = std::get_if<ApiError>(&ready_in)) return send_error(res, *err);
    CompletionRequest& r = std::get<CompletionRequest>(parsed);
    r.tenant = who->tenant;
    const Planner* planner = scheduler_->model().planner.get();
    const double read_ahead_s = planner ? planner->read_ahead_seconds(r.prompt.size()) : 0;
    const uint32_t ready_ms = std::get<uint32_t>(ready_in);
    const auto again = read_ahead_again_in(ready_ms, read_ahead_s);
    // The read-ahead before the deadline holds what it lifts: this call when there is no second one.
    if (!again && ready_ms > 0) r.retain.push_back(deadline_hold(ready_ms));
    auto called = scheduler_->call([&r](Runtime& rt) { return rt.prefetch(r); });
    if (!called.ok()) return send_error(res, error_from_status(called.status()));
    const Result<Runtime::PrefetchReport>& started = *called;
    if (!started.ok()) return send_error(res, error_from_status(started.status()));
    json answer{{"prefetch_id", "pf-" + std::to_string(next_prefetch_.fetch_add(1))},
                {"tokens_matched", started->cached_tokens},
                {"tokens_loading", started->loading_tokens},
                {"tokens_to_device", started->promoting_tokens}};
    if (again) {
      PromptRequest later = r;
      later.retain.push_back(deadline_hold(double(ready_ms) - double(again->count())));
      // Best effort: the read-ahead above is under way either way, so a full timer table (or a
      // stopping scheduler) costs only the second read, and the answer says so by its absence.
      if (scheduler_->post_after(*again, [p = std::move(later)](Runtime& rt) { (void)rt.prefetch(p); }).ok())
        answer["again_in_ms"] = again->count();
    }
    res.status = 202;
    res.set_content(json_text(answer), kJson);
  }));
}

RequestState::View HttpServer::wait_watching_client(WaitingClient& client, RequestState& state) {
  for (;;) {
    if (auto v = state.wait_done(kClientCheckInterval)) return *std::move(v);
    if (client.left()) {
      if (state.cancel()) metrics_.record_client_disconnect();
      return state.wait_done();  // the scheduler ends it at its next step
    }
  }
}

void HttpServer::respond(const httplib::Request& req, httplib::Response& res, Generation gen) {
  const CompletionRequest& creq = gen.request;
  GenerationRequest g = creq;  // the scheduler's part of the request
  // Segments ask to blend; "kvtier": {"blend": true} asks for the separator's; false never blends.
  if (creq.blend == false) g.segments.clear();
  if (creq.blend == true && g.segments.empty()) g.segments = segments_between(g.prompt, blend_separator_);
  // Found before the request is queued, while the client is surely there (a reset socket has no peer to match).
  const auto connection = ClientConnection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  auto submitted = scheduler_->submit(std::move(g));
  if (!submitted.ok() && submitted.status().is(StatusCode::kUnavailable) && scheduler_->draining())
    return refuse_draining(res);  // it began draining since the route's check
  if (!submitted.ok()) return send_error(res, error_from_status(submitted.status()));
  std::shared_ptr<RequestState> state = std::move(submitted).value();
  const bool chat = gen.endpoint == Endpoint::kChat;
  CompletionMeta meta{(chat ? "chat" : "") + new_completion_id(), unix_now(), model_name_};
  if (creq.stream) return stream(res, std::make_shared<Generation>(std::move(gen)), std::move(state), meta, connection);
  WaitingClient client(connection, req.version == "HTTP/1.1");
  answer_whole(client, res, gen, *state, meta);  // a half-closed client's: answer_half_closed_client
}

void HttpServer::answer_whole(WaitingClient& client, httplib::Response& res, const Generation& gen, RequestState& state,
                              const CompletionMeta& meta) {
  const CompletionRequest& creq = gen.request;
  const bool chat = gen.endpoint == Endpoint::kChat;
  RequestState::View v = wait_watching_client(client, state);
  metrics_.record_completion(v.usage, v.error);
  if (!v.error.ok()) return send_error(res, error_from_status(v.error));
  const TextCodec& codec = scheduler_->model().text;
  CompletionDetail detail{creq.logprobs, creq.return_token_ids, {}, &v.tokens, 0, token_text(codec), creq.tokens_as_ids};
  if (chat) {
    chat_->remember(gen.rendered, v.delta, gen.request.prompt, v.tokens.ids,
                    memo_scope(gen.request.tenant, gen.request.cache_salt));
    ReasoningSplit split{{}, v.delta};
    if (config_.reasoning_parser == ReasoningParser::kThink)
      split = split_reasoning(v.delta, prompt_opens_reasoning(gen.rendered));
    ParsedReply reply = parse_tool_calls(tool_parser_, split.content, gen.tool_names);
    reply.reasoning = std::move(split.reasoning);
    return res.set_content(chat_completion_json(meta, reply, v.finish_reason, v.usage, &detail), kJson);
  }
  // echo: the prompt as the model's tokens spell it, then the completion.
  const std::string text = creq.echo ? codec.detokenize(creq.prompt) + v.delta : v.delta;
  if (creq.echo) detail.prompt = creq.prompt;
  res.set_content(completion_json(meta, text, v.finish_reason, v.usage, &detail), kJson);
}

}  // namespace kvtier::server
