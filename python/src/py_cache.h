// The objects behind kvtier.Cache, kvtier.Match and kvtier.Lease.
//
// A CacheHandle owns one KVCache whose pool lives in a caller's buffer (the
// Python package always passes one). KVCache belongs to one control thread,
// so every call takes the handle's mutex with the GIL released: Python
// threads may share a Cache, one call runs at a time, and the interpreter
// runs on while a call waits or does I/O.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "bindings.h"
#include "cache/kv_cache.h"

namespace kvtier::python {

struct LeaseHandle;

struct CacheHandle {
  std::mutex mu;
  py::object pool_owner;           // the buffer the pool's pages live in: declared first, freed last
  std::unique_ptr<KVCache> cache;  // null once closed
  PageHash model_id;
  std::string adapter;
  std::set<LeaseHandle*> leases;   // live leases: released when the cache closes

  // Closes the cache (close_cache) if the program did not: its background copies read the pool.
  ~CacheHandle();
  KVCache& get();
  Namespace ns(const std::optional<std::string>& salt) const { return Namespace{model_id, adapter, salt.value_or("")}; }
  // Runs f(KVCache&) under the mutex with the GIL released.
  template <class F>
  auto locked(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard lk(mu);
    return f(get());
  }
};

struct MatchHandle {
  std::shared_ptr<CacheHandle> owner;
  std::optional<CacheLookup> lookup;  // moved out by load()
  // What the lookup found, kept readable after load():
  size_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  std::vector<TierKind> tiers;  // of each cached page
};

struct LeaseHandle {
  std::shared_ptr<CacheHandle> owner;
  CacheLease lease;
  ~LeaseHandle();
  // Releases without caching (no-op when already released or committed). Caller holds owner->mu.
  void release_locked();
  // f(lease) read under the cache's mutex with the GIL released: another thread may be growing,
  // committing or closing it.
  template <class F>
  auto read(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard lk(owner->mu);
    return f(static_cast<const CacheLease&>(lease));
  }
};

// KVCacheOptions from the Python keyword options (docs/PYTHON.md lists them).
KVCacheOptions cache_options(const KVGeometry& geometry, const py::dict& options);

}  // namespace kvtier::python
