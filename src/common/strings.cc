#include "common/strings.h"

#include "common/json_scan.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace kvtier {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view text) {
  std::string q;
  q.reserve(text.size() + 2);
  q += '\'';
  q.append(text);
  q += '\'';
  return q;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool Lines::next(std::string_view& line) {
  if (pos_ >= text_.size()) return false;
  const size_t end = std::min(text_.find('\n', pos_), text_.size());
  line = text_.substr(pos_, end - pos_);
  pos_ = end + 1;
  ++number_;
  return true;
}

size_t json_nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  for_each_json_structural(text, [&](size_t, char c) {
    if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  });
  return deepest;
}

uint64_t json_key_pairs(std::string_view text, size_t max_depth) {
  std::vector<uint64_t> keys;  // per open array (UINT64_MAX) or object (its keys so far)
  keys.reserve(std::min<size_t>(max_depth, 1024));
  size_t depth = 0;
  uint64_t pairs = 0;
  for_each_json_structural(text, [&](size_t, char c) {
    if (c == '[' || c == '{') {
      if (++depth <= max_depth) keys.push_back(c == '{' ? 0 : UINT64_MAX);
    } else if ((c == ']' || c == '}') && depth > 0) {
      if (depth-- <= max_depth) keys.pop_back();
    } else if (c == ':' && !keys.empty() && keys.back() != UINT64_MAX && depth <= max_depth) {
      pairs += keys.back()++;  // this key against each before it
    }
  });
  return pairs;
}

size_t find_text(std::string_view text, std::string_view needle, size_t from) {
  if (from > text.size()) return std::string_view::npos;
  if (needle.size() <= 64) return text.find(needle, from);  // naive, at most 64 compares a position
  // Knuth-Morris-Pratt: the needle's failure table, then one pass over the text.
  std::vector<size_t> fail(needle.size(), 0);
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k - 1];
    if (needle[i] == needle[k]) ++k;
    fail[i] = k;
  }
  for (size_t i = from, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != needle[k]) k = fail[k - 1];
    if (text[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string_view::npos;
}

}  // namespace kvtier
