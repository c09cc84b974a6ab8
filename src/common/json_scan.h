// One pass over JSON text that skips its strings: what the readers that measure or split JSON
// without parsing it share (json_nesting_depth, json_key_pairs, top-level pieces of a tool call).
#pragma once

#include <cstddef>
#include <string_view>

namespace kvtier {

// Calls f(i, c) for each character of `text` outside its strings (a string's quotes and contents,
// escapes included, are skipped). Malformed text is read the same way, never past its end.
template <class F>
void for_each_json_structural(std::string_view text, F&& f) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else {
      f(i, c);
    }
  }
}

}  // namespace kvtier
