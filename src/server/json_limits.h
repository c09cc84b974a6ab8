// How deep JSON from a client or a model may nest, and the parse that enforces it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/strings.h"

namespace kvtier::server {

// Requests, and JSON a model writes, nest at most this deep: deeper text is refused before it is
// parsed (the parsed value would be copied recursively, a stack frame per level).
inline constexpr size_t kMaxJsonDepth = 128;
// And their objects hold at most this many key pairs (json_key_pairs: an object of 4,096 keys and
// some small ones beside it):
// an insertion-ordered map compares each key with those before it, and one object of 80,000 keys
// (0.9 MB) took 6.8 s to parse, a 16 MiB body half an hour.
inline constexpr uint64_t kMaxJsonKeyPairs = uint64_t(1) << 23;

// Why `text` is not parsed (too deep, objects too wide), or an empty string.
inline std::string json_cost_refusal(std::string_view text) {
  if (json_nesting_depth(text) > kMaxJsonDepth)
    return "nests arrays and objects more than " + std::to_string(kMaxJsonDepth) + " deep";
  if (json_key_pairs(text, kMaxJsonDepth) > kMaxJsonKeyPairs)
    return "has objects with too many keys (about 4,096 in one object at most)";
  return {};
}

// `text` parsed as J (nlohmann::json or ordered_json): a discarded value where it is not JSON or
// json_cost_refusal refuses it.
template <class J>
J parse_bounded_json(std::string_view text) {
  if (!json_cost_refusal(text).empty()) return J(J::value_t::discarded);
  return J::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace kvtier::server
