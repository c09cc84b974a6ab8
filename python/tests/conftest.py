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


@pytest.fixture
def redis_url(tmp_path):
    """A private redis-server on a free port (skipped where redis-server is not installed)."""
    import shutil
    import socket
    import time

    server = shutil.which("redis-server", path="/usr/bin:" + os.environ.get("PATH", ""))
    if not server:
        pytest.skip("redis-server not installed (make deps)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()
