// GET /v1/cache/events: what this instance's cache gains and loses, as
// server-sent events (docs/SERVER.md, tiers/kv_events.h), for a router that
// keeps an index of every instance.
//
// A first connection, or one whose `?since=SEQ` is no longer in the log (the
// listener fell behind the log's window, or nobody listened for a while),
// gets `event: snapshot` first: every page hash on the device and the host
// and every chunk hash on disk, with the log's number then. After it, `event:
// kv` messages carry the events numbered after the last message, batched
// (everything since the previous message, at most kMaxBatch events). Every message's `id:`
// is its number, so a client that reconnects with since=that id misses
// nothing. Each open stream holds a connection thread: at most
// ServerConfig::max_event_listeners() may follow events at once (429 past it).
#include <httplib.h>

#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "common/json_text.h"
#include "server/http_server_detail.h"

namespace kvtier::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr size_t kMaxBatch = 4096;          // events in one message
constexpr auto kWake = 200ms;               // the longest a listener waits for news before looking again
constexpr int kIdleWakesPerKeepAlive = 10;  // a comment after this many idle wake-ups (a gone client is noticed)

json hashes_json(const std::vector<PageHash>& hashes) {
  json a = json::array();
  for (const PageHash& h : hashes) a.push_back(h.to_hex());
  return a;
}

// `event: NAME` with `id: seq` and one data line.
std::string sse_message(std::string_view name, uint64_t seq, const json& data) {
  return "id: " + std::to_string(seq) + "\nevent: " + std::string(name) + "\ndata: " + json_text(data) + "\n\n";
}

std::string snapshot_message(const KvSnapshot& s) {
  const json tiers{{"device", hashes_json(s.device)}, {"host", hashes_json(s.host)}, {"disk", hashes_json(s.disk)}};
  return sse_message("snapshot", s.seq, json{{"seq", s.seq}, {"tiers", tiers}});
}

// Consecutive events of the same kind, tier, origin and unit share one record.
std::string kv_message(uint64_t seq, const std::vector<KvEvent>& events) {
  json records = json::array();
  const KvEvent* head = nullptr;
  for (const KvEvent& e : events) {
    if (!head || e.kind != head->kind || e.tier != head->tier || e.from != head->from || e.unit != head->unit) {
      head = &e;
      json r{{"kind", kv_event_kind_name(e.kind)}, {"tier", tier_name(e.tier)}, {"unit", kv_event_unit_name(e.unit)},
             {"hashes", json::array()}};
      if (e.kind == KvEventKind::kMoved) r["from"] = tier_name(e.from);
      records.push_back(std::move(r));
    }
    if (e.kind != KvEventKind::kCleared) records.back()["hashes"].push_back(e.hash.to_hex());
  }
  return sse_message("kv", seq, json{{"seq", seq}, {"events", std::move(records)}});
}

}  // namespace

// One listener: subscribed for as long as its stream is open.
struct HttpServer::EventStream {
  explicit EventStream(std::shared_ptr<KvEventLog> l) : log(std::move(l)), subscription(*log) {}
  std::shared_ptr<KvEventLog> log;
  KvEventLog::Subscription subscription;
  uint64_t last = 0;  // the number of the last event sent
  bool need_snapshot = true;
  int idle_wakes = 0;
  std::vector<KvEvent> batch;
};

void HttpServer::install_events_route() {
  http_->Get("/v1/cache/events", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorize(req, res, Access::kAdmin)) return;
    const std::string key = request_key(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key"));
    std::optional<uint64_t> since;
    if (req.has_param("since")) {
      const std::string v = req.get_param_value("since");
      uint64_t n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size())
        return send_error(res, bad_request("since must be a sequence number (a message's id)", "since"));
      since = n;
    }
    auto log = scheduler_->call([](Runtime& r) { return r.cache_events(); });
    if (!log.ok()) return send_error(res, error_from_status(log.status()));
    if (*log == nullptr) return send_error(res, bad_request("this server runs without a cache", {}, "no_cache"));
    if (event_listeners_.fetch_add(1) >= config_.max_event_listeners()) {
      --event_listeners_;
      ApiError e = error_from_status(Status::Busy("too many event listeners (each holds a connection thread)"));
      e.code = "too_many_listeners";
      return send_error(res, e);
    }
    auto stream = std::make_shared<EventStream>(std::move(*log));  // subscribed from here on: nothing is lost
    if (since) {
      uint64_t last = 0;
      stream->need_snapshot = !stream->log->read_since(*since, 0, stream->batch, last);
      stream->last = *since;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, key](size_t, httplib::DataSink& sink) {
          // The key is asked again at each message: one revoked or rotated (SIGHUP) went on
          // receiving every tenant's page hashes on the stream it had opened.
          const std::optional<Principal> who = keys_->authenticate(key);
          if (stop_requested_ || scheduler_->draining() || !who || !who->admin) {  // a shut_down() waits for it
            sink.done();
            return true;
          }
          const std::string out = next_events(*stream);
          return out.empty() || sink.write(out.data(), out.size());
        },
        [this](bool) { --event_listeners_; });
  });
}

// The next message of a listener's stream (empty: nothing yet).
std::string HttpServer::next_events(EventStream& s) {
  if (s.need_snapshot) {
    auto snap = scheduler_->call([](Runtime& r) { return r.cache_event_snapshot(); });
    if (!snap.ok()) return {};  // stopping: the next call ends the stream
    s.need_snapshot = false;
    s.last = snap->seq;
    return snapshot_message(*snap);
  }
  // The index's events reach the log on the scheduler's thread (every cache call publishes them too).
  (void)scheduler_->post([](Runtime& r) { r.publish_cache_events(); });
  s.log->wait_past(s.last, kWake);
  s.batch.clear();
  uint64_t last = 0;
  if (!s.log->read_since(s.last, kMaxBatch, s.batch, last)) {  // fell out of the log's window
    s.need_snapshot = true;
    return next_events(s);
  }
  if (s.batch.empty()) return ++s.idle_wakes % kIdleWakesPerKeepAlive == 0 ? ": keep-alive\n\n" : "";
  s.idle_wakes = 0;
  s.last = last;
  return kv_message(last, s.batch);
}

}  // namespace kvtier::server
