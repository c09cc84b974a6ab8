// PayloadArena: where PrefixIndex keeps the per-page arrays of its nodes
// (hashes, residencies, token ids), carved out of large chunks that are
// advised as transparent huge pages. Growing the index then costs a few
// 2 MiB page faults instead of one 4 KiB fault per 4 KiB of token ids,
// which dominated insertion time with per-node heap vectors.
//
// A chunk is returned to the system once nothing lives in it (one empty
// chunk is kept for reuse); fragmentation is measured here and repaired by
// the index, which can move node payloads (only their node points at them).
// Internal to src/index; not thread-safe (owned by the index).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::index_detail {

struct ArenaBlock {
  std::byte* ptr = nullptr;
  uint32_t chunk = UINT32_MAX;
  uint32_t bytes = 0;
};

class PayloadArena {
 public:
  static constexpr size_t kChunkBytes = size_t{2} << 20;  // one huge page
  static constexpr size_t kAlign = 16;

  PayloadArena() = default;
  ~PayloadArena();
  PayloadArena(const PayloadArena&) = delete;
  PayloadArena& operator=(const PayloadArena&) = delete;

  // bytes > 0 and < 4 GiB; the block is kAlign-aligned. Throws std::bad_alloc
  // when the system has no memory, like operator new.
  ArenaBlock allocate(size_t bytes);
  void release(const ArenaBlock& b);
  void clear();

  size_t reserved_bytes() const { return reserved_; }  // held from the system
  size_t live_bytes() const { return live_; }          // in live blocks
  // Whether `b` sits in a shared chunk less than 3/4 full, so moving it out pays.
  bool sparse(const ArenaBlock& b) const;
  // The sparse chunks hold more than max(2 chunks, live/8) dead bytes: the
  // owner should move their blocks out (O(chunks)). Together with the 3/4
  // threshold this bounds reserved bytes near 1.4x live bytes.
  bool fragmented() const;

 private:
  struct Chunk {
    std::byte* base = nullptr;
    size_t size = 0;
    size_t used = 0;  // bump offset
    size_t live = 0;  // bytes of live blocks
  };
  uint32_t new_chunk(size_t size);
  void drop_chunk(uint32_t id);

  std::vector<Chunk> chunks_;
  std::vector<uint32_t> free_ids_;
  uint32_t current_ = UINT32_MAX;  // chunk being bump-allocated
  uint32_t spare_ = UINT32_MAX;    // one empty chunk kept mapped: saves a munmap + huge page fault + zeroing
  size_t reserved_ = 0;
  size_t live_ = 0;
};

}  // namespace kvtier::index_detail
