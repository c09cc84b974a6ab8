// TokenIndex: token text → id, as llama.cpp's token_to_id (a later duplicate
// wins). Internal to the tokenizers. Immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
  // Keeps views into `tokens`, which must outlive the index.
  explicit TokenIndex(const std::vector<std::string>& tokens) {
    map_.reserve(tokens.size());
    for (size_t id = 0; id < tokens.size(); ++id) map_[tokens[id]] = TokenId(id);
  }
  TokenId find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? kNoToken : it->second;
  }

 private:
  std::unordered_map<std::string_view, TokenId> map_;
};

}  // namespace kvtier::text
