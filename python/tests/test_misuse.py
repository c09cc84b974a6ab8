"""kvtier's Python objects used as a careless or concurrent program uses them: each call either
works or raises kvtier.Error (or TypeError for a wrong argument); the interpreter never crashes."""
import gc
import threading

import numpy as np
import pytest

import kvtier
from test_cache import fill


def test_leases_made_while_another_thread_closes_the_cache_are_released_with_it(geometry):
    """A lease made in the moment close() waited for the cache's lock outlived the cache: it stayed
    valid, and dropping it released its pages into the freed cache (a crash)."""
    for _ in range(20):
        cache = kvtier.Cache(geometry, "m", device_capacity=256 * geometry.page_bytes)
        leases, errors, start = [], [], threading.Barrier(3)

        def take():
            start.wait()
            for _ in range(200):
                try:
                    leases.append(cache.fresh(4))
                except kvtier.Error as e:
                    errors.append(e.code)
                    return

        threads = [threading.Thread(target=take) for _ in range(2)]
        for t in threads:
            t.start()
        start.wait()
        cache.close()
        for t in threads:
            t.join()
        assert set(errors) <= {"FailedPrecondition", "Busy"}
        assert not any(lease.valid for lease in leases)
        leases.clear()
        gc.collect()


def test_a_cache_dropped_without_close_finishes_its_stores_first():
    """Its pool (the caller's buffer, or the package's) was freed before the cache's background
    copies to the host had read it (pages of 4 MiB, so that the copies take a while)."""
    geometry = kvtier.Geometry(num_layers=32, num_kv_heads=8, head_dim=128, dtype="f32", page_tokens=16)
    for seed in range(4):
        cache = kvtier.Cache(geometry, "m", device_capacity=32 * geometry.page_bytes,
                             host_capacity=32 * geometry.page_bytes)
        tokens = list(range(100, 100 + 16 * 16))
        kept = cache.lookup(tokens)
        lease = cache.fresh(len(tokens))
        fill(cache, lease, len(tokens), seed)
        cache.commit(lease, tokens)
        del cache, lease
        del kept
        gc.collect()


def test_buffers_of_python_objects_are_refused(geometry):
    with pytest.raises(TypeError):
        kvtier.Cache(geometry, "m", pool=np.empty(kvtier.pool_shape(geometry, 4), dtype=object))
    with kvtier.Store(geometry, "m", chunk_pages=2, host_capacity=8 * geometry.page_bytes) as store:
        payload = store.empty_payload()
        assert store.set(["k"], [payload]) == [True]
        with pytest.raises(TypeError):
            store.get(["k"], [np.empty(payload.shape, dtype=object)])
        with pytest.raises(TypeError):
            store.set(["k"], [np.empty(payload.shape, dtype=object)])


def test_sizes_are_ints_or_strings(geometry):
    with kvtier.Cache(geometry, "m", device_capacity="8KiB") as cache:
        assert cache._impl.num_pages == max(2, 8192 // geometry.page_bytes)
    with pytest.raises(kvtier.Error) as e:
        kvtier.Cache(geometry, "m", device_capacity="eight")
    assert e.value.code == "InvalidArgument"


def test_a_geometry_that_cannot_be_is_refused(tiny_gguf):
    with pytest.raises(kvtier.Error) as e:
        kvtier.Model.load(tiny_gguf).kv_geometry("f32", 0)
    assert e.value.code == "InvalidArgument"


def test_reference_engine_shared_by_threads_answers_each_as_alone(tiny_gguf):
    """generate() ran threads at once on one cache and one engine: a third of the answers were wrong."""
    ref = kvtier.ReferenceEngine(kvtier.Model.load(tiny_gguf), threads=1)
    prompts = [[1 + (i * 7 + k) % 400 for i in range(256)] for k in range(4)]
    alone = [ref.generate(p, 8) for p in prompts]
    got = {}

    def run(k):
        got[k] = [ref.generate(prompts[k], 8) for _ in range(6)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        for logits, tokens in got[k]:
            assert tokens == alone[k][1]
            assert np.array_equal(logits, alone[k][0])
