// TokenIndex: token text → id, as llama.cpp's token_to_id (a later duplicate
// wins). Internal to the tokenizers. Immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/flat_map.h"

#include "kvtier/types.h"
#include "text/vocab.h"

namespace kvtier::text {

// Lets string-keyed maps be searched with a string_view (no temporary string).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class TokenIndex {
 public:
  explicit TokenIndex(const std::vector<std::string>& tokens) : map_(tokens.size()) {
    for (size_t id = 0; id < tokens.size(); ++id) map_.set(tokens[id], TokenId(id));
  }
  TokenId find(std::string_view text) const { return map_.find(text, kNoToken); }

 private:
  FlatStringMap map_;
};

}  // namespace kvtier::text
