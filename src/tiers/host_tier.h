// HostTier: host DRAM as a tier — an arena of page slots (SlotId) with a
// hard byte capacity (slots = capacity / slot_bytes, allocated once).
//
// Two faces:
//  * Slot arena, driven by the owner: allocate_slot()/free_slot() and the
//    page-first bytes of a slot (same layout as a BlockPool page, so
//    pool<->host moves are one memcpy per page, or per layer). The owner
//    (the index's eviction policy) decides what to evict; HostTier never
//    frees a slot it handed out.
//    With a codec (geometry.codec, tiers/kv_codec.h) a slot holds the page
//    encoded layer by layer — each layer is a 1-page layer slice encoded on
//    its own, at slot + l * stored_layer_bytes(1, codec) — so the same bytes
//    hold more pages. Slot bytes are then only reached through
//    store_layers / load_layers, which encode and decode.
//  * Tier (tiers/tier.h): chunks keyed by ChunkKey, stored as slots; gets
//    gather slots into a layer-major buffer. When slots run out, a put evicts
//    only chunks stored through this face (FIFO or LRU, option), never
//    owner-held slots; with eviction off it fails with kNoSpace. This face
//    stores raw pages only: with a codec its puts and gets are InvalidArgument.
// The aggregation step before any lower-tier write is gather_pages()
// (tiers/chunk_format.h) over slot or pool page pointers.
//
// Thread safety: all methods are thread-safe; slot *bytes* belong to whoever
// holds the SlotId. Ownership: the arena is owned by the HostTier.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "memory/device_memory.h"
#include "tiers/tier.h"

namespace kvtier {

struct HostTierOptions {
  ChunkGeometry geometry;
  size_t capacity_bytes = 0;  // hard limit; rounded down to whole slots (at least one page)
  bool evict_chunks = true;   // Tier puts may evict older Tier chunks
  EvictionOrder eviction = EvictionOrder::kLru;
  DeviceMemoryOptions memory;  // alignment, huge pages, mlock

  Status validate() const;
};

class HostTier final : public Tier {
 public:
  static Result<std::unique_ptr<HostTier>> create(const HostTierOptions& options);
  ~HostTier() override;

  // --- slot arena ---
  Result<SlotId> allocate_slot();
  // All or nothing: appends n slots to `out`, or changes nothing and returns kNoSpace.
  Status allocate_slots(uint32_t n, std::vector<SlotId>& out);
  void free_slot(SlotId slot);
  std::byte* slot(SlotId s) { return base_ + size_t(s.value()) * slot_bytes_; }
  const std::byte* slot(SlotId s) const { return base_ + size_t(s.value()) * slot_bytes_; }
  KvCodec codec() const { return geometry_.codec; }
  size_t slot_bytes() const { return slot_bytes_; }
  // Layers [first, first+count) of a raw page-first page (`raw_page` is the
  // whole page) into slot s, encoded with the codec (kNone: a copy); and back.
  // InvalidArgument for NaN/Inf KV under a lossy codec.
  Status store_layers(SlotId s, uint32_t first, uint32_t count, const std::byte* raw_page);
  Status load_layers(SlotId s, uint32_t first, uint32_t count, std::byte* raw_page) const;
  bool contains(SlotId s) const { return s.valid() && s.value() < num_slots_; }
  uint32_t num_slots() const { return num_slots_; }
  uint32_t free_slots() const;

  // --- Tier ---
  TierKind kind() const override { return TierKind::kHost; }
  const ChunkGeometry& geometry() const override { return geometry_; }
  void put_batch(std::span<PutOp> ops) override;
  void get_batch(std::span<GetOp> ops) override;
  size_t exists_prefix(const PageHash& ns, std::span<const PageHash> chunk_keys) override;
  Status erase(const ChunkKey& key) override;
  Status flush() override { return Status::Ok(); }
  TierStats stats() const override;
  bool degraded() const override { return false; }

 private:
  struct Chunk {
    std::vector<SlotId> slots;
    std::list<ChunkKey>::iterator order;
  };
  HostTier(const HostTierOptions& o, std::unique_ptr<DeviceMemory> mem, uint32_t slots);
  Status put_one(const PutOp& op);
  void drop_locked(std::unordered_map<ChunkKey, Chunk, ChunkKeyHasher>::iterator it);

  ChunkGeometry geometry_;
  HostTierOptions options_;
  std::unique_ptr<DeviceMemory> memory_;
  std::byte* base_;
  size_t slot_bytes_;  // a page as stored: page_bytes, or less under a codec
  size_t slot_layer_bytes_;
  uint32_t num_slots_;

  mutable std::mutex mu_;
  std::vector<uint32_t> free_;  // stack of free slot indices
  std::unordered_map<ChunkKey, Chunk, ChunkKeyHasher> chunks_;
  std::list<ChunkKey> order_;  // eviction order of Tier chunks: front = next victim
  TierStats stats_;
};

}  // namespace kvtier
