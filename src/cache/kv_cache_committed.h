// KVCache::Committed: the pages of one commit as the index now holds them
// (private to the cache's .cc files: kv_cache_store.cc, kv_cache_write.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"

namespace kvtier {

struct KVCache::Committed {
  std::vector<bool> taken;           // the index holds the page through the lease's reference
  std::vector<uint32_t> need_host;   // pages cached without a host copy
  std::vector<PageId> device;        // each page's device copy as the index now records it
  std::vector<bool> lossy;           // ... and its lossy mark
};

}  // namespace kvtier
