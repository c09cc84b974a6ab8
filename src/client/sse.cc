#include "client/sse.h"

namespace kvtier::client {
namespace {

// The message of one block of lines (without its blank line); false when it holds no field.
bool parse_block(std::string_view block, SseMessage& m) {
  bool any = false;
  while (!block.empty()) {
    const size_t nl = block.find('\n');
    std::string_view line = block.substr(0, nl);
    block = nl == std::string_view::npos ? std::string_view() : block.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == ':') continue;  // a comment
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field == "event") {
      m.event = value;
    } else if (field == "data") {
      if (m.has_data) m.data += '\n';
      m.data += value;
      m.has_data = true;
    } else if (field == "id") {
      m.id = value;
    } else {
      continue;
    }
    any = true;
  }
  return any;
}

// Where the first blank line ends (the message before it, up to blank_at, is complete), or npos.
// A blank line ("\n\n" or "\n\r\n") is sought from `from` on: one that ends past it starts at most
// two bytes before it, so `from` is where the last search ended minus two.
size_t message_end(const std::string& buf, size_t from, size_t& blank_at) {
  for (size_t nl = buf.find('\n', from); nl != std::string::npos; nl = buf.find('\n', nl + 1)) {
    const size_t next = nl + 1;
    if (next < buf.size() && buf[next] == '\n') return blank_at = nl, next + 1;
    if (next + 1 < buf.size() && buf[next] == '\r' && buf[next + 1] == '\n') return blank_at = nl, next + 2;
  }
  return std::string::npos;
}

}  // namespace

Status SseReader::feed(std::string_view bytes, const std::function<Status(const SseMessage&)>& on) {
  buf_.append(bytes);
  size_t blank = 0;
  for (size_t end; (end = message_end(buf_, searched_ > 2 ? searched_ - 2 : 0, blank)) != std::string::npos;) {
    SseMessage m;
    const bool any = parse_block(std::string_view(buf_).substr(0, blank), m);
    buf_.erase(0, end);
    searched_ = 0;
    if (any) KVTIER_RETURN_IF_ERROR(on(m));
  }
  searched_ = buf_.size();
  if (buf_.size() > max_bytes_) return Status::Corruption("event stream: a message over " + std::to_string(max_bytes_) + " bytes");
  return Status::Ok();
}

Status SseReader::feed_data(std::string_view bytes, const std::function<void(std::string_view data)>& on) {
  return feed(bytes, [&](const SseMessage& m) {
    if (m.has_data) on(m.data);
    return Status::Ok();
  });
}

}  // namespace kvtier::client
