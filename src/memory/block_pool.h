// BlockPool: a fixed number of KV pages in one DeviceMemory allocation.
//
// Each page is one contiguous blob in the page-first layout of DESIGN §4:
// [layer][k|v][page_tokens][num_kv_heads][head_dim]. Pages are reference
// counted: allocate() hands out a page with count 1, ref()/unref() adjust it,
// and the page returns to the free list when the count reaches 0.
//
// Thread safety: allocation, reference counts and statistics belong to the
// owner (control) thread. Page *bytes* may be read or written by any thread
// that the owner hands a PageId to (transfer workers, the engine); the base
// address never moves for the pool's lifetime.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/types.h"
#include "memory/device_memory.h"

namespace kvtier {

struct BlockPoolOptions {
  KVGeometry geometry;
  uint32_t num_pages = 0;
  DeviceMemoryOptions memory;
  // Accept memory the CPU cannot dereference (a GPU pool): page()/k()/v() are
  // then device addresses, for device kernels and copy engines only.
  bool allow_device_only = false;
  // Caller-owned host memory for the pages (memory/external_memory.h); empty:
  // the pool allocates its own per `memory`. Must hold num_pages pages and
  // outlive the pool.
  std::span<std::byte> external;

  Status validate() const;
  // The number of pages that fit in `bytes` for `geometry` (at least 1 when bytes > 0 fits one page).
  static uint32_t pages_for_bytes(const KVGeometry& geometry, size_t bytes);
  // `num_pages` pages of `geometry` in memory on `backend` (device-only when it is an accelerator's).
  static BlockPoolOptions on(MemoryBackend backend, const KVGeometry& geometry, uint32_t num_pages);
};

struct BlockPoolStats {
  uint32_t total_pages = 0;
  uint32_t used_pages = 0;
  uint32_t free_pages = 0;
  size_t page_bytes = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
};

class BlockPool {
 public:
  static Result<std::unique_ptr<BlockPool>> create(const BlockPoolOptions& options);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // One free page with reference count 1, or NoSpace when none is free.
  Result<PageId> allocate();
  // All-or-nothing: appends n pages to `out` or, when fewer are free, changes nothing and returns NoSpace.
  Status allocate(uint32_t n, std::vector<PageId>& out);
  void ref(PageId page);
  // Drops one reference; the page is free again when its count reaches 0.
  void unref(PageId page);
  uint32_t refcount(PageId page) const;
  bool contains(PageId page) const { return page.valid() && page.value() < num_pages_; }

  // Whole page (geometry().page_bytes() bytes).
  std::byte* page(PageId page) { return base_ + size_t(page.value()) * page_bytes_; }
  const std::byte* page(PageId page) const { return base_ + size_t(page.value()) * page_bytes_; }
  // One layer's contiguous slice [k|v][P][H][D] of a page.
  std::byte* layer(PageId p, LayerIdx l) { return page(p) + geometry_.layer_offset(l.value()); }
  const std::byte* layer(PageId p, LayerIdx l) const { return page(p) + geometry_.layer_offset(l.value()); }
  // K block [P][H][D] and V block [P][H][D] of one layer of a page.
  std::byte* k(PageId p, LayerIdx l) { return layer(p, l); }
  std::byte* v(PageId p, LayerIdx l) { return layer(p, l) + geometry_.v_offset_in_layer(); }
  const std::byte* k(PageId p, LayerIdx l) const { return layer(p, l); }
  const std::byte* v(PageId p, LayerIdx l) const { return layer(p, l) + geometry_.v_offset_in_layer(); }

  const KVGeometry& geometry() const { return geometry_; }
  uint32_t num_pages() const { return num_pages_; }
  uint32_t free_pages() const { return static_cast<uint32_t>(free_.size()); }
  BlockPoolStats stats() const;
  DeviceMemory& memory() { return *memory_; }
  const DeviceMemory& memory() const { return *memory_; }

 private:
  BlockPool(const BlockPoolOptions& o, std::unique_ptr<DeviceMemory> mem);

  KVGeometry geometry_;
  uint32_t num_pages_;
  size_t page_bytes_;
  std::unique_ptr<DeviceMemory> memory_;
  std::byte* base_;
  std::vector<uint32_t> refcount_;
  std::vector<uint32_t> free_;  // stack of free page indices
  uint64_t allocations_ = 0;
  uint64_t frees_ = 0;
};

}  // namespace kvtier
