#!/usr/bin/python3
"""Python vs C++ load time, and the PyTorch model's TTFT with vs without kvtier (docs/PERF.md, "Python").

load: a PREFIX-token prefix is cached, then loaded from the host tier (device evicted) and from the disk
tier (device and host flushed), alternately by Python (Cache.load, then Lease.wait_layer for every
layer) and by the same calls issued from C++ (_kvtier.cpp_load_seconds), in the same process; medians of
--reps paired rounds; the ratio is C++ time / Python time (1.0: Python adds nothing).

ttft: the PyTorch model of python/examples/torch_llama.py on a kvtier GGUF: prefill of a
--ttft-prefix-token prefix + --ttft-new new tokens, without the cache (all recomputed) vs with the prefix
loaded layer by layer from host and from disk; medians of --reps.

    python3 python/bench/load_bench.py --kvtier build/tools/kvtier --dir /tmp/kvtier-pybench
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import kvtier  # noqa: E402
from kvtier import _kvtier  # noqa: E402
from torch_llama import TorchLlama, prefill  # noqa: E402


def open_cache(geometry, model_id, tokens, dir_, **kw):
    pages = tokens // geometry.page_tokens + 64
    return kvtier.Cache(geometry=geometry, model_id=model_id, device_capacity=pages * geometry.page_bytes,
                        host_capacity=pages * geometry.page_bytes, disk_capacity=8 * tokens * geometry.bytes_per_token,
                        disk_dir=dir_, **kw)


def to_tier(cache, tier):
    if tier == "host":
        cache.evict("device", 1 << 30)
    else:
        cache.drain()
        cache.flush()


def python_load(cache, tokens, layers):
    match = cache.lookup(tokens)
    t0 = time.perf_counter()
    lease = cache.load(match)
    for l in range(layers):
        lease.wait_layer(l)
    s = time.perf_counter() - t0
    lease.release()
    return s, match


def bench_load(args, geometry):
    tokens = list(range(1, args.prefix + 2))  # PREFIX tokens cached (the last one never is)
    rows = []
    with open_cache(geometry, "load-bench", args.prefix, os.path.join(args.dir, "load")) as cache:
        lease = cache.load(cache.lookup(tokens))
        cache.commit(lease, tokens)
        cache.drain()
        for tier in ("host", "disk"):
            to_tier(cache, tier)
            py, cpp = [], []
            for r in range(args.reps + 1):  # the first round warms up; the order alternates
                if r % 2:
                    c = _kvtier.cpp_load_seconds(cache._impl, cache.lookup(tokens))
                s, match = python_load(cache, tokens, geometry.num_layers)
                assert match.tiers and set(match.tiers) == {tier}, match.tiers
                if r % 2 == 0:
                    c = _kvtier.cpp_load_seconds(cache._impl, cache.lookup(tokens))
                if r:
                    py.append(s)
                    cpp.append(c)
            gb = args.prefix * geometry.bytes_per_token / 1e9
            rows.append((tier, statistics.median(py), statistics.median(cpp), gb))
    print(f"load of a {args.prefix}-token prefix ({geometry}), medians of {args.reps}:")
    for tier, py, cpp, gb in rows:
        print(f"  {tier:5s} python {py * 1e3:8.2f} ms ({gb / py:6.2f} GB/s)   c++ {cpp * 1e3:8.2f} ms "
              f"({gb / cpp:6.2f} GB/s)   c++/python {cpp / py:.3f}")


def bench_ttft(args):
    path = os.path.join(args.dir, f"{args.ttft_model}.gguf")
    if not os.path.exists(path):
        subprocess.run([args.kvtier, "model", "make", "--preset", args.ttft_model, "--out", path], check=True,
                       stdout=subprocess.DEVNULL)
    model = kvtier.Model.load(path)
    tm = TorchLlama(model)
    g = model.kv_geometry(args.kv_dtype, 16)
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, model.config["vocab_size"], args.ttft_prefix + 1).tolist()
    times = {"none": [], "host": [], "disk": []}
    with torch.no_grad(), open_cache(g, model.fingerprint, args.ttft_prefix + args.ttft_new,
                                     os.path.join(args.dir, "ttft"), model_cost=model.model_cost(g)) as cache:
        lease = cache.load(cache.lookup(prefix))
        prefill(tm, cache, lease, prefix)
        cache.commit(lease, prefix)
        for r in range(args.reps):
            prompt = prefix[:-1] + rng.integers(0, model.config["vocab_size"], args.ttft_new).tolist()
            t0 = time.perf_counter()
            lease = cache.fresh(len(prompt))
            prefill(tm, cache, lease, prompt)
            times["none"].append(time.perf_counter() - t0)
            lease.release()
            for tier in ("disk", "host"):  # committing the disk-served run puts the prefix back on host
                to_tier(cache, tier)
                t0 = time.perf_counter()
                lease = cache.load(cache.lookup(prompt))
                prefill(tm, cache, lease, prompt)
                times[tier].append(time.perf_counter() - t0)
                assert lease.report["reused_tokens"][tier] >= args.ttft_prefix - 256, lease.report
                if tier == "disk":
                    cache.commit(lease, prompt)
                    cache.drain()
                else:
                    lease.release()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"PyTorch TTFT, {args.ttft_model} preset, {args.ttft_prefix}-token cached prefix + {args.ttft_new} new "
          f"tokens, kv {args.kv_dtype}, {torch.get_num_threads()} threads, medians of {args.reps}:")
    for k in ("none", "host", "disk"):
        speed = f"   {med['none'] / med[k]:.1f}x faster than no cache" if k != "none" else ""
        print(f"  {'no cache' if k == 'none' else 'from ' + k:10s} {med[k] * 1e3:9.1f} ms{speed}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kvtier", default=os.environ.get("KVTIER_BINARY", "kvtier"))
    p.add_argument("--dir", default="/tmp/kvtier-pybench", help="disk tier and model files")
    p.add_argument("--prefix", type=int, default=16384, help="tokens of the loaded prefix")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--kv-dtype", default="f16")
    p.add_argument("--ttft-model", default="small")
    p.add_argument("--ttft-prefix", type=int, default=4096)
    p.add_argument("--ttft-new", type=int, default=64)
    p.add_argument("--skip-ttft", action="store_true")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="PyTorch's threads (its OpenMP default here is 1)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.dir, exist_ok=True)
    # The `small` preset's KV geometry (8 layers, 4 KV heads, head dim 64).
    bench_load(args, kvtier.Geometry(num_layers=8, num_kv_heads=4, head_dim=64, dtype=args.kv_dtype, page_tokens=16))
    if not args.skip_ttft:
        bench_ttft(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
