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
#include "client/small_call.h"

namespace kvtier::server::loadgen_detail {

std::unique_ptr<httplib::Client> make_client(const LoadgenOptions& o);
httplib::Headers auth_headers(const LoadgenOptions& o);

using client::RequestDeadline;
using client::SmallAnswer;

// A small JSON exchange (GET /v1/models, POST /v1/cache/prefetch): within --timeout, its answer
// kept up to 1 MiB. An error only where no answer came (unreachable, timed out, too large).
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
