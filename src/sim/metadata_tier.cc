#include "sim/metadata_tier.h"

#include <cstring>

namespace kvtier {

Status MetadataTierOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (kind != TierKind::kDisk && kind != TierKind::kRemote)
    return Status::InvalidArgument("MetadataTier: kind must be disk or remote");
  if (regions == 0 || chunks_per_region == 0)
    return Status::InvalidArgument("MetadataTier: regions and chunks_per_region must be >= 1");
  return Status::Ok();
}

Result<std::unique_ptr<MetadataTier>> MetadataTier::create(const MetadataTierOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  return std::unique_ptr<MetadataTier>(new MetadataTier(o));
}

size_t MetadataTier::retain(std::span<const ChunkKey> keys, Clock::time_point until, double max_share) {
  std::lock_guard lk(mu_);
  const auto cap = static_cast<uint32_t>(max_share * options_.regions);
  size_t n = 0;
  for (; n < keys.size(); ++n) {
    auto it = index_.find(keys[n]);
    if (it == index_.end()) break;
    stats_.retain_yields += reclaim_order_.retain(it->second.region, until, cap, options_.clock->now());
  }
  return n;
}

void MetadataTier::reclaim_one_locked() {
  const std::optional<uint32_t> active = has_active_ ? std::optional(next_region_ - 1) : std::nullopt;
  const auto victim = reclaim_order_.victim(active, options_.clock->now());
  if (!victim) return;
  reclaim_order_.remove(*victim);
  auto it = region_keys_.find(*victim);
  for (const ChunkKey& k : it->second) {
    auto e = index_.find(k);
    if (e == index_.end() || e->second.region != *victim) continue;  // erased since
    held_pages_ -= e->second.pages;
    index_.erase(e);
    ++stats_.evictions;
  }
  region_keys_.erase(it);
}

// As DiskTier: an entry that does not fit the region being filled seals it;
// a new region is opened, reclaiming a whole region first when all are in use.
Status MetadataTier::put_locked(const PutOp& op) {
  KVTIER_RETURN_IF_ERROR(validate_put(options_.geometry, op));
  ++stats_.puts;
  if (index_.count(op.key)) return Status::Ok();
  if (has_active_ && active_fill_ == options_.chunks_per_region) has_active_ = false;
  if (!has_active_) {
    while (reclaim_order_.size() >= options_.regions) reclaim_one_locked();
    reclaim_order_.add(next_region_, ++tick_);
    region_keys_[next_region_];
    ++next_region_;
    has_active_ = true;
    active_fill_ = 0;
  }
  const uint32_t region = next_region_ - 1;
  const uint32_t pages = static_cast<uint32_t>(op.page_hashes.size());
  index_.emplace(op.key, Entry{region, pages});
  region_keys_[region].push_back(op.key);
  ++active_fill_;
  held_pages_ += pages;
  return Status::Ok();
}

void MetadataTier::put_batch(std::span<PutOp> ops) {
  std::lock_guard lock(mu_);
  for (PutOp& op : ops) op.status = put_locked(op);
}

void MetadataTier::get_batch(std::span<GetOp> ops) {
  std::lock_guard lock(mu_);
  for (GetOp& op : ops) {
    auto it = index_.find(op.key);
    if (it == index_.end()) {
      ++stats_.misses;
      op.status = Status::NotFound("MetadataTier: chunk not present");
      continue;
    }
    op.num_pages = it->second.pages;
    op.codec = options_.geometry.codec;  // every entry is written with the tier's codec
    op.status = resolve_get_range(options_.geometry, it->second.pages, op);
    if (!op.status.ok()) continue;
    std::memset(op.out.data(), 0, size_t(op.num_layers) * options_.geometry.layer_bytes(it->second.pages));
    reclaim_order_.touch(it->second.region, ++tick_);
    ++stats_.hits;
  }
}

size_t MetadataTier::exists_prefix(const PageHash& ns, std::span<const PageHash> keys) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  while (n < keys.size() && index_.count(ChunkKey{ns, keys[n]})) ++n;
  return n;
}

Status MetadataTier::erase(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    held_pages_ -= it->second.pages;
    index_.erase(it);
  }
  return Status::Ok();
}

TierStats MetadataTier::stats() const {
  std::lock_guard lock(mu_);
  TierStats s = stats_;
  const size_t page_bytes = options_.geometry.kv.page_bytes();
  s.capacity_bytes = uint64_t(options_.regions) * options_.chunks_per_region * options_.geometry.chunk_pages * page_bytes;
  s.entries = index_.size();
  s.bytes = held_pages_ * page_bytes;
  s.retained_bytes = reclaim_order_.held(options_.clock->now()) * options_.chunks_per_region *
                     options_.geometry.chunk_pages * page_bytes;
  return s;
}

}  // namespace kvtier
