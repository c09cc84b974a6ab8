// kvtier.Cache / Match / Lease: the KVCache facade, call for call.
#include "py_cache.h"

#include "memory/external_memory.h"

namespace kvtier::python {

KVCache& CacheHandle::get() {
  if (!cache) throw StatusError(Status::FailedPrecondition("kvtier.Cache is closed"));
  return *cache;
}

// With the GIL released while it waits for the mutex (a drain may hold it for seconds), when the
// caller holds it (Python dropped the lease).
LeaseHandle::~LeaseHandle() {
  if (!owner) return;
  std::optional<py::gil_scoped_release> nogil;
  if (PyGILState_Check()) nogil.emplace();
  std::lock_guard lk(owner->mu);
  release_locked();
}

void LeaseHandle::release_locked() {
  owner->leases.erase(this);
  if (lease.valid() && owner->cache) owner->cache->release(lease);
}

namespace {

std::shared_ptr<CacheHandle> open_cache(const KVGeometry& g, const py::handle& model_id, const py::buffer& pool,
                                        const std::string& adapter, const py::dict& options) {
  auto h = std::make_shared<CacheHandle>();
  KVCacheOptions o = cache_options(g, options);
  o.pool_memory = contiguous_bytes(pool, /*writable=*/true, "pool");
  h->pool_owner = pool;
  h->model_id = to_model_id(model_id);
  h->adapter = adapter;
  {
    py::gil_scoped_release nogil;
    auto c = KVCache::create(o);
    if (!c.ok()) throw StatusError(c.status());
    h->cache = std::move(c).value();
  }
  return h;
}

void close_cache(CacheHandle& h) {
  std::optional<py::gil_scoped_release> nogil;
  if (PyGILState_Check()) nogil.emplace();
  std::lock_guard lk(h.mu);
  if (!h.cache) return;
  while (!h.leases.empty()) (*h.leases.begin())->release_locked();
  (void)h.cache->drain();
  h.cache.reset();
}

}  // namespace

CacheHandle::~CacheHandle() { close_cache(*this); }

namespace {

py::dict tiers_dict(const uint64_t (&v)[kNumTiers]) {
  py::dict d;
  for (int t = 0; t < kNumTiers; ++t) d[py::str(std::string(tier_name(TierKind(t))))] = v[t];
  return d;
}
py::dict tiers_dict(const uint32_t (&v)[kNumTiers]) {
  uint64_t w[kNumTiers];
  for (int t = 0; t < kNumTiers; ++t) w[t] = v[t];
  return tiers_dict(w);
}

py::dict stats_dict(const KVCacheStats& s) {
  py::dict d;
  d["lookups"] = s.lookups;
  d["lookup_tokens"] = s.lookup_tokens;
  d["reused_tokens"] = tiers_dict(s.reused_tokens_by_tier);
  d["recomputed_cached_tokens"] = s.recomputed_cached_tokens;
  d["bytes_loaded"] = tiers_dict(s.bytes_loaded_by_tier);
  d["bytes_stored"] = tiers_dict(s.bytes_stored_by_tier);
  d["evicted_pages"] = tiers_dict(s.evicted_pages_by_tier);
  d["demoted_pages"] = s.demoted_pages;
  d["spilled_chunks"] = s.spilled_chunks;
  d["load_failures"] = s.load_failures;
  d["prefetched_pages"] = s.prefetched_pages;
  d["commits"] = s.commits;
  d["pool_pages"] = s.pool.total_pages;
  d["pool_used_pages"] = s.pool.used_pages;
  d["host_slots"] = s.host_slots;
  d["host_free_slots"] = s.host_free_slots;
  d["disk_present"] = s.disk_present;
  d["remote_present"] = s.remote_present;
  d["disk_degraded"] = s.disk_degraded;
  d["remote_degraded"] = s.remote_degraded;
  return d;
}

py::dict report_dict(const LeaseReport& r) {
  py::dict d;
  d["reused_tokens"] = tiers_dict(r.reused_tokens_by_tier);
  d["recomputed_cached_tokens"] = r.recomputed_cached_tokens;
  d["bytes_loaded"] = tiers_dict(r.bytes_loaded_by_tier);
  d["load_wait_s"] = double(r.load_wait_ns) * 1e-9;
  d["lossy_tokens"] = r.lossy_tokens;  // reused tokens from lossy codec entries (approximate KV)
  return d;
}

std::shared_ptr<MatchHandle> make_match(std::shared_ptr<CacheHandle> owner, CacheLookup&& look, uint32_t page_tokens) {
  auto m = std::make_shared<MatchHandle>();
  m->owner = std::move(owner);
  m->prompt_tokens = look.prompt_tokens;
  m->cached_tokens = look.cached_pages() * page_tokens;
  for (const CachedRun& run : look.runs) m->tiers.insert(m->tiers.end(), run.pages, run.tier);
  m->lookup = std::move(look);
  return m;
}

std::string key_string(const ChunkKey& k) { return k.ns.to_hex() + "-" + k.hash.to_hex(); }

// The lease `make(cache)` returns, registered in the same hold of the mutex: a close() between
// the two left a lease it did not know of, whose release later ran on the freed cache.
template <class Make>
std::shared_ptr<LeaseHandle> adopt_lease(const std::shared_ptr<CacheHandle>& owner, Make&& make) {
  auto l = std::make_shared<LeaseHandle>();
  l->owner = owner;
  owner->locked([&](KVCache& c) {
    l->lease = value_or_throw(make(c));
    owner->leases.insert(l.get());
  });
  return l;
}

// Runs f(lease) under the lease's cache mutex with the GIL released.
template <class F>
auto on_lease(LeaseHandle& l, F&& f) {
  if (!l.owner) throw StatusError(Status::FailedPrecondition("kvtier.Lease: released"));
  return l.owner->locked([&](KVCache& c) {
    if (!l.lease.valid()) throw StatusError(Status::FailedPrecondition("kvtier.Lease: released or committed"));
    return f(c, l.lease);
  });
}

void register_match(py::module_& m) {
  py::class_<MatchHandle, std::shared_ptr<MatchHandle>>(
      m, "Match", "Where the cached prefix of a prompt lives (Cache.lookup). Pass it once to Cache.load.")
      .def_readonly("prompt_tokens", &MatchHandle::prompt_tokens)
      .def_readonly("cached_tokens", &MatchHandle::cached_tokens, "Tokens of the prompt's prefix cached in some tier (whole pages).")
      .def_property_readonly("tiers",
                             [](const MatchHandle& h) {
                               std::vector<std::string> out;
                               for (TierKind t : h.tiers) out.emplace_back(tier_name(t));
                               return out;
                             },
                             "The tier of each cached page, in prompt order: 'device', 'host', 'disk' or 'remote'.")
      .def_property_readonly("consumed", [](const MatchHandle& h) { return !h.lookup.has_value(); });
}

void register_lease(py::module_& m) {
  py::class_<LeaseHandle, std::shared_ptr<LeaseHandle>>(
      m, "Lease",
      "The pages of one running sequence and the loads into them (Cache.load / Cache.fresh).\n"
      "Positions [0, cached_end) come from the cache (after wait_layer); compute from cached_end.\n"
      "If recompute_end > recompute_begin, positions [recompute_begin, recompute_end) must be computed\n"
      "first (waiting with wait_front_layer). Release it, or commit it with Cache.commit.")
      .def_property_readonly("pages",
                             [](LeaseHandle& l) {
                               const auto p = l.read([](const CacheLease& x) { return x.pages(); });  // a copy
                               py::array_t<int64_t> a(py::ssize_t(p.size()));
                               for (size_t i = 0; i < p.size(); ++i) a.mutable_at(py::ssize_t(i)) = p[i].value();
                               return a;
                             },
                             "Page table (int64 array): page i holds positions [i*P, (i+1)*P); an index into Cache.pool.")
      .def_property_readonly("cached_end", [](LeaseHandle& l) { return l.read([](const CacheLease& x) { return x.cached_end(); }); })
      .def_property_readonly("recompute_begin",
                             [](LeaseHandle& l) { return l.read([](const CacheLease& x) { return x.recompute_begin(); }); })
      .def_property_readonly("recompute_end",
                             [](LeaseHandle& l) { return l.read([](const CacheLease& x) { return x.recompute_end(); }); })
      .def_property_readonly("valid", [](LeaseHandle& l) { return l.read([](const CacheLease& x) { return x.valid(); }); })
      .def("wait_layer", [](LeaseHandle& l, uint32_t layer) { on_lease(l, [&](KVCache&, CacheLease& x) { throw_if_error(x.wait_layer(LayerIdx(layer))); }); },
           py::arg("layer"), "Blocks (GIL released) until layer `layer` of every load is in the pool.")
      .def("wait_front_layer",
           [](LeaseHandle& l, uint32_t layer) { on_lease(l, [&](KVCache&, CacheLease& x) { throw_if_error(x.wait_front_layer(LayerIdx(layer))); }); },
           py::arg("layer"), "Blocks until layer `layer` of the loads before recompute_begin is in the pool.")
      .def("loads_done", [](LeaseHandle& l) { return on_lease(l, [](KVCache&, CacheLease& x) { return x.loads_done(); }); })
      .def("grow", [](LeaseHandle& l, size_t tokens) { on_lease(l, [&](KVCache& c, CacheLease& x) { throw_if_error(c.grow(x, tokens)); }); },
           py::arg("tokens"), "Makes the page table cover at least `tokens` positions (decode).")
      .def("fall_back", [](LeaseHandle& l) { return on_lease(l, [](KVCache& c, CacheLease& x) { return value_or_throw(c.fall_back(x)); }); },
           "After a failed wait: waits for the loads and returns the position to recompute from. Read `pages`\n"
           "after it: pages shared with other sequences past that position are replaced by the lease's own.")
      .def_property_readonly("report",
                             [](LeaseHandle& l) {  // waits for the loads: GIL released, under the cache's mutex
                               if (!l.owner || !l.lease.valid()) return report_dict(l.lease.report());
                               return report_dict(on_lease(l, [](KVCache&, CacheLease& x) { return x.report(); }));
                             })
      .def("release",
           [](LeaseHandle& l) {
             if (!l.owner) return;
             py::gil_scoped_release nogil;
             std::lock_guard lk(l.owner->mu);
             l.release_locked();
           },
           "Releases the pages without caching them (idempotent).");
}

void register_cache_class(py::module_& m) {
  py::class_<CacheHandle, std::shared_ptr<CacheHandle>>(m, "Cache", "The C++ KVCache (use kvtier.Cache).")
      .def(py::init(&open_cache), py::arg("geometry"), py::arg("model_id"), py::arg("pool"), py::arg("adapter") = "",
           py::arg("options") = py::dict())
      .def("close", &close_cache)
      .def_property_readonly("closed",
                             [](CacheHandle& h) {
                               py::gil_scoped_release nogil;
                               std::lock_guard lk(h.mu);
                               return !h.cache;
                             })
      .def_property_readonly("num_pages", [](CacheHandle& h) { return h.locked([](KVCache& c) { return c.pool().num_pages(); }); })
      .def("lookup",
           [](std::shared_ptr<CacheHandle> h, const py::handle& tokens, std::optional<std::string> salt) {
             auto t = to_tokens(tokens);
             uint32_t page_tokens = 0;
             auto look = h->locked([&](KVCache& c) {
               page_tokens = c.geometry().page_tokens;
               return c.lookup(h->ns(salt), t);
             });
             return make_match(h, value_or_throw(std::move(look)), page_tokens);
           },
           py::arg("tokens"), py::arg("salt") = py::none())
      .def("load",
           [](std::shared_ptr<CacheHandle> h, MatchHandle& match) {
             if (!match.lookup) throw StatusError(Status::FailedPrecondition("Cache.load: this Match was already loaded"));
             if (match.owner != h) throw StatusError(Status::InvalidArgument("Cache.load: the Match is another cache's"));
             CacheLookup look = std::move(*match.lookup);
             match.lookup.reset();
             return adopt_lease(h, [&](KVCache& c) {
               const Plan plan = c.plan(look);
               return c.apply(std::move(look), plan);
             });
           },
           py::arg("match"))
      .def("fresh",
           [](std::shared_ptr<CacheHandle> h, size_t tokens, std::optional<std::string> salt) {
             return adopt_lease(h, [&](KVCache& c) { return c.fresh(h->ns(salt), tokens); });
           },
           py::arg("tokens"), py::arg("salt") = py::none())
      .def("commit",
           [](CacheHandle& h, LeaseHandle& l, const py::handle& tokens) {
             if (l.owner.get() != &h) throw StatusError(Status::InvalidArgument("Cache.commit: the Lease is another cache's"));
             auto t = to_tokens(tokens);
             on_lease(l, [&](KVCache& c, CacheLease& x) {
               h.leases.erase(&l);
               throw_if_error(c.commit(x, t));
             });
           },
           py::arg("lease"), py::arg("tokens"))
      .def("chunk_keys",
           [](std::shared_ptr<CacheHandle> h, const py::handle& tokens, std::optional<std::string> salt) {
             auto t = to_tokens(tokens);
             auto keys = h->locked([&](KVCache& c) { return c.chunk_keys(h->ns(salt), t); });
             std::vector<std::string> out;
             for (const auto& k : keys) out.push_back(key_string(k));
             return out;
           },
           py::arg("tokens"), py::arg("salt") = py::none())
      .def("stats", [](CacheHandle& h) { return stats_dict(h.locked([](KVCache& c) { return c.stats(); })); })
      .def("drain", [](CacheHandle& h) { throw_if_error(h.locked([](KVCache& c) { return c.drain(); })); })
      .def("flush", [](CacheHandle& h) { throw_if_error(h.locked([](KVCache& c) { return c.flush(); })); })
      .def("evict",
           [](CacheHandle& h, const std::string& tier, uint32_t pages) {
             const TierKind t = tier == "device" ? TierKind::kDevice : tier == "host" ? TierKind::kHost : TierKind::kDisk;
             if (t == TierKind::kDisk) throw StatusError(Status::InvalidArgument("Cache.evict: tier must be 'device' or 'host'"));
             throw_if_error(h.locked([&](KVCache& c) { return c.evict(t, pages); }));
           },
           py::arg("tier"), py::arg("pages"));
}

}  // namespace

void register_cache(py::module_& m) {
  m.attr("EXTERNAL_MEMORY_ALIGNMENT") = kExternalMemoryAlignment;
  register_match(m);
  register_lease(m);
  register_cache_class(m);
}

}  // namespace kvtier::python
