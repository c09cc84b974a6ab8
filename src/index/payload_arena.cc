#include "index/payload_arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace kvtier::index_detail {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Maps `size` bytes (a multiple of 4 KiB); sizes that are whole huge pages
// are aligned to 2 MiB and advised as huge pages (best effort: without THP
// the arena still works, with 4 KiB faults).
std::byte* map_chunk(size_t size) {
  const bool huge = size % kHugePage == 0;
  const size_t span = huge ? size + kHugePage : size;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::byte*>(p);
  if (!huge) return base;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
  const size_t lead = (kHugePage - addr % kHugePage) % kHugePage;
  if (lead) munmap(base, lead);
  if (kHugePage - lead) munmap(base + lead + size, kHugePage - lead);
  (void)madvise(base + lead, size, MADV_HUGEPAGE);
  return base + lead;
}

}  // namespace

PayloadArena::~PayloadArena() { clear(); }

uint32_t PayloadArena::new_chunk(size_t size) {
  std::byte* p = map_chunk(size);
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  chunks_[id] = Chunk{p, size, 0, 0};
  reserved_ += size;
  return id;
}

void PayloadArena::drop_chunk(uint32_t id) {
  munmap(chunks_[id].base, chunks_[id].size);
  reserved_ -= chunks_[id].size;
  chunks_[id] = Chunk{};
  free_ids_.push_back(id);
}

ArenaBlock PayloadArena::allocate(size_t bytes) {
  bytes = round_up(bytes, kAlign);
  uint32_t id;
  if (bytes > kChunkBytes / 4) {
    // Large payloads get a chunk of their own, in whole huge pages once that wastes little.
    id = new_chunk(round_up(bytes, bytes >= kHugePage ? kHugePage : 4096));
  } else {
    if (current_ == UINT32_MAX || chunks_[current_].size - chunks_[current_].used < bytes) {
      const uint32_t old = current_;
      if (spare_ != UINT32_MAX) {
        current_ = spare_;
        spare_ = UINT32_MAX;
      } else {
        current_ = new_chunk(kChunkBytes);
      }
      if (old != UINT32_MAX && chunks_[old].live == 0) drop_chunk(old);
    }
    id = current_;
  }
  Chunk& c = chunks_[id];
  ArenaBlock b{c.base + c.used, id, static_cast<uint32_t>(bytes)};
  c.used += bytes;
  c.live += bytes;
  live_ += bytes;
  return b;
}

void PayloadArena::release(const ArenaBlock& b) {
  if (b.ptr == nullptr) return;
  Chunk& c = chunks_[b.chunk];
  c.live -= b.bytes;
  live_ -= b.bytes;
  if (c.live != 0) return;
  if (b.chunk == current_) {
    c.used = 0;  // empty current chunk: bump from its start again
    return;
  }
  if (spare_ == UINT32_MAX && c.size == kChunkBytes) {
    c.used = 0;
    spare_ = b.chunk;
    return;
  }
  drop_chunk(b.chunk);
}

bool PayloadArena::sparse(const ArenaBlock& b) const {
  if (b.ptr == nullptr || b.chunk == current_ || b.chunk == spare_) return false;
  const Chunk& c = chunks_[b.chunk];
  return c.size == kChunkBytes && c.live * 4 < c.size * 3;
}

bool PayloadArena::fragmented() const {
  size_t dead = 0;
  for (uint32_t id = 0; id < chunks_.size(); ++id) {
    const Chunk& c = chunks_[id];
    if (c.base && c.size == kChunkBytes && id != current_ && id != spare_ && c.live * 4 < c.size * 3) dead += c.size - c.live;
  }
  return dead > 2 * kChunkBytes && dead > live_ / 8;
}

void PayloadArena::clear() {
  for (uint32_t id = 0; id < chunks_.size(); ++id)
    if (chunks_[id].base) munmap(chunks_[id].base, chunks_[id].size);
  chunks_.clear();
  free_ids_.clear();
  current_ = spare_ = UINT32_MAX;
  reserved_ = live_ = 0;
}

}  // namespace kvtier::index_detail
