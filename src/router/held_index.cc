#include "router/held_index.h"

#include <algorithm>

namespace kvtier::router {
namespace {

uint8_t bit_of(TierKind t) { return t == TierKind::kDevice ? 1 : t == TierKind::kHost ? 2 : 0; }

}  // namespace

void HeldIndex::clear() {
  pages_.clear();
  disk_.clear();
  remote_.clear();
}

void HeldIndex::reset(const std::vector<PageHash>& device, const std::vector<PageHash>& host,
                      const std::vector<PageHash>& disk) {
  pages_.clear();
  disk_.clear();
  for (const PageHash& h : device) pages_[h] |= kDeviceBit;
  for (const PageHash& h : host) pages_[h] |= kHostBit;
  disk_.insert(disk.begin(), disk.end());
}

void HeldIndex::apply(KvEventKind kind, TierKind tier, TierKind from, std::span<const PageHash> hashes) {
  if (tier == TierKind::kDisk || tier == TierKind::kRemote) {
    auto& set = tier == TierKind::kDisk ? disk_ : remote_;
    if (kind == KvEventKind::kCleared) set.clear();
    for (const PageHash& h : hashes) {
      if (kind == KvEventKind::kStored || kind == KvEventKind::kMoved) set.insert(h);
      if (kind == KvEventKind::kRemoved) set.erase(h);
    }
    while (remote_.size() > kMaxRemoteChunks) remote_.erase(remote_.begin());
    return;
  }
  const uint8_t bit = bit_of(tier);
  if (kind == KvEventKind::kCleared) {
    for (auto it = pages_.begin(); it != pages_.end();) {
      it->second &= uint8_t(~bit);
      it = it->second ? std::next(it) : pages_.erase(it);
    }
    return;
  }
  for (const PageHash& h : hashes) {
    if (kind == KvEventKind::kRemoved || kind == KvEventKind::kMoved) {
      const uint8_t gone = kind == KvEventKind::kMoved ? bit_of(from) : bit;
      auto it = pages_.find(h);
      if (it != pages_.end() && !(it->second &= uint8_t(~gone))) pages_.erase(it);
    }
    if (kind == KvEventKind::kStored || kind == KvEventKind::kMoved) pages_[h] |= bit;
  }
}

uint32_t HeldIndex::Match::pages() const {
  uint32_t n = 0;
  for (const CachedRun& r : runs) n += r.pages;
  return n;
}

uint32_t HeldIndex::Match::on(TierKind t) const {
  uint32_t n = 0;
  for (const CachedRun& r : runs) n += r.tier == t ? r.pages : 0;
  return n;
}

size_t HeldIndex::chunk_end(const std::unordered_set<PageHash, PageHashHasher>& set, std::span<const PageHash> chain,
                            size_t i, size_t chunk_pages) {
  const size_t lo = i / chunk_pages * chunk_pages;
  for (size_t end = std::min(lo + chunk_pages, chain.size()); end > i; --end)
    if (set.count(chain[end - 1])) return end;
  return i;
}

HeldIndex::Match HeldIndex::match(std::span<const PageHash> chain, uint32_t chunk_pages, const HeldIndex* shared) const {
  Match m;
  auto add = [&](TierKind t, size_t pages) {
    if (m.runs.empty() || m.runs.back().tier != t) m.runs.push_back({t, 0});
    m.runs.back().pages += uint32_t(pages);
  };
  const size_t C = chunk_pages ? chunk_pages : 1;
  for (size_t i = 0; i < chain.size();) {
    if (auto it = pages_.find(chain[i]); it != pages_.end()) {
      add((it->second & kDeviceBit) ? TierKind::kDevice : TierKind::kHost, 1);
      ++i;
      continue;
    }
    // A chunk on disk (or in the shared store) serves its pages from i to its end (the ones before i are in the index).
    size_t end = chunk_end(disk_, chain, i, C);
    const TierKind t = end > i ? TierKind::kDisk : TierKind::kRemote;
    if (end == i && shared) end = chunk_end(shared->remote_, chain, i, C);
    if (end == i) break;
    add(t, end - i);
    if (end % C != 0) break;  // a tail: nothing follows it below the index
    i = end;
  }
  return m;
}

}  // namespace kvtier::router
