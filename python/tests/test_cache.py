"""kvtier.Cache without a model: loads land in the caller's memory, bit for bit, from every tier."""
import threading
import time

import numpy as np
import pytest
import torch

import kvtier
from kvtier import _kvtier


def open_cache(geometry, tmp_path, pool=None, **kw):
    opts = dict(host_capacity=256 * geometry.page_bytes, disk_dir=str(tmp_path / "disk"), chunk_pages=2,
                device_capacity=64 * geometry.page_bytes)
    opts.update(kw)
    return kvtier.Cache(geometry=geometry, model_id="test-model", pool=pool, **opts)


def fill(cache, lease, n, seed):
    """Writes random K/V for positions [0, n) into the lease's pages (as a model would); returns them [n][L][2][H][D]."""
    g = cache.geometry
    kv = np.random.default_rng(seed).standard_normal((n, g.num_layers, 2, g.num_kv_heads, g.head_dim)).astype(np.float32)
    pages = lease.pages
    pos = np.arange(n)
    cache.pool[pages[pos // g.page_tokens], :, :, pos % g.page_tokens] = kv
    return kv


def read(cache, lease, n):
    g = cache.geometry
    pos = np.arange(n)
    return cache.pool[lease.pages[pos // g.page_tokens], :, :, pos % g.page_tokens]


def commit_prompt(cache, tokens, seed):
    lease = cache.load(cache.lookup(tokens))
    kv = fill(cache, lease, len(tokens), seed)
    cache.commit(lease, tokens)
    cache.drain()
    return kv


@pytest.mark.parametrize("tier", ["device", "host", "disk"])
def test_loads_land_in_caller_memory_bit_exact(geometry, tmp_path, tier):
    pool = torch.zeros(kvtier.pool_shape(geometry, 64))
    with open_cache(geometry, tmp_path, pool=pool) as cache:
        assert np.shares_memory(cache.pool, pool.numpy())
        assert cache.pool_tensor().data_ptr() == pool.data_ptr()
        tokens = list(range(1000, 1000 + 4 * 9 + 1))  # 9 whole pages: 4 chunks of 2 pages + 1 page
        kv = commit_prompt(cache, tokens, seed=1)
        if tier == "host":
            cache.evict("device", 1000)
        if tier == "disk":
            cache.flush()
        match = cache.lookup(tokens)
        cached = 36  # the disk holds whole chunks and prompts' tails (the last page here)
        assert match.cached_tokens == cached
        assert set(match.tiers) == {tier}
        with_ = cache.load(match)
        for layer in range(geometry.num_layers):
            with_.wait_layer(layer)
        assert with_.cached_end == cached
        assert with_.report["reused_tokens"][tier] == cached
        assert np.array_equal(read(cache, with_, cached), kv[:cached])  # in the caller's tensor, no copy after
        assert torch.equal(pool[torch.from_numpy(with_.pages[:1])], torch.from_numpy(cache.pool[with_.pages[:1]]))
        with_.release()


def test_numpy_pool_and_default_pool(geometry, tmp_path):
    pool = kvtier.empty_pool(geometry, 32)
    with open_cache(geometry, tmp_path, pool=pool) as cache:
        assert cache.pool.base is pool or np.shares_memory(cache.pool, pool)
        assert cache.stats()["pool_pages"] == 32
    with open_cache(geometry, tmp_path / "b") as cache:  # default: device_capacity bytes of NumPy pool
        assert cache.stats()["pool_pages"] == 64
        assert cache.pool.shape == kvtier.pool_shape(geometry, 64)


def test_chunk_keys(geometry, tmp_path):
    with open_cache(geometry, tmp_path) as cache:
        tokens = list(range(4 * 9 + 1))
        keys = cache.chunk_keys(tokens)
        assert len(keys) == 4 and len(set(keys)) == 4
        assert all(len(k) == 65 and k[32] == "-" for k in keys)
        assert cache.chunk_keys(tokens[: 4 * 4 + 1]) == keys[:2]  # a prefix's keys are a prefix of the keys
        assert cache.chunk_keys(tokens, salt="tenant-b")[0] != keys[0]
        assert cache.chunk_keys(np.array(tokens, dtype=np.int64)) == keys
        assert cache.chunk_keys(torch.tensor(tokens)) == keys


def test_salted_namespaces_do_not_share(geometry, tmp_path):
    with open_cache(geometry, tmp_path) as cache:
        tokens = list(range(4 * 5 + 1))
        commit_prompt(cache, tokens, seed=2)
        assert cache.lookup(tokens).cached_tokens == 20
        assert cache.lookup(tokens, salt="other").cached_tokens == 0


def test_errors_carry_status_code(geometry, tmp_path):
    with pytest.raises(kvtier.Error) as e:
        open_cache(geometry, tmp_path, no_such_option=1)
    assert e.value.code == "InvalidArgument" and "no_such_option" in e.value.message
    with pytest.raises(kvtier.Error) as e:
        kvtier.Geometry(num_layers=0, num_kv_heads=1, head_dim=8)
    assert e.value.code == "InvalidArgument"
    with pytest.raises(kvtier.Error) as e:
        open_cache(geometry, tmp_path, write_policy="sometimes")
    assert e.value.code == "InvalidArgument"
    unaligned = np.zeros(64 * geometry.page_bytes + 8, dtype=np.uint8)[8:]
    with pytest.raises(kvtier.Error, match="aligned"):
        open_cache(geometry, tmp_path, pool=unaligned)
    with open_cache(geometry, tmp_path) as cache:
        match = cache.lookup(list(range(9)))
        lease = cache.load(match)
        with pytest.raises(kvtier.Error) as e:
            cache.load(match)
        assert e.value.code == "FailedPrecondition"
    assert cache.closed
    lease.release()  # released by close(); releasing again is harmless
    with pytest.raises(kvtier.Error) as e:
        lease.wait_layer(0)
    assert e.value.code == "FailedPrecondition"
    with pytest.raises(kvtier.Error) as e:
        cache.lookup([1, 2, 3])
    assert e.value.code == "FailedPrecondition"
    assert isinstance(e.value, RuntimeError)


def test_a_stale_match_is_refused_not_loaded_over_another_lease(geometry, tmp_path):
    """A Match whose device pages were evicted, and handed to another lease, is refused (look up again)."""
    with open_cache(geometry, tmp_path, device_capacity=8 * geometry.page_bytes) as cache:
        tokens = list(range(1, 4 * geometry.page_tokens + 2))
        commit_prompt(cache, tokens, seed=1)
        match = cache.lookup(tokens)
        assert set(match.tiers) == {"device"}
        cache.evict("device", 8)
        other = cache.fresh(7 * geometry.page_tokens)
        with pytest.raises(kvtier.Error) as e:
            cache.load(match)
        assert e.value.code == "Retry" and "stale" in e.value.message
        other.release()
        lease = cache.load(cache.lookup(tokens))  # found again, on the host
        assert lease.cached_end == 4 * geometry.page_tokens
        lease.release()


def test_token_ids_are_integers_in_range(geometry, tmp_path):
    """Token arrays are not cast: a wrapped int64 or a truncated float would hit another prompt's prefix."""
    with open_cache(geometry, tmp_path) as cache:
        ids = np.arange(1, 2 * geometry.page_tokens + 2)
        commit_prompt(cache, ids.tolist(), seed=2)
        assert cache.lookup(ids.astype(np.int64)).cached_tokens == 2 * geometry.page_tokens
        assert cache.lookup(ids.astype(np.uint16)).cached_tokens == 2 * geometry.page_tokens
        with pytest.raises(ValueError):
            cache.lookup(ids.astype(np.int64) + 2**32)
        with pytest.raises(ValueError):
            cache.lookup(ids.astype(np.uint64) + 2**63)
        with pytest.raises(TypeError):
            cache.lookup(ids.astype(np.float64) + 0.9)
        with pytest.raises(ValueError):
            cache.lookup([1, 2, -3])
        with pytest.raises(TypeError):
            cache.lookup([1, 2, 2**40])


def test_stats_and_leases_released_on_close(geometry, tmp_path):
    cache = open_cache(geometry, tmp_path)
    tokens = list(range(4 * 4 + 1))
    commit_prompt(cache, tokens, seed=3)
    lease = cache.load(cache.lookup(tokens))
    s = cache.stats()
    assert s["lookups"] == 2 and s["commits"] == 1 and s["reused_tokens"]["device"] == 16
    assert s["disk_present"] and not s["remote_present"]
    assert s["pool_used_pages"] > 0
    cache.close()
    assert not lease.valid
    cache.close()  # idempotent


def longest_python_pause(fn):
    """Runs fn() while a Python thread ticks; returns (fn's seconds, the longest pause between ticks during it)."""
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.02)
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    inside = [x for x in stamps if t0 <= x <= t1] or [t0]
    gaps = np.diff([t0] + inside + [t1])
    return t1 - t0, float(gaps.max())


def test_gil_released_during_loads(tmp_path):
    """A Python thread keeps running while a long disk load runs in C++ (lookup, load, waits: GIL released)."""
    g = kvtier.Geometry(num_layers=8, num_kv_heads=4, head_dim=64, dtype="f32", page_tokens=16)
    with open_cache(g, tmp_path, host_capacity=0, device_capacity=1100 * g.page_bytes, chunk_pages=16,
                    disk_capacity=1 << 30, disk_region_bytes=64 << 20) as cache:
        tokens = list(range(16 * 512 + 1))  # 128 MiB: a load of tens of milliseconds
        lease = cache.load(cache.lookup(tokens))
        cache.commit(lease, tokens)
        cache.drain()
        # A held GIL makes every call one pause as long as the call; a loaded machine can stall the
        # ticking thread now and then too, so one call of three without such a pause suffices.
        tries = []
        for _ in range(3):
            cache.flush()  # each try loads from disk
            before = cache.stats()["reused_tokens"]["disk"]
            seconds, pause = longest_python_pause(lambda: _kvtier.cpp_load_seconds(cache._impl, cache.lookup(tokens)))
            assert cache.stats()["reused_tokens"]["disk"] - before == 16 * 512
            tries.append((seconds, pause))
            if pause < max(0.75 * seconds, 0.02):
                break
        assert pause < max(0.75 * seconds, 0.02), tries


@pytest.mark.parametrize("dtype,torch_dtype", [("f16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_pools_share_memory(tmp_path, dtype, torch_dtype):
    g = kvtier.Geometry(num_layers=2, num_kv_heads=2, head_dim=8, dtype=dtype, page_tokens=4)
    for pool in (None, torch.zeros(kvtier.pool_shape(g, 16), dtype=torch_dtype)):
        with open_cache(g, tmp_path / f"{dtype}-{pool is None}", pool=pool, device_capacity=16 * g.page_bytes) as cache:
            t = cache.pool_tensor()
            assert t.dtype == torch_dtype and t.shape == kvtier.pool_shape(g, 16)
            t[3, 1, 0, 2] = 1.5
            assert cache.pool[3, 1, 0, 2, 0, 0] != 0  # NumPy sees the write (bf16: its bits as uint16)
            if pool is not None:
                assert t.data_ptr() == pool.data_ptr() and pool[3, 1, 0, 2, 0, 0].item() == 1.5


def test_a_byte_pool_gives_a_tensor_of_the_geometrys_dtype(tmp_path):
    """pool_tensor() over a uint8 torch buffer with an f16 geometry: f16 values, not the bytes."""
    g = kvtier.Geometry(num_layers=2, num_kv_heads=2, head_dim=8, dtype="f16", page_tokens=4)
    raw = torch.zeros(16 * g.page_bytes, dtype=torch.uint8)
    with open_cache(g, tmp_path, pool=raw, device_capacity=16 * g.page_bytes) as cache:
        t = cache.pool_tensor()
        assert t.dtype == torch.float16 and t.shape == kvtier.pool_shape(g, 16)
        cache.pool[7] = 64
        assert t[7].flatten()[0].item() == 64 and t[7].flatten()[-1].item() == 64
        assert t.data_ptr() == raw.data_ptr()


def test_pool_is_shared_through_dlpack(geometry, tmp_path):
    """DLPack consumers (torch.from_dlpack) see the pool's own memory: a write through either side shows in the other."""
    with open_cache(geometry, tmp_path) as cache:
        t = torch.from_dlpack(cache.pool)
        assert t.data_ptr() == cache.pool.ctypes.data and tuple(t.shape) == cache.pool.shape
        t[1, 0, 1, 2, 1, 3] = 7.0
        assert cache.pool[1, 0, 1, 2, 1, 3] == 7.0


def test_leases_belong_to_their_cache(geometry, tmp_path):
    with open_cache(geometry, tmp_path / "a") as a, open_cache(geometry, tmp_path / "b") as b:
        tokens = list(range(9))
        lease = a.load(a.lookup(tokens))
        with pytest.raises(kvtier.Error) as e:
            b.commit(lease, tokens)
        assert e.value.code == "InvalidArgument"
        with pytest.raises(kvtier.Error):
            b.load(a.lookup(tokens))
        a.commit(lease, tokens)
        assert not lease.valid


def test_lossy_disk_codec_is_approximate_and_labelled(tmp_path):
    geometry = kvtier.Geometry(num_layers=2, num_kv_heads=1, head_dim=32, dtype="f32", page_tokens=4)
    tokens = list(range(500, 500 + 4 * 8 + 1))  # 8 whole pages: 4 chunks of 2
    with open_cache(geometry, tmp_path, disk_codec="q8") as cache:
        kv = commit_prompt(cache, tokens, seed=3)
        cache.flush()
        lease = cache.load(cache.lookup(tokens))
        lease.wait_layer(geometry.num_layers - 1)
        assert lease.report["reused_tokens"]["disk"] == 32
        assert lease.report["lossy_tokens"] == 32
        got = read(cache, lease, 32)
        assert not np.array_equal(got, kv[:32])
        # q8: within half a step of each block's scale (amax / 127), plus the scale's f16 rounding.
        assert np.max(np.abs(got - kv[:32])) <= np.max(np.abs(kv)) / 127 * 0.51 + 1e-3
        lease.release()
    with open_cache(geometry, tmp_path) as exact:  # all codecs none: the q8 entries are misses
        assert exact.lookup(tokens).cached_tokens == 0
    with pytest.raises(kvtier.Error, match="q7"):
        open_cache(geometry, tmp_path / "x", disk_codec="q7")
