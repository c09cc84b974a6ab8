#!/usr/bin/python3
"""Trains kvtier's fixture model: a small Llama on text found on a fresh Debian 12 machine.

The model is the architecture kvtier's engine runs (Llama: RMSNorm, RoPE on adjacent
pairs as GGUF stores it, GQA, SwiGLU, tied embeddings) with Llama 2's SentencePiece
vocabulary. It trains on the Python standard library and /usr/share/doc (a held-out slice
of documents is kept apart), most steps at 1024 tokens and the last ones at 4096 (the trained
length, so the benches' prompts sit inside it), on the CPU, deterministically, and
writes tests/data/models/fixture-trained-{f16,q8_0}.gguf and tests/data/text/heldout.txt.

    /usr/bin/python3 scripts/train_fixture.py [--kvtier build/tools/kvtier] [--short-steps 1800 --steps 40] [--precision auto]

`make fixture-model` runs it. Progress (the loss curve) goes to stderr; the summary
(train loss, held-out perplexity, unigram perplexity) to stdout as JSON.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_lite as gg  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = os.path.join(ROOT, "tests/data/vocab/ggml-vocab-llama-spm.gguf")
TEMPLATE = os.path.join(ROOT, "tests/data/models/fixture-trained.jinja")

# The shape: head_dim 64 (a multiple of 32, so the KV codecs apply), 4 query heads on 2 KV heads.
SHAPE = dict(num_layers=4, hidden=256, num_heads=4, num_kv_heads=2, head_dim=64, ffn=768,
             rms_eps=1e-5, rope_theta=10000.0, context_length=16512)


class FixtureLlama(torch.nn.Module):
    """The Llama forward pass exactly as kvtier computes it (f32)."""

    CHUNK = 512  # query rows per attention block

    def __init__(self, vocab: int, s: dict = SHAPE):
        super().__init__()
        self.s = s
        h, q, kv = s["hidden"], s["num_heads"] * s["head_dim"], s["num_kv_heads"] * s["head_dim"]
        self.embd = torch.nn.Parameter(torch.randn(vocab, h) * 0.02)
        self.out_norm = torch.nn.Parameter(torch.ones(h))
        lin = lambda o, i, std=0.02: torch.nn.Parameter(torch.randn(o, i) * std)
        out_std = 0.02 / math.sqrt(2 * s["num_layers"])
        self.layers = torch.nn.ModuleList()
        for _ in range(s["num_layers"]):
            layer = torch.nn.ParameterDict(dict(
                attn_norm=torch.nn.Parameter(torch.ones(h)), wq=lin(q, h), wk=lin(kv, h), wv=lin(kv, h),
                wo=lin(h, q, out_std), ffn_norm=torch.nn.Parameter(torch.ones(h)), w_gate=lin(s["ffn"], h),
                w_up=lin(s["ffn"], h), w_down=lin(h, s["ffn"], out_std)))
            self.layers.append(layer)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.s["rms_eps"]) * w

    def rope(self, x, positions):
        """x [n][heads][D]: pairs (x[2i], x[2i+1]) rotated by pos * theta^(-2i/D)."""
        d = x.shape[-1]
        inv = self.s["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = positions[:, None].double() * inv[None, :]
        cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def attention(self, layer, x, positions):
        n, s = x.shape[0], self.s
        q = (x @ layer["wq"].T).view(n, s["num_heads"], s["head_dim"])
        k = (x @ layer["wk"].T).view(n, s["num_kv_heads"], s["head_dim"])
        v = (x @ layer["wv"].T).view(n, s["num_kv_heads"], s["head_dim"])
        q, k = self.rope(q, positions), self.rope(k, positions)
        # GQA without copying K/V: per KV head, its query heads' rows side by side, [kv][n * group][D]
        # (row = position * group + head in group), so a chunk of positions is a contiguous slice.
        kvh, group, d = s["num_kv_heads"], s["num_heads"] // s["num_kv_heads"], s["head_dim"]
        q = (q / math.sqrt(d)).view(n, kvh, group, d).permute(1, 0, 2, 3).reshape(kvh, n * group, d)
        k, v = k.permute(1, 0, 2).contiguous(), v.permute(1, 0, 2).contiguous()
        out = []
        for start in range(0, n, self.CHUNK):  # causal in query chunks: keys past the chunk are never computed
            end = min(n, start + self.CHUNK)
            scores = torch.bmm(q[:, start * group:end * group], k[:, :end].transpose(1, 2))
            rows = torch.arange(start, end).repeat_interleave(group)
            mask = torch.arange(end)[None, :] > rows[:, None]
            out.append(torch.bmm(scores.masked_fill(mask, float("-inf")).softmax(-1), v[:, :end]))
        o = torch.cat(out, 1).view(kvh, n, group, d).permute(1, 0, 2, 3).reshape(n, -1)
        return o @ layer["wo"].T

    def forward(self, tokens):
        """tokens [n] -> logits [n][vocab]."""
        positions = torch.arange(tokens.shape[0])
        x = self.embd[tokens]
        for layer in self.layers:
            x = x + self.attention(layer, self.rms(x, layer["attn_norm"]), positions)
            hn = self.rms(x, layer["ffn_norm"])
            x = x + (F.silu(hn @ layer["w_gate"].T) * (hn @ layer["w_up"].T)) @ layer["w_down"].T
        return self.rms(x, self.out_norm) @ self.embd.T

    @staticmethod
    def from_gguf_weights(model) -> "FixtureLlama":
        """The same module with a kvtier.Model's weights (dequantized to f32 by kvtier)."""
        c = model.config
        s = dict(SHAPE, num_layers=c["num_layers"], hidden=c["hidden_size"], num_heads=c["num_heads"],
                 num_kv_heads=c["num_kv_heads"], head_dim=c["head_dim"], ffn=c["ffn_size"], rms_eps=c["rms_eps"],
                 rope_theta=c["rope_theta"])
        m = FixtureLlama(c["vocab_size"], s)
        t = lambda a: torch.tensor(np.asarray(a, dtype=np.float32))
        q, kv, ffn = s["num_heads"] * s["head_dim"], s["num_kv_heads"] * s["head_dim"], s["ffn"]
        with torch.no_grad():
            m.embd.copy_(t(model.token_embd))
            m.out_norm.copy_(t(model.output_norm))
            for i, layer in enumerate(m.layers):
                src = {k: t(v) for k, v in model.layer(i).items()}
                wq, wk, wv = src["wqkv"].split([q, kv, kv])
                w_gate, w_up = src["w_gate_up"].split([ffn, ffn])
                for name, value in dict(attn_norm=src["attn_norm"], wq=wq, wk=wk, wv=wv, wo=src["wo"],
                                        ffn_norm=src["ffn_norm"], w_gate=w_gate, w_up=w_up,
                                        w_down=src["w_down"]).items():
                    layer[name].copy_(value)
        return m


# ---------------------------------------------------------------- corpus

def _key(path: str) -> int:
    return int(hashlib.sha1(path.encode()).hexdigest()[:8], 16)


def _read_text(path: str, limit: int) -> str | None:
    try:
        raw = gzip.open(path).read(limit + 1) if path.endswith(".gz") else open(path, "rb").read(limit + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    if len(raw) > limit or len(text) < 200 or "\0" in text:
        return None
    return text


def corpus_documents() -> list[tuple[str, str]]:
    """(path, text) of every usable document, in a fixed order (by a hash of the path)."""
    paths = [p for p in glob.glob("/usr/lib/python3*/**/*.py", recursive=True)
             if not any(part in p.split("/") for part in ("test", "tests", "site-packages", "dist-packages"))]
    for pattern in ("README*", "NEWS*", "*.txt", "*.md", "changelog.gz"):
        paths += glob.glob("/usr/share/doc/*/" + pattern)
    docs = []
    for p in sorted(set(paths), key=lambda p: (_key(p), p)):
        text = _read_text(p, 400_000)
        if text is not None:
            docs.append((p, text))
    return docs


def tokenize(kvtier: str, text: str) -> list[int]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
        f.flush()
        out = subprocess.run([kvtier, "model", "tokenize", "--model", VOCAB, "--file", f.name, "--no-special", "--json"],
                             check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def build_corpus(kvtier: str, train_chars: int, heldout_chars: int, bos: int):
    """Training and held-out token streams (each document preceded by BOS) and the held-out text."""
    train, heldout, heldout_text = [], [], []
    used_train = used_held = 0
    for path, text in corpus_documents():
        held = _key(path) % 16 == 0
        if held and used_held < heldout_chars:
            heldout_text.append(text)
            heldout += [bos] + tokenize(kvtier, text)
            used_held += len(text)
        elif not held and used_train < train_chars:
            train += [bos] + tokenize(kvtier, text)
            used_train += len(text)
        if used_train >= train_chars and used_held >= heldout_chars:
            break
    log(f"corpus: {used_train} chars -> {len(train)} training tokens; {used_held} chars -> {len(heldout)} held out")
    return torch.tensor(train), torch.tensor(heldout), "\n\n".join(heldout_text)


# ---------------------------------------------------------------- training

def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def cpu_has_bf16() -> bool:
    """AVX512-BF16 in /proc/cpuinfo: bfloat16 matrix products run natively (oneDNN), about 2.4x the f32
    step at 1,024 tokens measured here; without it they would be emulated, slower than f32."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512_bf16" in line for line in f)
    except OSError:
        return False


def train(model, stream, seqs, lr, seed, bf16):
    """One optimizer step per entry of `seqs` (its sequence length), on a random window of the stream.
    bf16: mixed precision (matrix products in bfloat16 under autocast; weights, optimizer state, loss
    and evaluation in f32)."""
    steps = len(seqs)
    g = torch.Generator().manual_seed(seed)
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    rest = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses, start = [], time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup=max(1, steps // 20))
        seq = seqs[step]
        i = int(torch.randint(0, stream.shape[0] - seq - 1, (1,), generator=g))
        window = stream[i:i + seq + 1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(window[:-1])
        loss = F.cross_entropy(logits.float(), window[1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0 or step == steps - 1:
            recent = sum(losses[-10:]) / len(losses[-10:])
            log(f"step {step + 1}/{steps}  seq {seq}  loss {recent:.3f}  lr {opt.param_groups[0]['lr']:.2e}  "
                f"{time.time() - start:.0f}s")
    return sum(losses[-20:]) / len(losses[-20:])


@torch.no_grad()
def heldout_nll(model, stream, seq, windows):
    """Mean next-token NLL over up to `windows` non-overlapping held-out windows."""
    total, count = 0.0, 0
    for w in range(min(windows, (stream.shape[0] - 1) // seq)):
        window = stream[w * seq:(w + 1) * seq + 1]
        total += F.cross_entropy(model(window[:-1]), window[1:], reduction="sum").item()
        count += seq
    return total / count


def unigram_nll(train_stream, heldout_stream, vocab):
    """The held-out NLL of the training stream's token frequencies (add-one smoothed)."""
    counts = torch.bincount(train_stream, minlength=vocab).double() + 1
    logp = (counts / counts.sum()).log()
    return float(-logp[heldout_stream[1:]].mean())


# ---------------------------------------------------------------- export

def export(model, vocab_meta, path, extra):
    s = model.s
    meta = OrderedDict()
    meta["general.architecture"] = gg.string("llama")
    meta["general.name"] = gg.string("kvtier-fixture-trained")
    meta["general.file_type"] = gg.u32(0)
    hp = dict(vocab_size=len(vocab_meta["tokenizer.ggml.tokens"].value), context_length=s["context_length"],
              embedding_length=s["hidden"], block_count=s["num_layers"], feed_forward_length=s["ffn"],
              **{"rope.dimension_count": s["head_dim"], "attention.head_count": s["num_heads"],
                 "attention.head_count_kv": s["num_kv_heads"], "attention.key_length": s["head_dim"],
                 "attention.value_length": s["head_dim"]})
    for k, v in hp.items():
        meta["llama." + k] = gg.u32(v)
    meta["llama.attention.layer_norm_rms_epsilon"] = gg.f32(s["rms_eps"])
    meta["llama.rope.freq_base"] = gg.f32(s["rope_theta"])
    for k, v in vocab_meta.items():
        if k.startswith("tokenizer."):
            meta[k] = v
    with open(TEMPLATE, encoding="utf-8") as f:
        meta["tokenizer.chat_template"] = gg.string(f.read())
    meta.update(extra)
    tensors = [("token_embd.weight", model.embd), ("output_norm.weight", model.out_norm)]
    names = dict(attn_norm="attn_norm", wq="attn_q", wk="attn_k", wv="attn_v", wo="attn_output",
                 ffn_norm="ffn_norm", w_gate="ffn_gate", w_up="ffn_up", w_down="ffn_down")
    for i, layer in enumerate(model.layers):
        tensors += [(f"blk.{i}.{names[k]}.weight", layer[k]) for k in names]
    gg.write(path, meta, [(n, t.detach().numpy()) for n, t in tensors])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvtier", default=os.path.join(ROOT, "build/tools/kvtier"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests/data/models"))
    ap.add_argument("--text-out", default=os.path.join(ROOT, "tests/data/text/heldout.txt"))
    ap.add_argument("--short-steps", type=int, default=None,
                    help="first steps, at --short-seq (default: 1800 with bf16, 700 in f32: 19-28 min on 2 cores)")
    ap.add_argument("--short-seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=40, help="then steps at --seq (the trained length)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("auto", "bf16", "f32"), default="auto",
                    help="auto: bf16 mixed precision where the CPU has AVX512-BF16, else f32")
    ap.add_argument("--train-chars", type=int, default=12_000_000)
    ap.add_argument("--heldout-chars", type=int, default=240_000)
    ap.add_argument("--eval-windows", type=int, default=8)
    args = ap.parse_args()

    bf16 = args.precision == "bf16" or (args.precision == "auto" and cpu_has_bf16())
    precision = "bf16 mixed (autocast)" if bf16 else "f32"
    if args.short_steps is None:
        args.short_steps = 1800 if bf16 else 700
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    vocab_meta, _ = gg.read(VOCAB)
    vocab = len(vocab_meta["tokenizer.ggml.tokens"].value)
    bos = vocab_meta["tokenizer.ggml.bos_token_id"].value
    start = time.time()
    train_stream, held_stream, held_text = build_corpus(args.kvtier, args.train_chars, args.heldout_chars, bos)
    model = FixtureLlama(vocab)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters; {args.short_steps} steps "
        f"of {args.short_seq} tokens, then {args.steps} of {args.seq}; {precision} precision")
    seqs = [args.short_seq] * args.short_steps + [args.seq] * args.steps
    train_loss = train(model, train_stream, seqs, args.lr, args.seed, bf16)
    model.eval()
    ppl = math.exp(heldout_nll(model, held_stream, args.seq, args.eval_windows))
    eval_tokens = held_stream[:min(args.eval_windows, (held_stream.shape[0] - 1) // args.seq) * args.seq + 1]
    uni = math.exp(unigram_nll(train_stream, eval_tokens, vocab))
    summary = dict(steps=len(seqs), short_steps=args.short_steps, short_seq=args.short_seq, seq=args.seq, seed=args.seed, precision=precision, train_loss=round(train_loss, 4),
                   heldout_ppl=round(ppl, 2), unigram_ppl=round(uni, 2), train_tokens=int(train_stream.shape[0]),
                   heldout_tokens=int(held_stream.shape[0]), seconds=round(time.time() - start))
    log(f"held-out perplexity {ppl:.2f} (unigram baseline {uni:.2f})")

    os.makedirs(args.out_dir, exist_ok=True)
    os.makedirs(os.path.dirname(args.text_out), exist_ok=True)
    with open(args.text_out, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(held_text)
    extra = OrderedDict([
        ("kvtier.fixture.corpus", gg.string("Debian 12: /usr/lib/python3*/**/*.py (no tests), /usr/share/doc/*/"
                                            "{README*,NEWS*,*.txt,*.md,changelog.gz}; 1 document in 16 held out")),
        ("kvtier.fixture.steps", gg.u32(len(seqs))), ("kvtier.fixture.seq", gg.u32(args.seq)),
        ("kvtier.fixture.schedule", gg.string(f"{args.short_steps} steps at {args.short_seq} tokens, then "
                                              f"{args.steps} at {args.seq}")),
        ("kvtier.fixture.seed", gg.u32(args.seed)),
        ("kvtier.fixture.precision", gg.string(precision)), ("kvtier.fixture.train_loss", gg.f32(train_loss)),
        ("kvtier.fixture.heldout_ppl", gg.f32(ppl)), ("kvtier.fixture.unigram_ppl", gg.f32(uni))])
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "fixture-trained-f32.gguf")
        export(model, vocab_meta, f32_path, extra)
        for dtype in ("f16", "q8_0"):
            out = os.path.join(args.out_dir, f"fixture-trained-{dtype}.gguf")
            subprocess.run([args.kvtier, "model", "quantize", f32_path, out, "--dtype", dtype], check=True,
                           stdout=subprocess.DEVNULL)
            log(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
