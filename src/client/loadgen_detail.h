// The load generator's pieces shared by its workloads (internal to src/client).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "client/loadgen.h"

namespace kvtier::server::loadgen_detail {

std::unique_ptr<httplib::Client> make_client(const LoadgenOptions& o);
httplib::Headers auth_headers(const LoadgenOptions& o);

// Stops the request `client` has in flight once `seconds` have passed, from a thread of its own:
// httplib's timeouts bound each read, so a server that trickles header lines or body bytes never
// trips them. Destroying it ends the wait.
class RequestDeadline {
 public:
  RequestDeadline(httplib::Client& client, double seconds);
  ~RequestDeadline();
  RequestDeadline(const RequestDeadline&) = delete;
  RequestDeadline& operator=(const RequestDeadline&) = delete;
  bool passed() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, passed_ = false;
  std::thread thread_;  // last: it uses the members above
};

// A small JSON exchange (GET /v1/models, POST /v1/cache/prefetch): within --timeout, its answer
// kept up to 1 MiB. An error only where no answer came (unreachable, timed out, too large).
struct SmallAnswer {
  int status = 0;
  std::string body;
};
Result<SmallAnswer> small_request(httplib::Client& client, const LoadgenOptions& o, const std::string& method,
                                  const std::string& path, const std::string& body = {});
// Deterministic prose of `n` words: a stream per (purpose, user, round).
std::string synth_text(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint32_t n);
// One streamed request (a completion; a chat completion with o.chat or
// o.agent); `text` receives what was generated.
LoadgenSample send_one(httplib::Client& client, const LoadgenOptions& o, const std::string& model,
                       nlohmann::json body, std::string* text = nullptr);
// A count in a server's JSON answer (usage, tiers, a prefetch's): `fallback`
// where it is absent or not a count, so a misbehaving server gets its sample
// counted wrong, never the client stopped by an exception.
uint32_t count_of(const nlohmann::json& obj, const char* key, uint32_t fallback = 0);
// One agent session (loadgen_agent.cc): `may_send(turn)` says whether the
// turn may start now (waiting for its slot with qps), `record` keeps each
// turn's sample.
void run_agent_session(const LoadgenOptions& o, const std::string& model, uint32_t session,
                       const std::function<bool(uint32_t turn)>& may_send,
                       const std::function<void(uint32_t turn, LoadgenSample)>& record);

}  // namespace kvtier::server::loadgen_detail
