// CompletionText: turns the growing text of a completion into safe deltas.
//
// After each sampled token the scheduler passes the whole completion text
// decoded so far. advance() returns the part that may be sent now: text that
// could still turn into a stop string, or an unfinished UTF-8 sequence, is
// held back until the next token decides it. When a stop string appears the
// text is cut just before it and stopped() becomes true. finish() releases
// whatever is held back when generation ends for another reason.
// Not thread-safe: one per request, used by the scheduler thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvtier::server {

class CompletionText {
 public:
  explicit CompletionText(std::vector<std::string> stops);

  // `text` must extend the text of the previous call.
  std::string advance(std::string_view text);
  std::string finish(std::string_view text);

  bool stopped() const { return stopped_; }
  // Everything returned so far: the completion as the client sees it.
  const std::string& emitted() const { return emitted_; }

 private:
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string emitted_;
  bool stopped_ = false;
};

// Where `tag` may begin in a growing `text`: where it occurs, or where a suffix
// that may still grow into it starts; npos when neither.
size_t tag_start(std::string_view text, std::string_view tag);

// Bytes at the end of `s` that start a UTF-8 sequence not yet complete (0..3).
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace kvtier::server
