#include "router/backend.h"

#include "client/small_call.h"

#include <httplib.h>

#include <charconv>
#include <nlohmann/json.hpp>

namespace kvtier::router {

Result<BackendAddress> parse_backend_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("backend '" + std::string(url) + "': " + why + " (expected http://HOST:PORT)");
  };
  if (url.substr(0, kScheme.size()) != kScheme) return bad("not an http:// URL");
  std::string_view rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no host and port");
  if (rest.find('/') != std::string_view::npos) return bad("a path is not supported");
  int port = 0;
  const std::string_view p = rest.substr(colon + 1);
  if (std::from_chars(p.data(), p.data() + p.size(), port).ptr != p.data() + p.size() || port <= 0 || port > 65535)
    return bad("bad port");
  return BackendAddress{std::string(url), std::string(rest.substr(0, colon)), port};
}

namespace {

constexpr size_t kMaxProbeAnswer = size_t(1) << 20;  // /health and /v1/cache/config answers are a few hundred bytes

// The whole exchange within `timeout` (a backend that trickled its answer held every probe of the
// health loop, and the router's start, for as long as it liked), its answer up to kMaxProbeAnswer.
Result<nlohmann::json> get_json(const BackendAddress& b, const std::string& path, const std::string& key, Millis timeout,
                                bool accept_503 = false) {
  httplib::Client c(b.host, b.port);
  const auto secs = timeout.count() / 1000, usecs = (timeout.count() % 1000) * 1000;
  c.set_connection_timeout(secs, usecs);
  c.set_read_timeout(secs, usecs);
  c.set_write_timeout(secs, usecs);
  httplib::Request req;
  req.method = "GET";
  req.path = path;
  if (!key.empty()) req.set_header("Authorization", "Bearer " + key);
  KVTIER_ASSIGN_OR_RETURN(const client::SmallAnswer r, client::small_call(c, std::move(req), timeout.count() / 1000.0,
                                                                        kMaxProbeAnswer, b.url + path));
  if (r.status != 200 && !(accept_503 && r.status == 503))
    return Status::Unavailable(b.url + path + ": HTTP " + std::to_string(r.status));
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption(b.url + path + ": not a JSON object");
  return j;
}

// A non-negative integer field, or an error naming it.
Result<uint32_t> count_field(const nlohmann::json& j, const char* name, const std::string& where, bool required = true) {
  auto it = j.find(name);
  if (it == j.end() && !required) return 0u;
  if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX)
    return Status::Corruption(where + ": '" + name + "' is missing or not a count");
  return it->get<uint32_t>();
}

}  // namespace

Result<PageHash> hash_from_hex(std::string_view hex, const std::string& what) {
  PageHash h;
  auto half = [&](std::string_view digits, uint64_t& out) {
    return digits.size() == 16 && std::from_chars(digits.data(), digits.data() + 16, out, 16).ptr == digits.data() + 16;
  };
  if (hex.size() != 32 || !half(hex.substr(0, 16), h.hi) || !half(hex.substr(16), h.lo))
    return Status::Corruption(what + " is not 32 hex digits");
  return h;
}

Result<BackendHealth> probe_health(const BackendAddress& b, Millis timeout) {
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json j, get_json(b, "/health", "", timeout, true));
  const std::string where = b.url + "/health";
  const auto status = j.find("status");
  if (status == j.end() || !status->is_string()) return Status::Corruption(where + ": no 'status'");
  if (*status != "ok") return Status::Unavailable(where + ": " + status->get<std::string>());
  BackendHealth h;
  KVTIER_ASSIGN_OR_RETURN(h.waiting, count_field(j, "waiting", where));
  KVTIER_ASSIGN_OR_RETURN(h.running, count_field(j, "running", where));
  KVTIER_ASSIGN_OR_RETURN(h.free_device_pages, count_field(j, "free_device_pages", where, false));
  return h;
}

Result<BackendCacheConfig> probe_cache_config(const BackendAddress& b, const std::string& key, Millis timeout) {
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json j, get_json(b, "/v1/cache/config", key, timeout));
  const std::string where = b.url + "/v1/cache/config";
  BackendCacheConfig c;
  const auto model = j.find("model"), fp = j.find("model_fingerprint"), hash = j.find("hash");
  if (model == j.end() || !model->is_string() || fp == j.end() || !fp->is_string() || hash == j.end() ||
      !hash->is_string())
    return Status::Corruption(where + ": 'model', 'model_fingerprint' or 'hash' missing");
  c.model = model->get<std::string>();
  KVTIER_ASSIGN_OR_RETURN(c.fingerprint, hash_from_hex(fp->get<std::string>(), where + ": 'model_fingerprint'"));
  KVTIER_ASSIGN_OR_RETURN(c.hash, parse_hash_algo(hash->get<std::string>()));
  KVTIER_ASSIGN_OR_RETURN(c.page_tokens, count_field(j, "page_tokens", where));
  KVTIER_ASSIGN_OR_RETURN(c.chunk_pages, count_field(j, "chunk_pages", where));
  if (c.page_tokens == 0) return Status::Corruption(where + ": page_tokens is 0");
  if (auto e = j.find("cache_enabled"); e != j.end() && e->is_boolean()) c.cache_enabled = e->get<bool>();
  if (auto p = j.find("planner"); p != j.end() && !p->is_null()) {
    auto planner = Planner::from_json(p->dump());
    if (!planner.ok()) return Status::Corruption(where + ": 'planner': " + planner.status().message());
    c.planner = std::make_shared<const Planner>(std::move(*planner));
  }
  if (auto r = j.find("remote_store"); r != j.end() && !r->is_null()) {
    if (!r->is_string()) return Status::Corruption(where + ": 'remote_store' is not a string");
    c.remote_store = r->get<std::string>();
  }
  return c;
}

}  // namespace kvtier::router
