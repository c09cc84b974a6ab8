// kvtier.Store: ChunkStore (src/cache/chunk_store.h) — batch exists / get /
// set of KV chunks by key on the host, disk and remote tiers, for engines
// that keep their own device cache (docs/PYTHON.md maps vLLM, SGLang and
// LMCache calls onto it).
#include <cstring>
#include <set>
#include <shared_mutex>

#include "cache/chunk_store.h"
#include "common/page_hash.h"
#include "py_cache.h"

namespace kvtier::python {

namespace {

struct StoreHandle {
  std::shared_mutex mu;               // calls share it; close() takes it alone
  std::unique_ptr<ChunkStore> store;  // null once closed
  ChunkGeometry geometry;
  PageHash ns;                        // namespace seed of keys that are not kvtier chunk keys

  // Runs f(ChunkStore&) with the GIL released (ChunkStore is thread-safe).
  template <class F>
  auto call(F&& f) {
    py::gil_scoped_release nogil;
    std::shared_lock lk(mu);
    if (!store) throw StatusError(Status::FailedPrecondition("kvtier.Store is closed"));
    return f(*store);
  }
};

// A kvtier chunk key ('<ns>-<hash>', Cache.chunk_keys) as itself; any other
// string as the XXH3-128 of its bytes under the store's namespace.
ChunkKey to_chunk_key(const StoreHandle& h, const std::string& key) {
  ChunkKey k;
  const std::string_view v(key);
  if (v.size() == 65 && v[32] == '-' && parse_hash_hex(v.substr(0, 32), k.ns) && parse_hash_hex(v.substr(33), k.hash)) return k;
  return ChunkKey{h.ns, hash_bytes(HashAlgo::kXXH3_128, key.data(), key.size())};
}

std::vector<ChunkKey> to_chunk_keys(const StoreHandle& h, const std::vector<std::string>& keys) {
  std::vector<ChunkKey> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(to_chunk_key(h, k));
  return out;
}

std::span<std::byte> buffer_bytes(const py::buffer& b, bool writable) { return contiguous_bytes(b, writable, "Store: buffers"); }

std::shared_ptr<StoreHandle> open_store(const KVGeometry& g, const py::handle& model_id, uint32_t chunk_pages,
                                        const py::dict& options) {
  static const std::set<std::string> allowed = {"host_capacity", "disk_dir",       "disk_capacity",
                                                "disk_region_bytes", "disk_direct_io", "remote",
                                                "remote_insecure", "tier_secret_file", "remote_password_file"};
  for (auto [k, v] : options)
    if (!allowed.count(py::cast<std::string>(k)))
      throw StatusError(Status::InvalidArgument("Store: unknown option '" + py::cast<std::string>(k) + "'"));
  py::dict with_chunks(options);
  with_chunks["chunk_pages"] = chunk_pages;
  const KVCacheOptions c = cache_options(g, with_chunks);  // the same names and parsing as Cache's
  ChunkStoreOptions o;
  o.tier_config() = c.tier_config();  // the tier factory builds them, as for a Cache
  o.geometry = ChunkGeometry{g, chunk_pages};
  auto h = std::make_shared<StoreHandle>();
  h->ns = namespace_seed(Namespace{to_model_id(model_id), "", ""}, HashAlgo::kXXH3_128);
  h->geometry = o.geometry;
  py::gil_scoped_release nogil;
  h->store = value_or_throw(ChunkStore::create(o));
  return h;
}

size_t store_exists(StoreHandle& h, const std::vector<std::string>& keys) {
  const auto ck = to_chunk_keys(h, keys);
  std::vector<PageHash> hashes;
  for (const auto& k : ck) {
    if (k.ns != ck.front().ns) break;  // one namespace per query: a change ends the run
    hashes.push_back(k.hash);
  }
  if (hashes.empty()) return size_t(0);
  return h.call([&](ChunkStore& s) { return s.exists(ck.front().ns, hashes); });
}

std::vector<bool> store_get(StoreHandle& h, const std::vector<std::string>& keys, const std::vector<py::buffer>& outs) {
  if (keys.size() != outs.size()) throw py::value_error("Store.get: one buffer per key");
  const auto ck = to_chunk_keys(h, keys);
  std::vector<GetOp> ops;
  for (size_t i = 0; i < ck.size(); ++i) ops.push_back(GetOp{ck[i], 0, kAllLayers, buffer_bytes(outs[i], true), {}, 0});
  h.call([&](ChunkStore& s) { s.get(ops); });
  std::vector<bool> ok;
  for (const auto& op : ops) {
    if (!op.status.ok() && op.status.code() != StatusCode::kNotFound && op.status.code() != StatusCode::kCorruption)
      throw StatusError(op.status);  // a missing or dropped chunk is a miss; anything else (a too-small buffer) raises
    ok.push_back(op.status.ok());
  }
  return ok;
}

std::vector<bool> store_set(StoreHandle& h, const std::vector<std::string>& keys, const std::vector<py::buffer>& payloads) {
  if (keys.size() != payloads.size()) throw py::value_error("Store.set: one payload per key");
  const ChunkGeometry& g = h.geometry;
  const auto ck = to_chunk_keys(h, keys);
  std::vector<std::vector<PageHash>> pages(ck.size());
  std::vector<PutOp> ops;
  for (size_t i = 0; i < ck.size(); ++i) {
    const auto bytes = buffer_bytes(payloads[i], false);
    const size_t per_page = g.payload_bytes(1);
    if (bytes.size() % per_page != 0 || bytes.empty() || bytes.size() / per_page > g.chunk_pages)
      throw StatusError(Status::InvalidArgument("Store.set: a payload must be 1.." + std::to_string(g.chunk_pages) +
                                                " pages of " + std::to_string(per_page) + " bytes"));
    // The store does not know the pages' own hashes: each page is named by the chunk key.
    pages[i].assign(bytes.size() / per_page, ck[i].hash);
    ops.push_back(PutOp{ck[i], pages[i], bytes, {}});
  }
  h.call([&](ChunkStore& s) { s.set(ops); });
  std::vector<bool> ok;
  for (const auto& op : ops) ok.push_back(op.status.ok());
  return ok;
}

py::dict store_stats(StoreHandle& h) {
  const ChunkStoreStats s = h.call([](ChunkStore& st) { return st.stats(); });
  py::dict d, hits, tiers;
  d["exists_calls"] = s.exists_calls;
  d["exists_keys"] = s.exists_keys;
  d["exists_hits"] = s.exists_hits;
  d["gets"] = s.gets;
  d["get_misses"] = s.get_misses;
  d["sets"] = s.sets;
  d["set_failures"] = s.set_failures;
  for (int t = 1; t < kNumTiers; ++t) {
    hits[py::str(std::string(tier_name(TierKind(t))))] = s.get_hits_by_tier[t];
    if (!s.present[t]) continue;
    py::dict ts;
    ts["entries"] = s.tiers[t].entries;
    ts["bytes"] = s.tiers[t].bytes;
    ts["capacity_bytes"] = s.tiers[t].capacity_bytes;
    ts["evictions"] = s.tiers[t].evictions;
    ts["checksum_failures"] = s.tiers[t].checksum_failures;
    tiers[py::str(std::string(tier_name(TierKind(t))))] = ts;
  }
  d["get_hits"] = hits;
  d["tiers"] = tiers;
  return d;
}

}  // namespace

void register_store(py::module_& m) {
  py::class_<StoreHandle, std::shared_ptr<StoreHandle>>(m, "Store", "The C++ ChunkStore (use kvtier.Store).")
      .def(py::init(&open_store), py::arg("geometry"), py::arg("model_id"), py::arg("chunk_pages"), py::arg("options"))
      .def("exists", &store_exists, py::arg("keys"))
      .def("get", &store_get, py::arg("keys"), py::arg("buffers"))
      .def("set", &store_set, py::arg("keys"), py::arg("payloads"))
      .def("flush", [](StoreHandle& h) { throw_if_error(h.call([](ChunkStore& s) { return s.flush(); })); })
      .def("stats", &store_stats)
      .def("close",
           [](StoreHandle& h) {
             py::gil_scoped_release nogil;
             std::unique_lock lk(h.mu);
             h.store.reset();
           })
      .def_property_readonly("closed", [](StoreHandle& h) {
        std::shared_lock lk(h.mu);
        return !h.store;
      });
}

}  // namespace kvtier::python
