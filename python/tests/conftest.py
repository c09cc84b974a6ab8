"""Shared fixtures: a small geometry, a temporary disk tier, the kvtier binary and the tiny GGUF."""
import os
import subprocess

import pytest

import kvtier


@pytest.fixture
def geometry():
    return kvtier.Geometry(num_layers=3, num_kv_heads=2, head_dim=8, dtype="f32", page_tokens=4)


@pytest.fixture
def tiny_gguf(tmp_path_factory):
    binary = os.environ.get("KVTIER_BINARY", "kvtier")
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    subprocess.run([binary, "model", "make", "--preset", "tiny", "--out", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return str(path)
