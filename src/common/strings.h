// Small text helpers shared across modules. Pure functions.
#pragma once

#include <string>
#include <string_view>

namespace kvtier {

// `s` without leading and trailing whitespace (isspace).
std::string_view trim(std::string_view s);
// 'text', built by appends (GCC 12 misreports "'" + std::string(...) under -Wrestrict).
std::string quoted(std::string_view text);
// HTML (and XML) escaping as markupsafe.escape does it (& < > " '): jinja's
// escape filter, and text in the reports' SVG.
std::string html_escape(std::string_view text);

// The deepest nesting of arrays and objects in JSON text (brackets inside
// strings not counted), read without recursion and without parsing. A parsed
// value is copied recursively, one stack frame per level, so text from a
// client is measured before it is parsed.
size_t json_nesting_depth(std::string_view text);
// Over every object in JSON text, n(n - 1) / 2 for its n keys: the key comparisons an
// insertion-ordered map (nlohmann::ordered_json) makes to parse it, each insert searching the keys
// before it. Read like json_nesting_depth; for text that nests at most `max_depth` deep (deeper
// levels are not counted).
uint64_t json_key_pairs(std::string_view text, size_t max_depth);

// The lines of a text, split at '\n' (which they do not include); a text that
// ends in '\n' has no empty last line. number(): the last line's, from 1.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line);
  size_t number() const { return number_; }

 private:
  std::string_view text_;
  size_t pos_ = 0, number_ = 0;
};

// The first occurrence of `needle` in `text` at or after `from` (npos: none), in time linear in
// their lengths (std::string::find compares naively: a long needle in a long text took hours; a
// chat's reply searched for in its rendering, a client's text, seconds a request).
size_t find_text(std::string_view text, std::string_view needle, size_t from = 0);

}  // namespace kvtier
