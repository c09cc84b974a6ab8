// WordCache: a memo of word → token ids, one per thread and tokenizer model,
// so that the words text repeats (most of them) skip the merge loop and its
// table lookups. Invisible to callers: a hit returns exactly what the merge
// loop would. Bounded: at kMaxWords entries it starts over. Each thread has
// its own (thread_local), so nothing is shared and nothing is locked.
// Internal to text/.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/types.h"
#include "text/flat_map.h"

namespace kvtier::text {

class WordCache {
 public:
  static constexpr size_t kMaxWords = size_t(1) << 15;
  static constexpr size_t kMaxWordBytes = 48;

  // A process-unique id for a tokenizer model (its cache key).
  static uint64_t new_owner() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  // This thread's cache for `owner`; another owner's entries are dropped.
  static WordCache& for_thread(uint64_t owner) {
    thread_local std::unique_ptr<WordCache> cache;
    if (!cache || cache->owner_ != owner) cache.reset(new WordCache(owner));
    return *cache;
  }

  // Appends the ids of `word` to `out` when cached.
  bool lookup(std::string_view word, std::vector<TokenId>& out) const {
    if (word.size() > kMaxWordBytes) return false;
    const int32_t at = index_->find(word, -1);
    if (at < 0) return false;
    const auto [begin, count] = spans_[size_t(at)];
    out.insert(out.end(), ids_.begin() + begin, ids_.begin() + begin + count);
    return true;
  }
  void store(std::string_view word, std::span<const TokenId> ids) {
    if (word.size() > kMaxWordBytes) return;
    if (spans_.size() >= kMaxWords) clear();
    index_->set(word, int32_t(spans_.size()));
    spans_.emplace_back(uint32_t(ids_.size()), uint32_t(ids.size()));
    ids_.insert(ids_.end(), ids.begin(), ids.end());
  }

 private:
  explicit WordCache(uint64_t owner) : owner_(owner) { clear(); }
  void clear() {
    index_ = std::make_unique<FlatStringMap>(kMaxWords);
    spans_.clear(), ids_.clear();
  }

  uint64_t owner_;
  std::unique_ptr<FlatStringMap> index_;
  std::vector<std::pair<uint32_t, uint32_t>> spans_;
  std::vector<TokenId> ids_;
};

}  // namespace kvtier::text
