"""kvtier from Python: the tiered KV cache's C++ API, with zero-copy pages.

    import kvtier
    model = kvtier.Model.load("tiny.gguf")
    geometry = model.kv_geometry("f32")
    with kvtier.Cache(geometry=geometry, model_id=model.fingerprint,
                      host_capacity=64 << 20, disk_dir="/tmp/kv") as cache:
        match = cache.lookup(tokens)          # where the cached prefix lives
        lease = cache.load(match)             # loads start; pages are allocated
        for layer in range(geometry.num_layers):
            lease.wait_layer(layer)           # layer `layer` is in cache.pool
            ...                               # compute from lease.cached_end
        cache.commit(lease, tokens)           # the new pages enter the cache

The pool is one array in the page-first layout [page][layer][k|v][token]
[kv_head][head_dim] (``cache.pool``, NumPy; ``cache.pool_tensor()``, torch);
loads land in it and a model reads them there. See docs/PYTHON.md.
"""
from __future__ import annotations

import numpy as np

from . import _kvtier
from ._kvtier import Error, Geometry, Lease, Match, Model, ReferenceEngine

__all__ = ["Cache", "Error", "Geometry", "Lease", "Match", "Model", "ReferenceEngine", "Store", "empty_pool", "pool_shape"]

_NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}  # NumPy has no bfloat16: raw bits


def pool_shape(geometry: Geometry, num_pages: int) -> tuple:
    """The shape of a pool of `num_pages` pages: (pages, layers, 2 (k, v), page_tokens, kv_heads, head_dim)."""
    g = geometry
    return (num_pages, g.num_layers, 2, g.page_tokens, g.num_kv_heads, g.head_dim)


def empty_pool(geometry: Geometry, num_pages: int) -> np.ndarray:
    """A zeroed NumPy pool of `num_pages` pages for `geometry` (see pool_shape)."""
    return np.zeros(pool_shape(geometry, num_pages), dtype=_NUMPY_DTYPES[geometry.dtype])


def _as_buffer(pool):
    """A NumPy view of a NumPy array or a contiguous torch CPU tensor (no copy)."""
    if isinstance(pool, np.ndarray):
        return pool
    if type(pool).__module__.startswith("torch"):
        if pool.device.type != "cpu":
            raise ValueError("pool: a torch tensor must be on the CPU")
        if not pool.is_contiguous():
            raise ValueError("pool: the tensor must be contiguous")
        import torch
        if pool.dtype == torch.bfloat16:
            pool = pool.view(torch.int16)
        return pool.numpy()
    return np.asarray(memoryview(pool))


class Cache:
    """kvtier's tiered KV cache (src/cache/kv_cache.h), one per model and KV geometry.

    Args:
      geometry: a kvtier.Geometry (Model.kv_geometry(...) gives the model's).
      model_id: the model's identity, the namespace's fingerprint: Model.fingerprint
        (32 hex digits), 16 bytes, or any string (hashed). Caches of different
        models never share a page.
      pool: optional caller memory for the pool's pages — a NumPy array or a
        contiguous torch CPU tensor of whole pages in the page-first layout
        (pool_shape); loads land there. Default: a NumPy pool of
        device_capacity bytes.
      adapter: adapter id (part of the namespace), default none.
      **options: the server's [cache] options: device_capacity, host_capacity,
        disk_capacity (bytes), disk_dir, disk_region_bytes, disk_direct_io,
        chunk_pages, write_policy ('write_through'|'write_back'|'selective'),
        selective_hits, eviction ('lru'|'lfu'|'fifo'|'priority'|'slru'),
        hash ('xxh3'|'sha256'), layerwise, transfer_workers, remote
        ('redis://host:port': needs tier_secret_file, a file of >= 16 secret
        bytes, or KVTIER_TIER_SECRET, else remote_insecure=True), profile (a `kvtier calibrate` JSON path or dict;
        default: always load cached KV), model_cost (Model.model_cost(geometry)).

    A context manager; close() releases live leases, waits for background
    stores and shuts the tiers down. Calls may come from several threads (one
    runs at a time); every call that may block releases the GIL. Failures raise
    kvtier.Error with `.code` (kvtier's status code) and `.message`.
    """

    def __init__(self, geometry: Geometry, model_id, pool=None, adapter: str = "", **options):
        if pool is None:
            pages = max(2, _kvtier.parse_size(options.get("device_capacity", 512 << 20)) // geometry.page_bytes)
            pool = empty_pool(geometry, pages)
        self._owner = pool
        buf = _as_buffer(pool)
        self._impl = _kvtier.Cache(geometry, model_id, buf, adapter, options)
        self.geometry = geometry
        pages = self._impl.num_pages
        flat = buf.reshape(-1).view(_NUMPY_DTYPES[geometry.dtype])
        self._pool = flat[: pages * geometry.page_bytes // flat.itemsize].reshape(pool_shape(geometry, pages))

    # -- the pool ----------------------------------------------------------------
    @property
    def pool(self) -> np.ndarray:
        """The pool's pages, a NumPy view [page][layer][k|v][token][kv_head][head_dim] (bf16: uint16 bits)."""
        return self._pool

    def pool_tensor(self):
        """The pool as a torch tensor sharing its memory (torch.from_numpy; bf16 viewed as torch.bfloat16)."""
        import torch
        same = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.geometry.dtype]
        if type(self._owner).__module__.startswith("torch") and self._owner.dtype == same:
            return self._owner.reshape(-1)[: self._pool.size].reshape(self._pool.shape)
        # A pool of another dtype (a uint8 torch buffer, a NumPy array): the NumPy view's memory.
        if self.geometry.dtype == "bf16":  # torch has no uint16: the same bits as int16, viewed as bfloat16
            return torch.from_numpy(self._pool.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(self._pool)

    # -- the request path --------------------------------------------------------
    def lookup(self, tokens, salt: str | None = None) -> Match:
        """Where the cached prefix of `tokens` lives, in every tier (the last token is never cached)."""
        return self._impl.lookup(tokens, salt)

    def load(self, match: Match) -> Lease:
        """Plans and starts the loads of a Match; returns the sequence's Lease. A Match loads once."""
        return self._impl.load(match)

    def fresh(self, tokens: int, salt: str | None = None) -> Lease:
        """A Lease of pages for `tokens` positions that uses no cached KV (the no-cache baseline)."""
        return self._impl.fresh(tokens, salt)

    def commit(self, lease: Lease, tokens) -> None:
        """Caches the whole pages of `tokens` (their KV is in the lease's pages) and releases the lease."""
        self._impl.commit(lease, tokens)

    def chunk_keys(self, tokens, salt: str | None = None) -> list[str]:
        """Content-addressed keys ('<namespace>-<chunk hash>', hex) of the whole chunks of `tokens`."""
        return self._impl.chunk_keys(tokens, salt)

    # -- operations --------------------------------------------------------------
    def stats(self) -> dict:
        """The cache's counters (lookups, reused tokens and bytes per tier, pool and host occupancy, ...)."""
        return self._impl.stats()

    def drain(self) -> None:
        """Waits for every background store (write-through copies to host, disk, remote)."""
        self._impl.drain()

    def flush(self) -> None:
        """Drops every cached page on the device and host tiers (disk and remote keep theirs)."""
        self._impl.flush()

    def evict(self, tier: str, pages: int) -> None:
        """Evicts up to `pages` cached pages from 'device' or 'host', in policy order."""
        self._impl.evict(tier, pages)

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def close(self) -> None:
        """Releases live leases, waits for background stores, shuts the tiers down. Idempotent."""
        self._impl.close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Store:
    """kvtier's host, disk and remote tiers as a batch key-value store of KV chunks (src/cache/chunk_store.h).

    For an engine that keeps its own device cache and prefix index: `exists`
    (how many leading keys are stored), `get` into the caller's host buffers,
    `set` from them — the shape of SGLang's HiCache storage backends and
    LMCache's storage backends (docs/PYTHON.md maps their calls).

    Args:
      geometry: the KV geometry (Model.kv_geometry, kvtier.Geometry).
      model_id: the namespace of keys that are not kvtier chunk keys (see Cache).
      chunk_pages: pages per chunk (a payload holds 1..chunk_pages pages).
      **options: host_capacity, disk_dir, disk_capacity, disk_region_bytes,
        disk_direct_io, remote — as for Cache.

    Keys: kvtier chunk keys ('<namespace>-<hash>', Cache.chunk_keys) stand for
    themselves, so a Store reads what a Cache's disk or remote tier wrote; any
    other string is hashed (XXH3-128) under model_id's namespace. A payload is
    one layer-major chunk, payload_shape(pages) =
    (layers, pages, 2 (k, v), page_tokens, kv_heads, head_dim), in a
    C-contiguous NumPy array or torch CPU tensor. Reads are verified
    (checksums); calls release the GIL and may come from any thread.
    """

    def __init__(self, geometry: Geometry, model_id, chunk_pages: int = 16, **options):
        self.geometry, self.chunk_pages = geometry, chunk_pages
        self._impl = _kvtier.Store(geometry, model_id, chunk_pages, options)

    def payload_shape(self, pages: int | None = None) -> tuple:
        g = self.geometry
        return (g.num_layers, pages or self.chunk_pages, 2, g.page_tokens, g.num_kv_heads, g.head_dim)

    def empty_payload(self, pages: int | None = None) -> np.ndarray:
        return np.zeros(self.payload_shape(pages), dtype=_NUMPY_DTYPES[self.geometry.dtype])

    def exists(self, keys) -> int:
        """The number of leading `keys` some tier holds (a prefix query: one round trip per tier)."""
        return self._impl.exists(list(keys))

    def get(self, keys, buffers) -> list[bool]:
        """Reads each key's chunk into its buffer (fastest tier first); True where it was found."""
        return self._impl.get(list(keys), [_as_buffer(b) for b in buffers])

    def set(self, keys, payloads) -> list[bool]:
        """Stores each payload under its key in every tier (write-through); True where some tier holds it."""
        return self._impl.set(list(keys), [_as_buffer(p) for p in payloads])

    def flush(self) -> None:
        """Makes accepted sets durable (disk)."""
        self._impl.flush()

    def stats(self) -> dict:
        return self._impl.stats()

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def close(self) -> None:
        self._impl.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
