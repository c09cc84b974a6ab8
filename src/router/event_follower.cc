#include "router/event_follower.h"

#include "client/sse.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace kvtier::router {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxMessageBytes = size_t(256) << 20;  // a snapshot of millions of pages fits
constexpr int kReadTimeoutS = 30;                       // far past the backend's keep-alive: a dead link

Result<TierKind> tier_of(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    for (int t = 0; t < kNumTiers; ++t)
      if (tier_name(TierKind(t)) == s) return TierKind(t);
  }
  return Status::Corruption("events: unknown tier " + v.dump());
}

Result<KvEventKind> kind_of(const json& v) {
  for (KvEventKind k : {KvEventKind::kStored, KvEventKind::kMoved, KvEventKind::kRemoved, KvEventKind::kCleared})
    if (v.is_string() && kv_event_kind_name(k) == v.get_ref<const std::string&>()) return k;
  return Status::Corruption("events: unknown kind " + v.dump());
}

Status hashes_of(const json& v, std::vector<PageHash>& out) {
  if (!v.is_array()) return Status::Corruption("events: hashes are not a list");
  out.reserve(out.size() + v.size());
  for (const json& h : v) {
    if (!h.is_string()) return Status::Corruption("events: a hash is not a string");
    KVTIER_ASSIGN_OR_RETURN(PageHash p, hash_from_hex(h.get_ref<const std::string&>(), "events: a hash"));
    out.push_back(p);
  }
  return Status::Ok();
}

Status parse_snapshot(const json& j, EventMessage& m) {
  const auto tiers = j.find("tiers");
  if (tiers == j.end() || !tiers->is_object()) return Status::Corruption("events: a snapshot without 'tiers'");
  const std::pair<const char*, std::vector<PageHash>*> lists[] = {{"device", &m.device}, {"host", &m.host}, {"disk", &m.disk}};
  for (auto [name, out] : lists)
    if (auto it = tiers->find(name); it != tiers->end()) KVTIER_RETURN_IF_ERROR(hashes_of(*it, *out));
  return Status::Ok();
}

Status parse_records(const json& j, EventMessage& m) {
  const auto events = j.find("events");
  if (events == j.end() || !events->is_array()) return Status::Corruption("events: a kv message without 'events'");
  for (const json& r : *events) {
    if (!r.is_object()) return Status::Corruption("events: a record is not an object");
    EventMessage::Record rec;
    KVTIER_ASSIGN_OR_RETURN(rec.kind, kind_of(r.value("kind", json())));
    KVTIER_ASSIGN_OR_RETURN(rec.tier, tier_of(r.value("tier", json())));
    rec.from = rec.tier;
    if (rec.kind == KvEventKind::kMoved) {
      KVTIER_ASSIGN_OR_RETURN(rec.from, tier_of(r.value("from", json())));
    }
    KVTIER_RETURN_IF_ERROR(hashes_of(r.value("hashes", json::array()), rec.hashes));
    m.records.push_back(std::move(rec));
  }
  return Status::Ok();
}

}  // namespace

Result<EventMessage> parse_event_message(std::string_view event, std::string_view data) {
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption("events: data is not a JSON object");
  EventMessage m;
  const auto seq = j.find("seq");
  if (seq == j.end() || !seq->is_number_unsigned()) return Status::Corruption("events: no 'seq'");
  m.seq = seq->get<uint64_t>();
  m.snapshot = event == "snapshot";
  if (!m.snapshot && event != "kv") return Status::Corruption("events: unknown event '" + std::string(event) + "'");
  KVTIER_RETURN_IF_ERROR(m.snapshot ? parse_snapshot(j, m) : parse_records(j, m));
  return m;
}

Status follow_events(const BackendAddress& b, const std::string& key, std::optional<uint64_t> since,
                     const std::function<void(EventMessage&&)>& on_message, const std::function<bool()>& keep_going) {
  httplib::Client c(b.host, b.port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(kReadTimeoutS, 0);
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  const std::string path = "/v1/cache/events" + (since ? "?since=" + std::to_string(*since) : std::string());
  client::SseReader split(kMaxMessageBytes);
  Status failed;
  int status = 0;
  auto r = c.Get(
      path, headers, [&](const httplib::Response& res) { return (status = res.status) == 200; },
      [&](const char* data, size_t n) {
        failed = split.feed({data, n}, [&](const client::SseMessage& sse) {
          if (sse.event.empty()) return Status::Ok();  // a bare id: nothing to do
          KVTIER_ASSIGN_OR_RETURN(EventMessage m, parse_event_message(sse.event, sse.data));
          on_message(std::move(m));
          return Status::Ok();
        });
        return failed.ok() && keep_going();
      });
  if (!failed.ok()) return failed;
  if (status != 0 && status != 200) return Status::Unavailable(b.url + path + ": HTTP " + std::to_string(status));
  if (!r && keep_going()) return Status::Unavailable(b.url + path + ": " + httplib::to_string(r.error()));
  return Status::Ok();
}

}  // namespace kvtier::router
