// HttpServer: the OpenAI-compatible HTTP front end of `kvtier serve`.
//
// Endpoints: POST /v1/completions and /v1/chat/completions (JSON or server-sent events), GET
// /v1/models, GET /health, GET /metrics (Prometheus text), GET
// /v1/cache/stats, GET /v1/cache/events (server-sent events of what the cache gains and loses, for a
// router: http_events.cc), POST /v1/cache/flush, POST /v1/cache/prefetch (202: the
// prompt's disk/remote prefix starts loading into host memory); the dashboard: GET /dashboard (the
// page, no key), GET /v1/cache/tree, /v1/cache/tiers and /v1/requests/recent
// (its data, answered from snapshots: they never wait behind a prefill). Connection threads (cpp-httplib's
// pool) parse and validate requests, submit them to the Scheduler and stream
// results back; everything that touches the Runtime goes through
// Scheduler::call(). With keys configured (server/auth.h) every endpoint but
// /health and the dashboard page requires "Authorization: Bearer <key>"
// (401 otherwise); the cache's views, flush and /metrics only the admin's
// (403 for a client's). A request runs in its key's tenant's namespace.
// Requests that could never run (a prompt or prompt + max_tokens beyond the
// context or the device KV pool, a text too long to tokenize) get a 400
// before they are queued (RequestLimits); /v1/models and /health show the
// limits. A client that hangs up cancels its request, streaming or not.
// Thread-safe: bind() and serve() from one thread, stop() from any other.
// The Scheduler is borrowed and must outlive the HttpServer.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/auth.h"
#include "server/chat_api.h"
#include "server/chat_prompt.h"
#include "server/client_connection.h"
#include "server/config.h"
#include "server/connection_drain.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace kvtier::server {

class CacheView;

class HttpServer {
 public:
  // `keys`: the server's keys (server/auth.h); null: read from `config`.
  static Result<std::unique_ptr<HttpServer>> create(const ServerConfig& config, Scheduler* scheduler,
                                                    std::shared_ptr<const KeyRing> keys = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds config.host:config.port (port 0: any free port); returns the port.
  Result<uint16_t> bind();
  // Accepts connections until stop(). Returns an error if listening failed.
  Status serve();
  // Stops accepting; serve() returns once each worker has finished its request (a stream is cut at
  // its next chunk) and let go of its connection: one idle or half sent holds it for httplib's
  // keep-alive or read timeout (5 s, 30 s). shut_down() does not wait on them.
  void stop();
  // The end of serving, after the scheduler's drain: waits up to `bound` for the answers being
  // written (event streams end at the drain), stop()s, then shuts the connections still open, so
  // that serve() returns at once (server/connection_drain.h). Returns how many it shut.
  size_t shut_down(std::chrono::milliseconds bound);

 private:
  enum class Endpoint { kCompletions, kChat };
  struct Generation {
    CompletionRequest request;
    Endpoint endpoint;
    std::string rendered;  // chat: the prompt's text
    // Chat with tools and tool_choice "auto": the functions whose calls are parsed from the reply (empty: none).
    std::vector<std::string> tool_names;
  };

  HttpServer(const ServerConfig& config, Scheduler* scheduler, std::shared_ptr<const KeyRing> keys);
  Status load_chat_template();
  void install_routes();
  // POST /v1/cache/prefetch.
  void install_prefetch_route();
  void install_cache_routes();
  void install_generation_routes();
  // Who sent the request, when it may use an endpoint of `access`; else
  // nullopt with the 401 (no or unknown key) or 403 (not the admin) written.
  enum class Access { kClient, kAdmin };
  std::optional<Principal> authorize(const httplib::Request& req, httplib::Response& res, Access access) const;
  // Text to ids and chat to ids, on the connection's thread (the codec is
  // thread-safe); chat prompts' memo is kept per tenant and salt.
  Tokenizer tokenizer() const;
  ChatPromptBuilder chat_builder(const std::string& tenant) const;
  // GET /dashboard and the JSON it polls (http_dashboard.cc).
  void install_dashboard_routes();
  // GET /v1/cache/events (http_events.cc): one listener's stream, and its next message.
  struct EventStream;
  void install_events_route();
  std::string next_events(EventStream& s);
  // Submits a parsed request and answers it, whole or as server-sent events.
  void respond(const httplib::Request& req, httplib::Response& res, Generation gen);
  // The whole (non-streaming) answer of a submitted request, into `res`.
  void answer_whole(WaitingClient& client, httplib::Response& res, const Generation& gen, RequestState& state,
                    const CompletionMeta& meta);
  // Waits for a whole (non-streaming) result; cancels the request when its client leaves meanwhile.
  RequestState::View wait_watching_client(WaitingClient& client, RequestState& state);
  // `connection`: where a client that half-closed gets the stream httplib will not write to it.
  void stream(httplib::Response& res, std::shared_ptr<const Generation> gen, std::shared_ptr<RequestState> state,
              const CompletionMeta& meta, std::optional<ClientConnection> connection);
  // One streamed answer's state (http_server.cc), and its steps: the events of one wake-up (a comment
  // when idle) with the request's state then; one content chunk; the end of a reply with tool calls;
  // the rest of the stream written past httplib to a client that half-closed (false: it is gone).
  struct StreamJob;
  std::pair<std::string, RequestState::View> stream_step(StreamJob& job);
  std::string stream_chunk(StreamJob& job, const RequestState::View& v, std::optional<std::string_view> finish,
                           bool last);
  std::string stream_tool_call_end(StreamJob& job, const RequestState::View& v);
  bool stream_rest_raw(StreamJob& job, std::string out, RequestState::View v, bool head);

  ServerConfig config_;
  Scheduler* scheduler_;
  std::shared_ptr<const KeyRing> keys_;
  std::string model_name_;
  RequestLimits limits_;
  std::vector<TokenId> blend_separator_;  // --blend-separator's tokens (no BOS); empty: none
  ServerMetrics metrics_;
  std::unique_ptr<ChatPrompts> chat_;
  ToolParser tool_parser_ = ToolParser::kNone;  // --tool-parser, or the one the chat template's format names
  std::vector<TokenId> tool_marker_ids_;        // its markers that are single tokens: shown in replies it parses
  std::shared_ptr<CacheView> view_;  // the dashboard's snapshots
  std::unique_ptr<httplib::Server> http_;
  ConnectionDrain drain_;
  uint16_t port_ = 0;  // once bound
  std::atomic<bool> stop_requested_{false}, serve_entered_{false}, serve_returned_{false};
  std::atomic<uint64_t> next_prefetch_{1};
  std::atomic<uint32_t> event_listeners_{0};
};

// cpp-httplib 0.11 listens with a backlog of 5: a burst of clients connecting
// at once (24 chat users starting together) overflows the accept queue, and
// the kernel drops their SYNs, which the clients retry only after a second.
// Raises the backlog of this process's listening socket on `port` to
// SOMAXCONN (listen() on a listening socket only resizes it); a no-op where
// there is none. Every HTTP front (serve, route) calls it after binding.
void widen_listen_backlog(uint16_t port);

// cpp-httplib's listening socket takes SO_REUSEPORT, so a second server on a port in use started
// without a word and the kernel shared the connections between the two. Every HTTP front sets
// this instead (set_socket_options): SO_REUSEADDR alone, so a port in use fails to bind.
void reuse_address_only(int socket);

}  // namespace kvtier::server
