#include "memory/block_pool.h"

#include "memory/external_memory.h"

#include <cassert>
#include <string>

namespace kvtier {

Status BlockPoolOptions::validate() const {
  KVTIER_RETURN_IF_ERROR(geometry.validate());
  if (num_pages == 0) return Status::InvalidArgument("BlockPoolOptions: num_pages must be > 0");
  if (num_pages == PageId::kInvalid) return Status::InvalidArgument("BlockPoolOptions: too many pages");
  if (!external.empty()) {
    KVTIER_RETURN_IF_ERROR(validate_external_memory(external));
    if (external.size() < size_t(num_pages) * geometry.page_bytes())
      return Status::InvalidArgument("BlockPoolOptions: external memory holds fewer than num_pages pages");
  }
  return memory.validate();
}

BlockPoolOptions BlockPoolOptions::on(MemoryBackend backend, const KVGeometry& geometry, uint32_t num_pages) {
  return {.geometry = geometry,
          .num_pages = num_pages,
          .memory = pool_memory_options(backend),
          .allow_device_only = backend != MemoryBackend::kCpu};
}

uint32_t BlockPoolOptions::pages_for_bytes(const KVGeometry& g, size_t bytes) {
  const size_t pb = g.page_bytes();
  if (pb == 0) return 0;
  const size_t n = bytes / pb;
  return n >= PageId::kInvalid ? PageId::kInvalid - 1 : static_cast<uint32_t>(n);
}

Result<std::unique_ptr<BlockPool>> BlockPool::create(const BlockPoolOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.validate());
  const size_t bytes = size_t(o.num_pages) * o.geometry.page_bytes();
  KVTIER_ASSIGN_OR_RETURN(auto mem, o.external.empty() ? DeviceMemory::allocate(bytes, o.memory)
                                                       : adopt_host_memory(o.external.first(bytes)));
  if (!mem->host_accessible() && !o.allow_device_only) return Status::Unimplemented("BlockPool: device memory not addressable by the CPU");
  return std::unique_ptr<BlockPool>(new BlockPool(o, std::move(mem)));
}

BlockPool::BlockPool(const BlockPoolOptions& o, std::unique_ptr<DeviceMemory> mem)
    : geometry_(o.geometry),
      num_pages_(o.num_pages),
      page_bytes_(o.geometry.page_bytes()),
      memory_(std::move(mem)),
      base_(memory_->data()),
      refcount_(o.num_pages, 0) {
  free_.reserve(num_pages_);
  // Lowest page ids are handed out first (stack popped from the back).
  for (uint32_t i = num_pages_; i-- > 0;) free_.push_back(i);
}

Result<PageId> BlockPool::allocate() {
  if (free_.empty()) return Status::NoSpace("BlockPool: all " + std::to_string(num_pages_) + " pages in use");
  uint32_t i = free_.back();
  free_.pop_back();
  refcount_[i] = 1;
  ++allocations_;
  return PageId(i);
}

Status BlockPool::allocate(uint32_t n, std::vector<PageId>& out) {
  if (n > free_.size())
    return Status::NoSpace("BlockPool: asked for " + std::to_string(n) + " pages, " + std::to_string(free_.size()) +
                           " free");
  for (uint32_t k = 0; k < n; ++k) out.push_back(*allocate());
  return Status::Ok();
}

void BlockPool::ref(PageId p) {
  assert(contains(p) && refcount_[p.value()] > 0);
  ++refcount_[p.value()];
}

void BlockPool::unref(PageId p) {
  assert(contains(p) && refcount_[p.value()] > 0);
  if (--refcount_[p.value()] == 0) {
    free_.push_back(p.value());
    ++frees_;
  }
}

uint32_t BlockPool::refcount(PageId p) const { return contains(p) ? refcount_[p.value()] : 0; }

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s;
  s.total_pages = num_pages_;
  s.free_pages = free_pages();
  s.used_pages = num_pages_ - s.free_pages;
  s.page_bytes = page_bytes_;
  s.allocations = allocations_;
  s.frees = frees_;
  return s;
}

}  // namespace kvtier
