// Server-sent events as a reader sees them (the WHATWG event-stream format):
// a byte stream, fed in pieces split anywhere, cut into messages at blank
// lines. Lines end in \n or \r\n. A message keeps its `event:`, its `data:`
// lines (several are joined with \n) and its `id:`; comments (`:` lines) and
// other fields are skipped, and a block of nothing else is no message. One
// optional space after a field's colon is not part of its value.
//
// Used by every reader in the project: the load generator (completion
// streams), the router (a backend's /v1/cache/events) and the tests.
// Bounded: a message longer than max_bytes is an error, so a peer that never
// ends a message cannot grow the buffer. Not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::client {

struct SseMessage {
  std::string event;  // empty: none given (the format's default, "message")
  std::string data;
  std::string id;
  bool has_data = false;  // at least one data line (possibly empty)
};

class SseReader {
 public:
  explicit SseReader(size_t max_bytes = size_t(64) << 20) : max_bytes_(max_bytes) {}
  // Hands every message completed by `bytes` to `on`, in order; stops at the
  // first error `on` returns, or when an unfinished message passes max_bytes.
  Status feed(std::string_view bytes, const std::function<Status(const SseMessage&)>& on);
  // The data of every message that has some, for readers that want nothing
  // else (a completion stream: each chunk's JSON, then "[DONE]").
  Status feed_data(std::string_view bytes, const std::function<void(std::string_view data)>& on);

 private:
  size_t max_bytes_;
  std::string buf_;
  size_t searched_ = 0;  // bytes of buf_ already searched for a blank line: each byte is searched once
};

}  // namespace kvtier::client
