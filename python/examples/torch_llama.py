#!/usr/bin/python3
"""A Llama forward pass in PyTorch served from kvtier's tiers, checked exactly.

The model is a kvtier GGUF (`kvtier model make --preset tiny`), read by
kvtier's reader (kvtier.Model). Its KV lives in the kvtier pool (a torch view
of the cache's pages, page-first layout): for each prompt the cache is asked
for the cached prefix, its loads run while the model computes layer by layer
(lease.wait_layer), the new KV is written straight into the lease's pages and
committed after prefill.

Checks (exit status 1 on any mismatch):
  1. the PyTorch model without the cache vs kvtier's C++ engine on the same
     file: greedy tokens identical, logits within --tol;
  2. a multi-turn chat through the cache, where turn 2 is served from the host
     tier, turn 3 from disk, turn 4 from the device: every turn's output equals
     the no-cache PyTorch run and the C++ engine's, and the expected tier served it.

    python3 python/examples/torch_llama.py [--model tiny.gguf] [--kvtier build/tools/kvtier]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import kvtier  # noqa: E402


class TorchLlama:
    """Llama/Qwen2 decoder in PyTorch (f32) whose KV cache is a kvtier pool."""

    def __init__(self, model: kvtier.Model):
        self.model = model
        self.cfg = c = model.config
        t = lambda a: torch.tensor(np.asarray(a))  # weights are copied once; KV never is
        self.embd, self.out_norm, self.out = t(model.token_embd), t(model.output_norm), t(model.output)
        self.layers = [{k: t(v) for k, v in model.layer(i).items()} for i in range(c["num_layers"])]
        self.q_dim, self.kv_dim = c["num_heads"] * c["head_dim"], c["num_kv_heads"] * c["head_dim"]

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_eps"]) * w

    def rope(self, x, cs):
        """x [n][heads][D]; cs [n][D/2][cos, sin] (kvtier's table). Llama GGUF: adjacent pairs (x[2i], x[2i+1])."""
        cos, sin = cs[:, None, :, 0], cs[:, None, :, 1]
        if self.cfg["rope_style"] == "adjacent_pairs":
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        half = x.shape[-1] // 2
        x0, x1 = x[..., :half], x[..., half:]
        return torch.cat((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)

    @staticmethod
    def attend(q, K, V, mask):
        """Causal attention of queries q [m][H][D] over keys/values [n][H][D]; mask [m][n] is True where hidden."""
        s = torch.einsum("qhd,khd->hqk", q, K) / (q.shape[-1] ** 0.5)
        s = s.masked_fill(mask[None], float("-inf")).softmax(-1)
        return torch.einsum("hqk,khd->qhd", s, V).reshape(len(q), -1)

    def forward(self, pool, pages, tokens, start: int, wait=None):
        """Computes positions [start, len(tokens)) over KV of [0, start) already in `pool` pages; returns the
        last position's logits. Writes the new K, V into the pages. wait(l) runs before layer l."""
        c, P = self.cfg, pool.shape[3]
        H, Hkv, D = c["num_heads"], c["num_kv_heads"], c["head_dim"]  # queries in blocks of 1024 bound memory
        n = len(tokens)
        pos = torch.arange(start, n)
        cs = torch.from_numpy(self.model.rope_cos_sin(pos.tolist()))
        pages = torch.as_tensor(pages, dtype=torch.long)
        new_page, new_off = pages[pos // P], pos % P
        all_pos = torch.arange(n)
        all_page, all_off = pages[all_pos // P], all_pos % P
        mask = all_pos[None, :] > pos[:, None]  # causal: query at p sees keys <= p
        h = self.embd[torch.as_tensor(tokens[start:], dtype=torch.long)]
        for l, w in enumerate(self.layers):
            if wait is not None:
                wait(l)
            x = self.rms(h, w["attn_norm"])
            qkv = x @ w["wqkv"].T
            if "bqkv" in w:
                qkv = qkv + w["bqkv"]
            q = self.rope(qkv[:, : self.q_dim].reshape(-1, H, D), cs)
            k = self.rope(qkv[:, self.q_dim : self.q_dim + self.kv_dim].reshape(-1, Hkv, D), cs)
            v = qkv[:, self.q_dim + self.kv_dim :].reshape(-1, Hkv, D)
            pool[new_page, l, 0, new_off] = k.to(pool.dtype)  # the new KV goes straight into the lease's pages
            pool[new_page, l, 1, new_off] = v.to(pool.dtype)
            K = pool[all_page, l, 0, all_off].float().repeat_interleave(H // Hkv, dim=1)  # [n][H][D]: head h reads kv head h/group
            V = pool[all_page, l, 1, all_off].float().repeat_interleave(H // Hkv, dim=1)
            a = torch.cat([self.attend(q[b : b + 1024], K, V, mask[b : b + 1024]) for b in range(0, len(q), 1024)])
            h = h + a @ w["wo"].T
            x = self.rms(h, w["ffn_norm"])
            gate, up = (x @ w["w_gate_up"].T).split(c["ffn_size"], dim=-1)
            h = h + (torch.nn.functional.silu(gate) * up) @ w["w_down"].T
        return self.rms(h[-1], self.out_norm) @ self.out.T


def prefill(tm: TorchLlama, cache: kvtier.Cache, lease: kvtier.Lease, tokens):
    """Prefill over a lease, as kvtier's cached_prefill does: the front recompute range first (waiting only for
    the loads before it), then from cached_end waiting for each layer; on a failed load, recompute."""
    pool = cache.pool_tensor()
    try:
        if lease.recompute_end > lease.recompute_begin:
            tm.forward(pool, lease.pages, tokens[: lease.recompute_end], lease.recompute_begin, lease.wait_front_layer)
        return tm.forward(pool, lease.pages, tokens, lease.cached_end, lease.wait_layer)
    except kvtier.Error as e:
        print(f"  load failed ({e.code}): recomputing", file=sys.stderr)
        start = lease.fall_back()  # before reading the pages: it may give the lease pages of its own
        return tm.forward(pool, lease.pages, tokens, start)


def generate(tm, cache, lease, prompt, steps):
    """Greedy decoding over the lease: (last prompt logits, generated tokens, all tokens with KV in the pages)."""
    with torch.no_grad():
        logits = prefill(tm, cache, lease, prompt)
        seq, out, t = list(prompt), [], int(torch.argmax(logits))
        for _ in range(steps):
            out.append(t)
            seq.append(t)
            lease.grow(len(seq))
            t = int(torch.argmax(tm.forward(cache.pool_tensor(), lease.pages, seq, len(seq) - 1)))
        return logits.numpy(), out, seq[:-1] if steps else seq


def make_model(path: str, kvtier_bin: str) -> str:
    if not os.path.exists(path):
        subprocess.run([kvtier_bin, "model", "make", "--preset", "tiny", "--out", path], check=True,
                       stdout=subprocess.DEVNULL)
    return path


class Checker:
    def __init__(self, tol: float):
        self.tol, self.failures = tol, 0

    def same(self, what: str, got, ref) -> None:
        (gl, gt), (rl, rt) = got, ref
        diff = float(np.max(np.abs(gl - rl)))
        ok = gt == rt and diff <= self.tol
        self.failures += not ok
        print(f"  {'ok ' if ok else 'MISMATCH'} {what}: tokens {'identical' if gt == rt else f'{gt} vs {rt}'}, "
              f"max |dlogit| {diff:.2e} (tol {self.tol:g})")

    def expect(self, what: str, cond: bool) -> None:
        self.failures += not cond
        print(f"  {'ok ' if cond else 'MISMATCH'} {what}")


def run(args) -> int:
    torch.manual_seed(0)
    model = kvtier.Model.load(make_model(args.model, args.kvtier))
    tm, ref = TorchLlama(model), kvtier.ReferenceEngine(model, max_tokens=8192)
    geometry = model.kv_geometry("f32", 16)
    rng = np.random.default_rng(5)
    vocab = model.config["vocab_size"]
    check = Checker(args.tol)
    with tempfile.TemporaryDirectory() as tmp, kvtier.Cache(
            geometry=geometry, model_id=model.fingerprint, device_capacity=4096 * geometry.page_bytes,
            host_capacity=4096 * geometry.page_bytes, disk_dir=os.path.join(tmp, "disk"), chunk_pages=4,
            model_cost=model.model_cost(geometry)) as cache:
        print("1. PyTorch without the cache vs kvtier's C++ engine")
        prompt = rng.integers(0, vocab, 300).tolist()
        lease = cache.fresh(len(prompt) + args.steps)
        base = generate(tm, cache, lease, prompt, args.steps)[:2]
        lease.release()
        check.same("single prompt", base, ref.generate(prompt, args.steps))

        print("2. multi-turn chat through the cache (turn 2 from host, 3 from disk, 4 from device)")
        history, expect_tier = rng.integers(0, vocab, 200).tolist(), [None, "host", "disk", "device"]
        for turn, tier in enumerate(expect_tier, start=1):
            if tier == "host":
                cache.evict("device", 1 << 20)
            elif tier == "disk":
                cache.drain()
                cache.flush()
            prompt = history + rng.integers(0, vocab, 40).tolist()
            match = cache.lookup(prompt)
            lease = cache.load(match)
            logits, toks, seq = generate(tm, cache, lease, prompt, args.steps)
            reused = lease.report["reused_tokens"]
            cache.commit(lease, seq)
            print(f"  turn {turn}: prompt {len(prompt)} tokens, cached {match.cached_tokens}, reused {reused}")
            if tier:
                check.expect(f"turn {turn} served from {tier}", reused[tier] > 0 and match.cached_tokens > 0)
            fresh = cache.fresh(len(prompt) + args.steps)
            nocache = generate(tm, cache, fresh, prompt, args.steps)[:2]
            fresh.release()
            check.same(f"turn {turn} cached vs no-cache", (logits, toks), nocache)
            check.same(f"turn {turn} cached vs C++ engine", (logits, toks), ref.generate(prompt, args.steps))
            history = prompt + toks
        print(f"stats: reused tokens {cache.stats()['reused_tokens']}")
    print("PASS" if check.failures == 0 else f"FAIL: {check.failures} mismatches")
    return 0 if check.failures == 0 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(tempfile.gettempdir(), "kvtier-torch-llama-tiny.gguf"),
                   help="a kvtier GGUF (made with `kvtier model make --preset tiny` if missing)")
    p.add_argument("--kvtier", default=os.environ.get("KVTIER_BINARY", "kvtier"), help="the kvtier command")
    p.add_argument("--steps", type=int, default=4, help="greedy tokens per turn")
    p.add_argument("--tol", type=float, default=1e-4, help="largest allowed |logit difference|")
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
