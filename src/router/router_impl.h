// Internal to the router's sources: Router::Impl, its backends' state and
// the forwarding functions (router_forward.cc).
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "router/held_index.h"
#include "router/pricing.h"
#include "router/prefix_tracker.h"
#include "router/router.h"
#include "server/guarded_http_server.h"
#include "runtime/runtime.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/chat_prompt.h"
#include "server/client_connection.h"
#include "server/connection_drain.h"

namespace kvtier::router {

// One backend as the router sees it; guarded by Impl::mu.
struct BackendState {
  BackendState(BackendAddress a, size_t max_tracked_pages) : addr(std::move(a)), tracker(max_tracked_pages) {}
  BackendAddress addr;
  bool healthy = false;
  std::string reason = "not probed yet";
  BackendHealth health;
  std::optional<BackendCacheConfig> config;
  uint32_t in_flight = 0;
  PrefixTracker tracker;
  HeldIndex held;                 // what its /v1/cache/events says it holds
  std::optional<uint64_t> events_seq;  // the last event number applied
  bool events_live = false;
  std::string events_reason = "not followed yet";
  uint64_t routed = 0;
  // The predicted prefill of the requests routed here whose answers have not begun: what a new
  // request waits for before its own (decoding ones interleave with it and are not counted).
  double prefill_queue_s = 0;
};

enum class Endpoint : uint8_t { kCompletions, kChat, kPrefetch };

// Counters for /metrics; guarded by Impl::mu.
struct RouterCounters {
  uint64_t routed[3] = {};  // by RouteReason
  uint64_t failovers = 0;   // attempts that found their backend unreachable
  uint64_t unroutable = 0;  // requests answered 503: no backend up
  uint64_t cut_streams = 0; // streams whose backend went away after they began (the client saw them end early)
  uint64_t client_left = 0; // requests whose client hung up before their answer began (the backend's was reset)
  uint64_t busy = 0;        // requests answered 429: max_forwarding() already in flight
  uint64_t matched_pages = 0, request_pages = 0;
  double decide_s = 0;  // time spent rendering, hashing and choosing
  uint64_t decisions = 0;
  // Requests whose backend reported its cached tokens, against what the router predicted.
  uint64_t compared = 0, predicted_cached = 0, actual_cached = 0, cached_abs_error = 0;
};

struct Router::Impl {
  RouterOptions o;
  std::optional<TextCodec> codec;
  std::optional<ChatPrompts> chat;
  std::unique_ptr<server::KeyRing> keys;  // with api_keys_file
  std::string backend_key;
  server::RequestLimits limits;

  mutable std::mutex mu;
  std::vector<BackendState> backends;
  std::optional<BackendCacheConfig> reference;  // the first backend's: others must agree to be routed to
  std::map<std::string, HeldIndex> stores;      // by remote_store: chunks any of its backends put there
  uint64_t rotation = 0;
  RouterCounters counters;
  uint32_t forwarding = 0;  // requests in route() now

  server::GuardedHttpServer http;
  server::ConnectionDrain drain;  // counts the answers being written; closes what is left at the end
  int port = 0;                   // once bound
  std::thread health_thread;
  std::vector<std::thread> event_threads;  // one per backend (cache-aware only)
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::atomic<bool> serving{false};  // serve() is in (or entering) httplib's listen loop

  void install_routes();
  void health_loop();
  void probe_all();
  // Follows backend i's /v1/cache/events into its HeldIndex, resyncing after every break, until stop.
  void events_loop(size_t i);
  bool stopped();
  // Waits up to `d` or until stop; false once stopping.
  bool pause(std::chrono::milliseconds d);
  // Authenticates against the keys file (when given): the tenant, or an error already sent.
  std::optional<std::string> tenant_of(const httplib::Request& req, httplib::Response& res) const;
  bool is_admin(const httplib::Request& req) const;
  // A keyless router's answer to a browser's request from another site (server/http_front.h): true when refused.
  bool refuse_foreign(const httplib::Request& req, httplib::Response& res) const;  // with keys: the request carries the backends' admin key
  // The request's page hashes as the backends would form them (empty when they cannot be known).
  RoutedPrompt page_chain(Endpoint ep, const std::string& body, const std::string& tenant) const;
  // Under mu: what backend b holds of `p` (its events, what was routed there, its shared store), priced.
  Belief believe(const BackendState& b, const RoutedPrompt& p) const;
  // A request to the backends, its answer written to a client that half-closed after sending it too.
  void route(Endpoint ep, const httplib::Request& req, httplib::Response& res);
  void route_to_backend(Endpoint ep, const httplib::Request& req, const std::optional<server::ClientConnection>& from,
                        httplib::Response& res);
  // Under mu.
  std::string health_json() const;
  std::string metrics_text() const;
};

// An OpenAI-shaped error answer.
void send_error(httplib::Response& res, int status, std::string type, std::string code, std::string message);
// The client's headers a backend needs: its key (Authorization, X-Api-Key).
httplib::Headers passed_headers(const httplib::Request& req);

// What a forward attempt came to: an answer was (or is being) relayed, or the backend could not be reached.
enum class Forwarded : uint8_t { kAnswered, kUnreachable };
// How a request is forwarded: streamed or whole, and how long a stream's backend may stay silent
// (a kvtier backend sends a keep-alive comment each second, queued or computing).
struct ForwardLimits {
  bool stream = false;
  int stream_idle_s = 30;
};
// Sends the request to `b` and relays its answer into `res` (a stream chunk by chunk through a
// content provider; `done` runs once the relay is over, whatever its outcome, with the backend's status
// and the answer's body, or a stream's last kTailBytes). A client that hangs up (resets) ends the
// backend's request; `done` gets kClientLeft where nothing was relayed yet.
// The status `done` gets for a stream its backend cut off after it began (it reaches the client cut).
inline constexpr int kCutStream = 0;
// The status `done` gets when the client left before its answer began (nginx's "client closed request").
inline constexpr int kClientLeft = 499;
inline constexpr size_t kTailBytes = 16384;
// `from`: the client's connection (server::ClientConnection), watched while the answer is awaited.
Forwarded forward(const BackendAddress& b, const httplib::Request& req, const std::optional<server::ClientConnection>& from,
                  const ForwardLimits& limits, httplib::Response& res, std::string& unreachable_why,
                  std::function<void(int status, std::string_view tail)> done);
// The cached tokens a backend's answer reports (usage.prompt_tokens_details.cached_tokens), from a
// whole JSON body or the last usage-bearing `data:` line of a stream's tail; nullopt when it says none.
std::optional<uint64_t> reported_cached_tokens(std::string_view body_or_tail);

}  // namespace kvtier::router
