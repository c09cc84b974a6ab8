// How deep JSON from a client or a model may nest, and the parse that enforces it.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/strings.h"

namespace kvtier::server {

// Requests, and JSON a model writes, nest at most this deep: deeper text is refused before it is
// parsed (the parsed value would be copied recursively, a stack frame per level).
inline constexpr size_t kMaxJsonDepth = 128;
// `text` parsed as J (nlohmann::json or ordered_json): a discarded value where it is not JSON or
// nests deeper than kMaxJsonDepth.
template <class J>
J parse_bounded_json(std::string_view text) {
  if (json_nesting_depth(text) > kMaxJsonDepth) return J(J::value_t::discarded);
  return J::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace kvtier::server
