"""kvtier.Model / ReferenceEngine, and the PyTorch proof (python/examples/torch_llama.py) run end to end."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kvtier
from test_cache import longest_python_pause

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "torch_llama.py")


def test_model_views_and_identity(tiny_gguf):
    m = kvtier.Model.load(tiny_gguf)
    c = m.config
    assert c["arch"] == "llama" and c["rope_style"] == "adjacent_pairs"
    assert m.token_embd.shape == (c["vocab_size"], c["hidden_size"])
    assert not m.token_embd.flags.writeable  # a view of the C++ model's weights
    w = m.layer(0)
    assert w["wqkv"].shape == (c["num_heads"] * c["head_dim"] + 2 * c["num_kv_heads"] * c["head_dim"], c["hidden_size"])
    assert len(m.fingerprint) == 32 and kvtier.Model.load(tiny_gguf).fingerprint == m.fingerprint
    cs = m.rope_cos_sin([0, 3])
    assert cs.shape == (2, c["head_dim"] // 2, 2) and np.allclose(cs[0], [1.0, 0.0])
    g = m.kv_geometry("f16", 32)
    assert (g.num_layers, g.num_kv_heads, g.head_dim, g.dtype, g.page_tokens) == (
        c["num_layers"], c["num_kv_heads"], c["head_dim"], "f16", 32)
    with pytest.raises(kvtier.Error) as e:
        kvtier.Model.load(tiny_gguf + ".missing")
    assert e.value.code in ("NotFound", "IOError")


def test_reference_engine_releases_the_gil(tiny_gguf):
    ref = kvtier.ReferenceEngine(kvtier.Model.load(tiny_gguf), threads=1)
    prompt = [1 + i % 500 for i in range(1500)]
    out = {}
    seconds, pause = longest_python_pause(lambda: out.update(r=ref.generate(prompt, 2)))
    logits, tokens = out["r"]
    assert logits.shape == (kvtier.Model.load(tiny_gguf).config["vocab_size"],) and len(tokens) == 2
    assert pause < max(0.75 * seconds, 0.02), (seconds, pause)  # held GIL: one pause as long as the call


def test_torch_llama_example_is_exact(tiny_gguf):
    """The proof: PyTorch from kvtier's tiers == PyTorch without cache == kvtier's C++ engine; host and disk hits."""
    r = subprocess.run([sys.executable, EXAMPLE, "--model", tiny_gguf], capture_output=True, text=True, timeout=600)
    print(r.stdout, r.stderr)
    assert r.returncode == 0 and "PASS" in r.stdout
    assert "turn 2 served from host" in r.stdout and "turn 3 served from disk" in r.stdout


def test_torch_llama_example_fails_on_mismatch(tiny_gguf):
    """The example's checks bite: with a tolerance no float computation meets, it reports mismatches and exits 1."""
    r = subprocess.run([sys.executable, EXAMPLE, "--model", tiny_gguf, "--tol", "0", "--steps", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "MISMATCH" in r.stdout and "FAIL" in r.stdout
