"""The trained fixture model (tests/data/models/fixture-trained-*.gguf): its metadata, and kvtier's
engine against the PyTorch model it was trained as (scripts/train_fixture.py), on held-out text."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import kvtier

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gguf_lite  # noqa: E402

MODELS = os.path.join(ROOT, "tests", "data", "models")
F16 = os.path.join(MODELS, "fixture-trained-f16.gguf")
Q8 = os.path.join(MODELS, "fixture-trained-q8_0.gguf")
HELDOUT = os.path.join(ROOT, "tests", "data", "text", "heldout.txt")


def heldout_prompt(n_tokens: int) -> list[int]:
    binary = os.environ.get("KVTIER_BINARY", "kvtier")
    with open(HELDOUT, encoding="utf-8") as f:
        text = f.read(n_tokens * 8)
    out = subprocess.run([binary, "model", "tokenize", "--model", F16, "--text", text, "--bos", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"][:n_tokens]


@pytest.mark.parametrize("path", [F16, Q8])
def test_fixture_metadata(path):
    meta, tensors = gguf_lite.read(path)
    assert meta["general.architecture"].value == "llama"
    assert meta["llama.context_length"].value >= 16512
    assert meta["kvtier.fixture.seq"].value >= 4096
    assert len(meta["tokenizer.ggml.tokens"].value) == 32000
    for key in ("corpus", "steps", "seed", "train_loss", "heldout_ppl", "unigram_ppl"):
        assert "kvtier.fixture." + key in meta, key
    ppl, unigram = meta["kvtier.fixture.heldout_ppl"].value, meta["kvtier.fixture.unigram_ppl"].value
    assert ppl < unigram / 4, (ppl, unigram)  # a language model, far from the unigram baseline (README)
    template = meta["tokenizer.chat_template"].value
    assert "[INST]" in template and "bos_token" in template
    names = {t["name"] for t in tensors}
    assert "output.weight" not in names and "token_embd.weight" in names  # tied embeddings
    assert os.path.getsize(F16) + os.path.getsize(Q8) <= 40e6


def test_fixture_chat_template_tokens_exist():
    binary = os.environ.get("KVTIER_BINARY", "kvtier")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump([{"role": "user", "content": "What does os.path.join do?"}], f)
        f.flush()
        out = subprocess.run([binary, "model", "chat-template", "--model", F16, "--messages", f.name,
                              "--add-generation-prompt", "--tokens", "--json"], check=True, capture_output=True,
                             text=True).stdout
    rendered = json.loads(out)
    assert rendered["prompt"].startswith("<s>[INST] What does os.path.join do? [/INST]")
    assert rendered["tokens"][0] == 1  # <s> is the vocabulary's BOS, one token


def test_engine_matches_pytorch_on_fixture():
    torch = pytest.importorskip("torch", reason="torch not installed (make deps)")
    from train_fixture import FixtureLlama
    torch.set_num_threads(2)
    model = kvtier.Model.load(F16)
    prompt = heldout_prompt(200)
    ref = kvtier.ReferenceEngine(model, max_tokens=512, threads=2)
    logits, greedy = ref.generate(prompt, 64, all_logits=True)
    with torch.no_grad():
        pt = FixtureLlama.from_gguf_weights(model)
        pt_logits = pt(torch.tensor(prompt)).numpy()
        diff, scale = float(np.max(np.abs(pt_logits - logits))), float(np.max(np.abs(pt_logits)))
        print(f"max |logit difference| {diff:.2e} of logits up to {scale:.1f}")
        assert diff < 1e-4 * max(1.0, scale)  # f32 rounding: the same weights, summed in another order
        tokens = list(prompt)
        for _ in range(64):  # greedy, recomputing the whole sequence each step
            tokens.append(int(pt(torch.tensor(tokens))[-1].argmax()))
    assert tokens[len(prompt):] == greedy
    # A trained model is confident on real text: far from the random fixtures' flat distributions.
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert float(np.mean(p.max(axis=1))) > 0.05  # random weights: 0.015 (docs/PERF.md)
