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


def _start_redis(server, directory):
    """A redis-server on a free port, answering; None if it exited at start (its port was taken)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(500):
        if proc.poll() is not None:
            return None
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server on port {port} did not accept connections")


@pytest.fixture
def redis_url(tmp_path):
    """A private redis-server on a free port (skipped where redis-server is not installed)."""
    import shutil

    server = shutil.which("redis-server", path="/usr/bin:" + os.environ.get("PATH", ""))
    if not server:
        pytest.skip("redis-server not installed (make deps)")
    started = None
    for _ in range(5):  # another process may take the port between its probe and the server's bind
        started = _start_redis(server, tmp_path)
        if started:
            break
    assert started, "redis-server exited at start five times"
    proc, port = started
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()
