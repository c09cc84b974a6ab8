#include "router/held_index.h"

namespace kvtier::router {
namespace {

uint8_t bit_of(TierKind t) { return t == TierKind::kDevice ? 1 : t == TierKind::kHost ? 2 : 0; }

}  // namespace

void HeldIndex::clear() {
  pages_.clear();
  disk_.clear();
}

void HeldIndex::reset(const std::vector<PageHash>& device, const std::vector<PageHash>& host,
                      const std::vector<PageHash>& disk) {
  clear();
  for (const PageHash& h : device) pages_[h] |= kDeviceBit;
  for (const PageHash& h : host) pages_[h] |= kHostBit;
  disk_.insert(disk.begin(), disk.end());
}

void HeldIndex::apply(KvEventKind kind, TierKind tier, TierKind from, std::span<const PageHash> hashes) {
  if (tier == TierKind::kDisk) {
    if (kind == KvEventKind::kCleared) disk_.clear();
    for (const PageHash& h : hashes) {
      if (kind == KvEventKind::kStored || kind == KvEventKind::kMoved) disk_.insert(h);
      if (kind == KvEventKind::kRemoved) disk_.erase(h);
    }
    return;
  }
  const uint8_t bit = bit_of(tier);
  if (bit == 0) return;  // the remote tier is shared: not one backend's
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

HeldIndex::Match HeldIndex::match(std::span<const PageHash> chain, uint32_t chunk_pages) const {
  Match m;
  const size_t C = chunk_pages ? chunk_pages : 1;
  for (size_t i = 0; i < chain.size();) {
    if (auto it = pages_.find(chain[i]); it != pages_.end()) {
      ++((it->second & kDeviceBit) ? m.device : m.host);
      ++i;
      continue;
    }
    // A chunk on disk serves its pages from i to its end (the ones before i are in the index).
    const size_t end = (i / C + 1) * C;
    if (end > chain.size() || !disk_.count(chain[end - 1])) break;
    m.disk += uint32_t(end - i);
    i = end;
  }
  return m;
}

}  // namespace kvtier::router
