#include "tiers/host_tier.h"

#include <cstring>

namespace kvtier {

Status HostTierOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  KVTIER_RETURN_IF_ERROR(memory.validate());
  const size_t slot_bytes = geometry.stored_payload_bytes(1, geometry.codec);
  if (capacity_bytes < slot_bytes) return Status::InvalidArgument("HostTier: capacity below one page");
  if (capacity_bytes / slot_bytes >= SlotId::kInvalid) return Status::InvalidArgument("HostTier: too many slots");
  return Status::Ok();
}

Result<std::unique_ptr<HostTier>> HostTier::create(const HostTierOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const size_t slot_bytes = o.geometry.stored_payload_bytes(1, o.geometry.codec);
  const uint32_t slots = static_cast<uint32_t>(o.capacity_bytes / slot_bytes);
  KVTIER_ASSIGN_OR_RETURN(auto mem, DeviceMemory::allocate(size_t(slots) * slot_bytes, o.memory));
  return std::unique_ptr<HostTier>(new HostTier(o, std::move(mem), slots));
}

HostTier::HostTier(const HostTierOptions& o, std::unique_ptr<DeviceMemory> mem, uint32_t slots)
    : geometry_(o.geometry),
      options_(o),
      memory_(std::move(mem)),
      base_(memory_->data()),
      slot_bytes_(o.geometry.stored_payload_bytes(1, o.geometry.codec)),
      slot_layer_bytes_(o.geometry.stored_layer_bytes(1, o.geometry.codec)),
      num_slots_(slots) {
  free_.reserve(slots);
  for (uint32_t i = slots; i > 0; --i) free_.push_back(i - 1);
  stats_.capacity_bytes = uint64_t(slots) * slot_bytes_;
}

Status HostTier::store_layers(SlotId s, uint32_t first, uint32_t count, const std::byte* raw_page) {
  const KVGeometry& g = geometry_.kv;
  if (!contains(s) || first + count > g.num_layers) return Status::InvalidArgument("HostTier: slot or layers out of range");
  const size_t raw = g.layer_slice_bytes();
  for (uint32_t l = first; l < first + count; ++l) {
    std::byte* dst = slot(s) + l * slot_layer_bytes_;
    if (geometry_.codec == KvCodec::kNone) {
      std::memcpy(dst, raw_page + l * raw, raw);
      continue;
    }
    KVTIER_RETURN_IF_ERROR(kv_encode_layer(geometry_.codec, g, 1, {raw_page + l * raw, raw}, {dst, slot_layer_bytes_}));
  }
  return Status::Ok();
}

Status HostTier::load_layers(SlotId s, uint32_t first, uint32_t count, std::byte* raw_page) const {
  const KVGeometry& g = geometry_.kv;
  if (!contains(s) || first + count > g.num_layers) return Status::InvalidArgument("HostTier: slot or layers out of range");
  return decode_chunk_layers(geometry_.codec, geometry_, 1, count, {slot(s) + first * slot_layer_bytes_, count * slot_layer_bytes_},
                             {raw_page + first * g.layer_slice_bytes(), count * g.layer_slice_bytes()});
}

HostTier::~HostTier() = default;

Result<SlotId> HostTier::allocate_slot() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return Status::NoSpace("HostTier: no free slot");
  SlotId s(free_.back());
  free_.pop_back();
  return s;
}

Status HostTier::allocate_slots(uint32_t n, std::vector<SlotId>& out) {
  std::lock_guard lock(mu_);
  if (free_.size() < n) return Status::NoSpace("HostTier: not enough free slots");
  for (uint32_t i = 0; i < n; ++i) {
    out.emplace_back(free_.back());
    free_.pop_back();
  }
  return Status::Ok();
}

void HostTier::free_slot(SlotId s) {
  std::lock_guard lock(mu_);
  free_.push_back(s.value());
}

uint32_t HostTier::free_slots() const {
  std::lock_guard lock(mu_);
  return static_cast<uint32_t>(free_.size());
}

void HostTier::drop_locked(std::unordered_map<ChunkKey, Chunk, ChunkKeyHasher>::iterator it) {
  for (SlotId s : it->second.slots) free_.push_back(s.value());
  order_.erase(it->second.order);
  chunks_.erase(it);
}

Status HostTier::put_one(const PutOp& op) {
  if (geometry_.codec != KvCodec::kNone) return Status::InvalidArgument("HostTier: the chunk face stores raw pages only (a codec is set)");
  KVTIER_RETURN_IF_ERROR(validate_put(geometry_, op));
  const uint32_t n = static_cast<uint32_t>(op.page_hashes.size());
  std::vector<SlotId> slots;
  {
    std::lock_guard lock(mu_);
    ++stats_.puts;
    if (chunks_.count(op.key)) return Status::Ok();
    if (n > num_slots_) return Status::NoSpace("HostTier: chunk larger than the whole tier");
    while (free_.size() < n && options_.evict_chunks && !order_.empty()) {
      drop_locked(chunks_.find(order_.front()));
      ++stats_.evictions;
    }
    if (free_.size() < n) return Status::NoSpace("HostTier: full");
    for (uint32_t i = 0; i < n; ++i) {
      slots.emplace_back(free_.back());
      free_.pop_back();
    }
  }
  // The slots are ours until published, so the copy runs unlocked.
  std::vector<std::byte*> pages;
  for (SlotId s : slots) pages.push_back(slot(s));
  scatter_layers(geometry_.kv, op.payload.data(), 0, geometry_.kv.num_layers, pages);
  std::lock_guard lock(mu_);
  if (chunks_.count(op.key)) {  // a racing put of the same key won
    for (SlotId s : slots) free_.push_back(s.value());
    return Status::Ok();
  }
  auto pos = order_.insert(order_.end(), op.key);
  chunks_.emplace(op.key, Chunk{std::move(slots), pos});
  return Status::Ok();
}

void HostTier::put_batch(std::span<PutOp> ops) {
  for (PutOp& op : ops) op.status = put_one(op);
}

void HostTier::get_batch(std::span<GetOp> ops) {
  const KVGeometry& g = geometry_.kv;
  const size_t s = g.layer_slice_bytes();
  for (GetOp& op : ops) {
    std::lock_guard lock(mu_);
    if (geometry_.codec != KvCodec::kNone) {
      op.status = Status::InvalidArgument("HostTier: the chunk face stores raw pages only (a codec is set)");
      continue;
    }
    auto it = chunks_.find(op.key);
    if (it == chunks_.end()) {
      ++stats_.misses;
      op.status = Status::NotFound("HostTier: chunk not present");
      continue;
    }
    const uint32_t n = static_cast<uint32_t>(it->second.slots.size());
    op.num_pages = n;
    op.status = resolve_get_range(geometry_, n, op);
    if (!op.status.ok()) continue;
    // Held under the lock: a concurrent eviction must not recycle the slots mid-copy.
    for (uint32_t i = 0; i < op.num_layers; ++i)
      for (uint32_t p = 0; p < n; ++p)
        std::memcpy(op.out.data() + (size_t(i) * n + p) * s, slot(it->second.slots[p]) + (op.first_layer + i) * s, s);
    ++stats_.hits;
    if (options_.eviction == EvictionOrder::kLru) order_.splice(order_.end(), order_, it->second.order);
  }
}

size_t HostTier::exists_prefix(const PageHash& ns, std::span<const PageHash> keys) {
  std::lock_guard lock(mu_);
  size_t n = 0;
  while (n < keys.size() && chunks_.count(ChunkKey{ns, keys[n]})) ++n;
  return n;
}

Status HostTier::erase(const ChunkKey& key) {
  std::lock_guard lock(mu_);
  auto it = chunks_.find(key);
  if (it != chunks_.end()) drop_locked(it);
  return Status::Ok();
}

TierStats HostTier::stats() const {
  std::lock_guard lock(mu_);
  TierStats s = stats_;
  s.entries = chunks_.size();
  s.bytes = uint64_t(num_slots_ - free_.size()) * slot_bytes_;
  return s;
}

}  // namespace kvtier
