// Following a backend's GET /v1/cache/events (server-sent events; the
// format is docs/SERVER.md's): each message (client/sse.h splits the
// stream) parsed into typed values, and a blocking follow loop. Anything that
// is not a well-formed message ends the follow with an error (the router then
// resyncs from a snapshot), never a crash.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "router/backend.h"
#include "tiers/kv_events.h"

namespace kvtier::router {

struct EventMessage {
  uint64_t seq = 0;
  bool snapshot = false;
  std::vector<PageHash> device, host, disk;  // a snapshot's tiers
  struct Record {
    KvEventKind kind = KvEventKind::kStored;
    TierKind tier = TierKind::kDevice, from = TierKind::kDevice;
    std::vector<PageHash> hashes;
  };
  std::vector<Record> records;  // a kv message's
};

// One message from its `event:` name ("snapshot" or "kv") and `data:` JSON.
Result<EventMessage> parse_event_message(std::string_view event, std::string_view data);

// Follows `b`'s events after `since` (nullopt: from a snapshot), handing each
// message to `on_message` until the stream ends or fails, a message is
// malformed, or `keep_going()` turns false (it is asked at every chunk; the
// backend sends a keep-alive at least every few seconds). `key`: the admin
// key the backend wants (empty: none). Returns why it ended.
Status follow_events(const BackendAddress& b, const std::string& key, std::optional<uint64_t> since,
                     const std::function<void(EventMessage&&)>& on_message, const std::function<bool()>& keep_going);

}  // namespace kvtier::router
