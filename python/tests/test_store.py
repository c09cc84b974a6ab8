"""kvtier.Store: batch exists/get/set by key on host and disk, and reading what a Cache wrote."""
import numpy as np
import pytest
import torch

import kvtier
from test_cache import commit_prompt, open_cache


def payloads(store, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(store.payload_shape()).astype(np.float32) for _ in range(n)]


def test_set_exists_get_round_trip(geometry, tmp_path):
    with kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=4 * geometry.page_bytes,
                      disk_dir=str(tmp_path / "d"), disk_region_bytes=1 << 20, disk_capacity=4 << 20) as store:
        keys = [f"request-7/chunk-{i}" for i in range(4)]
        data = payloads(store, 4, 1)
        assert store.set(keys, data) == [True] * 4
        assert store.exists(keys) == 4
        assert store.exists(keys[:2] + ["absent"] + keys[2:]) == 2  # leading hits only
        outs = [store.empty_payload() for _ in range(5)]
        assert store.get(keys + ["absent"], outs) == [True] * 4 + [False]
        for o, d in zip(outs, data):
            assert np.array_equal(o, d)
        s = store.stats()
        assert s["get_hits"]["host"] == 2 and s["get_hits"]["disk"] == 2  # the host holds the newest two
        assert s["get_misses"] == 1 and s["tiers"]["disk"]["entries"] == 4
        # torch tensors work as buffers, without copies
        t = torch.zeros(store.payload_shape())
        assert store.get(keys[:1], [t]) == [True] and np.array_equal(t.numpy(), data[0])


def test_partial_chunks_and_bad_payloads(geometry, tmp_path):
    with kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=8 * geometry.page_bytes) as store:
        one = store.empty_payload(1) + 3
        assert store.set(["one-page"], [one]) == [True]
        out = store.empty_payload(2)
        assert store.get(["one-page"], [out]) == [True]
        assert np.array_equal(out.reshape(-1)[: one.size], one.reshape(-1))
        with pytest.raises(kvtier.Error) as e:
            store.set(["bad"], [np.zeros(7, dtype=np.float32)])
        assert e.value.code == "InvalidArgument"
    with pytest.raises(kvtier.Error) as e:
        kvtier.Store(geometry, "m", host_capacity=0)
    assert e.value.code == "InvalidArgument"
    with pytest.raises(kvtier.Error):
        kvtier.Store(geometry, "m", write_policy="write_back")  # not a Store option
    assert store.closed
    with pytest.raises(kvtier.Error) as e:
        store.exists(["x"])
    assert e.value.code == "FailedPrecondition"


def test_store_reads_a_caches_disk_chunks(geometry, tmp_path):
    """A Cache writes chunks through to disk; a Store on that directory finds them by Cache.chunk_keys."""
    tokens = list(range(500, 500 + 4 * 9 + 1))
    with open_cache(geometry, tmp_path) as cache:
        kv = commit_prompt(cache, tokens, seed=9)
        keys = cache.chunk_keys(tokens)
    with kvtier.Store(geometry, "test-model", chunk_pages=2, host_capacity=0, disk_dir=str(tmp_path / "disk"),
                      disk_capacity=8 << 30) as store:
        assert store.exists(keys) == len(keys) == 4
        out = store.empty_payload()
        assert store.get(keys[1:2], [out]) == [True]
        # chunk 1 = positions [8, 16): payload [layer][page][k|v][token][head][dim] vs kv [pos][layer][k|v][head][dim]
        expect = kv[8:16].reshape(2, 4, geometry.num_layers, 2, geometry.num_kv_heads, geometry.head_dim)
        assert np.array_equal(out, expect.transpose(2, 0, 3, 1, 4, 5))


def test_corrupt_chunks_are_misses_not_bytes(geometry, tmp_path):
    """A chunk whose bytes fail their checksum on disk is reported missing (and dropped), never returned."""
    disk = tmp_path / "d"
    with kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=0, disk_dir=str(disk), disk_region_bytes=1 << 20,
                      disk_capacity=4 << 20) as store:
        assert store.set(["a", "b"], payloads(store, 2, 3)) == [True, True]
        store.flush()
    for f in disk.iterdir():  # flip one byte in every 4 KiB past the first 8 KiB of each region file
        data = bytearray(f.read_bytes())
        for off in range(8192, len(data), 4096):
            data[off] ^= 0x5A
        f.write_bytes(bytes(data))
    with kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=0, disk_dir=str(disk), disk_region_bytes=1 << 20,
                      disk_capacity=4 << 20) as store:
        outs = [store.empty_payload() for _ in range(2)]
        assert store.get(["a", "b"], outs) == [False, False]
        assert store.exists(["a", "b"]) == 0


def test_remote_without_a_tier_secret_is_refused(geometry, tmp_path, redis_url):
    """remote= needs tier_secret_file (or KVTIER_TIER_SECRET) unless remote_insecure=True says otherwise."""
    with pytest.raises(kvtier.Error, match="tier-secret-file"):
        open_cache(geometry, tmp_path / "a", remote=redis_url)
    with pytest.raises(kvtier.Error, match="tier-secret-file"):
        kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=0, remote=redis_url)
    with open_cache(geometry, tmp_path / "b", remote=redis_url, remote_insecure=True) as c:
        assert c.stats()["remote_present"]


def test_remote_tier_shared_by_a_cache_and_a_store(geometry, tmp_path, redis_url):
    """remote='redis://...': one Cache's chunks are another Cache's remote hits (bit-exact) and a Store's keys."""
    tokens = list(range(700, 700 + 4 * 9 + 1))
    secret = tmp_path / "tier-secret"
    secret.write_text("a-tier-secret-of-32-bytes-000000\n")
    auth = dict(remote=redis_url, tier_secret_file=str(secret))
    with open_cache(geometry, tmp_path / "a", **auth) as a:
        kv = commit_prompt(a, tokens, seed=11)
        assert a.stats()["remote_present"] and not a.stats()["remote_degraded"]
        keys = a.chunk_keys(tokens)
    with open_cache(geometry, tmp_path / "b", **auth) as b:  # empty host and disk
        match = b.lookup(tokens)
        assert match.cached_tokens == 36 and set(match.tiers) == {"remote"}  # 4 whole chunks and the tail
        lease = b.load(match)
        for layer in range(geometry.num_layers):
            lease.wait_layer(layer)
        pos = np.arange(36)
        got = b.pool[lease.pages[pos // geometry.page_tokens], :, :, pos % geometry.page_tokens]
        assert np.array_equal(got, kv[:36])
        lease.release()
    with kvtier.Store(geometry, "test-model", chunk_pages=2, host_capacity=0, **auth) as store:
        assert store.exists(keys) == 4
        out = store.empty_payload()
        assert store.get(keys[:1], [out]) == [True]
        assert store.stats()["get_hits"]["remote"] == 1
