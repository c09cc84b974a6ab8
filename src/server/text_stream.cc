#include "server/text_stream.h"

#include <algorithm>

namespace kvtier::server {

size_t incomplete_utf8_tail(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes: invalid, nothing to wait for
}

CompletionText::CompletionText(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) max_stop_ = std::max(max_stop_, s.size());
}

std::string CompletionText::advance(std::string_view text) {
  if (stopped_) return {};
  const size_t done = emitted_.size();
  // A stop string may straddle what was already emitted only by less than
  // its length, and we never emitted a possible stop prefix, so searching from
  // `done` minus nothing is enough: held-back bytes were never emitted.
  size_t cut = std::string_view::npos;
  for (const auto& s : stops_) {
    const size_t pos = text.find(s, done);
    if (pos != std::string_view::npos) cut = std::min(cut, pos);
  }
  if (cut != std::string_view::npos) {
    stopped_ = true;
    std::string delta(text.substr(done, cut - done));
    emitted_ += delta;
    return delta;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t upto = std::min(s.size() - 1, text.size() - done);
    for (size_t k = upto; k > hold; --k)
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
  }
  hold = std::max(hold, incomplete_utf8_tail(text.substr(done)));
  const size_t end = text.size() - std::min(hold, text.size() - done);
  std::string delta(text.substr(done, end - done));
  emitted_ += delta;
  return delta;
}

std::string CompletionText::finish(std::string_view text) {
  std::string delta = advance(text);
  if (stopped_) return delta;
  const std::string rest(text.substr(emitted_.size()));
  emitted_ += rest;
  return delta + rest;
}

size_t tag_start(std::string_view text, std::string_view tag) {
  if (size_t at = text.find(tag); at != std::string_view::npos) return at;
  for (size_t n = std::min(tag.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return text.size() - n;
  return std::string_view::npos;
}

}  // namespace kvtier::server
